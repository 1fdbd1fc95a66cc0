"""The step clock, its phase hooks and the GPU phases (on the fake CUDA), in this process."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from fakes.fake_cuda import FakeCuda, SimClock
from torch import nn
from torch.optim import optimizer as optimizer_module
from torchpar_top.contract import messages as m
from torchpar_top.contract.vocab import PHASES, StepSource
from torchpar_top.probes.agent import usercode_phases, usercode_steps
from torchpar_top.probes.agent.usercode import UserCode
from torchpar_top.probes.agent.usercode_install import Instrumentation
from torchpar_top.probes.agent.usercode_steps import (
    BACKWARD,
    COMM,
    DATA,
    FORWARD,
    HOLD_S,
    OPTIMIZER,
    TRANSFER,
    GpuSteps,
    StepClock,
    read_memory,
    rss_bytes,
)


def phases(steps):
    return {p: getattr(steps.phases, p) for p in PHASES}


def test_phases_nest_and_add_up_to_the_step_time_exactly():
    t = SimClock(0.0)
    c = StepClock(clock=t)
    c.enter(DATA)
    t.advance(0.010)
    c.exit(DATA)
    c.step(StepSource.DATALOADER)
    t.advance(0.001)  # other
    c.enter(FORWARD)
    t.advance(0.004)
    c.enter(TRANSFER)  # a copy inside the forward is transfer, not forward
    t.advance(0.002)
    c.exit(TRANSFER)
    t.advance(0.004)
    c.exit(FORWARD)
    c.enter(BACKWARD)
    t.advance(0.005)
    c.exit(BACKWARD, split_at=t.now - 0.003)  # its last 3 ms waited for the other ranks
    c.enter(OPTIMIZER)
    t.advance(0.002)
    c.exit(OPTIMIZER)
    c.step(StepSource.OPTIMIZER)
    steps = c.take(wall=lambda: 1000.0)
    # the better source came before any sample: the dataloader step was folded into the first one
    assert steps.source == StepSource.OPTIMIZER and steps.count == 1
    got = phases(steps)
    want = dict(data=0.010, transfer=0.002, forward=0.008, backward=0.002, comm=0.003, optimizer=0.002)
    for p, v in want.items():
        assert got[p] == pytest.approx(v)
    assert got["other"] == pytest.approx(0.001)
    assert sum(got.values()) == pytest.approx(steps.seconds) == pytest.approx(0.028)
    assert len(steps.ends) == 1 and len(steps.recent) == 1
    assert steps.ends[0] == pytest.approx(1000.0)  # wall clock: the step ended "now"
    assert m.decode(m.Log(text="x").to_json())  # the codec takes the message (Sample: test_usercode.py)


def test_without_step_records_the_steps_go_out_the_same_less_each_step_whole():
    """``--no-step-records`` (nothing records the run): the count, ends and phases as with them, no
    ``recent`` (a recording's export is their only reader)."""

    def three_steps(records):
        t = SimClock(0.0)
        c = StepClock(clock=t, records=records)
        for _ in range(3):
            c.enter(FORWARD)
            t.advance(0.004)
            c.exit(FORWARD)
            t.advance(0.001)
            c.step(StepSource.OPTIMIZER)
        return c.take(wall=lambda: 1000.0)

    with_records, without = three_steps(True), three_steps(False)
    assert len(with_records.recent) == 3 and without.recent == ()
    assert without == dataclasses.replace(with_records, recent=())


def test_a_better_source_after_a_sample_keeps_the_count_growing():
    t = SimClock(0.0)
    c = StepClock(clock=t)
    for _ in range(3):
        t.advance(0.01)
        c.step(StepSource.MODULE)
    assert c.take().count == 3  # went out in a sample
    t.advance(0.01)
    c.step(StepSource.BACKWARD)
    assert not c.step(StepSource.MODULE)  # a lower source no longer marks steps
    steps = c.take()
    assert steps.source == StepSource.BACKWARD and steps.count == 4 and steps.before == 3
    assert steps.seconds == pytest.approx(0.03)  # the first step starts at the first boundary (t=0.01)
    assert len(steps.ends) == 1  # only the step since the last sample
    assert c.take().ends == ()
    assert c.late_source == (StepSource.MODULE, 3)  # for the agent to say (the first 3 were model calls)


def test_a_better_source_before_any_sample_leaves_nothing_to_say():
    t = SimClock(0.0)
    c = StepClock(clock=t)
    for source in (StepSource.MODULE, StepSource.BACKWARD, StepSource.OPTIMIZER):
        t.advance(0.01)
        c.step(source)
    assert c.take().count == 1 and c.late_source is None  # folded back: the count starts with the optimizer


def test_a_replaceable_sources_first_steps_are_held_so_a_better_one_takes_them_over():
    """DDP's first optimizer step came after backward calls had gone out: held for HOLD_S from the first
    step, the backward calls are folded into the optimizer's first step and nothing needs saying."""
    t = SimClock(0.0)
    c = StepClock(clock=t, hold=HOLD_S)
    for _ in range(3):
        t.advance(0.1)
        c.step(StepSource.BACKWARD)
    assert c.take() is None and not c.sent  # held: 0.2 s from its first step
    t.advance(0.3)
    c.step(StepSource.OPTIMIZER)
    steps = c.take()  # optimizer steps are never held: nothing can replace them
    assert steps.source == StepSource.OPTIMIZER and steps.count == 1 and steps.before == 0
    assert c.late_source is None


def test_a_held_source_goes_out_after_the_hold_or_in_the_last_sample():
    t = SimClock(0.0)
    c = StepClock(clock=t, hold=HOLD_S)
    for _ in range(4):
        t.advance(0.1)
        c.step(StepSource.BACKWARD)
    assert c.take() is None
    assert c.take(final=True).count == 4  # the run's last sample: what there is
    c = StepClock(clock=t, hold=HOLD_S)
    for _ in range(4):
        t.advance(0.1)
        c.step(StepSource.BACKWARD)
    t.advance(HOLD_S)
    c.step(StepSource.BACKWARD)
    assert c.take().count == 5  # a loop with no optimizer: its steps, a second late
    t.advance(0.1)
    c.step(StepSource.OPTIMIZER)  # later than the hold: the count goes on, and it is said
    steps = c.take()
    assert steps.count == 6 and steps.before == 5 and c.late_source == (StepSource.BACKWARD, 5)


def test_gpu_phases_are_event_time_read_a_step_later_without_waiting():
    cuda = FakeCuda(devices=1)
    t = cuda.clock
    c = StepClock(clock=t)
    c.use_gpu(GpuSteps(cuda))
    c.step(StepSource.OPTIMIZER)  # CPU step; GPU timing starts with the next one
    stream = cuda.current_stream()
    c.enter(FORWARD)
    stream.submit(0.005)  # 5 ms of kernels launched in 1 ms
    t.advance(0.001)
    c.exit(FORWARD)
    c.enter(BACKWARD)
    stream.submit(0.010)
    t.advance(0.001)
    c.exit(BACKWARD)
    c.step(StepSource.OPTIMIZER)
    assert c.take().count == 1  # the GPU has not finished that step: not read yet, nobody waited
    assert cuda.syncs == 0
    t.advance(0.050)
    c.step(StepSource.OPTIMIZER)  # the next step's end reads the one before
    steps = c.take()
    assert steps.gpu and steps.count >= 2
    gpu = steps.recent[-1] if steps.count == 2 else steps.recent[-2]
    assert gpu.phases.forward == pytest.approx(0.005, abs=1e-4)
    assert gpu.phases.backward == pytest.approx(0.010, abs=1e-4)
    events = cuda.events_created
    for _ in range(20):  # events are reused from the pool
        c.enter(FORWARD)
        stream.submit(0.001)
        c.exit(FORWARD)
        t.advance(0.01)
        c.step(StepSource.OPTIMIZER)
    assert cuda.events_created <= events + 6
    assert cuda.syncs == 0


def test_a_step_begun_while_a_graph_is_captured_keeps_its_cpu_phases():
    cuda = FakeCuda(devices=1)
    cuda.is_current_stream_capturing = lambda: True
    t = cuda.clock
    c = StepClock(clock=t)
    gpu = GpuSteps(cuda)
    c.use_gpu(gpu)
    c.step(StepSource.OPTIMIZER)
    c.enter(FORWARD)
    t.advance(0.003)
    c.exit(FORWARD)
    c.step(StepSource.OPTIMIZER)
    steps = c.take()
    assert steps.count == 2 and steps.recent[-1].phases.forward == pytest.approx(0.003)
    assert gpu.untimed == 1 and gpu.timed == 0 and not steps.gpu


def test_memory_is_rss_and_each_initialised_devices_allocator():
    assert rss_bytes() > 10 << 20
    stats = {
        0: {
            "allocated_bytes.all.current": 100,
            "reserved_bytes.all.current": 200,
            "allocated_bytes.all.peak": 150,
        },
        1: {"reserved_bytes.all.current": 0},  # not used by this process: left out
    }
    cuda = SimpleNamespace(
        is_initialized=lambda: True,
        current_device=lambda: 0,
        device_count=lambda: 2,
        memory_stats=lambda i: stats[i],
    )
    mem = read_memory(cuda)
    assert mem.rss_bytes > 0
    assert mem.devices == (m.DeviceMemory("cuda:0", 100, 200, 150),)
    never = SimpleNamespace(
        is_initialized=lambda: False, memory_stats=lambda i: pytest.fail("initialised CUDA")
    )
    assert read_memory(never).devices == ()


class RecordingUser(UserCode):
    def __init__(self, **kw):
        super().__init__(None, target="test", **kw)
        self.agent.send = lambda msg: None
        self.steps.hold = 0.0  # the first steps go out at once here (the hold has tests of its own)


def test_roots_are_found_then_hooked_alone_and_everything_is_put_back(monkeypatch):
    monkeypatch.setattr(usercode_steps, "TIMED_EVERY_S", 0.0)  # every step timed: the hooks stay on
    user = RecordingUser()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    criterion = nn.MSELoss()
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    originals = (torch.autograd.backward, torch.autograd.grad, torch.distributed.all_reduce)
    with Instrumentation(user):
        assert torch.autograd.backward is not originals[0]
        for i in range(8):
            loss = criterion(model(x), y)
            loss.backward()
            if i == 0:
                assert user.phases.discovering
        assert not user.phases.discovering  # the global module hooks are gone
        assert {id(r) for r in user.phases.roots} == {id(model), id(criterion)}  # not the inner layers
        # the roots' calls are timed by their classes' __call__, not by module hooks (torch's slow path)
        assert nn.Sequential.__dict__["__call__"]._tpt_root_call and "__call__" in nn.MSELoss.__dict__
        assert not model._forward_pre_hooks and not model._forward_hooks
        inner = nn.Sequential(nn.Linear(8, 8))  # another instance of a root's class passes through
        before = user.steps._cur[FORWARD]
        inner(x)
        assert user.steps._cur[FORWARD] == before
        steps = user.steps.take()
    assert steps.source == StepSource.BACKWARD and steps.count == 8
    assert steps.phases.forward > 0 and steps.phases.backward > 0
    assert (torch.autograd.backward, torch.autograd.grad, torch.distributed.all_reduce) == originals
    assert "__call__" not in nn.Sequential.__dict__ and "__call__" not in nn.MSELoss.__dict__
    assert not torch.nn.modules.module._global_forward_pre_hooks


def test_a_fast_loops_phases_are_timed_in_some_steps_with_the_hooks_off_in_between(monkeypatch):
    monkeypatch.setattr(usercode_steps, "TIMED_EVERY_S", 10.0)  # any step is fast: the most untimed
    user = RecordingUser()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    w = list(model.parameters())
    opt = torch.optim.SGD(w, lr=0.01)
    x = torch.randn(4, 8)
    original = torch.autograd.backward
    seen = set()
    with Instrumentation(user):
        for _ in range(3 * (usercode_steps.MAX_UNTIMED + 1)):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            if not user.phases.discovering:
                seen.add((torch.autograd.backward is original, "__call__" in nn.Sequential.__dict__))
        steps = user.steps.take()
    # between timed steps backward's wrapper and the pre hook are off; they come back for the timed
    # ones; the root's class keeps its __call__ (changing a class costs more than the wrapper)
    assert seen == {(True, True), (False, True)}
    assert steps.count == 3 * (usercode_steps.MAX_UNTIMED + 1)  # every step is counted
    # the steps of the root discovery (the first 5 or 6), then one in MAX_UNTIMED + 1
    assert 7 <= steps.timed <= 10
    assert sum(phases(steps).values()) == pytest.approx(steps.seconds)  # estimated, still adding up
    assert steps.phases.forward > 0 and steps.phases.backward > 0 and steps.phases.optimizer > 0
    assert all(sum(phases(r).values()) > 0 for r in steps.recent)  # whole steps: timed ones only
    assert torch.autograd.backward is original and "__call__" not in nn.Sequential.__dict__
    assert not optimizer_module._global_optimizer_pre_hooks


@pytest.mark.parametrize("source", [StepSource.BACKWARD, StepSource.MODULE])
def test_a_fast_loop_without_an_optimizer_keeps_every_step_with_sampled_phases(monkeypatch, source):
    """The wrapper that marks the steps stays on in the untimed steps (manual SGD: backward's)."""
    monkeypatch.setattr(usercode_steps, "TIMED_EVERY_S", 10.0)
    user = RecordingUser()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    x = torch.randn(4, 8)
    n = 2 * (usercode_steps.MAX_UNTIMED + 1)
    with Instrumentation(user):
        for _ in range(n):
            if source is StepSource.BACKWARD:
                model(x).sum().backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(p.grad, alpha=-0.01)
                        p.grad = None
            else:
                with torch.no_grad():
                    model(x)
        steps = user.steps.take()
    assert steps.source == source and steps.count == n
    assert steps.timed is not None and steps.timed < n // 10
    assert sum(phases(steps).values()) == pytest.approx(steps.seconds)


def test_a_wrapper_someone_put_over_ours_is_left_alone_when_the_hooks_come_off(monkeypatch):
    monkeypatch.setattr(usercode_steps, "TIMED_EVERY_S", 10.0)
    user = RecordingUser()
    w = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.01)
    with Instrumentation(user):
        ours = torch.autograd.backward

        def theirs(*args, **kwargs):  # a library wrapping backward after us
            return ours(*args, **kwargs)

        torch.autograd.backward = theirs
        for _ in range(10):
            w.sum().backward()
            opt.step()
            assert torch.autograd.backward is theirs
        user.phases.clock.sampling = True
        user.phases.set_timing(False)
        assert torch.autograd.backward is theirs
        torch.autograd.backward = ours  # they put ours back before we go
    assert user.steps.take().count == 10


def test_a_module_only_loop_steps_by_its_outermost_calls():
    user = RecordingUser()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    with Instrumentation(user), torch.no_grad():
        for _ in range(6):
            model(torch.randn(2, 8))
        steps = user.steps.take()
    assert steps.source == StepSource.MODULE and steps.count == 6


def test_the_optimizer_phase_and_the_step_source():
    user = RecordingUser()
    w = torch.zeros(64, requires_grad=True)
    opt = torch.optim.Adam([w])
    with Instrumentation(user):
        for _ in range(5):
            w.pow(2).sum().backward()
            opt.step()
        steps = user.steps.take()
    assert steps.source == StepSource.OPTIMIZER and steps.count == 5
    assert steps.phases.optimizer > 0 and steps.phases.backward > 0
    assert user.agent.items == 5


def test_what_counts_as_a_transfer():
    cpu = torch.zeros(2)
    assert usercode_phases._to_moves(cpu, "cuda")
    assert usercode_phases._to_moves(cpu, torch.device("cuda", 0))
    assert usercode_phases._to_moves(cpu, device="cuda:1")
    assert usercode_phases._to_moves(cpu, 0)  # an int is a CUDA ordinal
    assert not usercode_phases._to_moves(cpu, torch.float16)  # a dtype change is no transfer
    assert not usercode_phases._to_moves(cpu, "cpu")
    assert not usercode_phases._to_moves(cpu, torch.zeros(1))
    assert usercode_phases._cuda_moves(cpu) and not usercode_phases._cpu_moves(cpu)
    assert not usercode_phases._copy_moves(cpu, torch.ones(2))


def test_cuda_patches_go_on_once_and_come_off(monkeypatch):
    user = RecordingUser()
    original_to, original_sync = torch.Tensor.to, torch.cuda.synchronize
    # another test's monkeypatch may leave the inherited method in Tensor's own __dict__: put back as found
    had_to = "to" in torch.Tensor.__dict__
    with Instrumentation(user):
        user.phases.install_cuda()
        user.phases.install_cuda()
        assert torch.Tensor.to is not original_to and torch.Tensor.to.__wrapped__ is original_to
        t = torch.zeros(2).to(torch.float16)  # still works, and is no transfer
        assert t.dtype == torch.float16
        assert user.steps._cur[TRANSFER] == 0.0
    assert torch.Tensor.to is original_to and ("to" in torch.Tensor.__dict__) == had_to
    assert torch.cuda.synchronize is original_sync
    assert PHASES.index("comm") == COMM


def test_a_compiled_model_steps_without_graph_breaks_or_a_warning_about_our_hooks(recwarn):
    from torch._dynamo.utils import counters

    counters.clear()
    user = RecordingUser()
    model = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    with Instrumentation(user):
        for _ in range(8):  # through the root discovery and past it
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        steps = user.steps.take()
    assert steps.source == StepSource.OPTIMIZER and steps.count == 8 and steps.phases.forward > 0
    assert not counters["graph_break"]
    assert not [w for w in recwarn if "global hooks" in str(w.message)]


def test_once_steps_are_found_the_op_counter_samples_less_of_the_time():
    from torchpar_top.probes.agent.usercode_sampling import DUTY, SLICE, STEPS_DUTY, STEPS_SLICE

    user = RecordingUser()
    w = torch.zeros(4, requires_grad=True)
    with Instrumentation(user) as inst:
        assert inst.counting.duty == DUTY
        w.sum().backward()
        assert inst.counting.duty == STEPS_DUTY < DUTY
        assert inst.counting.slice == STEPS_SLICE < SLICE


def _drive(clock: StepClock, sim: SimClock, short: bool) -> list:
    """A sampled loop of 0.3 ms steps: forward, backward, then the optimizer step's end, which takes the
    short way (``close_untimed``) where ``short`` and the clock allows it, else the full path."""
    clock.sampling = True
    for _ in range(100):
        clock.enter(FORWARD)
        sim.advance(1e-4)
        clock.exit(FORWARD)
        clock.enter(BACKWARD)
        sim.advance(1e-4)
        clock.exit(BACKWARD)
        clock.enter(OPTIMIZER) if clock.timing else None
        sim.advance(1e-4)
        if not (short and clock.close_untimed(StepSource.OPTIMIZER)):
            clock.exit(OPTIMIZER, step=StepSource.OPTIMIZER)
    return list(clock._done)


def test_the_short_way_of_an_untimed_step_leaves_what_the_full_path_leaves(monkeypatch):
    monkeypatch.setattr(usercode_steps, "TIMED_EVERY_S", 10.0)  # any step is fast: the most untimed
    full_sim, short_sim = SimClock(), SimClock()
    full, short = StepClock(clock=full_sim), StepClock(clock=short_sim)
    seen = []
    short.on_step = lambda: seen.append(short.count)
    assert short.close_untimed(StepSource.OPTIMIZER) == 0.0  # nothing marks steps yet: not taken
    assert _drive(full, full_sim, False) == _drive(short, short_sim, True)
    assert short.count == full.count == 100
    # the short way took the untimed steps (the caller runs the per-step work), the full path the rest
    assert 0 < len(seen) < 10
    assert short.close_untimed(StepSource.BACKWARD) == 0.0  # not the source that marks the steps
    short.timing = True
    assert short.close_untimed(StepSource.OPTIMIZER) == 0.0  # a timed step: its phases need the full path
    assert short.count == 100


def test_an_untimed_optimizer_step_still_runs_the_agents_per_step_work(monkeypatch):
    """The hook's short way still runs the agent's per-step work: the op counter's tick when a switch is
    due or a call waits for it (a stop), never otherwise, and the step count for throughput."""
    monkeypatch.setattr(usercode_steps, "TIMED_EVERY_S", 10.0)
    user = RecordingUser()
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2, 4)
    short = []
    close_untimed = user.steps.close_untimed
    user.steps.close_untimed = lambda source: short.append(t := close_untimed(source)) or t

    def step() -> None:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    with Instrumentation(user) as inst:
        for _ in range(40):
            step()
        assert any(short)  # the short way was taken
        ticks = []
        monkeypatch.setattr(inst.counting, "tick", lambda: ticks.append(user.steps.count))
        inst.counting.due = float("inf")  # no switch due
        short.clear()
        for _ in range(5):
            step()
        assert all(short) and ticks == []  # untimed steps, no tick
        inst.counting.pending.append(lambda: None)  # a call waits (run_soon's list)
        step()
        assert short[-1] and ticks == [46]
        inst.counting.pending.clear()
        inst.counting.due = 0.0  # a switch is due
        step()
        assert short[-1] and ticks == [46, 47]
        assert user.agent.items == 47
