"""End to end, no mocks: two "nodes" (two ``torchpar-top run --nnodes 2`` on loopback, 2 ranks each), a
real Prometheus scraping both, and ``torchpar-top cluster --headless`` reading the job back from it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest
from prometheus_server import PrometheusServer, free_port, stop
from torchpar_top.sources.prometheus import LOOKBACK
from waiting import running, wait_for

CMD = [sys.executable, "-m", "torchpar_top"]
SCRIPTS = os.path.join(os.path.dirname(__file__), os.pardir, "scripts")

pytestmark = pytest.mark.slow


def _node(tmp_path, rank: int, rdzv: int, metrics: int, script: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [
            *CMD,
            "run",
            "--nnodes",
            "2",
            f"--node-rank={rank}",
            "--rdzv-endpoint",
            f"127.0.0.1:{rdzv}",
            "--nproc-per-node",
            "2",
            "--headless",
            "--duration",
            "400",
            "--interval",
            "0.5",
            "--metrics-port",
            str(metrics),
            *script,
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / f"node{rank}.log", "wb"),
        cwd=tmp_path,
    )


def _cluster(prom: PrometheusServer, tmp_path, seconds: int, *extra: str) -> list[dict]:
    proc = subprocess.run(
        [
            *CMD,
            "cluster",
            "--prometheus",
            prom.url,
            "--job",
            prom.job,
            "--headless",
            "--duration",
            str(seconds),
            "--interval",
            "1",
            *extra,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _two_nodes(tmp_path, script: list[str]):
    rdzv, m0, m1 = free_port(), free_port(), free_port()
    prom = PrometheusServer(tmp_path, [f"127.0.0.1:{m0}", f"127.0.0.1:{m1}"])
    nodes = [_node(tmp_path, r, rdzv, m, script) for r, m in ((0, m0), (1, m1))]
    return prom, nodes, (m0, m1)


def _all_running(prom: PrometheusServer, nodes: list[subprocess.Popen], tmp_path) -> bool:
    for i, node in enumerate(nodes):
        if node.poll() is not None:
            pytest.fail(
                f"node {i} ended ({node.returncode}): " + (tmp_path / f"node{i}.log").read_text()[-3000:]
            )
    result = prom.query("torchpar_rank_running == 1")
    return len(result) == 4


def _all_stepping(prom: PrometheusServer) -> bool:
    """Every rank's step count rose between two scrapes (the cluster view's steps/s is their ``irate``):
    ranks of a DDP job start stepping only once all four have joined, later on a loaded machine."""
    return len(prom.query(f"irate(torchpar_steps_total[{LOOKBACK}]) > 0")) == 4


def test_two_nodes_four_ranks_then_one_node_goes(tmp_path):
    prom, nodes, (m0, m1) = _two_nodes(tmp_path, [os.path.join(SCRIPTS, "ddp_gloo.py"), "1000000"])
    try:
        # generous: four ranks import torch on a shared, loaded machine
        wait_for(lambda: _all_running(prom, nodes, tmp_path), timeout=240, every=1.0)
        wait_for(lambda: _all_stepping(prom), timeout=120, every=1.0)
        report = tmp_path / "cluster.json"
        lines = _cluster(prom, tmp_path, 6, "--report", str(report))
        last = lines[-1]
        assert last["error"] == "" and last["nodes_expected"] == 2 and last["nodes_seen"] == 2
        ranks = {r["rank"]: r for r in last["ranks"]}
        assert set(ranks) == {0, 1, 2, 3}
        host = socket.gethostname()
        for r in ranks.values():
            assert r["hostname"] == host and r["state"] == "running" and not r["stale"]
            assert r["steps_per_s"] is not None and r["steps_per_s"] > 0, r
        assert {(r["node"], r["local_rank"]) for r in ranks.values()} == {(0, 0), (0, 1), (1, 0), (1, 1)}
        assert {ranks[0]["instance"], ranks[2]["instance"]} == {f"127.0.0.1:{m0}", f"127.0.0.1:{m1}"}
        assert ranks[0]["node"] != ranks[2]["node"]  # ranks 0,1 on one node, 2,3 on the other
        assert last["steps_per_s"] == min(r["steps_per_s"] for r in ranks.values())
        assert last["scrape_age"] is not None and last["scrape_age"] < 30
        summary = json.loads(report.read_text())
        assert summary["nodes_seen"] == 2 and summary["steps_per_s_mean"] > 0 and len(summary["ranks"]) == 4

        # node 1's monitor goes (with its ranks): its rows stay, stale. Node 0's ranks then fail in their
        # next all-reduce and its headless monitor ends with them, so node 0's rows may go stale as well,
        # but they stay listed with what they last said.
        stop(nodes[1], signal.SIGTERM)
        wait_for(lambda: prom.query(f'up{{instance="127.0.0.1:{m1}"}} == 0'), timeout=120, every=1.0)
        after = _cluster(prom, tmp_path, 2)[-1]
        assert after["error"] == ""
        rows = {r["rank"]: r for r in after["ranks"]}
        assert set(rows) == {0, 1, 2, 3}, after
        lost = [r for r in rows.values() if r["instance"] == f"127.0.0.1:{m1}"]
        kept = [r for r in rows.values() if r["instance"] == f"127.0.0.1:{m0}"]
        assert len(lost) == 2 and all(r["stale"] and r["state"] in ("stale", "exited") for r in lost), lost
        assert all(r["steps_per_s"] is None for r in lost)  # nothing current is claimed for a stale rank
        assert len(kept) == 2 and {r["node"] for r in kept} == {ranks[0]["node"]}
        assert (
            after["nodes_seen"] == 2
            and {n["instance"]: n["stale"] for n in after["nodes"]}[f"127.0.0.1:{m1}"]
        )
    finally:
        for node in nodes:
            stop(node, signal.SIGTERM)
        prom.close()
    assert not any(running(p.pid) for p in (*nodes, prom.proc))


def test_the_slow_rank_is_named_straggler(tmp_path):
    script = [os.path.join(SCRIPTS, "ddp_slow_rank.py"), "1000000", "3", "0.05"]
    prom, nodes, _ = _two_nodes(tmp_path, script)
    try:
        wait_for(lambda: _all_running(prom, nodes, tmp_path), timeout=240, every=1.0)
        wait_for(lambda: _all_stepping(prom), timeout=120, every=1.0)
        lines = _cluster(prom, tmp_path, 20)
        last = lines[-1]
        assert last["steps_known"] and last["straggler"] is not None, last
        assert last["straggler"]["rank"] == 3 and last["straggler"]["cause"] == "forward"
    finally:
        for node in nodes:
            stop(node, signal.SIGTERM)
        prom.close()


def test_a_hung_job_says_which_rank_is_not_waiting_for_its_peers(tmp_path):
    """Rank 3 sleeps in its forward after 6 s; the other three then wait in DDP's all-reduce. Each node's
    monitor reads its ranks' stacks and exports where a stalled rank is; the cluster view shows it."""
    prom, nodes, _ = _two_nodes(tmp_path, [os.path.join(SCRIPTS, "ddp_steps.py"), "600", "hang", "3", "6"])
    try:
        wait_for(lambda: _all_running(prom, nodes, tmp_path), timeout=240, every=1.0)
        wait_for(lambda: len(prom.query("torchpar_rank_stalled_at_info")) == 4, timeout=180, every=1.0)
        last = _cluster(prom, tmp_path, 3)[-1]
        ranks = {r["rank"]: r for r in last["ranks"]}
        assert all(r["stalled"] is not None and r["stalled"] >= 3.0 for r in ranks.values()), ranks
        assert ranks[3]["at"].startswith("sleep at ddp_steps.py:") and ranks[3]["at"].endswith("(forward)")
        for r in (0, 1, 2):  # in backward, where DDP waits for the all-reduce (a wait Python cannot see)
            assert ranks[r]["at"].startswith(("waits at ddp_steps.py:", "collective at ")), ranks[r]
    finally:
        for node in nodes:
            stop(node, signal.SIGTERM)
        prom.close()
    assert not any(running(p.pid) for p in (*nodes, prom.proc))


def test_unreachable_prometheus_is_one_line_and_status_2(tmp_path):
    port = free_port()
    proc = subprocess.run(
        [*CMD, "cluster", "--prometheus", f"http://127.0.0.1:{port}", "--headless", "--duration", "2"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr == f"torchpar-top: error: Prometheus at http://127.0.0.1:{port} cannot be reached: "
        "connection refused\n"
    )


def test_an_empty_prometheus_is_one_line_and_status_2(tmp_path):
    prom = PrometheusServer(tmp_path, [f"127.0.0.1:{free_port()}"])  # a target nobody serves
    try:
        wait_for(lambda: prom.query("up"), timeout=120, every=1.0)
        proc = subprocess.run(
            [*CMD, "cluster", "--prometheus", prom.url, "--headless", "--duration", "2"],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        wrong = subprocess.run(  # a server that is not Prometheus' API
            [*CMD, "cluster", "--prometheus", prom.url + "/nothing/here", "--headless", "--duration", "2"],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        prom.close()
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "no torchpar_* series in Prometheus at " in proc.stderr and "1 scrape targets" in proc.stderr
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "Traceback" not in wrong.stderr, (
        wrong.stderr
    )


def test_the_flight_recorder_counts_gloo_collectives(tmp_path):
    """torch's flight recorder, turned on by the user, read by each rank's agent: Gloo records every
    collective (DDP's all-reduces) but no time; the log says so per rank."""
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="500")
    proc = subprocess.run(
        [
            *CMD,
            "run",
            "--nproc-per-node",
            "2",
            "--headless",
            "--duration",
            "30",
            os.path.join(SCRIPTS, "ddp_gloo.py"),
            "1000000",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    texts = [line["text"] for r in map(json.loads, proc.stdout.splitlines()) for line in r["log"]]
    lines = [t for t in texts if "collectives over" in t]
    assert lines, texts[-20:]
    for rank in (0, 1):
        mine = [t for t in lines if t.startswith(f"rank {rank}: collectives over ")]
        assert mine and all("gloo:all_reduce ×" in t and "(time unknown)" in t for t in mine), lines


def test_a_node_whose_peers_never_come_waits_then_ends_with_torchruns_timeout(tmp_path):
    rdzv = free_port()
    proc = subprocess.run(
        [
            *CMD,
            "run",
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{rdzv}",
            "--rdzv-conf",
            "join_timeout=8",
            "--nproc-per-node",
            "1",
            "--headless",
            "--duration",
            "200",
            os.path.join(SCRIPTS, "ddp_gloo.py"),
            "100",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    waiting = f"waiting for rendezvous at 127.0.0.1:{rdzv}: 2 nodes expected"
    assert records and records[0]["notice"].startswith(waiting) and records[-1]["notice"].startswith(waiting)
    texts = [line["text"] for r in records for line in r["log"]]
    assert any("RendezvousTimeoutError" in t for t in texts), texts[-10:]
    assert records[-1]["child"]["state"] == "exited" and records[-1]["child"]["exit_code"] == 1
    assert proc.returncode == 1 and "workload exited with status 1" in proc.stderr
    import psutil

    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if f"127.0.0.1:{rdzv}" in " ".join(p.info["cmdline"] or [])
    ]
    assert not [p for p in left if running(p.pid)]
