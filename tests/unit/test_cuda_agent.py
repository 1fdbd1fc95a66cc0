"""The CUDA agent (launch counter, markers, lanes, sync) driven by the fake ``torch.cuda``.

Real torch ops on CPU tensors run under the real ``LaunchCounter``; the fake's ``device_of`` hook plays
the GPU: each counted op launches one kernel of ``kernel_time`` on a fake stream. Host time is the
fake's simulated clock, so every schedule below is known exactly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import torch
from fakes.fake_cuda import FakeCuda
from torchpar_top.contract import messages as m
from torchpar_top.contract.vocab import Counted, SyncScope
from torchpar_top.probes.agent.activity import busy_time, covered, union
from torchpar_top.probes.agent.agent import Agent
from torchpar_top.probes.agent.cuda import CudaMonitor
from torchpar_top.probes.agent.cuda_launch import LaunchCounter
from torchpar_top.probes.agent.cuda_stream import MAX_PENDING

A, B = torch.ones(1), torch.ones(1)  # made before any counter starts: creating them is not a launch


def _op() -> None:
    torch.add(A, B)


@pytest.fixture
def rig() -> Iterator[tuple[FakeCuda, Agent, list]]:
    """An agent whose CUDA monitor runs on a 2-GPU fake, polled by hand; closed even if a test fails."""
    fake = FakeCuda(2)
    agent = Agent(None, experiment="test", description="fake CUDA")

    def monitor(**kw: object) -> CudaMonitor:
        agent.cuda = CudaMonitor(
            fake, clock=fake.clock, device_of=fake.device_of, thread=False, on_stream=agent.add, **kw
        )
        return agent.cuda

    yield fake, agent, [monitor]
    agent.close()


def _row(agent: Agent, t0: float, t1: float, name: str) -> dict:
    return next(r for r in agent.sample(t0, t1).executors if r.name == name)


def test_outstanding_follows_completed_markers(rig) -> None:
    fake, agent, (monitor,) = rig
    monitor()
    s = agent.cuda_stream("cuda:0")
    t0 = fake.clock.now
    for _ in range(10):  # 100 ops of 1 ms, 10 µs apart; the marker thread polls every 10 launches
        for _ in range(10):
            agent.launch(s, _op)
        agent.cuda.poll()
    assert (s.launched, s.completed, s.value()) == (100, 0, 100)
    fake.clock.advance_to(t0 + 50.5e-3)  # kernels 0..49 done (kernel k ends at t0 + 5 µs + (k+1) ms)
    agent.cuda.poll()
    assert (s.completed, s.value()) == (50, 50)
    row = _row(agent, t0, fake.clock.now, "cuda:0")
    assert (row.kind, row.quantity, row.capacity) == ("cuda-stream", "outstanding", 1024)
    assert row.emulated is False and row.counts == Counted.TORCH_CALLS
    assert row.blocked is None  # completion markers cannot see a blocked launch: not "never blocked"
    assert (row.value, row.launched, row.completed) == (50, 100, 50)
    fake.clock.advance(0.2)
    agent.cuda.poll()
    assert s.value() == 0 and s.items_completed() == 100


def test_full_launch_queue_blocks_and_outstanding_saturates(rig) -> None:
    fake, agent, (monitor,) = rig
    monitor()
    s = agent.cuda_stream("cuda:0")
    t0 = fake.clock.now
    for i in range(1500):
        agent.launch(s, _op)
        if i % 50 == 0:
            agent.cuda.poll()
    agent.cuda.poll()
    assert fake.clock.now - t0 > 0.4  # the host blocked: 1500 launches of 10 µs alone take 15 ms
    assert 1000 <= s.value() <= 1024 + MAX_PENDING + 50  # marker granularity: 50 launches


def test_markers_are_bounded_pooled_and_timed_only_when_caught_up(rig) -> None:
    fake, agent, (monitor,) = rig
    monitor()
    s = agent.cuda_stream("cuda:0")
    timed_before = fake.records[True]  # the calibration's reference event
    for _ in range(200):  # a backlog: 200 ms of work, polled after every launch
        agent.launch(s, _op)
        agent.cuda.poll()
        assert len(s._markers) <= MAX_PENDING
    fake.clock.advance(0.5)
    for _ in range(3):
        agent.cuda.poll()
    assert s.value() == 0
    # timing-enabled only where a run's edge is: the first item (the stream had caught up), and the
    # marker recorded once the backlog had drained (it covers launches made while MAX_PENDING waited)
    assert fake.records[True] - timed_before == 2
    assert fake.events_created <= MAX_PENDING + 3  # events are reused


def test_sync_after_every_op(rig) -> None:
    fake, agent, (monitor,) = rig
    monitor()
    s = agent.cuda_stream("cuda:0")
    agent.sync.set(True, SyncScope.OP)
    fake.launch_cost = 0.5e-3  # longer than the recorder's 200 µs merge gap: each wait stays separate
    syncs, t0 = fake.syncs, fake.clock.now
    for _ in range(20):
        agent.launch(s, _op)
        assert s.value() == 0  # synchronize completed everything at once
    t1 = fake.clock.now
    assert fake.syncs - syncs == 20
    msg = agent.sample(t0, t1)
    assert msg.mode == "sync"
    # each item: 0.5 ms in the launch call, then a wait until the kernel ends 1.005 ms after launch
    assert msg.frontend.wait == pytest.approx(0.505 / 1.005, abs=1e-6)
    assert s.items_completed() == 20


def test_sync_after_every_step_and_toggle(rig) -> None:
    fake, agent, (monitor,) = rig
    monitor()
    s = agent.cuda_stream("cuda:0")
    for _ in range(50):  # ASYNC: a backlog builds
        agent.launch(s, _op)
    assert fake.syncs == 1 and s.value() == 50  # only the calibration synchronized
    agent.sync.set(True, SyncScope.STEP)
    syncs = fake.syncs
    for _ in range(3):
        for _ in range(5):
            agent.launch(s, _op)
        assert s.value() > 0  # within a step the queue still grows
        agent.step()
        assert s.value() == 0  # the step's synchronize drained it (the first one also the backlog)
    assert fake.syncs - syncs == 3


def test_lanes_and_overlap_match_a_known_two_device_schedule(rig) -> None:
    fake, agent, (monitor,) = rig
    monitor()
    s0, s1 = agent.cuda_stream("cuda:0", 0), agent.cuda_stream("cuda:1", 1)
    t0 = fake.clock.now
    fake.next_device = 0
    for _ in range(10):
        agent.launch(s0, _op)  # cuda:0 busy about [t0, t0 + 10 ms]
    while fake.clock.now < t0 + 5e-3:
        agent.cuda.poll()
        fake.clock.advance(1e-3)
    fake.next_device = 1
    for _ in range(10):
        agent.launch(s1, _op)  # cuda:1 busy about [t0 + 5 ms, t0 + 15 ms]
    while fake.clock.now < t0 + 20e-3:
        agent.cuda.poll()
        fake.clock.advance(1e-3)
    t1 = t0 + 20e-3
    truth = [union(fake.current_stream(d).kernels) for d in (0, 1)]
    msg = agent.sample(t0, t1)
    busy = {r.name: r.busy for r in msg.executors}
    assert busy["cuda:0"] == pytest.approx(busy_time(truth[0]) / 20e-3, abs=0.005)
    assert busy["cuda:1"] == pytest.approx(busy_time(truth[1]) / 20e-3, abs=0.005)
    assert msg.overlap == pytest.approx(covered(truth[0] + truth[1], 2) / 20e-3, abs=0.005)
    assert msg.overlap == pytest.approx(0.25, abs=0.01)


def test_lanes_without_timed_markers_are_within_one_poll(rig) -> None:
    fake, agent, (monitor,) = rig
    monitor(timed_edges=False)
    s = agent.cuda_stream("cuda:0")
    t0 = fake.clock.now
    for _ in range(5):
        agent.launch(s, _op)
    while fake.clock.now < t0 + 20e-3:
        agent.cuda.poll()
        fake.clock.advance(1e-3)
    assert fake.records[True] == 1  # the calibration only
    assert _row(agent, t0, t0 + 20e-3, "cuda:0").busy == pytest.approx(0.25, abs=1e-3 / 20e-3)


def test_idle_gaps_are_not_counted_as_busy(rig) -> None:
    """A frontend-bound loop: 0.1 ms of GPU work every 0.91 ms reads about 11 % busy, not 100 %."""
    fake, agent, (monitor,) = rig
    monitor()
    s = agent.cuda_stream("cuda:0")
    fake.kernel_time = 0.1e-3
    t0 = fake.clock.now
    for _ in range(50):
        agent.launch(s, _op)
        for _ in range(2):
            fake.clock.advance(0.45e-3)
            agent.cuda.poll()
    t1 = fake.clock.now
    truth = busy_time(union(fake.current_stream(0).kernels)) / (t1 - t0)
    assert truth == pytest.approx(0.1 / 0.91, abs=1e-6)
    assert _row(agent, t0, t1, "cuda:0").busy == pytest.approx(truth, abs=0.01)


def test_items_completed_counts_whole_items(rig) -> None:
    fake, agent, (monitor,) = rig
    monitor()
    s = agent.cuda_stream("cuda:0")
    t0 = fake.clock.now
    for _ in range(4):
        agent.launch(s, lambda: (_op(), _op()))  # two ops per item
        agent.cuda.poll()
    fake.clock.advance_to(t0 + 4.5e-3)  # four kernels done: two items
    agent.cuda.poll()
    assert (s.completed, s.items_completed()) == (4, 2)


def test_sample_message_carries_uuids_and_validates(rig) -> None:
    fake, agent, (monitor,) = rig
    monitor()
    agent.cuda_stream("cuda:0")
    msg = agent.sample(fake.clock.now - 0.1, fake.clock.now)
    assert msg.cuda_uuids == tuple(f"GPU-{u}" for u in fake.uuids)
    decoded = m.decode(msg.to_json())
    assert decoded.executors[0].kind == "cuda-stream"


def test_a_failing_stream_does_not_stop_the_others(rig) -> None:
    fake, agent, (monitor,) = rig
    monitor()
    s0, s1 = agent.cuda_stream("cuda:0", 0), agent.cuda_stream("cuda:1", 1)
    fake.next_device = 0
    agent.launch(s0, _op)
    fake.next_device = 1
    agent.launch(s1, _op)
    agent.cuda.poll()

    def broken() -> bool:
        raise RuntimeError("CUDA error: an illegal memory access")

    s0._markers[0].event.query = broken
    fake.clock.advance(0.01)
    agent.cuda.poll()
    assert s0.error and "illegal memory access" in s0.error
    assert s1.value() == 0


def test_marker_thread_runs_and_reports_its_tid() -> None:
    fake = FakeCuda(1)
    tids: list[int] = []
    mon = CudaMonitor(fake, clock=fake.clock, device_of=fake.device_of, period=0.05, on_thread=tids.append)
    try:
        s = mon.stream("cuda:0")
        torch.add(A, B)  # long before the thread's first round (the fake is not thread-safe)
        deadline = time.monotonic() + 2
        while fake.records[False] + fake.records[True] < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert s.launched == 1 and len(tids) == 1 and tids[0] != threading.get_native_id()
    finally:
        mon.close()
    assert not mon._thread.is_alive()


def test_launch_counter_on_real_cpu_ops() -> None:
    """The production mode on CPU tensors: CPU ops are 'other', metadata is skipped, per thread."""
    counter = LaunchCounter()
    counter.start()
    counter.start()  # idempotent
    try:
        x = torch.ones(3) + 1
        _ = (x.shape, x.device, len(x), x.size(), x.dim())
        torch.mm(torch.ones(2, 2), torch.ones(2, 2))
        other = threading.Thread(target=lambda: torch.add(A, B))
        other.start()
        other.join()
    finally:
        counter.stop()
    torch.add(A, B)  # after stop: not counted
    assert counter.counts == {}
    assert counter.other == 5  # ones, add, ones, ones, mm


def test_launch_counter_counts_per_stream_with_first_launch_time() -> None:
    t = iter([1.0, 2.0, 3.0])
    stream = {3: 7}
    new: list[tuple[int, int]] = []
    counter = LaunchCounter(
        device_of=lambda out, args: 3,
        clock=lambda: next(t),
        stream_of=stream.__getitem__,
        on_new_stream=lambda *key: new.append(key),
    )
    with counter:
        torch.add(A, B)
        torch.add(A, B)
        stream[3] = 9
        torch.add(A, B)
    assert counter.counts == {(3, 7): 2, (3, 9): 1} and counter.count(3) == 3
    assert new == [(3, 7), (3, 9)]
    assert counter.take_first_launch((3, 7)) == 1.0 and counter.take_first_launch((3, 9)) == 2.0
    assert counter.take_first_launch((3, 7)) is None


def test_launch_counter_does_not_break_or_recompile_a_compiled_function() -> None:
    """A real torch.compile (dynamo, eager backend, CPU) under the counter counting on cuda:0."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    counter = LaunchCounter(device_of=lambda out, args: 0)
    compiled = torch.compile(lambda x: torch.relu(x @ x + 1).sum(), backend="eager")
    x = torch.randn(8, 8)
    with counter:
        for _ in range(3):
            compiled(x)
        torch.add(A, B)  # eager: counted
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1
    assert counter.count(0) >= 1


@pytest.mark.parametrize("broken", ["untimed", "unrecorded"])
def test_a_marker_torch_cannot_time_completes_at_the_poll(rig, broken: str) -> None:
    """torch raises ValueError (not RuntimeError) for elapsed_time on an untimed or unrecorded event."""
    fake, agent, (monitor,) = rig
    monitor()
    s = agent.cuda_stream("cuda:0")
    agent.launch(s, _op)  # caught up: a timed marker ends the item
    marker = s._markers[0]
    odd = fake.Event(enable_timing=broken == "unrecorded")
    if broken == "untimed":
        odd.record(s.stream)
    marker.event = odd
    fake.clock.advance(0.01)
    agent.cuda.poll()
    assert s.error is None and s.value() == 0


def test_work_under_a_side_stream_is_watched_on_that_stream(rig) -> None:
    """``with torch.cuda.stream(side)``: its calls count on ``side``, which becomes its own executor."""
    fake, agent, (monitor,) = rig
    monitor()
    agent.cuda_stream("cuda:0")
    side = fake.Stream(0)
    t0 = fake.clock.now
    with fake.stream(side):
        for _ in range(10):  # 10 ms of kernels on the side stream
            _op()
    _op()  # 1 ms on the default stream
    agent.cuda.poll()
    fake.clock.advance_to(t0 + 3.5e-3)
    agent.cuda.poll()
    rows = {r.name: r for r in agent.sample(t0, fake.clock.now).executors}
    assert set(rows) == {"cuda:0", "cuda:0 s1"}
    assert (rows["cuda:0"].launched, rows["cuda:0"].value) == (1, 0)
    assert (rows["cuda:0 s1"].launched, rows["cuda:0 s1"].value) == (10, 10)
    while fake.clock.now < t0 + 20e-3:
        agent.cuda.poll()
        fake.clock.advance(1e-3)
    msg = agent.sample(t0, t0 + 20e-3)
    busy = {r.name: r.busy for r in msg.executors}
    truth = {"cuda:0": union(fake.default_stream(0).kernels), "cuda:0 s1": union(side.kernels)}
    for name, kernels in truth.items():
        assert busy[name] == pytest.approx(busy_time(kernels) / 20e-3, abs=0.005)
    assert all(r.value == 0 for r in msg.executors)


def test_rows_say_what_they_count_and_whether_blocking_was_measured(rig) -> None:
    """A CUDA stream counts torch calls and cannot see blocking; an emulated stream counts items, sees it."""
    fake, agent, (monitor,) = rig
    monitor()
    agent.cuda_stream("cuda:0")
    agent.emulated_stream("cpu-stream:0", capacity=4)
    rows = {
        r.name: m.decode(agent.sample(fake.clock.now - 0.1, fake.clock.now).to_json()).executors[i]
        for i, r in enumerate(agent.executors)
    }
    assert (rows["cuda:0"].counts, rows["cuda:0"].blocked) == (Counted.TORCH_CALLS, None)  # not "never"
    assert (rows["cpu-stream:0"].counts, rows["cpu-stream:0"].blocked) == (Counted.ITEMS, 0.0)
