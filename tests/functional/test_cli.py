"""The torchpar-top command: flags, errors, headless JSON lines, nothing left running."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

CMD = [sys.executable, "-m", "torchpar_top"]


def run(*args, timeout=120):
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--experiment", "nope"], "invalid choice: 'nope'"),
        (["--interval", "-1"], "must be greater than 0"),
        (["--interval", "fast"], "not a number"),
        (["--headless"], "--headless needs --duration"),
        (["--duration", "3"], "--duration only applies with --headless"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_is_one_clear_line_and_status_2(args, needle):
    proc = run(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("torchpar-top: error:")


def test_version_and_help():
    from torchpar_top import __version__

    assert run("--version").stdout.strip() == f"torchpar-top {__version__}"
    out = run("--help").stdout
    for flag in ("--experiment", "--headless", "--duration", "--interval", "--sync", "multi-device"):
        assert flag in out


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_headless_writes_json_lines_with_every_field_and_exits_clean():
    # long enough for a loaded machine to start the child (importing torch) and hear from it
    proc = run("--headless", "--duration", "10", "--interval", "0.1", timeout=180)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(records) >= 10
    last = records[-1]
    for key in ("t", "cores", "threads", "executors", "mode", "throughput", "experiment", "child"):
        assert key in last
    assert last["mode"] == "async" and last["experiment"] == "async"
    assert len(last["cores"]) == os.cpu_count()
    live = [r for r in records if r["executors"]]
    assert live, "no sample from the child within 4 s"
    ex = live[-1]["executors"][0]
    assert {"name", "kind", "quantity", "value", "capacity"} <= set(ex)
    assert ex["quantity"] == "depth" and ex["capacity"] == 1024 and ex["kind"] == "emulated-stream"
    assert live[-1]["throughput"]["value"] > 0 and live[-1]["throughput"]["unit"] == "it/s"
    assert any(t["role"] == "frontend (main)" for t in live[-1]["threads"])
    times = [r["t"] for r in records]
    assert times == sorted(times)
    assert not _alive(last["child"]["pid"])
    stacks = [r["stack"] for r in records if r["stack"]]
    assert stacks and stacks[-1]["source"] == "agent"  # the agent reads it: no py-spy for an experiment


@pytest.mark.slow
def test_headless_sync_flag_starts_in_sync_mode_and_no_stacks_means_none():
    proc = run("--headless", "--duration", "10", "--sync", "--no-stacks", timeout=180)
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    live = [r for r in records if r["executors"]]
    assert live and all(r["mode"] == "sync" for r in live)
    # a round of the text's table launches its 10 items at once whatever the mode (and says so)
    assert all(r["executors"][0]["value"] <= 1 for r in live[3:] if not r["timing"])
    assert all(r["stack"] is None for r in records)


@pytest.mark.slow
def test_sigterm_to_headless_stops_the_child_too():
    proc = subprocess.Popen([*CMD, "--headless", "--duration", "60"], stdout=subprocess.PIPE, text=True)
    pid = None
    deadline = time.monotonic() + 60
    while pid is None and time.monotonic() < deadline:
        record = json.loads(proc.stdout.readline())
        pid = record["child"]["pid"] if record["executors"] else None
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_attach_to_a_dead_pid_is_one_clear_line():
    proc = run("attach", "999999999")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "torchpar-top: error: no process with pid 999999999"


@pytest.mark.slow
def test_attach_headless_shows_threads_and_stack_then_the_exit(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.01)\n")
    target = subprocess.Popen([sys.executable, str(script)])
    try:
        watcher = subprocess.Popen([*CMD, "attach", str(target.pid), "--headless", "--duration", "8"],
                                   stdout=subprocess.PIPE, text=True)
        records = []
        for line in watcher.stdout:
            records.append(json.loads(line))
            if len(records) == 30:
                target.kill()  # the watched process dies mid-run: shown, not fatal
        watcher.wait(30)
    finally:
        target.kill()
        target.wait()
    assert watcher.returncode == 0
    early = records[25]
    assert early["mode"] is None and "queue depth needs" in early["notice"]
    assert early["child"]["state"] == "attached" and early["executors"] == []
    assert any(t["role"] == "frontend (main)" for t in early["threads"])
    stacks = [r["stack"] for r in records[:30] if r["stack"]]
    assert stacks and stacks[-1]["waiting_in"] == "sleep"
    assert records[-1]["child"]["state"] == "exited"
    assert any("has exited" in line["text"] for r in records for line in r["log"])
