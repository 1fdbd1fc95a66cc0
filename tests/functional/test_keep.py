"""Keeping a run, end to end: ``--record`` on a headless run and on ``run``, ``replay`` of the recording and
of
its export, ``export``, and the command line's errors (one line, status 2)."""

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from terminal import Screen
from torchpar_top.contract.recording import FORMAT, read_recording
from waiting import running, wait_for

pytestmark = pytest.mark.slow

CMD = [sys.executable, "-m", "torchpar_top"]
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def run(*args, timeout=240, cwd=None):
    return subprocess.run(
        [*CMD, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A 3-second headless run of the default experiment, recorded."""
    tmp = tmp_path_factory.mktemp("keep")
    path = tmp / "run.jsonl"
    proc = run("--headless", "--duration", "3", "--record", path)
    assert proc.returncode == 0, proc.stderr
    return path, [json.loads(line) for line in proc.stdout.splitlines()]


def test_a_headless_run_records_every_snapshot(recorded):
    path, printed = recorded
    lines = path.read_text().split("\n")
    assert lines[-1] == ""  # closed after a whole line
    header = json.loads(lines[0])
    assert header["format"] == FORMAT and header["command"][-2:] == ["--record", str(path)]
    assert header["machine"]["torch"] and header["machine"]["cores"] >= 1
    rec = read_recording(str(path))
    snaps = list(rec.snapshots())
    assert rec.note == "" and len(snaps) >= 2 and snaps[-1].target == "async"
    assert any(s.cores for s in snaps)
    # what headless printed is what was recorded (the child may not have sampled yet on a loaded machine)
    assert any(s.executors for s in snaps) or not any(p["executors"] for p in printed)
    # the recording runs to the end: the last host sample printed is among the last ones recorded
    recent = [
        [round(c, 1) for c in sample] for sample in list(zip(*snaps[-1].core_history, strict=True))[-5:]
    ]
    assert printed[-1]["cores"] in recent
    times = [s.t for s in snaps]
    assert times == sorted(times)


def test_the_recording_replays_headless_to_its_end(recorded, tmp_path):
    path, _ = recorded
    report = tmp_path / "report.json"
    proc = run("replay", path, "--headless", "--speed", "4", "--report", report)
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(report.read_text())  # the end-of-run verdict reads a recording as a run
    assert verdict["seconds_are"] == "recorded wall time"
    assert verdict["ended_by"] == "the replay reached the recording's end"
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    last_recorded = list(read_recording(str(path)).snapshots())[-1]
    assert out[-1]["replay"]["finished"] and out[-1]["child"]["state"] == "finished"
    assert out[-1]["cores"] == [round(c, 1) for c in last_recorded.cores]
    assert out[-1]["target"].startswith("replay run.jsonl")
    assert [e["value"] for e in out[-1]["executors"]] == [e.value for e in last_recorded.executors]
    assert any("replay of" in line["text"] for line in out[0]["log"])


def test_summary_and_export_of_the_recording_and_the_export_replays(recorded, tmp_path):
    path, _ = recorded
    n = len(read_recording(str(path)).lines)
    proc = run("replay", path, "--summary")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["snapshots"] == n and summary["header"]["format"] == FORMAT
    out_json, out_csv = tmp_path / "run.json", tmp_path / "run.csv"
    proc = run("export", path, "--perfetto", out_json, "--csv", out_csv)
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out_json.read_text())["traceEvents"]
    assert {e["ph"] for e in events} >= {"M", "C", "X"}
    with open(out_csv, newline="") as f:
        assert len(list(csv.DictReader(f))) == n
    proc = run("replay", out_json, "--headless", "--speed", "4")
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["replay"]["finished"] and last["cores"]


def test_run_records_the_users_script(tmp_path):
    path = tmp_path / "script.jsonl"
    proc = run(
        "run", "--headless", "--duration", "120", "--record", path, SCRIPTS / "item_every_step.py", "50"
    )
    assert proc.returncode == 0, proc.stderr
    snaps = list(read_recording(str(path)).snapshots())
    assert snaps and snaps[-1].child.state.value == "exited" and snaps[-1].child.exit_code == 0
    assert json.loads(path.read_text().split("\n")[0])["command"][:1] == ["run"]


def test_attach_records_the_process_it_watches(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.01)\n")
    target = subprocess.Popen([sys.executable, str(script)])
    try:
        path = tmp_path / "attach.jsonl"
        proc = run("attach", target.pid, "--headless", "--duration", "2", "--record", path)
        assert proc.returncode == 0, proc.stderr
    finally:
        target.kill()
        target.wait()
    snaps = list(read_recording(str(path)).snapshots())
    assert snaps and all(s.attached and s.child.pid == target.pid for s in snaps)
    assert any(g.role.value == "frontend (main)" for s in snaps for g in s.thread_groups)
    out = tmp_path / "attach.json"
    assert run("export", path, "--perfetto", out).returncode == 0
    events = json.loads(out.read_text())["traceEvents"]
    assert not [e for e in events if e.get("cat") == "mode"]  # attached: no mode to show
    assert any(e["ph"] == "C" and e["name"] == "core 0 load %" for e in events)


def _recorded_log(path) -> str:
    """The recording's log (the ranks' stdout and stderr, the app's notes): why a workload failed."""
    try:
        lines = {line.seq: line for snap in read_recording(str(path)).snapshots() for line in snap.log}
    except Exception as exc:
        return f"\n(no recorded log: {exc})"
    return "\nrecorded log:\n" + "\n".join(
        f"  {lines[k].source} {lines[k].text}" for k in sorted(lines)[-40:]
    )


def _gloo():
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available()


@pytest.mark.skipif(not _gloo(), reason="torch.distributed with Gloo is not available")
def test_a_torchrun_job_is_recorded_with_its_ranks_and_exports_per_rank(tmp_path):
    path = tmp_path / "ddp.jsonl"
    proc = run(
        "run",
        "--nproc-per-node",
        "2",
        "--headless",
        "--duration",
        "240",
        "--record",
        path,
        SCRIPTS / "ddp_gloo.py",
        "60",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:] + _recorded_log(path)
    snaps = list(read_recording(str(path)).snapshots())
    assert any(sorted(r.rank for r in s.ranks) == [0, 1] for s in snaps)
    assert {(e.rank, e.name) for s in snaps for e in s.executors} >= {(0, "cpu (eager)"), (1, "cpu (eager)")}
    # recorded, the ranks send each step whole (--no-step-records only where nothing records)
    assert {r.rank for s in snaps for r in s.ranks if r.steps is not None and r.steps.recent} == {0, 1}
    out = tmp_path / "ddp.csv"
    assert run("export", path, "--csv", out).returncode == 0
    with open(out, newline="") as f:
        header = next(csv.reader(f))
    assert {"r0 cpu (eager) depth", "r1 cpu (eager) depth"} <= set(header)


def bad_version(tmp_path, recorded):
    path, _ = recorded
    lines = path.read_text().split("\n")
    header = json.loads(lines[0])
    header["version"] = 99
    out = tmp_path / "v99.jsonl"
    out.write_text("\n".join([json.dumps(header), *lines[1:]]))
    return out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["replay", "{tmp}/missing.jsonl"], "missing.jsonl"),
        (["replay", "{v99}"], "recording format version 99"),
        (["replay", "{headless}"], "is --headless output (one summary object per sample), not a recording"),
        (["export", "{headless}", "--csv", "{tmp}/o.csv"], "is --headless output"),
        (["replay", "{v99}", "--summary"], "recording format version 99"),
        (["export", "{tmp}/missing.jsonl", "--csv", "{tmp}/o.csv"], "missing.jsonl"),
        (["export", "{rec}"], "export needs --perfetto OUT.json, --csv OUT.csv or both"),
        (["export", "{rec}", "--perfetto", "{tmp}/no/such/dir/o.json"], "cannot write"),
        (["--headless", "--duration", "1", "--record", "{tmp}/no/such/dir/r.jsonl"], "cannot write"),
        (["run", "--record", "{tmp}/no/such/dir/r.jsonl", "{script}"], "cannot write"),
    ],
)
def test_bad_input_is_one_line_and_status_2(recorded, tmp_path, args, needle):
    headless = tmp_path / "out.jsonl"
    headless.write_text("".join(json.dumps(p) + "\n" for p in recorded[1]))
    values = {
        "tmp": tmp_path,
        "v99": bad_version(tmp_path, recorded),
        "rec": recorded[0],
        "headless": headless,
        "script": SCRIPTS / "item_every_step.py",
    }
    proc = run(*[a.format(**values) for a in args], timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("torchpar-top: error:"), proc.stderr
    assert "Traceback" not in proc.stderr


def whole_lines(path):
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.parametrize("how", ["key q", "SIGKILL"])
def test_the_screen_records_and_a_kill_loses_at_most_the_last_line(tmp_path, how):
    path = tmp_path / "tui.jsonl"
    screen = Screen("--record", path)
    try:
        wait_for(lambda: screen.read() and whole_lines(path) >= 6, timeout=120)
        pids = screen.children()
        if how == "key q":
            os.write(screen.master, b"q")
        else:
            os.kill(screen.pid, signal.SIGKILL)
        wait_for(screen.ended, timeout=60)
        assert screen.status == (0 if how == "key q" else -signal.SIGKILL)
        wait_for(lambda: not any(running(p) for p in pids), timeout=60)  # nothing left running
    finally:
        screen.close()
    rec = read_recording(str(path))  # every whole line decodes; a cut-off last one is only a note
    snaps = list(rec.snapshots())
    assert len(snaps) >= 5 and snaps[-1].target == "async"
    if how == "key q":
        assert rec.note == "" and path.read_bytes().endswith(b"\n")


def test_a_recording_replays_on_the_screen_and_quits_on_q(recorded):
    path, _ = recorded
    screen = Screen("replay", path)
    try:
        wait_for(lambda: b"launch queue" in screen.read() and b"replay run.jsonl" in screen.seen, timeout=120)
        os.write(screen.master, b"q")
        wait_for(screen.ended, timeout=60)
        assert screen.status == 0
    finally:
        screen.close()
