"""CUDA launch queues from CUPTI activity records, against a fake ``cupti`` replaying real A100 records.

The records come from the Kineto traces in ``tests/data/hta`` (Kineto is a CUPTI client: each trace event
is one CUPTI record). The monitor's per-stream depth, launches and starts are checked against
``torchpar_top.analysis`` (which is checked against HTA) on the same trace, at every settled time.
Untested on hardware.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from fakes.fake_cuda import FakeCuda
from fakes.fake_cupti import ActivityKind, FakeCupti, Result, Runtime_api_trace_cbid, records_from_trace
from torchpar_top.analysis import events_from_chrome, queue_series
from torchpar_top.contract.vocab import Counted
from torchpar_top.probes.agent.agent import Agent
from torchpar_top.probes.agent.cuda_capture import CaptureGuard
from torchpar_top.probes.agent.cuda_cupti import PROFILER_NOTE, CuptiMonitor, CuptiUnavailable, load_cupti
from torchpar_top.probes.agent.cuda_launch import LaunchCounter
from torchpar_top.probes.agent.cupti_records import RecordQueues, cbid_names
from torchpar_top.probes.agent.usercode import UserCode
from torchpar_top.probes.agent.usercode_ops import SyncCounter

DATA = Path(__file__).resolve().parents[1] / "data" / "hta"
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
TRACES = [
    "a100_event_sync_3_streams.json.gz",
    "a100_alexnet_2_streams.json.gz",
    "a100_triton_culaunchkernel.json.gz",
    "gpu_2_ranks/rank-0.json.gz",
    "a100_sxm4_5_streams.json.gz",
]


def _monitor(fake: FakeCupti, **kw) -> tuple[CuptiMonitor, Agent, list[str]]:
    agent, logs = Agent(None, experiment="test", description="fake CUPTI"), []
    mon = CuptiMonitor(fake, add=agent.add, log=logs.append, **kw)
    mon.start()
    return mon, agent, logs


def _expected(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return queue_series(list(events_from_chrome(json.load(f))))


@pytest.mark.parametrize("name", TRACES)
def test_queue_per_stream_equals_the_analysis_of_the_same_trace(name: str) -> None:
    """Records played in order, flushed every few hundred: at every settled span, L, S and Q per stream
    equal the analysis module's (HTA's definition) at every launch and start time within it, and the
    time at the cap within it too (with a cap low enough for these traces to reach it)."""
    records = records_from_trace(str(DATA / name))
    expected = _expected(DATA / name)
    assert expected, "the trace has launches with GPU ops"
    cap = 4
    with gzip.open(DATA / name, "rt") as f:
        capped = queue_series(list(events_from_chrome(json.load(f))), cap=cap)
    fake = FakeCupti()
    mon, _agent, _ = _monitor(fake)
    mon.queues.cap = cap
    checked = at_cap = 0
    step = max(50, len(records) // 40)
    try:
        for i in range(0, len(records), step):
            fake.play(records[i : i + step])
            mon.refresh()
            q = mon.queues
            for key, exp in expected.items():
                times = [t for t in exp.launch_times + exp.start_times if q.since <= t <= q.settled]
                for t in times + ([q.settled] if q.settled > q.since else []):
                    assert (q.launched(key, t), q.started(key, t), q.depth(key, t)) == (
                        exp.launched_by(t),
                        exp.started_by(t),
                        exp.depth_at(t),
                    ), (key, t)
                    checked += 1
                if q.settled > q.since:
                    want = capped[key].time_at_cap_between(q.since, q.settled)
                    assert q.time_at_cap(key) == pytest.approx(want, abs=1e-6), key
                    at_cap += want > 0
        q = mon.queues
        q.update(now=q.newest + q.orphan_us + 1)  # the end: launches never run stop holding time back
        for key, exp in expected.items():
            assert q.launched(key) == exp.launches == q.started(key), key
            assert mon.streams.get(key) is None or mon.streams[key].counts == Counted.KERNELS
    finally:
        mon.close()
    assert checked > 0
    assert set(expected) <= set(mon.queues.keys())
    if name == "a100_sxm4_5_streams.json.gz":
        assert at_cap > 0, "the check of the time at the cap saw a queue at the cap"


def _spy(fake: FakeCupti, kinds: list) -> None:
    """Note ``(kind, cbid)`` of every record the fake delivers to the registered callback."""
    completed = fake.completed
    fake.completed = lambda buf: (
        kinds.extend((r.kind, getattr(r, "cbid", None)) for r in buf),
        completed(buf),
    )


def test_only_launch_calls_and_gpu_ops_are_recorded_and_the_switch_survives_standing_aside() -> None:
    """The other API calls are switched off in CUPTI (after enabling their kind, which resets the
    switch): only launch records and GPU ops reach Python, before and after standing aside."""
    records = records_from_trace(str(DATA / "a100_sxm4_5_streams.json.gz"))
    fake, kinds = FakeCupti(), []
    mon, _, _ = _monitor(fake)
    launch_cbids = {c for cbids in mon.converter.launch_cbids.values() for c in cbids}
    try:
        assert mon.filtered > 0 and 131 in fake.api_off[int(ActivityKind.RUNTIME)]  # cudaStreamSynchronize
        _spy(fake, kinds)
        fake.play(records[: len(records) // 2])
        mon.refresh()
        mon.stand_aside("test")
        assert not fake.enabled
        mon.resume()
        assert 131 in fake.api_off[int(ActivityKind.RUNTIME)]
        _spy(fake, kinds)  # subscribing again registered the monitor's callback again
        fake.play(records[len(records) // 2 :])
        mon.refresh()
    finally:
        mon.close()
    api = [cbid for kind, cbid in kinds if kind in (int(ActivityKind.RUNTIME), int(ActivityKind.DRIVER))]
    assert api and set(api) <= launch_cbids
    assert mon.records == len(kinds) < len(records) // 2


def test_without_the_per_api_switch_other_calls_are_skipped_and_the_queue_is_the_same() -> None:
    """An older binding without ``activity_enable_runtime_api``: every API record arrives, the queue
    skips the non-launches by cbid and counts the same launches."""
    name = "a100_event_sync_3_streams.json.gz"
    records = records_from_trace(str(DATA / name))
    expected = _expected(DATA / name)
    fake = FakeCupti()
    fake.activity_enable_runtime_api = None  # type: ignore[assignment] - getattr finds no switch
    fake.activity_enable_driver_api = None  # type: ignore[assignment]
    mon, _, _ = _monitor(fake)
    try:
        assert mon.filtered == 0
        fake.play(records)
        mon.refresh()
        q = mon.queues
        q.update(now=q.newest + q.orphan_us + 1)
        assert mon.records == sum(r.kind in fake.enabled for r in records)
        for key, exp in expected.items():
            assert q.launched(key) == exp.launches == q.started(key), key
    finally:
        mon.close()


@pytest.mark.parametrize("name", ["a100_sxm4_5_streams.json.gz", "a100_alexnet_2_streams.json.gz"])
def test_in_recording_windows_the_depth_equals_the_analysis_where_it_is_known(name: str) -> None:
    """duty 1/2: records are taken in every other stretch. Within each window, from the stream's first
    GPU start of a window launch to the window's settled time, Q per stream equals the analysis module's
    depth of the whole trace (a stream runs in launch order: launches from before the window have all
    started by then); the rows say they are sampled and their counts only grow."""
    records = records_from_trace(str(DATA / name))
    expected = _expected(DATA / name)
    fake = FakeCupti()
    # the records cost nothing here (a CPU clock that stands still): the governor keeps duty's cycle
    mon, agent, _ = _monitor(fake, duty=0.5, drain_s=0.0, cpu_clock=lambda: 0.0)
    checked, windows, seen = 0, 0, {}
    step = max(50, len(records) // 30)
    try:
        assert mon.cycle == 2 and mon._recording
        for i in range(0, len(records), step):
            recording = mon._recording
            if not recording:  # between windows nothing is recorded
                assert not (fake.enabled & {int(ActivityKind.RUNTIME), int(ActivityKind.CONCURRENT_KERNEL)})
            fake.play(records[i : i + step])
            mon.refresh()
            q = mon.queues
            if not recording:
                continue
            windows += 1
            assert q.settled <= q.until
            for key, exp in expected.items():
                t0 = max(q.since, q.valid_from(key))
                for t in [t for t in exp.launch_times + exp.start_times if t0 <= t <= q.settled]:
                    assert q.depth(key, t) == exp.depth_at(t), (key, t)
                    checked += 1
            for key, ex in mon.streams.items():
                assert ex.launched >= seen.get(key, (0, 0))[0] and ex.started >= seen.get(key, (0, 0))[1]
                seen[key] = (ex.launched, ex.started)
        rows = agent.sample(0.0, 1.0).executors
    finally:
        mon.close()
    assert windows >= 5 and checked > 0
    assert rows and all(r.note and r.note.startswith("sampled") for r in rows)


def test_duty_must_be_a_share() -> None:
    with pytest.raises(ValueError, match="duty"):
        CuptiMonitor(FakeCupti(), add=lambda x: x, log=lambda s: None, duty=0)


def test_rows_carry_the_settled_depth_in_kernels_and_python_runs_per_buffer() -> None:
    records = records_from_trace(str(DATA / "a100_sxm4_5_streams.json.gz"))
    fake = FakeCupti()
    mon, agent, _ = _monitor(fake)
    try:
        for i in range(0, len(records), 2000):
            fake.play(records[i : i + 2000])
            mon.refresh()
            for key, ex in mon.streams.items():
                assert ex.value() == mon.queues.depth(key)
                assert ex.launched == mon.queues.launched(key)
        rows = agent.sample(0.0, 1.0).executors
    finally:
        mon.close()
    assert {r.name for r in rows} >= {f"cuda:0 stream {s}" for s in (7, 25, 27)}
    assert all(r.counts == Counted.KERNELS and r.note is None for r in rows)
    # one Python call per buffer, not per record: 42k records, 4 MiB buffers, one forced flush per refresh
    assert mon.buffers <= fake.flushes + len(records) // ((4 << 20) // 64) + 1 < len(records) // 100


def test_a_disabled_kind_produces_no_records_and_is_named() -> None:
    fake = FakeCupti(refuse={int(ActivityKind.MEMCPY): Result.ERROR_INSUFFICIENT_PRIVILEGES})
    mon, _, _ = _monitor(fake)
    try:
        assert int(ActivityKind.MEMCPY) not in fake.enabled
        assert mon.refused and "INSUFFICIENT_PRIVILEGES" in mon.refused[0]
        completed, kinds = fake.completed, set()
        fake.completed = lambda buf: (kinds.update(r.kind for r in buf), completed(buf))
        fake.play(records_from_trace(str(DATA / "a100_alexnet_2_streams.json.gz")))
        mon.refresh()
        assert int(ActivityKind.CONCURRENT_KERNEL) in kinds and int(ActivityKind.MEMCPY) not in kinds
    finally:
        mon.close()


def test_cbid_names_drop_version_and_per_thread_suffixes() -> None:
    names = cbid_names(Runtime_api_trace_cbid)
    assert names[211] == "cudaLaunchKernel" and names[214] == "cudaLaunchKernel"
    assert names[131] == "cudaStreamSynchronize"


def test_stands_aside_while_torch_profiler_runs_and_resumes_after() -> None:
    """A real torch.profiler (CPU) window: CUPTI is given up before Kineto starts, taken back after."""
    fake = FakeCupti()
    mon, agent, logs = _monitor(fake)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            assert mon.aside == PROFILER_NOTE
            assert not fake.subscribers and not fake.enabled  # Kineto can subscribe now
            row = agent.sample(0.0, 1.0)
            assert mon.note() == f"standing aside: {PROFILER_NOTE}"
        assert mon.aside is None and fake.subscribers and int(ActivityKind.RUNTIME) in fake.enabled
        assert any("standing aside (torch.profiler active)" in line for line in logs)
        assert any("recording CUPTI activity again" in line for line in logs)
        del row
    finally:
        mon.close()


def test_a_profiler_that_keeps_cupti_makes_the_launch_counter_take_over() -> None:
    fake, lost = FakeCupti(), []
    mon, _, _logs = _monitor(fake, on_lost=lost.append)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            fake.other_client = "Kineto"  # it does not give CUPTI back
        assert lost and "MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" in lost[0]
        assert mon.note().startswith("CUPTI lost")
    finally:
        mon.close()


def test_a_profiler_enabled_behind_our_back_is_stood_aside_from_at_the_next_sample() -> None:
    fake, enabled = FakeCupti(), [False]
    mon, _, _ = _monitor(fake, profiler_enabled=lambda: enabled[0])
    try:
        enabled[0] = True
        mon.refresh()
        assert mon.aside and mon.aside.startswith(PROFILER_NOTE) and not fake.enabled
        enabled[0] = False
        mon.refresh()
        assert mon.aside is None and fake.enabled
    finally:
        mon.close()


def test_stands_aside_during_a_graph_capture_and_drops_its_launches() -> None:
    cuda = FakeCuda(1)
    guard = CaptureGuard()
    guard.install([cuda.CUDAGraph], cuda.current_stream)
    fake = FakeCupti()
    mon, _, _ = _monitor(fake, capture=guard)
    records = records_from_trace(str(DATA / "a100_alexnet_2_streams.json.gz"))
    launches = [r for r in records if r.kind == int(ActivityKind.RUNTIME) and r.cbid == 211]
    try:
        graph = cuda.CUDAGraph()
        with cuda.graph(graph):
            assert mon.note() == "standing aside: CUDA graph capture in progress"
            flushes = fake.flushes
            mon.refresh()
            assert fake.flushes == flushes  # nothing flushed during the capture
            fake.play(launches[:5])  # launched into the graph: no kernel ever runs for them
            assert mon.queues.pending == 0  # not flushed yet
        assert mon.queues.pending == 0 and mon.note() is None
    finally:
        mon.close()


def test_sync_points_come_from_the_runtime_call_with_the_callers_line() -> None:
    fake, points = FakeCupti(), SyncCounter(lambda: True)
    mon, _, _ = _monitor(fake, syncpoints=points)
    mon.api_frames = 1  # the fake's api_call is a Python frame; CUPTI calls from C
    try:
        fake.api_call(fake.CallbackDomain.RUNTIME_API, 131)  # cudaStreamSynchronize
        line = sys._getframe().f_lineno - 1
        fake.api_call(fake.CallbackDomain.RUNTIME_API, 211)  # a launch: no callback armed
    finally:
        mon.close()
    (site,) = points.sites()
    assert site.where.endswith(f"test_cupti.py:{line}") and site.call == "cudaStreamSynchronize"
    assert site.count == 1


#: The UserCodes a test made: on CUDA they patch Tensor.item, .to... (the step phases' transfers and
#: waits); every test puts them back, or the next module's tests count sync points through our wrappers.
_MADE: list[UserCode] = []


@pytest.fixture(autouse=True)
def _patches_put_back():
    yield
    while _MADE:
        _MADE.pop().phases.uninstall()


def _usercode(load) -> tuple[UserCode, list[str]]:
    uc = UserCode(None, target="script.py")
    _MADE.append(uc)
    logs: list[str] = []
    uc.agent.log = logs.append  # type: ignore[method-assign]
    uc.cuda = FakeCuda(1)
    uc.load_cupti = load
    return uc, logs


def _modes() -> list:
    return list(torch.overrides._get_current_function_mode_stack())


def test_cupti_path_installs_no_function_mode() -> None:
    fake = FakeCupti()
    uc, logs = _usercode(lambda: fake)
    try:
        uc.watch_cuda_streams()
        assert uc.cupti is not None and uc.agent.cuda is uc.cupti
        assert not _modes(), "no Python hook per torch op on the CUPTI path"
        assert uc.syncpoints.from_runtime
        assert any("from CUPTI activity records" in line for line in logs)
    finally:
        uc.agent.close()
    assert not fake.subscribers and not fake.enabled


@pytest.mark.parametrize(
    "load, why",
    [
        (
            lambda: (_ for _ in ()).throw(
                CuptiUnavailable("cupti-python not importable (ModuleNotFoundError)")
            ),
            "cupti-python not importable",
        ),
        (lambda: FakeCupti(other_client="Nsight Systems"), "MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"),
        (
            lambda: FakeCupti(refuse={int(ActivityKind.RUNTIME): Result.ERROR_INSUFFICIENT_PRIVILEGES}),
            "INSUFFICIENT_PRIVILEGES",
        ),
    ],
)
def test_falls_back_to_the_launch_counter_and_says_why(load, why, monkeypatch) -> None:
    uc, logs = _usercode(load)
    from torchpar_top.probes.agent.cuda import CudaMonitor

    def cuda_stream(name, device=0, stream=None):  # the agent's CUDA monitor, on the fake torch.cuda
        fake = uc.cuda
        uc.agent.cuda = CudaMonitor(fake, clock=fake.clock, device_of=fake.device_of, thread=False)
        return uc.agent.add(uc.agent.cuda.stream(name, device, stream))

    monkeypatch.setattr(uc.agent, "cuda_stream", cuda_stream)
    try:
        uc.watch_cuda_streams()
        assert uc.cupti is None and not uc.syncpoints.from_runtime
        assert any(isinstance(m, LaunchCounter) for m in _modes())
        assert any("CUPTI not used" in line and why in line for line in logs), logs
    finally:
        uc.agent.close()
    assert not _modes()


def test_every_op_keeps_the_launch_counter() -> None:
    fake = FakeCupti()
    uc, _ = _usercode(lambda fake=fake: fake)
    uc.every_op = True
    called = []
    uc._watch_with_counter = lambda: called.append(True)  # type: ignore[method-assign]
    uc.watch_cuda_streams()
    assert called and uc.cupti is None and not fake.subscribers


@pytest.mark.parametrize("every_op", [False, True])
def test_no_queues_watches_no_launch_queue_but_times_the_steps_on_the_gpu(every_op) -> None:
    from torchpar_top.probes.agent.usercode import NO_QUEUES_NOTE

    fake = FakeCupti()
    uc, logs = _usercode(lambda fake=fake: fake)
    uc.every_op, uc.watch_queues = every_op, False
    counter = []
    uc._watch_with_counter = lambda: counter.append(True)  # type: ignore[method-assign]
    try:
        uc.watch_cuda_streams()
        assert uc.cupti is None and not fake.subscribers and not fake.enabled  # CUPTI never touched
        assert not counter and not any(isinstance(m, LaunchCounter) for m in _modes())
        assert uc.agent.cuda is None and not [ex for ex in uc.agent.executors if ex.kind == "cuda-stream"]
        assert uc.steps._gpu_next is not None  # the step phases still come from CUDA events
        assert logs.count(NO_QUEUES_NOTE) == 1
        uc.watch_cuda_streams()  # once only
        assert logs.count(NO_QUEUES_NOTE) == 1
    finally:
        uc.agent.close()


def test_no_queues_goes_from_the_command_line_to_the_agent() -> None:
    from torchpar_top.args import run_parser
    from torchpar_top.probes.agent.run import parse_args
    from torchpar_top.sources.live.targets import ScriptTarget

    assert run_parser().parse_args(["--no-queues"]).no_queues
    assert not run_parser().parse_args([]).no_queues
    cmd = ScriptTarget("x.py", queues=False).command(3, 0.1, False)
    assert "--no-queues" in cmd and not parse_args(cmd[cmd.index("--fd") :]).queues
    assert "--no-queues" not in ScriptTarget("x.py").command(3, 0.1, False)
    assert parse_args(["x.py", "--no-queues"]).queues  # after the script: the script's own argument


def test_step_records_go_to_the_agent_only_when_the_run_is_recorded() -> None:
    """A run's ranks send each step whole (``Steps.recent``) only under ``--record``: nothing else
    reads them."""
    from torchpar_top.args import parse
    from torchpar_top.main import _run_target
    from torchpar_top.probes.agent.run import parse_args

    script = str(SCRIPTS / "steps_phases.py")
    for argv, records in (([script], False), (["--record", "run.jsonl", script], True)):
        target = _run_target(parse(["run", *argv]))
        for fd, nproc in ((3, None), (None, 2)):
            cmd = dataclasses.replace(target, nproc=nproc).command(fd, 0.1, False)
            agent = parse_args(cmd[cmd.index("torchpar_top.probes.agent.run") + 1 :])
            assert agent.step_records is records and agent.target == script


def test_load_cupti_without_the_package_is_a_clear_one_line_reason(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupti", None)
    with pytest.raises(CuptiUnavailable, match=r"pip install torchpar-top\[cuda\]"):
        load_cupti()


def test_a_cpu_run_never_imports_cupti() -> None:
    code = (
        "import sys; import torchpar_top.probes.agent.usercode, torchpar_top.probes.agent.run; "
        "print('cupti' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.stdout.strip() == "False", out.stderr


def test_orphan_launches_stop_holding_the_settled_time_back() -> None:
    records = records_from_trace(str(DATA / "a100_alexnet_2_streams.json.gz"))
    launch = next(r for r in records if r.kind == int(ActivityKind.RUNTIME) and r.cbid == 211)
    fake = FakeCupti()
    mon, _, _ = _monitor(fake)
    try:
        fake.play([launch])  # its kernel never comes
        mon.refresh()
        assert mon.queues.settled < launch.start / 1000
        q: RecordQueues = mon.queues
        q.update(now=launch.start / 1000 + q.orphan_us + 1)
        assert q.orphans == 1 and q.pending == 0
    finally:
        mon.close()


def test_a_rows_note_reaches_the_snapshot_and_headless_json() -> None:
    """The field that says a CUDA row stands aside travels the wire, the store and the snapshot."""
    import json as _json

    from torchpar_top.contract import messages as m
    from torchpar_top.contract.codec import to_plain
    from torchpar_top.model.store import SessionStore

    def sample(note):
        return m.decode(
            _json.dumps(
                {
                    "v": m.VERSION,
                    "type": "sample",
                    "t": 1.0,
                    "window": 0.1,
                    "mode": "async",
                    "throughput": 1.0,
                    "unit": "it/s",
                    "num_threads": 1,
                    "frontend": {"busy": 0.5, "wait": 0.5},
                    "overlap": 0.0,
                    "executors": [
                        {
                            "name": "cuda:0 stream 7",
                            "kind": "cuda-stream",
                            "quantity": "depth",
                            "value": 3,
                            "capacity": 1024,
                            "launched": 10,
                            "completed": 7,
                            "busy": 0.5,
                            "blocked": 0.0,
                            "counts": "kernels",
                            "note": note,
                        }
                    ],
                    "roles": [{"tid": 7, "role": "frontend (main)"}],
                }
            )
        )

    st = SessionStore("run")
    st.on_message(sample(f"standing aside: {PROFILER_NOTE}"))
    view = st.snapshot().executors[0]
    assert view.note == "standing aside: torch.profiler active" and view.counts == Counted.KERNELS
    assert to_plain(view)["note"] == "standing aside: torch.profiler active"
    st.on_message(sample(None))
    assert st.snapshot().executors[0].note is None


def _cuda_row(note: str):
    """A CUDA stream's queue row as the snapshot carries it, with ``note``."""
    from torchpar_top.contract.snapshot import ExecutorView
    from torchpar_top.contract.vocab import ExecutorKind, Quantity

    return ExecutorView(
        name="cuda:0 stream 7",
        kind=ExecutorKind.CUDA_STREAM,
        quantity=Quantity.DEPTH,
        value=3,
        capacity=1024,
        launched=10,
        completed=7,
        emulated=False,
        history=(3.0,),
        busy=(0.5,),
        blocked=0.0,
        counts=Counted.KERNELS,
        note=note,
    )


def test_the_queue_panel_says_a_row_stands_aside() -> None:
    from dataclasses import replace

    from torchpar_top.tui.widgets.queues import note_text

    row = _cuda_row("standing aside: torch.profiler active")
    assert note_text(row, short=False) == "standing aside: torch.profiler active"
    assert note_text(row, short=True) == "aside"
    assert note_text(replace(row, note=None), short=False) == ""


def test_the_gpu_checks_cupti_step_skips_and_says_so_without_cupti_python(tmp_path) -> None:
    """On a machine without cupti-python the step reports it absent (here: no GPU either; the counts
    child stops at the binding before touching CUDA)."""
    import time as _time

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        from gpu_check_parts import checks
    finally:
        sys.path.remove(str(root / "benchmarks"))
    assert any(p.name == "cupti_run" for p in checks.PLAN)
    ctx = checks.Context(info={"device_count": 1}, smi=None, tmp=tmp_path)
    ctx.deadline = _time.monotonic() + 120
    with pytest.raises(checks.Skip, match="cupti-python not importable"):
        checks.check_cupti(ctx)


def test_a_profiler_running_at_start_is_waited_for() -> None:
    """torch.profiler already on when CUDA gets watched: no subscription until it stops."""
    fake, enabled = FakeCupti(), [True]
    mon, _, logs = _monitor(fake, profiler_enabled=lambda: enabled[0])
    try:
        assert mon.aside == PROFILER_NOTE and not fake.subscribers and not fake.enabled
        mon.refresh()
        assert mon.aside == PROFILER_NOTE
        enabled[0] = False
        mon.refresh()
        assert mon.aside is None and fake.subscribers and int(ActivityKind.RUNTIME) in fake.enabled
        assert any("CUPTI is taken when it ends" in line for line in logs)
    finally:
        mon.close()


def test_cupti_duty_goes_from_the_command_line_to_the_monitor(capsys) -> None:
    from torchpar_top.args import run_parser
    from torchpar_top.probes.agent.run import UsageError, parse_args
    from torchpar_top.sources.live.targets import ScriptTarget

    assert run_parser().parse_args(["--cupti-duty", "0.25"]).cupti_duty == 0.25
    with pytest.raises(SystemExit) as exit_:
        run_parser().parse_args(["--cupti-duty", "0"])
    assert exit_.value.code == 2 and "must be above 0" in capsys.readouterr().err
    cmd = ScriptTarget("x.py", cupti_duty=0.25).command(3, 0.1, False)
    assert cmd[cmd.index("--cupti-duty") + 1] == "0.25"
    assert parse_args(cmd[cmd.index("--fd") :]).cupti_duty == 0.25
    with pytest.raises(UsageError, match="--cupti-duty"):
        parse_args(["--cupti-duty", "2", "x.py"])
    for duty, cycle in ((None, 20), (0.25, 4), (1.0, 1)):
        fake = FakeCupti()
        uc, _ = _usercode(lambda fake=fake: fake)
        uc.cupti_duty = duty
        try:
            uc.watch_cuda_streams()
            assert uc.cupti.cycle == cycle
            assert (uc.cupti.note() or "").startswith("sampled") == (cycle > 1)
        finally:
            uc.agent.close()


def test_a_sampled_row_says_so_in_short() -> None:
    from torchpar_top.tui.widgets.queues import note_text

    row = _cuda_row("sampled: CUPTI records 1 sample interval in 20")
    assert note_text(row, short=True) == "sampled"


def test_costly_records_stretch_the_cycle_to_the_budget_and_cheap_ones_bring_it_back() -> None:
    """On an H100 a 150k launches/s loop ran 0.62-0.72x under run at duty 0.05: converting the records
    held the GIL about a quarter of the time. The governor measures the CPU time a window's records cost
    and records less often until they cost CPU_BUDGET."""
    from torchpar_top.probes.agent import cuda_cupti as cc

    wall, cpu_now, cost = [0.0], [0.0], [0.0]

    def cpu() -> float:  # read at a window's end, before and after its records are read: `cost` apart
        cpu_now[0] += cost[0]
        return cpu_now[0]

    fake = FakeCupti()
    mon, _, logs = _monitor(fake, duty=0.05, drain_s=0.0, clock=lambda: wall[0], cpu_clock=cpu)

    def one_cycle() -> None:
        for _ in range(mon.cycle):  # a refresh per sample interval of 0.1 s
            wall[0] += 0.1
            mon.refresh()

    try:
        assert mon.cycle == mon.base_cycle == 20
        cost[0] = 0.56  # 0.56 s reading a 0.1 s window's records: 28 % of a 2 s cycle
        one_cycle()
        assert mon.cost_share == pytest.approx(0.28)
        assert mon.cycle == 280  # 20 x 0.28 / 0.02
        assert mon.note() == "sampled: CUPTI records 1 sample interval in 280"
        assert logs[-2:] == [
            cc.LAUNCH_BOUND_HINT,  # the first stretch: the loop is launch-bound, --no-queues is named
            "CUDA launch queues: CUPTI's records cost 28.0% of the time at 1 sample interval in 20: "
            "recording 1 in 280 (budget 2%)",
        ]
        cost[0] = 0.0004  # a slow loop: a few records a window
        one_cycle()
        assert mon.cycle == 20  # never below what duty asks for
        cost[0] = 0.3 * cc.MAX_CYCLE  # absurdly costly: capped
        one_cycle()
        assert mon.cycle == cc.MAX_CYCLE
        assert logs.count(cc.LAUNCH_BOUND_HINT) == 1  # said once
    finally:
        mon.close()


def test_a_small_change_in_cost_leaves_the_cycle_as_it_is() -> None:
    wall, cpu_now = [0.0], [0.0]

    def cpu() -> float:
        cpu_now[0] += 0.021  # 2.1 % at 1 in 20: the governor would want 21, within its hysteresis
        return cpu_now[0]

    mon, _, logs = _monitor(FakeCupti(), duty=0.05, drain_s=0.0, clock=lambda: wall[0], cpu_clock=cpu)
    try:
        for _ in range(60):
            wall[0] += 0.1
            mon.refresh()
        assert mon.cycle == 20 and not any("recording 1 in" in line for line in logs)
    finally:
        mon.close()


def test_records_read_by_position_and_by_attribute_give_the_same_queues() -> None:
    """cupti-python's records are read in one ``_data.item(0)`` (their properties cost a trip through
    numpy each); any other record by attribute. Both ways, the same launches, starts and depths."""
    from types import SimpleNamespace

    from fakes.fake_cupti import BindingRecord
    from torchpar_top.probes.agent.cupti_records import FIELDS, RecordConverter, layout

    records = records_from_trace(str(DATA / "a100_alexnet_2_streams.json.gz"))
    assert all(isinstance(r, BindingRecord) and layout(r) for r in records)
    plain = [
        SimpleNamespace(**{f: getattr(r, f) for f in FIELDS if f in r._data.dtype.names}) for r in records
    ]
    assert layout(plain[0]) == ()
    conv = RecordConverter(FakeCupti())
    fast, slow = RecordQueues(conv), RecordQueues(conv)
    for i in range(0, len(records), 300):
        fast.add_records(records[i : i + 300])
        slow.add_records(plain[i : i + 300])
    fast.update(fast.newest + 1)
    slow.update(slow.newest + 1)
    keys = sorted(fast.keys())
    assert keys and keys == sorted(slow.keys())
    for key in keys:
        assert fast.launched(key) == slow.launched(key) > 0
        assert fast.started(key) == slow.started(key)
        assert fast.depth(key) == slow.depth(key)
    assert fast.launch_records == slow.launch_records


def test_buffers_built_on_cuptis_own_thread_count_from_its_second_on(monkeypatch) -> None:
    """The binding builds the record objects on the thread that delivers the buffer: CUPTI's own (a
    thread Python did not start) when a buffer fills. Its CPU time between two buffers is the records'
    cost and goes into the window's; a Python thread's flush (the sampler's, a frontend standing aside)
    is not counted there."""
    from torchpar_top.probes.agent import cuda_cupti as cc

    wall, cpu_now = [0.0], [0.0]
    mon, _, _ = _monitor(
        FakeCupti(), duty=0.05, drain_s=0.0, clock=lambda: wall[0], cpu_clock=lambda: cpu_now[0]
    )
    try:
        mon._buffer_completed([])  # a Python thread's flush: never counted
        cpu_now[0] = 5.0
        mon._buffer_completed([])
        assert mon._delivery_cpu == 0.0
        monkeypatch.setattr(cc, "_outside_python", lambda: True)

        def cuptis_thread() -> None:
            mon._buffer_completed([])  # its first buffer: where it stands
            cpu_now[0] = 5.8
            mon._buffer_completed([])  # 0.8 s building this buffer's records

        worker = threading.Thread(target=cuptis_thread)
        worker.start()
        worker.join()
        assert mon._delivery_cpu == pytest.approx(0.8)
        monkeypatch.undo()
        wall[0] += 0.1
        mon.refresh()  # the window ends: 0.8 s of a 0.1 s window at 1 in 20
        assert mon.cost_share == pytest.approx(0.4) and mon._delivery_cpu == 0.0
        assert mon.cycle == 400
    finally:
        mon.close()
