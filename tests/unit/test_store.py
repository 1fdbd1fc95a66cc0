"""The store: ring buffers stay bounded; the scoreboard counts each mode's steady state only."""

import json

from pytest import approx
from torchpar_top.contract import messages as m
from torchpar_top.contract.snapshot import ChildStatus, HostSample, ThreadInfo
from torchpar_top.contract.vocab import ChildState, DataBound, Role
from torchpar_top.model import figures
from torchpar_top.model import store as store_mod
from torchpar_top.model.store import SessionStore, thread_every


def wire(**plain):
    """A message as the agent sends it, read back by the real codec."""
    return m.decode(json.dumps({"v": m.VERSION, **plain}))


def sample(mode="async", depth=10, throughput=100.0, window=0.1, wait=0.5, draining=False, **over):
    return wire(
        **{
            "type": "sample",
            "t": 1.0,
            "window": window,
            "mode": mode,
            "throughput": throughput,
            "unit": "it/s",
            "num_threads": 2,
            "frontend": {"busy": 1 - wait, "wait": wait},
            "overlap": 0.25,
            "draining": draining,
            "executors": [
                {
                    "name": "s0",
                    "kind": "emulated-stream",
                    "emulated": True,
                    "quantity": "depth",
                    "value": depth,
                    "capacity": 1024,
                    "launched": 5 + depth,
                    "completed": 3,
                    "busy": 0.9,
                    "blocked": 0.4,
                }
            ],
            "roles": [{"tid": 7, "role": "frontend (main)"}],
            **over,
        }
    )


def test_scoreboard_means_per_mode_skip_the_switch_and_the_drain():
    st = SessionStore("async")
    for _ in range(11):  # the first sample has no previous mode: not counted
        st.on_message(sample("async", depth=1000, throughput=50.0))
    st.on_message(sample("sync", depth=900, throughput=1.0))  # straddles the switch: not counted
    st.on_message(sample("sync", depth=500, throughput=1.0, draining=True))  # ASYNC backlog: not counted
    for _ in range(5):
        st.on_message(sample("sync", depth=1, throughput=40.0, wait=1.0))
    snap = st.snapshot()
    by_mode = {m.mode: m for m in snap.scoreboard}
    assert abs(by_mode["async"].seconds - 1.0) < 1e-9
    assert by_mode["async"].throughput == approx(50.0) and by_mode["async"].mean_depth == approx(1000)
    assert abs(by_mode["sync"].seconds - 0.5) < 1e-9
    assert by_mode["sync"].throughput == approx(40.0) and by_mode["sync"].mean_depth == approx(1)
    assert by_mode["sync"].frontend_wait == approx(1.0)
    assert snap.ratio == approx(50.0 / 40.0)
    assert snap.mode == "sync" and snap.executors[0].history[-1] == 1


def test_the_scoreboard_starts_at_the_first_work_done():
    """Windows before any work completed (CUDA starting, the experiment fitting its item) are no mode's
    steady state: nor is the window in which the first work completed; a later idle window counts."""
    st = SessionStore("async")
    for _ in range(30):  # three seconds of start-up, nothing done
        st.on_message(sample("async", depth=0, throughput=0.0))
    st.on_message(sample("async", depth=500, throughput=20.0))  # the first items: not counted
    for _ in range(10):
        st.on_message(sample("async", depth=1000, throughput=50.0))
    st.on_message(sample("async", depth=1000, throughput=0.0))  # a stall once running counts
    by_mode = {s.mode: s for s in st.snapshot().scoreboard}
    assert by_mode["async"].seconds == approx(1.1)
    assert by_mode["async"].throughput == approx(10 * 50.0 * 0.1 / 1.1)
    assert by_mode["async"].mean_depth == approx(1000)


def test_buffers_are_bounded():
    st = SessionStore("async")
    for i in range(store_mod.HISTORY + 50):
        st.on_message(sample(depth=i))
        st.on_host(HostSample(float(i), (10.0, 20.0), ()))
        st.add_log("stdout", f"line {i}")
    snap = st.snapshot()
    assert len(snap.executors[0].history) == store_mod.HISTORY
    assert snap.executors[0].history[-1] == store_mod.HISTORY + 49
    assert all(len(h) == store_mod.CORE_HISTORY for h in snap.core_history)
    assert len(snap.log) <= 200 and snap.log[-1].text == f"line {store_mod.HISTORY + 49}"
    # the series read over the lanes' window keep twice that window: 100 samples at 10 Hz
    keep = store_mod.series_length(st.interval)
    assert keep == 100
    for series in (snap.frontend_busy, snap.overlap, snap.timing, snap.executors[0].busy):
        assert len(series) == keep
    assert snap.samples == store_mod.HISTORY + 50 and snap.host_samples == store_mod.HISTORY + 50
    assert snap.executors[0].samples == store_mod.HISTORY + 50


def test_the_series_kept_cover_the_lanes_window_at_every_interval():
    for interval in (0.02, 0.05, 0.1, 0.5, 1.0, 60.0):
        st = SessionStore("async", interval=interval)
        for _ in range(3 * store_mod.series_length(interval) + 5):
            st.on_message(sample(depth=3))
        snap = st.snapshot()
        window = figures.windows(interval)
        assert len(snap.frontend_busy) == len(snap.executors[0].busy) == 2 * window
        assert snap.lanes is not None and snap.lanes.windows == window  # the lanes read a full window


def test_the_log_is_copied_again_only_after_a_line_came():
    st = SessionStore("async")
    st.add_log("stdout", "one")
    first = st.snapshot().log
    st.on_message(sample(depth=2))
    assert st.snapshot().log is first  # no new line: the same tuple, not a copy
    st.add_log("stdout", "two")
    assert [line.text for line in st.snapshot().log] == ["one", "two"]
    st.add_log("stdout", "three", partial=True)  # a partial line is not in the log
    assert [line.text for line in st.snapshot().log] == ["one", "two"]


def test_pause_freezes_samples_but_keeps_the_log():
    st = SessionStore("async")
    st.on_message(sample(depth=3))
    st.set_paused(True)
    st.on_message(sample(depth=99))
    st.on_host(HostSample(1.0, (50.0,), ()))
    st.add_log("stderr", "kept")
    snap = st.snapshot()
    assert snap.paused and snap.executors[0].history == (3,) and snap.cores == ()
    assert snap.log[-1].text == "kept"


def test_threads_are_grouped_and_results_kept_by_label():
    st = SessionStore("multi-device")
    threads = (
        ThreadInfo(1, "python", Role.FRONTEND, 95.0),
        ThreadInfo(2, "python", Role.INTRAOP, 50.0),
        ThreadInfo(3, "python", Role.INTRAOP, 1.0),
    )
    st.on_host(HostSample(1.0, (1.0,), threads))
    st.on_message(wire(type="result", label="both at once", value=0.5, unit="s"))
    st.on_message(wire(type="result", label="both at once", value=0.4, unit="s"))
    snap = st.snapshot()
    workers = next(g for g in snap.thread_groups if g.role == Role.INTRAOP)
    assert (workers.count, workers.busy, workers.cpu_percent) == (2, 1, 51.0)
    assert [(r.label, r.value) for r in snap.results] == [("both at once", 0.4)]


def test_a_dead_child_carries_its_last_stderr_lines():
    st = SessionStore("async")
    for i in range(20):
        st.add_log("stderr", f"err {i}")
    st.on_child(ChildStatus(42, ChildState.EXITED, 1, "workload exited with status 1"))
    child = st.snapshot().child
    assert child.exit_code == 1 and child.last_stderr[-1] == "err 19"
    assert len(child.last_stderr) == store_mod.STDERR_TAIL


def _hello(pid, rank=None, interop_threads=1):
    return m.Hello(
        pid=pid,
        experiment="run",
        torch="2",
        device="cpu",
        num_threads=1,
        interop_threads=interop_threads,
        rank=rank,
        world_size=None if rank is None else 2,
    )


def test_a_rank_reports_its_exit_status_before_its_connection_closes():
    store = SessionStore("run")
    store.on_message(_hello(11, rank=1), source=7)
    store.on_message(wire(type="exit", status=1, reason="RuntimeError: boom"), source=7)
    store.on_source_closed(7)  # a rank is not our child: no status from wait()
    (rank,) = store.snapshot().ranks
    assert (rank.rank, rank.state, rank.exit_code) == (1, "exited", 1)
    assert store.snapshot().log[-1].text == "rank 1's code ended with status 1: RuntimeError: boom"


def test_our_own_childs_wait_status_wins_over_its_report():
    store = SessionStore("run")
    store.on_message(_hello(12), source=0)
    store.on_message(wire(type="exit", status=0, reason=""), source=0)
    store.on_source_closed(0, -9)  # killed after it reported: wait() knows better
    assert [(r.rank, r.exit_code) for r in store.snapshot().ranks] == [(None, -9)]
    assert not any("ended with status" in line.text for line in store.snapshot().log)


def test_a_report_that_agrees_with_wait_gives_the_exit_its_reason_once():
    """Our own child's exit is said by the session's line, which carries the report's reason (the exit
    note): the store does not say it a second time ("the workload's code ended with status 1: ...")."""
    store = SessionStore("run")
    store.on_message(_hello(12), source=0)
    store.on_message(wire(type="exit", status=1, reason="ValueError: bad value 42"), source=0)
    store.on_source_closed(0, 1)
    assert store.exit_notes() == ["ValueError: bad value 42"]
    assert not any("bad value" in line.text for line in store.snapshot().log)


def test_a_spoofed_exit_while_the_process_runs_marks_nothing():
    """A script can write an ``exit`` message on the agent's socket: while the process runs it is
    neither shown nor taken as its state, and wait()'s status is what counts at the end."""
    store = SessionStore("run")
    store.on_message(_hello(12), source=0)
    store.on_message(wire(type="exit", status=99, reason="spoofed"), source=0)
    snap = store.snapshot()
    assert [(r.state, r.exit_code) for r in snap.ranks] == [("running", None)]
    assert not any("99" in line.text for line in snap.log)
    store.on_source_closed(0, 0)
    snap = store.snapshot()
    assert [(r.state, r.exit_code) for r in snap.ranks] == [("exited", 0)]
    assert not any("99" in line.text for line in snap.log)


def test_a_connection_that_closes_while_its_process_runs_on_is_monitoring_lost():
    store = SessionStore("run")
    store.on_message(_hello(12), source=0)
    assert store.on_source_lost(0)
    snap = store.snapshot()
    assert (
        snap.notice.startswith("monitoring lost: the workload (pid 12)") and snap.ranks[0].state == "running"
    )
    assert snap.log[-1].text == snap.notice
    store.on_source_closed(0, 0)
    assert store.snapshot().notice == "" and store.snapshot().ranks[0].exit_code == 0


def test_a_rank_that_runs_on_after_its_connection_closed_keeps_no_reported_status():
    store = SessionStore("run")
    store.on_message(_hello(11, rank=1), source=7)
    assert store.on_source_lost(7)
    store.on_message(wire(type="exit", status=99, reason="spoofed"), source=7)  # too late to be believed
    store.on_source_closed(7)
    (rank,) = store.snapshot().ranks
    assert (rank.state, rank.exit_code) == ("exited", None)


def test_a_connection_closing_after_its_exit_report_is_not_lost():
    store = SessionStore("run")
    store.on_message(_hello(12), source=0)
    store.on_message(wire(type="exit", status=0, reason=""), source=0)
    assert not store.on_source_lost(0)  # the process is only ending
    assert store.snapshot().notice == ""


def test_a_second_hello_on_a_connection_is_ignored():
    store = SessionStore("run")
    store.on_message(_hello(12), source=0)
    store.on_message(_hello(1), source=0)  # a script writing on our socket cannot rename the workload
    assert [r.pid for r in store.snapshot().ranks] == [12]
    assert "second hello" in store.snapshot().log[-1].text


def test_ranks_are_fields_not_name_prefixes():
    store = SessionStore("run")
    for rank in (0, 1):
        store.on_message(_hello(20 + rank, rank=rank), source=rank + 1)
        store.on_message(sample(), source=rank + 1)
    store.on_message(
        wire(type="syncpoints", sites=[{"where": "t.py:3", "call": "item()", "count": 4}]), source=2
    )
    snap = store.snapshot()
    assert [(e.rank, e.name) for e in snap.executors] == [(0, "s0"), (1, "s0")]
    assert [(s.rank, s.where) for s in snap.syncpoints] == [(1, "t.py:3")]


def test_the_dataloader_verdict_is_computed_once_per_rank():
    loader = {
        "name": "dataloader:0",
        "kind": "dataloader",
        "emulated": False,
        "quantity": "outstanding",
        "value": 4,
        "capacity": 4,
        "launched": 40,
        "completed": 36,
        "busy": 1.0,
        "blocked": 0.0,
        "ready": 0,
    }
    store = SessionStore("run")
    store.on_message(_hello(20, rank=0), source=1)
    store.on_message(_hello(21, rank=1), source=2)
    store.on_message(sample(executors=[loader], data_wait=0.62), source=1)
    store.on_message(sample(executors=[loader], data_wait=0.10), source=2)
    snap = store.snapshot()
    assert (snap.data_verdict.bound, snap.data_verdict.wait) == (DataBound.INPUT, 0.62)  # the primary rank's
    assert [r.data_verdict.bound for r in snap.ranks] == [DataBound.INPUT, DataBound.COMPUTE]
    assert snap.executors[0].ready == 0
    no_loader = SessionStore("run")
    no_loader.on_message(sample(data_wait=0.9))
    assert no_loader.snapshot().data_verdict is None  # a wait without a watched DataLoader is no verdict


def _round(st, number, d0, d1, both, close=True):
    rows = [
        ("device 0 alone", d0, "s"),
        ("device 1 alone", d1, "s"),
        ("both at once", both, "s"),
        ("speed-up of both", (d0 + d1) / both, "×"),
    ]
    for i, (label, value, unit) in enumerate(rows):
        if i == len(rows) - 1 and not close:
            return
        st.on_message(
            wire(
                type="result",
                label=label,
                value=value,
                unit=unit,
                round=number,
                closes_round=i == len(rows) - 1,
            )
        )


def test_results_in_rounds_never_mix_two_rounds():
    """The issue's screen: round N+1's devices (0.5847, 0.6191) beside round N's "both" and speed-up.
    Mid-round, the last complete round is shown, all of it."""
    st = SessionStore("multi-device")
    _round(st, 1, 0.60, 0.62, 1.20)
    st.on_message(wire(type="result", label="device 0 alone", value=0.5847, unit="s", round=2))
    st.on_message(wire(type="result", label="device 1 alone", value=0.6191, unit="s", round=2))
    rows = st.snapshot().results
    assert [(r.label, r.value, r.round) for r in rows] == [
        ("device 0 alone", 0.60, 1),
        ("device 1 alone", 0.62, 1),
        ("both at once", 1.20, 1),
        ("speed-up of both", approx((0.60 + 0.62) / 1.20), 1),
    ]
    _round(st, 2, 0.5847, 0.6191, 1.1612)  # now complete: its own speed-up, 1.037
    speed = {r.label: r for r in st.snapshot().results}["speed-up of both"]
    assert speed.round == 2 and speed.value == approx((0.5847 + 0.6191) / 1.1612)


def test_rounds_have_a_median_and_range_and_a_round_that_never_closed_is_dropped():
    st = SessionStore("multi-device")
    for number, both in enumerate((1.0, 0.8, 0.9), 1):
        _round(st, number, 0.5, 0.5, both)
    _round(st, 4, 0.7, 0.7, 0.7, close=False)  # stopped mid-round
    _round(st, 5, 0.5, 0.5, 0.6)
    rows = {r.label: r for r in st.snapshot().results}
    both = rows["both at once"]
    assert (both.value, both.round, both.rounds) == (0.6, 5, 4)
    assert (both.median, both.low, both.high) == (approx(0.85), 0.6, 1.0)
    assert rows["device 0 alone"].high == 0.5  # round 4's 0.7 never completed


def test_plain_results_are_kept_beside_rounds():
    st = SessionStore("async")
    st.on_message(wire(type="result", label="note", value=1.0, unit="x"))
    _round(st, 1, 0.5, 0.5, 0.5)
    assert [r.round for r in st.snapshot().results] == [None, 1, 1, 1, 1]


def test_running_and_waiting_for_a_core_are_kept_beside_busy():
    st = SessionStore("multi-device")
    row = {
        "name": "s0",
        "kind": "emulated-stream",
        "emulated": True,
        "quantity": "depth",
        "value": 3,
        "capacity": 1024,
        "launched": 5,
        "completed": 2,
        "busy": 1.0,
        "blocked": 0.0,
    }
    st.on_message(sample(executors=[row]))  # the first window: no schedstat span yet
    st.on_message(
        sample(
            executors=[row | {"running": 0.31, "core_wait": 0.69}],
            overlap=0.0,
            overlap_high=0.3,
            overlap_in_progress=1.0,
            frontend={"busy": 0.01, "wait": 0.9, "core_wait": 0.02},
        )
    )
    snap = st.snapshot()
    (ex,) = snap.executors
    assert ex.busy == (1.0, 1.0) and ex.running == (1.0, 0.31) and ex.core_wait == (0.0, 0.69)
    assert snap.overlap[-1] == 0.0 and snap.overlap_high[-1] == 0.3 and snap.overlap_in_progress[-1] == 1.0
    assert snap.frontend_busy[-1] == 0.01 and snap.frontend_core_wait[-1] == 0.02
    plain = SessionStore("async")
    plain.on_message(sample())
    assert plain.snapshot().executors[0].running == () and plain.snapshot().frontend_core_wait == ()


def test_a_timing_round_counts_in_neither_mode():
    st = SessionStore("async")
    for _ in range(6):
        st.on_message(sample("async", throughput=50.0))
    st.on_message(sample("async", throughput=5.0, timing=True))
    by_mode = {s.mode: s for s in st.snapshot().scoreboard}
    assert by_mode["async"].seconds == approx(0.5) and by_mode["async"].throughput == approx(50.0)
    assert st.snapshot().timing == (False,) * 6 + (True,)  # aligned with the other series


def test_the_agents_stack_is_classified_and_can_be_turned_off():
    frames = [
        {"function": "run", "filename": "/x/workloads/async_compute.py", "line": 78},
        {"function": "EmulatedStream.synchronize", "filename": "/x/probes/agent/stream.py", "line": 79},
        {"function": "Condition.wait", "filename": "/usr/lib/python3.11/threading.py", "line": 331},
    ]
    st = SessionStore("async")
    st.on_message(_hello(42))
    st.on_message(sample(stack={"frames": frames, "idle": True}))
    stack = st.snapshot().stack
    assert (stack.pid, stack.source, stack.idle) == (42, "agent", True)
    assert (
        stack.waiting_in == "synchronize (emulated stream)" and stack.frames[-1].function == "Condition.wait"
    )
    st.on_message(sample())  # samples without a stack keep the last one
    assert st.snapshot().stack == stack
    off = SessionStore("async")
    off.stacks = False  # --no-stacks
    off.on_message(sample(stack={"frames": frames, "idle": True}))
    assert off.snapshot().stack is None


def test_threads_show_their_mean_over_the_last_second():
    st = SessionStore("async", interval=0.25)  # threads read every other sample: 2 readings make a second
    for cpu in (90.0, 0.0, 30.0, 40.0, 10.0):
        st.on_host(HostSample(1.0, (1.0,), (ThreadInfo(7, "python", Role.FRONTEND, cpu, 100.0 - cpu),)))
        st.on_host(HostSample(1.0, (1.0,), None))  # a sample without a thread reading keeps the last one
    (info,) = st.snapshot().threads
    assert info.cpu_percent == approx(25.0) and info.wait_percent == approx(75.0)  # 40, 10


def test_threads_are_read_every_half_second_whatever_the_interval():
    assert [thread_every(i) for i in (0.02, 0.1, 0.25, 0.5, 1.0, 5.0)] == [25, 5, 2, 1, 1, 1]


def test_the_session_serves_the_same_snapshot_until_something_changes():
    from torchpar_top.sources.live.session import Session

    s = Session("async")  # not started: nothing runs
    first = s.snapshot()
    assert s.snapshot() is first  # the screen skips a frame with nothing new
    s.store.add_log("app", "something new")
    assert s.snapshot() is not first and s.snapshot().log[-1].text == "something new"


def test_the_dataloader_verdict_is_over_the_last_second_of_windows():
    """Recorded on a loaded machine: one window of waiting, then the loop computes (a core was taken):
    compute-bound; the same loop with its workers' sleeps dominating: input-bound."""
    loader = {
        "name": "dataloader:0",
        "kind": "dataloader",
        "emulated": False,
        "quantity": "outstanding",
        "value": 4,
        "capacity": 4,
        "launched": 40,
        "completed": 36,
        "busy": 1.0,
        "blocked": 0.0,
        "ready": 0,
    }
    st = SessionStore("run")
    for wait in (0.79, 0.196, 0.042, 0.047, 0.067, 0.049, 0.06, 0.05, 0.02, 0.03):
        st.on_message(sample(executors=[loader], data_wait=wait))
    assert st.snapshot().data_verdict.bound == DataBound.COMPUTE
    assert st.snapshot().data_verdict.wait == approx(0.1351)
    for wait in (0.92, 0.97, 0.80, 0.12, 0.96, 0.97, 0.68, 0.96, 0.72, 0.65):  # one window computed
        st.on_message(sample(executors=[loader], data_wait=wait))
    assert st.snapshot().data_verdict.bound == DataBound.INPUT  # a single window does not flip it


def test_the_host_loop_reads_threads_every_few_samples_and_a_new_process_at_once():
    import threading
    import time

    from torchpar_top.sources.live.session import Session

    class CountingSampler:
        error = None

        def __init__(self) -> None:
            self.started = {7: 100}  # as ThreadSampler: when each thread read last started
            self.reads = 0
            self.first_at: int | None = None  # the host sample it was first read in

        def sample(self, roles):
            self.reads += 1
            if self.first_at is None:
                self.first_at = s.host_samples
            return (ThreadInfo(7, "python", Role.FRONTEND, 50.0),)

    s = Session("async", interval=0.02)  # threads every 25th sample; never started: no child
    first = CountingSampler()
    s._samplers[1] = first
    loop = threading.Thread(target=s._host_loop)
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while s.host_samples < 60 and time.monotonic() < deadline:
            time.sleep(0.01)
        second = CountingSampler()
        with s._child_lock:
            s._samplers[2] = second  # a new process: read on the next sample, not 25 samples later
        seen = s.host_samples
        while second.reads == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert second.first_at is not None and second.first_at <= seen + 1
    finally:
        s._stop.set()
        loop.join(timeout=5)
    assert 1 <= first.reads <= s.host_samples // 25 + 2
    assert s.snapshot().threads and s.snapshot().threads[0].cpu_percent == approx(50.0)


def test_a_reader_on_its_own_clock_shares_a_recent_snapshot():
    from torchpar_top.sources.live.session import Session

    s = Session("async")  # not started: nothing runs
    first = s.snapshot()
    s.store.add_log("app", "something new")
    assert s.recent_snapshot(60.0) is first  # built within a minute: shared, not built again
    fresh = s.recent_snapshot(0.0)  # too old for this reader: a new build, with what changed
    assert fresh is not first and fresh.log[-1].text == "something new"
    assert s.snapshot() is fresh


def test_the_session_tells_of_each_snapshot_it_builds_and_only_those():
    from torchpar_top.sources.live.session import Session

    s = Session("async")  # not started: nothing runs
    told: list = []
    s.built.append(told.append)
    first = s.snapshot()
    assert s.snapshot() is first and told == [first]  # nothing changed: the same one, not told again
    s.store.add_log("app", "something new")
    fresh = s.recent_snapshot(0.0)
    assert told == [first, fresh]


def test_attached_python_threads_are_named_from_the_last_dump():
    from torchpar_top.contract.messages import ThreadRole
    from torchpar_top.contract.snapshot import StackView
    from torchpar_top.sources.live.session import Session

    class Poller:
        latest = (StackView(100, "MainThread", (), False, 0.0, python_tids=(100, 101, 102)), "")

    s = Session("async")  # not started
    assert s._python_roles({}) == {}  # no stacks: nothing added
    s._stacks = Poller()
    agent = ThreadRole(tid=102, role=Role.STREAM_EXECUTOR, executor="cpu-stream:0")
    roles = s._python_roles({102: agent})
    assert roles == {101: ThreadRole(tid=101, role=Role.PYTHON), 102: agent}  # main stays the frontend


def test_the_openmp_workers_of_inter_op_threads_are_not_counted_in_the_pool():
    # the inter-op experiment: 2 inter-op threads (started together), each of which started an OpenMP
    # worker for its first parallel op; all four are named PTThreadPool (a thread inherits its creator's)
    st = SessionStore("inter-op")
    st.on_message(_hello(100, interop_threads=2))
    threads = (
        ThreadInfo(100, "python", Role.FRONTEND, 3.0, pid=100),
        ThreadInfo(101, "python", Role.INTRAOP, 0.0, pid=100),
        ThreadInfo(140, "PTThreadPool", Role.INTEROP, 50.0, pid=100),
        ThreadInfo(141, "PTThreadPool", Role.INTEROP, 48.0, pid=100),
        ThreadInfo(152, "PTThreadPool", Role.INTEROP, 47.0, pid=100),
        ThreadInfo(160, "PTThreadPool", Role.INTEROP, 45.0, pid=100),
        ThreadInfo(170, "PTThreadPool", Role.INTEROP, 40.0, pid=101),  # another process: no size known
    )
    st.on_host(HostSample(1.0, (1.0,), threads))
    roles = {t.tid: t.role for t in st.snapshot().threads}
    assert [roles[t] for t in (140, 141, 152, 160, 170)] == [
        Role.INTEROP,
        Role.INTEROP,
        Role.INTRAOP,
        Role.INTRAOP,
        Role.INTEROP,
    ]
    pool = next(g for g in st.snapshot().thread_groups if g.role == Role.INTEROP)
    assert pool.count == 3


def test_the_inter_op_pool_is_told_by_age_where_thread_ids_wrapped_around():
    # the pool started just below the kernel's largest thread id, its OpenMP workers after the ids wrapped
    # around: the workers have the lower ids, the later start times
    st = SessionStore("inter-op")
    st.on_message(_hello(100, interop_threads=2))
    threads = (
        ThreadInfo(100, "python", Role.FRONTEND, 3.0, pid=100),
        ThreadInfo(4194300, "PTThreadPool", Role.INTEROP, 50.0, pid=100),
        ThreadInfo(4194301, "PTThreadPool", Role.INTEROP, 48.0, pid=100),
        ThreadInfo(301, "PTThreadPool", Role.INTEROP, 47.0, pid=100),
        ThreadInfo(302, "PTThreadPool", Role.INTEROP, 45.0, pid=100),
    )
    started = {100: 500, 4194300: 900, 4194301: 900, 301: 901, 302: 902}
    st.on_host(HostSample(1.0, (1.0,), threads, started))
    roles = {t.tid: t.role for t in st.snapshot().threads}
    assert [roles[t] for t in (4194300, 4194301, 301, 302)] == [
        Role.INTEROP,
        Role.INTEROP,
        Role.INTRAOP,
        Role.INTRAOP,
    ]
