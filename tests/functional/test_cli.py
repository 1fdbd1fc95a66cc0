"""The torchpar-top command: flags, errors, headless JSON lines, nothing left running."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from terminal import Screen
from waiting import wait_for

CMD = [sys.executable, "-m", "torchpar_top"]
SCRIPTS = os.path.join(os.path.dirname(__file__), os.pardir, "scripts")


def run(*args, timeout=120, env=None):
    return subprocess.run(
        [*CMD, *args], capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--experiment", "nope"], "invalid choice: 'nope'"),
        (["--interval", "-1"], "must be greater than 0"),
        (["--interval", "fast"], "not a number"),
        (["--interval", "inf"], "must be a finite number"),
        (["--interval", "1e-9"], "must be between 0.02 and 60 seconds"),
        (["--headless", "--duration", "inf"], "must be a finite number"),
        (["run", "--interval", "1e-9", "x.py"], "must be between 0.02 and 60 seconds"),
        (["attach", "1", "--interval", "inf"], "must be a finite number"),
        (["run", "-m"], "-m needs a MODULE name"),
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
    for flag in (
        "--experiment",
        "--headless",
        "--duration",
        "--interval",
        "--sync",
        "multi-device",
        "replay",
    ):
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
    # the async experiment pauses its live loop for its timing rounds: a window may rightly read 0
    assert max(r["throughput"]["value"] for r in live) > 0 and live[-1]["throughput"]["unit"] == "it/s"
    assert any(t["role"] == "frontend (main)" for t in live[-1]["threads"])
    times = [r["t"] for r in records]
    assert times == sorted(times)
    assert not _alive(last["child"]["pid"])
    stacks = [r["stack"] for r in records if r["stack"]]
    assert stacks and stacks[-1]["source"] == "agent"  # the agent reads it: no py-spy for an experiment
    footprint = [r["monitor_cpu"] for r in records if r["monitor_cpu"] is not None]
    assert footprint and all(0 < x < 2 for x in footprint)  # its own share of a core, once a second


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
    script.write_text(
        "import threading, time\n"
        "for _ in range(3):\n"
        "    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
        "while True:\n    time.sleep(0.01)\n"
    )
    target = subprocess.Popen([sys.executable, str(script)])
    try:
        watcher = subprocess.Popen(
            [*CMD, "attach", str(target.pid), "--headless", "--duration", "8"],
            stdout=subprocess.PIPE,
            text=True,
        )
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
    # no agent names the threads: py-spy's dump says which run Python (not OpenMP workers)
    groups = [{g["role"]: g["count"] for g in r["threads"]} for r in records[:30]]
    assert any(g.get("Python threads") == 3 and "intra-op workers" not in g for g in groups), groups[-1]
    stacks = [r["stack"] for r in records[:30] if r["stack"]]
    assert stacks and stacks[-1]["waiting_in"] == "sleep"
    assert records[-1]["child"]["state"] == "exited"
    assert any("has exited" in line["text"] for r in records for line in r["log"])


TRACES = os.path.join(os.path.dirname(__file__), os.pardir, "data", "hta")


def test_replay_summary_is_one_json_object():
    proc = run("replay", os.path.join(TRACES, "a100_alexnet_2_streams.json.gz"), "--summary", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    summary = json.loads(proc.stdout)
    assert summary["gpu_activity"] is True and summary["note"] is None
    streams = [(s["stream"], s["launches"], s["max_depth"]) for s in summary["streams"]]
    assert streams == [(7, 91, 18), (20, 7, 2)]
    assert {"device", "mean_depth", "seconds_at_cap", "busy_seconds"} <= set(summary["streams"][0])
    (rank,) = summary["ranks"]
    assert {"overlap", "duration", "devices", "sync_points"} <= set(rank)
    assert rank["sync_points"][0]["site"] in ("aten::copy_", "(no enclosing op)")


def test_replay_summary_of_a_folder_of_ranks():
    proc = run("replay", os.path.join(TRACES, "gpu_2_ranks"), "--summary", timeout=60)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    assert {s["rank"] for s in summary["streams"]} == {0, 1}


def test_replay_of_a_cpu_only_trace_says_so_and_succeeds():
    proc = run("replay", os.path.join(TRACES, "cpu_only.json.gz"), "--summary", timeout=60)
    assert proc.returncode == 0
    summary = json.loads(proc.stdout)
    assert summary["gpu_activity"] is False and summary["streams"] == []
    assert "no GPU activity in this trace" in summary["note"]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchpar-top: note: no GPU activity in this trace")


def test_replay_errors_are_one_line_and_status_2(tmp_path):
    cut = tmp_path / "cut.json.gz"
    data = Path(TRACES, "a100_alexnet_2_streams.json.gz").read_bytes()
    cut.write_bytes(data[:5000])
    odd = tmp_path / "trace.bin"
    odd.write_bytes(b"\x00\x01binary")
    cases = [
        ([str(cut), "--summary"], "truncated gzip file"),
        ([str(odd), "--summary"], "unknown format"),
        ([str(tmp_path / "missing.json"), "--summary"], "no such file or folder"),
        ([str(cut)], "truncated gzip file"),
        ([str(cut), "--headless"], "truncated gzip file"),
        (
            [os.path.join(TRACES, "cpu_only.json.gz"), "--duration", "3"],
            "--duration only applies with --headless",
        ),
        (
            [os.path.join(TRACES, "cpu_only.json.gz"), "--summary", "--headless"],
            "--headless and --duration do not",
        ),
        ([os.path.join(TRACES, "cpu_only.json.gz"), "--speed", "0"], "must be greater than 0"),
        (["--summary"], "the following arguments are required: FILE"),
    ]
    for args, needle in cases:
        proc = run("replay", *args, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("torchpar-top: error:") and needle in lines[0], lines


def test_replay_through_main_without_a_subprocess(capsys):
    from torchpar_top.main import main

    assert main(["replay", os.path.join(TRACES, "mi250_rocm.json.gz"), "--summary"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [(s["device"], s["stream"], s["launches"]) for s in summary["streams"]] == [(2, 0, 16)]


def test_replay_headless_plays_to_the_end_and_stops():
    # 5 ms of trace per frame: the 19.9 ms trace, from its first launch at 0.4 ms, in 4 frames
    proc = run(
        "replay",
        os.path.join(TRACES, "a100_event_sync_3_streams.json.gz"),
        "--headless",
        "--speed",
        "0.1",
        "--interval",
        "0.05",
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # stdout is JSON lines only; the end-of-run verdict goes to stderr
    assert proc.stderr.startswith("torchpar-top: replay a100_event_sync_3_streams.json.gz: ")
    assert "the replay reached the trace's end" in proc.stderr.splitlines()[0]
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(records) == 4
    first, last = records[0], records[-1]
    assert first["target"] == "replay a100_event_sync_3_streams.json.gz" and first["mode"] == "async"
    assert first["child"]["state"] == "running" and last["child"]["state"] == "finished"
    assert [r["replay"]["finished"] for r in records] == [False, False, False, True]
    assert last["replay"]["position"] == pytest.approx(last["replay"]["duration"])
    assert [e["name"] for e in last["executors"]] == ["cuda:0 s20", "cuda:0 s24", "cuda:0 s28"]
    assert {(e["kind"], e["quantity"], e["counts"], e["capacity"]) for e in last["executors"]} == {
        ("cuda-stream", "depth", "kernels", 1024)
    }
    assert [(e["launched"], e["completed"], e["value"]) for e in last["executors"]] == [(2, 2, 0)] * 3
    assert last["gpus"][0]["name"] == "NVIDIA A100-PG509-200" and last["throughput"]["unit"] == "launches/s"
    texts = [line["text"] for r in records for line in r["log"]]
    assert (
        "rank 0 cuda:0 s28: 2 launches, depth max 2 mean 1.0 (HTA's), never at the cap, busy 124 µs" in texts
    )
    assert texts[-1].startswith("replay finished at t = 19.9 ms")


def test_replay_headless_duration_stops_before_the_end():
    proc = run(
        "replay",
        os.path.join(TRACES, "a100_alexnet_2_streams.json.gz"),
        "--headless",
        "--duration",
        "0.5",
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records and not records[-1]["replay"]["finished"]
    assert records[-1]["child"]["state"] == "running"


def test_replay_headless_of_a_cpu_only_trace_is_a_note_and_one_line():
    proc = run("replay", os.path.join(TRACES, "cpu_only.json.gz"), "--headless", timeout=60)
    assert proc.returncode == 0
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == (
        "torchpar-top: note: no GPU activity in this trace (no kernel, memcpy or memset events): "
        "no queues or lanes to show"
    )
    assert lines[1].startswith("torchpar-top: replay cpu_only.json.gz: ")  # then the end-of-run verdict
    assert not any("error" in line or "Traceback" in line for line in lines)
    (record,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert record["executors"] == [] and record["child"]["state"] == "finished"
    assert record["notice"].startswith("no GPU activity in this trace")


@pytest.mark.slow
def test_replay_screen_in_a_terminal_quits_on_q():
    screen = Screen("replay", os.path.join(TRACES, "a100_event_sync_3_streams.json.gz"))
    try:
        wait_for(lambda: b"launch queue" in screen.read() and b"cuda:0 s28" in screen.seen, timeout=60)
        screen.press(b"q")
        wait_for(screen.ended, timeout=30)
    finally:
        screen.close()
    assert screen.status == 0


def _first_record(proc, predicate, timeout=60):
    """Read headless records until one satisfies ``predicate``; returns it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, "headless output ended early"
        record = json.loads(line)
        if predicate(record):
            return record
    pytest.fail("no such record in time")


@pytest.mark.slow
@pytest.mark.parametrize("first, second", [("SIGINT", "SIGINT"), ("SIGTERM", "SIGHUP")])
def test_headless_second_signal_while_stopping_is_quiet(tmp_path, first, second):
    """Two signals 20 ms apart while a stubborn script is stopped: status 128 + the first, no traceback,
    the script gone."""
    proc = subprocess.Popen(
        [*CMD, "run", "--headless", "--duration", "60", os.path.join(SCRIPTS, "stubborn.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        record = _first_record(
            proc, lambda r: any(line["text"] == "stubborn script ready" for line in r["log"])
        )
        pid = record["child"]["pid"]
        proc.send_signal(getattr(signal, first))
        time.sleep(0.02)
        proc.send_signal(getattr(signal, second))
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + getattr(signal, first)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert not _alive(pid)


@pytest.mark.slow
def test_headless_into_a_closed_pipe_exits_quietly_with_nothing_left():
    """``torchpar-top --headless ... | head -3``: the reader goes away; the app ends as a killed-by-SIGPIPE
    upstream would (128 + 13), without a traceback, and stops its child."""
    proc = subprocess.Popen(
        [*CMD, "--headless", "--duration", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        record = _first_record(proc, lambda r: r["child"]["pid"] and r["executors"])
        proc.stdout.close()  # as head does after its lines
        err = proc.stderr.read()
        proc.wait(30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGPIPE
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err
    assert not _alive(record["child"]["pid"])
    assert "stdout closed" in err and "--duration" not in err, err  # the verdict says why it ended


@pytest.mark.slow
def test_a_headless_replay_into_a_closed_pipe_says_stdout_closed():
    proc = subprocess.Popen(
        [*CMD, "replay", os.path.join(TRACES, "a100_event_sync_3_streams.json.gz"), "--headless"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGPIPE
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert "stdout closed" in err, err


@pytest.mark.slow
@pytest.mark.parametrize(
    "code, status",
    [
        ("print('bye', flush=True)\nraise SystemExit(3)\n", 3),
        ("print('bye', flush=True)\n", 0),
        (
            "import os, signal\nprint('bye', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\n",
            128 + signal.SIGTERM,
        ),
    ],
)
def test_headless_run_ends_with_the_script_and_its_status(tmp_path, code, status):
    """A batch job: the monitor ends when the script ends (after a last record that says so) and exits
    as the script did; --duration is only the upper bound (600 s here: the test would time out)."""
    script = tmp_path / "short.py"
    script.write_text(code)
    proc = run("run", "--headless", "--duration", "600", str(script), timeout=120)
    assert proc.returncode == status, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records[-1]["child"]["state"] == "exited"
    assert any(line["text"] == "bye" for r in records for line in r["log"])
    assert all(r["child"]["state"] != "exited" for r in records[:-1])


@pytest.mark.slow
@pytest.mark.parametrize("how", ["the script ends", "the duration ends"])
def test_processes_that_left_the_group_end_with_a_headless_run(how):
    """A setsid daemon and a grandchild in a group of its own: gone when the headless run ends."""
    from waiting import processes_running, unique_tag, wait_for

    tag = unique_tag()
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "leaves_processes.py")
    stay = "exit" if how == "the script ends" else "stay"
    proc = subprocess.Popen(
        [*CMD, "run", "--headless", "--duration", "600" if stay == "exit" else "8", script, tag, stay],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        _first_record(proc, lambda r: any(line["text"] == "started" for line in r["log"]))
        wait_for(lambda: len(processes_running(tag + "1", tag + "2")) == 2, timeout=30)
        proc.communicate(timeout=120)
        assert proc.returncode == 0
        wait_for(lambda: not processes_running(tag + "1", tag + "2"), timeout=15)
    finally:
        proc.kill()
        for leftover in processes_running(tag + "1", tag + "2"):
            leftover.kill()


def _big_trace(path, pairs=200_000):
    """A trace of ``pairs`` launches and their kernels on one stream (57 MB: loading it takes seconds)."""
    events = []
    for i in range(pairs):
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": i * 10, "dur": 2, "pid": 1,
             "tid": 1, "args": {"correlation": i + 1}}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "kernel", "name": "k", "ts": i * 10 + 3, "dur": 4, "pid": 0, "tid": 7,
             "args": {"correlation": i + 1, "stream": 7, "device": 0}}
        )  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def _has_read(pid, size):
    """Whether process ``pid`` has read ``size`` bytes (the trace; decoding and analysing it come next)."""
    try:
        with open(f"/proc/{pid}/io") as fh:
            return int(next(line for line in fh if line.startswith("rchar:")).split()[1]) >= size
    except (OSError, StopIteration):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("command", ["summary", "export", "headless"])
def test_ctrl_c_while_a_large_trace_loads_ends_quietly_with_130(tmp_path, command):
    """SIGINT (Ctrl-C) once the trace is read, while it is decoded: 130, no KeyboardInterrupt traceback."""
    trace = _big_trace(tmp_path / "big.json")
    argv = {
        "summary": ["replay", trace, "--summary"],
        "export": ["export", trace, "--csv", str(tmp_path / "out.csv")],
        "headless": ["replay", trace, "--headless"],
    }[command]
    proc = subprocess.Popen([*CMD, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        size = os.path.getsize(trace)
        wait_for(lambda: _has_read(proc.pid, size) or proc.poll() is not None, timeout=120)
        assert proc.poll() is None, "ended before the trace was read"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # a second Ctrl-C, while it ends, is quiet too
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["experiment", "run", "attach", "replay"])
@pytest.mark.parametrize("stdin", ["/dev/null", "a terminal, stdout a pipe"])
def test_the_screen_without_a_terminal_is_one_line_and_status_2(mode, stdin):
    """``< /dev/null`` spun a core with q dead; under nohup the app ended with 0: now refused at the start."""
    import pty

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    argv = {
        "experiment": [],
        "run": ["run", os.path.join(SCRIPTS, "sleeps.py")],
        "attach": ["attach", str(sleeper.pid)],
        "replay": ["replay", os.path.join(TRACES, "a100_event_sync_3_streams.json.gz")],
    }[mode]
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [*CMD, *argv],
            check=False,
            stdin=subprocess.DEVNULL if stdin == "/dev/null" else slave,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        sleeper.kill()
        os.close(master)
        os.close(slave)
    which = "stdin" if stdin == "/dev/null" else "stdout"
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"torchpar-top: error: the screen needs a terminal ({which} is not one); use --headless"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("module", [False, True])
def test_the_frontend_stack_under_run_starts_at_the_users_code(module):
    """The agent's own frames (run.py, usercode_exec.py, runpy's) were shown above the script's <module>."""
    target = ["-m", "sleeps"] if module else [os.path.join(SCRIPTS, "sleeps.py")]
    proc = subprocess.Popen(
        [*CMD, "run", "--headless", "--duration", "60", *target],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=SCRIPTS,
    )
    try:
        record = _first_record(
            proc, lambda r: r["stack"] and any("main (" in f for f in r["stack"]["frames"])
        )
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    frames = record["stack"]["frames"]
    assert frames[0].startswith("<module> (") and frames[0].split("(")[1].startswith(
        os.path.realpath(os.path.join(SCRIPTS, "sleeps.py"))
    ), frames
    assert not any("probes/agent" in f or "runpy" in f for f in frames), frames


ABORT_NOTE = "aborted (SIGABRT) at interpreter exit, after its work had finished"


@pytest.mark.slow
def test_a_rank_that_aborts_after_its_work_is_told_apart_and_torchruns_status_kept(tmp_path):
    temp = tmp_path / "temp"  # the temp folder of torchpar-top, torchrun and the ranks
    temp.mkdir()
    proc = run(
        "run", "--nproc-per-node", "2", "--headless", "--duration", "240",
        os.path.join(SCRIPTS, "aborts_at_exit.py"), str(tmp_path / "rank0-done"), timeout=300,
        env={**os.environ, "TMPDIR": str(temp)},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]  # torchrun's own status for a failed rank
    # torchrun's log folder (a failed rank's error file in it) was ours, and went with the run: a bare
    # torchrun leaves a torchelastic_* folder behind
    assert os.listdir(temp) == []
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    ranks = {r["rank"]: r for r in records[-1]["ranks"]}
    log = [line["text"] for r in records for line in r["log"]]
    said = {k: ranks[1].get(k) for k in ("state", "exit_code", "note")}  # in full when it fails
    assert ranks[1]["note"] == f"rank 1 {ABORT_NOTE}" and ranks[1]["exit_code"] == -6, (said, log[-12:])
    assert ranks[0]["note"] == "", ranks
    assert log.count(f"rank 1 {ABORT_NOTE}") == 1, log[-20:]
    assert f"rank 1 {ABORT_NOTE}" in proc.stderr.split("verdict")[0]  # the verdict's first line says why


@pytest.mark.slow
def test_a_workload_that_aborts_after_its_work_is_told_apart():
    proc = run(
        "run", "--headless", "--duration", "240", os.path.join(SCRIPTS, "aborts_at_exit.py"), timeout=300
    )
    assert proc.returncode == 128 + signal.SIGABRT, proc.stderr[-3000:]
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records[-1]["ranks"][0]["note"] == f"the workload {ABORT_NOTE}"
    assert f"the workload {ABORT_NOTE}" in proc.stderr
