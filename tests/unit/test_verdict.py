"""The end-of-run verdict: one constructed run per class, the tally's bookkeeping, the report, compare."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
from fakes.fake_session import make_run_snapshot, make_snapshot
from torchpar_top.contract.snapshot import DataVerdict
from torchpar_top.contract.vocab import DataBound
from torchpar_top.model.store import exit_note
from torchpar_top.sinks import verdict
from torchpar_top.sinks.verdict import Bound, RunTally


def fed(*snaps, seconds: float = 2.0, step: float = 0.1) -> RunTally:
    """A tally fed each snapshot in turn for ``seconds`` (one every ``step``), times made up."""
    tally = RunTally()
    t = 1000.0
    for snap in snaps:
        for _ in range(round(seconds / step)):
            tally.feed(dataclasses.replace(snap, t=t, sample_t=t - 0.05))
            t += step
    return tally


def calm(snap, busy: float = 0.5, wait: float = 0.1):
    """``snap`` with no starvation and a frontend ``busy`` / ``wait`` share in its last window."""
    groups = tuple(dataclasses.replace(g, wait_percent=0.0) for g in snap.thread_groups)
    return dataclasses.replace(
        snap,
        thread_groups=groups,
        starved=None,
        frontend_busy=(*snap.frontend_busy[:-1], busy),
        frontend_wait=(*snap.frontend_wait[:-1], wait),
        frontend_core_wait=(*snap.frontend_core_wait[:-1], 0.0),
    )


def with_queue(snap, value: int, blocked: float = 0.0):
    ex = dataclasses.replace(snap.executors[0], value=value, blocked=blocked)
    return dataclasses.replace(snap, executors=(ex,))


def verdict_of(tally: RunTally) -> dict:
    return tally.report()["verdict"]


def test_input_bound_on_a_dataloader_fed_loop():
    snap = calm(make_run_snapshot(), busy=0.3, wait=0.65)
    report = fed(snap).report()
    assert report["verdict"]["class"] == Bound.INPUT == "input-bound"
    assert report["figures"]["data_wait"] == pytest.approx(0.62)
    assert report["figures"]["steps_per_s"] == pytest.approx(6.2)  # the scoreboard's, in steps/s
    assert "62 %" in report["verdict"]["why"] and "num_workers" in report["verdict"]["next"]


def test_cpu_starved_when_the_threads_wait_for_cores():
    snap = dataclasses.replace(make_run_snapshot(), data_verdict=None)
    assert snap.starved is not None  # the store's verdict on its thread groups (derive.starved)
    v = verdict_of(fed(snap))
    assert v["class"] == Bound.STARVED and "0.64 cores" in v["why"]


def test_backend_bound_when_launches_block_on_a_full_queue():
    snap = calm(with_queue(make_snapshot(executors=1, gpus=1), 1024, blocked=0.61), busy=0.2, wait=0.7)
    report = fed(snap).report()
    assert report["verdict"]["class"] == Bound.BACKEND
    assert report["figures"]["blocked"] == pytest.approx(0.61) and report["figures"]["queue_fill"] == 1.0
    assert report["figures"]["sync_wait"] == pytest.approx(0.09)  # wait less the blocked share


def test_backend_bound_on_a_full_queue_that_never_blocks_in_a_sample():
    snap = calm(with_queue(make_snapshot(executors=1, gpus=1), 1000, blocked=0.0), busy=0.4, wait=0.0)
    assert verdict_of(fed(snap))["class"] == Bound.BACKEND


def test_a_full_queue_without_a_gpu_is_compute_bound_cpu_never_gpu():
    snap = calm(with_queue(make_snapshot(executors=1), 1024, blocked=0.61), busy=0.2, wait=0.7)
    report = fed(snap).report()
    assert report["figures"]["cuda"] is False
    assert report["verdict"]["class"] == Bound.COMPUTE_CPU == "compute-bound (CPU)"
    assert "GPU" not in json.dumps(report["verdict"]) and "GPU" not in verdict.render(report)


def test_launch_bound_when_the_frontend_is_busy_and_the_queue_empty():
    snap = calm(with_queue(make_snapshot(executors=1), 2), busy=0.92, wait=0.02)
    v = verdict_of(fed(snap))
    assert v["class"] == Bound.LAUNCH and "92 %" in v["why"]


def test_sync_bound_when_the_frontend_waits_in_synchronize():
    snap = calm(make_snapshot(executors=1, mode="sync"), busy=0.1, wait=0.85)
    v = verdict_of(fed(snap))
    assert v["class"] == Bound.SYNC and "85 %" in v["why"]


def test_eager_cpu_busy_frontend_is_compute_bound_cpu():
    snap = calm(
        dataclasses.replace(make_run_snapshot(), data_verdict=DataVerdict(DataBound.COMPUTE, 0.05)),
        busy=0.9,
        wait=0.05,
    )
    report = fed(snap).report()
    assert report["figures"]["eager_cpu"] is True
    assert report["verdict"]["class"] == Bound.COMPUTE_CPU and "eager CPU" in report["verdict"]["why"]
    assert "GPU" not in report["verdict"]["next"]


def test_no_clear_bottleneck():
    snap = calm(with_queue(make_snapshot(executors=1), 500), busy=0.5, wait=0.1)
    v = verdict_of(fed(snap))
    assert v["class"] == Bound.NONE and v["also"] == []


def test_the_figures_are_over_the_whole_run_not_the_last_snapshot():
    waiting = calm(make_run_snapshot(), busy=0.3, wait=0.65)
    fine = dataclasses.replace(waiting, data_verdict=DataVerdict(DataBound.COMPUTE, 0.0))
    report = fed(waiting, fine, fine, fine).report()  # waited a quarter of the run
    assert report["figures"]["data_wait"] == pytest.approx(0.62 / 4, abs=0.01)
    assert report["verdict"]["class"] != Bound.INPUT


def test_paused_exited_and_gaps_are_not_run_time():
    snap = calm(make_run_snapshot())
    tally = fed(snap, seconds=1.0)
    seconds = tally.seconds
    t = 2000.0
    for variant in (
        dataclasses.replace(snap, paused=True),
        dataclasses.replace(snap, child=dataclasses.replace(snap.child, state="exited")),
    ):
        for _ in range(5):
            tally.feed(dataclasses.replace(variant, t=t, sample_t=t))
            t += 0.1
    assert tally.seconds == pytest.approx(seconds)


def test_no_new_sample_is_no_run_time():
    snap = calm(make_run_snapshot())
    tally = fed(snap, seconds=1.0)
    seconds = tally.seconds
    for i in range(20):  # the screen goes on, the agent sends nothing (the workload is being stopped)
        tally.feed(dataclasses.replace(snap, t=4000.0 + 0.1 * i, sample_t=1000.85))  # the last one fed
    assert tally.seconds == pytest.approx(seconds)


def test_a_new_workload_starts_a_new_tally():
    snap = calm(make_run_snapshot())
    tally = fed(snap, seconds=1.0)
    again = dataclasses.replace(snap, child=dataclasses.replace(snap.child, pid=5555))
    for i in range(4):
        tally.feed(dataclasses.replace(again, t=3000.0 + 0.1 * i, sample_t=3000.0 + 0.1 * i))
    assert tally.seconds == pytest.approx(0.3)


def test_the_report_is_json_and_renders(tmp_path):
    snap = calm(make_run_snapshot(), busy=0.3, wait=0.65)
    report = fed(snap).report(ended_by="--duration 2 s reached", tool="torchpar-top test")
    path = tmp_path / "r.json"
    verdict.write(report, str(path))
    assert json.loads(path.read_text()) == report
    text = verdict.render(report, str(path))
    assert text.splitlines()[1].startswith("  verdict: input-bound:")
    assert "throughput: 6.2 steps/s" in text and f"report: {path}" in text
    assert "train.py:57 item() ×1860" in text  # the top sync-point lines, by count


def test_a_run_that_ended_stalled_says_where_each_rank_was():
    from fakes.fake_session import make_steps_snapshot

    snap = make_steps_snapshot(straggler=False)
    at = {0: "waits at hang.py:21 (<module>)", 1: "sleep at hang.py:15 (forward)"}
    ranks = tuple(
        dataclasses.replace(r, at=at[r.rank], steps=dataclasses.replace(r.steps, stalled=40.0 + r.rank))
        for r in snap.ranks
    )
    report = fed(dataclasses.replace(snap, ranks=ranks), seconds=0.5).report()
    assert [(r["stalled"], r["at"]) for r in report["ranks"]] == [(40.0, at[0]), (41.0, at[1])]
    # the run ended hung: that is the verdict, whatever else passed its threshold before
    assert report["verdict"]["class"] == "stalled" and report["verdict"]["share"] == 1.0
    text = verdict.render(report)
    assert (
        "  verdict: stalled: no step for 40.0 s when the run ended (100 % of it): rank 0 waits at "
        "hang.py:21 (<module>); rank 1 sleep at hang.py:15 (forward)"
    ) in text.splitlines()
    assert "stalled" not in verdict.render(fed(snap, seconds=0.5).report())  # stepping to the end
    # a hang that ended in an error (a collective's timeout): where each rank was first, the error next
    hung = dataclasses.replace(snap, ranks=ranks)
    timed_out = dataclasses.replace(
        hung,
        child=dataclasses.replace(
            hung.child, state="exited", exit_code=1, message="workload exited with status 1"
        ),
    )
    v = fed(hung, seconds=0.5).report(final=timed_out)["verdict"]
    assert v["class"] == "stalled" and v["also"][0] == {
        "class": "failed",
        "why": "the workload exited with status 1",
    }


def test_a_run_that_failed_says_so_before_any_bottleneck():
    snap = calm(make_run_snapshot(), busy=0.3, wait=0.65)  # input-bound while it ran
    tally = fed(snap, seconds=1.0)
    message = "workload exited with status 1; rank 0 failed first: AttributeError: no _cuda_setDevice"
    ended = dataclasses.replace(
        snap, child=dataclasses.replace(snap.child, state="exited", exit_code=1, message=message)
    )
    v = tally.report(final=ended)["verdict"]
    assert v["class"] == Bound.FAILED and v["share"] is None
    assert v["why"] == "the " + message and "traceback is in the log" in v["next"]
    assert [a["class"] for a in v["also"]] == [Bound.INPUT]  # what bounded it while it ran, still said
    assert "  verdict: failed: the workload exited with status 1; rank 0 failed first" in verdict.render(
        tally.report(final=ended)
    )
    # a code that returned, or a stop of ours (the session gives no status for it), is no failure
    done = dataclasses.replace(snap, child=dataclasses.replace(snap.child, state="exited", exit_code=0))
    assert tally.report(final=done)["verdict"]["class"] == Bound.INPUT
    assert tally.report(final=snap)["verdict"]["class"] == Bound.INPUT
    killed = dataclasses.replace(
        snap,
        child=dataclasses.replace(
            snap.child, state="exited", exit_code=-9, message="workload killed by signal 9"
        ),
    )
    v = tally.report(final=killed)["verdict"]
    assert v["class"] == Bound.FAILED and "signal 9" in v["why"] and "out-of-memory" in v["next"]
    assert "out-of-memory" not in tally.report(final=ended)["verdict"]["next"]  # a traceback to read there
    # a rank's exit note, in the words model.store writes it: a signal other than SIGABRT is read as one
    for code, signalled in ((-9, True), (-15, True), (-6, False)):
        note = exit_note("rank 1", (0, ""), code)
        ranked = dataclasses.replace(
            snap,
            child=dataclasses.replace(
                snap.child, state="exited", exit_code=1, message=f"workload exited with status 1; {note}"
            ),
        )
        v = tally.report(final=ranked)["verdict"]
        assert v["class"] == Bound.FAILED and ("out-of-memory" in v["next"]) == signalled, note


def test_a_run_that_did_no_work_says_so_not_what_its_set_up_looked_like():
    """pytorch/examples' FSDP2 example on a CPU machine printed that it found no GPUs and returned: 8 s of
    importing torch read *compute-bound (CPU): eager CPU ops run on the frontend thread, busy 97 %*."""
    snap = calm(make_run_snapshot(), busy=0.97, wait=0.0)
    idle = dataclasses.replace(snap, throughput=0.0, throughput_unit="ops/s", steps=None, steady=None)
    idle = dataclasses.replace(idle, ranks=tuple(dataclasses.replace(r, steps=None) for r in idle.ranks))
    v = verdict_of(fed(idle))
    assert v["class"] == Bound.NO_WORK and v["also"] == []
    assert (
        v["why"]
        == "no training step and no torch op were seen in the run (its frontend was busy 97 % of it: "
        "importing, setting up)"
    )
    ended = dataclasses.replace(
        idle,
        child=dataclasses.replace(
            idle.child, state="exited", exit_code=2, message="workload exited with status 2"
        ),
    )
    v = fed(idle).report(final=ended)["verdict"]
    assert v["class"] == Bound.FAILED and [a["class"] for a in v["also"]] == [Bound.NO_WORK]
    # one op counted is work: judged as before
    busy = dataclasses.replace(idle, throughput=50.0)
    assert verdict_of(fed(busy))["class"] == Bound.COMPUTE_CPU


# -- compare -------------------------------------------------------------------------------------------


def report_with(tmp_path, name: str, steps: float | None, unit: str = "steps/s", **figures) -> str:
    snap = calm(make_run_snapshot(), busy=0.3, wait=0.65)
    report = fed(snap, seconds=0.5).report()
    report["figures"].update(
        throughput=steps, steps_per_s=steps if unit == "steps/s" else None, throughput_unit=unit, **figures
    )
    path = tmp_path / name
    path.write_text(json.dumps(report))
    return str(path)


def run_compare(capsys, *argv):
    from torchpar_top.main import main

    try:
        status = main(["compare", *argv])
    except SystemExit as exc:
        status = exc.code
    out = capsys.readouterr()
    return status, out.out, out.err


def test_compare_exit_status_follows_the_tolerance(tmp_path, capsys):
    a = report_with(tmp_path, "a.json", 10.0)
    same = report_with(tmp_path, "b.json", 9.7)
    worse = report_with(tmp_path, "c.json", 9.0)
    status, out, _ = run_compare(capsys, a, same)
    assert status == 0 and "steps_per_s (steps/s): -3.0 %, tolerance 5.0 %: ok" in out
    assert "verdict" in out and "input-bound" in out
    status, out, _ = run_compare(capsys, a, worse)
    assert status == 1 and "-10.0 %" in out and "FELL" in out
    assert run_compare(capsys, a, worse, "--tolerance", "0.2")[0] == 0
    assert run_compare(capsys, worse, a)[0] == 0  # faster is never a fall


def test_compare_a_chosen_figure_and_throughput_without_steps(tmp_path, capsys):
    a = report_with(tmp_path, "a.json", 100.0, unit="it/s", cpu_load=0.8)
    b = report_with(tmp_path, "b.json", 99.0, unit="it/s", cpu_load=0.5)
    status, out, _ = run_compare(capsys, a, b)
    assert status == 0 and "throughput (it/s): -1.0 %" in out
    assert run_compare(capsys, a, b, "--metric", "cpu_load")[0] == 1


def test_compare_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    a = report_with(tmp_path, "a.json", 10.0)
    ops = report_with(tmp_path, "ops.json", 1000.0, unit="ops/s (sampled)")
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    broken = tmp_path / "broken.json"
    broken.write_text('{"report_version": 1, "fig')
    cases = [
        ([a, str(tmp_path / "missing.json")], "no such file"),
        ([a, str(other)], "not a torchpar-top report"),
        ([a, str(broken)], "not JSON"),
        ([a, ops], "different units"),
        ([a, a, "--metric", "nope"], "invalid choice"),
        ([a, a, "--tolerance", "2"], "between 0 and 1"),
    ]
    for argv, needle in cases:
        status, out, err = run_compare(capsys, *argv)
        lines = err.strip().splitlines()
        assert status == 2 and out == "", (argv, err)
        assert len(lines) == 1 and lines[0].startswith("torchpar-top: error:") and needle in lines[0], lines


def test_a_replay_counts_trace_time_once():
    from torchpar_top.contract.snapshot import ReplayView

    snap = calm(make_snapshot(executors=1))
    tally = RunTally()

    def at(position: float) -> None:
        tally.feed(
            dataclasses.replace(snap, t=5000.0, replay=ReplayView("t.json", position, 1.0, 0.01, 0.001))
        )

    for i in range(101):  # 0 to 100 ms of trace time, a frame (1 ms) at a time
        at(i / 1000)
    for i in range(50, 101):  # played again from 50 ms (r, or a seek back): nothing new
        at(i / 1000)
    at(0.5)  # a seek forward: the trace jumped over is not counted
    for i in range(501, 511):
        at(i / 1000)
    assert tally.seconds == pytest.approx(0.110)
    assert tally.report()["seconds_are"] == "trace time"


@pytest.mark.parametrize("where, needle", [("missing/r.json", "no such folder"), (".", "is a folder")])
def test_a_report_path_that_cannot_be_written_is_one_line_and_status_2_before_the_run(
    tmp_path, where, needle
):
    import subprocess
    import sys

    path = str(tmp_path / where)
    proc = subprocess.run(
        [sys.executable, "-m", "torchpar_top", "--headless", "--duration", "30", "--report", path],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"torchpar-top: error: --report {path}: {needle}"
        + (f" {tmp_path / 'missing'}" if needle == "no such folder" else "")
    ]


def test_the_watch_feeds_recent_snapshots_and_a_fresh_last_one():
    import time

    from torchpar_top.sinks.verdict import TallyWatch

    ages: list[float] = []
    built: list[str] = []

    def recent(max_age: float):
        ages.append(max_age)
        return make_snapshot()

    def fresh():
        built.append("fresh")
        return make_snapshot()

    watch = TallyWatch(fresh, RunTally(), 0.01, recent)
    watch.start()
    deadline = time.monotonic() + 30
    while len(ages) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    watch.stop()
    assert len(ages) >= 3 and set(ages) == {0.01}  # on its clock, a snapshot at most one interval old
    assert built == ["fresh"]  # only the last one is built for it: the end of the run, as it is


def test_the_watch_is_fed_where_snapshots_are_built_and_stands_behind_when_they_stop():
    """The session tells of each snapshot it builds: the tally is fed those (in the builder's thread) and
    the watch's thread feeds nothing meanwhile; once none came for ``grace`` seconds it feeds again."""
    import time

    from torchpar_top.sinks.verdict import TallyWatch

    fed: list[str] = []

    class Counting(RunTally):
        def feed(self, snap):
            fed.append(threading.current_thread().name)
            super().feed(snap)

    built: list = []
    watch = TallyWatch(make_snapshot, Counting(), 0.01, lambda age: make_snapshot(), built)
    watch.grace = 0.3
    watch.start()
    assert len(built) == 1  # it listens
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:  # a screen building snapshots at 20 Hz
        for told in built:
            told(make_snapshot())
        time.sleep(0.05)
    by_builder = fed.count("MainThread")
    assert by_builder >= 6 and "tpt-verdict" not in fed  # fed where built, the thread stood behind
    deadline = time.monotonic() + 30
    while "tpt-verdict" not in fed and time.monotonic() < deadline:  # the builds stopped
        time.sleep(0.02)
    assert "tpt-verdict" in fed  # ... so the thread feeds again
    watch.stop()
    assert built == []  # no longer listens
    assert fed[-1] == "MainThread"  # the last one, fresh, from stop()


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1e999"])
@pytest.mark.parametrize("where", ["a", "b", "other figure"])
def test_compare_never_passes_on_a_figure_that_is_not_finite(tmp_path, capsys, bad, where):
    """json reads NaN, Infinity and 1e999 (inf): the gate gave "+nan %: ok" and status 0."""
    good = report_with(tmp_path, "good.json", 10.0)
    garbage = tmp_path / "garbage.json"
    text = (tmp_path / "good.json").read_text()
    if where == "other figure":
        garbage.write_text(text.replace('"frontend_busy": ', f'"frontend_busy": {bad}, "was": ', 1))
    else:
        garbage.write_text(text.replace('"steps_per_s": 10.0', f'"steps_per_s": {bad}', 1))
    assert garbage.read_text() != text
    argv = (good, str(garbage)) if where != "a" else (str(garbage), good)
    status, out, err = run_compare(capsys, *argv)
    lines = err.strip().splitlines()
    assert status == 2 and out == "", (status, out, err)
    assert len(lines) == 1 and "garbage.json" in lines[0] and "not a finite number" in lines[0], lines
