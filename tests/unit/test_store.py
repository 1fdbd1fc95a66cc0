"""The store: ring buffers stay bounded; the scoreboard counts each mode's steady state only."""

from pytest import approx

from torchpar_top.session import store as store_mod
from torchpar_top.session.model import ChildStatus, HostSample, ThreadInfo
from torchpar_top.session.store import SessionStore


def sample(mode="async", depth=10, throughput=100.0, window=0.1, wait=0.5, draining=False):
    return {
        "v": 1, "type": "sample", "t": 1.0, "window": window, "mode": mode, "sync_scope": "op",
        "throughput": throughput, "unit": "it/s", "items": 1, "num_threads": 2,
        "frontend": {"busy": 1 - wait, "wait": wait}, "overlap": 0.25, "draining": draining,
        "executors": [{"name": "s0", "kind": "emulated-stream", "emulated": True, "quantity": "depth",
                       "value": depth, "capacity": 1024, "launched": 5, "started": 4, "completed": 3,
                       "busy": 0.9, "blocked": 0.4}],
        "roles": {"7": "frontend (main)"},
    }


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


def test_pause_freezes_samples_but_keeps_the_log():
    st = SessionStore("async")
    st.on_message(sample(depth=3))
    st.paused = True
    st.on_message(sample(depth=99))
    st.on_host(HostSample(1.0, (50.0,), ()))
    st.add_log("stderr", "kept")
    snap = st.snapshot()
    assert snap.paused and snap.executors[0].history == (3,) and snap.cores == ()
    assert snap.log[-1].text == "kept"


def test_threads_are_grouped_and_results_kept_by_label():
    st = SessionStore("multi-device")
    threads = (ThreadInfo(1, "python", "frontend (main)", 95.0), ThreadInfo(2, "python", "intra-op workers", 50.0),
               ThreadInfo(3, "python", "intra-op workers", 1.0))
    st.on_host(HostSample(1.0, (1.0,), threads))
    st.on_message({"v": 1, "type": "result", "label": "both at once", "value": 0.5, "unit": "s"})
    st.on_message({"v": 1, "type": "result", "label": "both at once", "value": 0.4, "unit": "s"})
    snap = st.snapshot()
    workers = next(g for g in snap.thread_groups if g.role == "intra-op workers")
    assert (workers.count, workers.busy, workers.cpu_percent) == (2, 1, 51.0)
    assert [(r.label, r.value) for r in snap.results] == [("both at once", 0.4)]


def test_a_dead_child_carries_its_last_stderr_lines():
    st = SessionStore("async")
    for i in range(20):
        st.add_log("stderr", f"err {i}")
    st.on_child(ChildStatus(42, "exited", 1, "workload exited with status 1"))
    child = st.snapshot().child
    assert child.exit_code == 1 and child.last_stderr[-1] == "err 19"
    assert len(child.last_stderr) == store_mod.STDERR_TAIL


def _hello(pid, rank=None):
    msg = {"v": 1, "type": "hello", "pid": pid, "experiment": "run", "description": "", "torch": "2",
           "device": "cpu", "num_threads": 1, "interop_threads": 1, "executors": [], "roles": {}}
    return msg if rank is None else {**msg, "rank": rank}


def test_a_rank_reports_its_exit_status_before_its_connection_closes():
    store = SessionStore("run")
    store.on_message(_hello(11, rank=1), source=7)
    store.on_message({"v": 1, "type": "exit", "status": 1, "reason": "RuntimeError: boom"}, source=7)
    store.on_source_closed(7)  # a rank is not our child: no status from wait()
    (rank,) = store.snapshot().ranks
    assert (rank.rank, rank.state, rank.exit_code) == (1, "exited", 1)
    assert store.snapshot().log[-1].text == "rank 1's code ended with status 1: RuntimeError: boom"


def test_our_own_childs_wait_status_wins_over_its_report():
    store = SessionStore("run")
    store.on_message(_hello(12), source=0)
    store.on_message({"v": 1, "type": "exit", "status": 0, "reason": ""}, source=0)
    assert store.snapshot().log[-1].text == "the workload's code ended with status 0"
    store.on_source_closed(0, -9)  # killed after it reported: wait() knows better
    assert [(r.rank, r.exit_code) for r in store.snapshot().ranks] == [(None, -9)]
