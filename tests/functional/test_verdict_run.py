"""End to end: the verdict of a real, unmodified training loop, and a real Prometheus scraping a
headless run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest
from prometheus_server import PrometheusServer, free_port, stop
from terminal import Screen
from waiting import running, wait_for

CMD = [sys.executable, "-m", "torchpar_top"]
SCRIPTS = os.path.join(os.path.dirname(__file__), os.pardir, "scripts")
LOOP = os.path.join(SCRIPTS, "train_dataloader.py")

pytestmark = pytest.mark.slow


def test_an_unmodified_dataloader_loop_reads_steps_and_input_bound(tmp_path):
    report_path = tmp_path / "r.json"
    proc = subprocess.run(
        [*CMD, "run", "--headless", "--duration", "12", "--report", str(report_path), LOOP, "2000"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]  # stdout stays JSON lines only
    assert records
    report = json.loads(report_path.read_text())
    figures, verdict = report["figures"], report["verdict"]
    assert report["ended_by"] == "--duration 12 s reached"
    assert figures["throughput_unit"] == "steps/s" and figures["steps_per_s"] > 0  # no trace_step() needed
    assert figures["done"] >= 1 and figures["dataloader"] is True
    assert verdict["class"] == "input-bound", (verdict, figures)
    assert figures["data_wait"] > 0.3
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("torchpar-top: run ") and lines[1].startswith("  verdict: input-bound: ")
    assert lines[-1] == f"  report: {report_path}"


def test_the_report_is_written_when_the_workload_ends_first(tmp_path):
    report_path = tmp_path / "r.json"
    proc = subprocess.run(
        [*CMD, "run", "--headless", "--duration", "120", "--report", str(report_path), LOOP, "30"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    assert report["ended_by"] == "workload exited with status 0" and report["exit_code"] == 0
    assert report["figures"]["steps_per_s"] > 0


def test_prometheus_scrapes_a_headless_run(tmp_path):
    ours = free_port()
    prom = PrometheusServer(tmp_path, [f"127.0.0.1:{ours}"])
    top = subprocess.Popen(
        [*CMD, "run", "--headless", "--duration", "180", "--metrics-port", str(ours), LOOP, "5000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:

        def series(expr: str) -> list[dict]:
            if top.poll() is not None:
                pytest.fail(f"torchpar-top ended ({top.returncode}): {top.stderr.read()[-2000:]}")
            return prom.query(expr)

        # generous: the machine is shared and loaded; Prometheus scrapes every second once both are up
        depth = wait_for(lambda: series('torchpar_queue_depth{kind="dataloader"}'), timeout=90, every=1.0)
        labels = depth[0]["metric"]
        assert labels["job"] == "torchpar-top" and labels["instance"] == f"127.0.0.1:{ours}"
        assert labels["Hostname"] == socket.gethostname() and labels["quantity"] == "outstanding"
        assert float(depth[0]["value"][1]) >= 0
        loads = wait_for(lambda: series("torchpar_cpu_load_ratio"), timeout=60, every=1.0)
        assert {r["metric"]["core"] for r in loads} == {str(i) for i in range(os.cpu_count() or 1)}
        assert all(0.0 <= float(r["value"][1]) <= 1.0 for r in loads)
        steps = wait_for(
            lambda: series('torchpar_throughput_per_second{what="steps"}'), timeout=90, every=1.0
        )
        assert float(steps[0]["value"][1]) >= 0
    finally:
        stop(top, signal.SIGINT)
        prom.close()
    assert top.returncode == 128 + signal.SIGINT  # ended by the signal, as shells report it
    assert "ended by SIGINT" in top.stderr.read()
    assert not running(top.pid) and not running(prom.proc.pid)
    with socket.socket() as s:  # nothing listens on the metrics port any more (REUSEADDR: TIME_WAIT is fine)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", ours))
        s.listen()


def test_the_tui_prints_the_verdict_after_leaving_the_alternate_screen(tmp_path):
    report_path = tmp_path / "r.json"
    screen = Screen("run", "--report", report_path, LOOP, "2000", cwd=tmp_path)
    try:
        wait_for(lambda: b"steps/s" in screen.read(), timeout=120)  # it measures steps
        screen.press(b"q")
        wait_for(screen.ended, timeout=60)
    finally:
        screen.close()
    assert screen.status == 0
    after = bytes(screen.seen).rsplit(b"\x1b[?1049l", 1)  # the alternate screen's end
    assert len(after) == 2, "the app never left the alternate screen"
    text = after[1].decode(errors="replace")
    assert "torchpar-top: run " in text and ", quit" in text and "  verdict: " in text
    assert f"  report: {report_path}" in text
    report = json.loads(report_path.read_text())
    assert report["ended_by"] == "quit" and report["figures"]["throughput_unit"] == "steps/s"
