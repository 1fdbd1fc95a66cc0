"""The op counter in slices: on for a share of the time, switched only on the frontend, standing aside
for other function modes, and what it covered accounted exactly."""

from __future__ import annotations

import sys
import threading
import time

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torchpar_top.probes.agent.usercode_sampling import LATE, SampledCounting, SwitchSignal


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Counter(TorchFunctionMode):
    """Counts torch calls made while it is on the stack."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.soon = []

    def run_soon(self, fn) -> None:
        self.soon.append(fn)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def _stack() -> int:
    return torch._C._len_torch_function_stack()


@pytest.fixture
def rig():
    clock, mode = Clock(), Counter()
    counting = SampledCounting(mode, slice_s=0.05, duty=0.05, clock=clock)
    yield clock, mode, counting
    counting.stop()
    assert _stack() == 0


def test_slices_keep_the_long_run_duty(rig):
    clock, mode, counting = rig
    counting.tick()
    assert counting.on and _stack() == 1
    torch.ones(2) + 1
    clock.now += 0.03
    counting.tick()  # before the slice's end: stays on
    assert counting.on
    clock.now += 0.03
    counting.tick()  # 60 ms on: off, and off for 60 ms x 19 so that the duty stays 5 %
    assert not counting.on and _stack() == 0 and counting.covered == pytest.approx(0.06)
    n = mode.n
    torch.ones(2) + 1
    assert mode.n == n  # off: not counted, and no mode on the stack at all
    clock.now += 0.06 * 19 - 0.01
    counting.tick()
    assert not counting.on
    clock.now += 0.02
    counting.tick()
    assert counting.on
    assert counting.covered_until(clock.now + 0.01) == pytest.approx(0.07)  # the running slice counts


def test_it_stands_aside_for_another_mode_and_never_pops_one_that_is_not_its_own(rig):
    clock, _mode, counting = rig
    with Counter():  # the user's own function mode
        counting.tick()
        assert not counting.on and counting.stood_aside == 1 and _stack() == 1
    clock.now += 10
    counting.tick()
    assert counting.on
    other = Counter()
    other.__enter__()  # pushed above ours (e.g. the user entered a mode inside a slice)
    clock.now += 1
    counting.tick()
    assert counting.on and _stack() == 2  # ours is not on top: left alone until it is
    other.__exit__(None, None, None)
    counting.tick()
    assert not counting.on and _stack() == 0


def test_pinned_stays_on_and_unpinned_goes_back_to_slices(rig):
    clock, _mode, counting = rig
    counting.pin(True)
    counting.tick()
    clock.now += 5
    counting.tick()
    assert counting.on and counting.covered_until() == pytest.approx(5.0)
    counting.pin(False)
    counting.tick()
    assert not counting.on and counting.covered == pytest.approx(5.0)


def test_calls_wait_for_the_frontend_thread(rig):
    _clock, mode, counting = rig
    counting.tick()  # on
    ran = []
    other = threading.Thread(
        target=lambda: (counting.run_soon(lambda: ran.append(threading.get_ident())), counting.tick())
    )
    other.start()
    other.join()
    assert ran == []  # a tick from another thread does nothing
    assert mode.soon == [counting.tick]  # on: the mode's next op will tick
    counting.tick()
    assert ran == [threading.get_ident()]


def test_a_switch_is_overdue_only_past_its_time(rig):
    clock, _mode, counting = rig
    counting.tick()
    clock.now += 0.05 + LATE / 2
    assert not counting.overdue()
    clock.now += LATE
    assert counting.overdue()
    counting.tick()
    assert not counting.on and not counting.overdue()


def test_the_fallback_signal_switches_a_loop_without_steps():
    """No step, no batch: the sampler's signal runs the switch on the main thread, between bytecodes."""
    mode = Counter()
    counting = SampledCounting(mode, slice_s=0.02, duty=0.5)
    switch = SwitchSignal(counting)
    assert switch.install()
    try:
        stop = threading.Event()

        def sampler() -> None:
            while not stop.is_set():
                switch.poke()
                time.sleep(0.01)

        th = threading.Thread(target=sampler)
        th.start()
        x = torch.ones(4)
        deadline = time.monotonic() + 20
        while counting.covered == 0 and time.monotonic() < deadline:
            x = x * 1.0  # a loop of small ops with nothing else in it
        stop.set()
        th.join()
        assert counting.covered > 0 and mode.n > 0  # switched on, counted, switched off: all by signal
    finally:
        counting.stop()
        switch.uninstall()
    assert _stack() == 0


def test_once_compiled_code_is_seen_the_counter_keeps_its_state_and_nothing_recompiles():
    """torch.compile guards on the function-mode stack: a second state would compile everything again."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    from torchpar_top.probes.agent.usercode_ops import EagerOps, OpCounter, SyncCounter

    clock, mode = Clock(), OpCounter(EagerOps(), SyncCounter())
    counting = SampledCounting(mode, slice_s=0.05, duty=0.05, clock=clock)
    told = []
    counting.on_freeze = told.append
    fn = torch.compile(lambda x: x * 2 + 1, backend="eager")
    try:
        counting.tick()  # a slice starts
        fn(torch.ones(3))  # compiled while the counter is on
        for _ in range(5):
            clock.now += 10
            counting.tick()
            fn(torch.ones(3))
        assert counters["frames"]["total"] == 1  # compiled once, never again
        assert counting.frozen and counting.on and told == [True]
    finally:
        counting.stop()
        torch._dynamo.reset()
        counters.clear()  # "compiled code seen" is process-wide: later tests start without it


def test_an_error_of_ours_never_reaches_the_users_code(rig, monkeypatch):
    """The switch runs inside the user's code (hooks, a signal handler): it keeps its errors."""
    clock, _mode, counting = rig
    counting.tick()
    assert counting.on and not counting.frozen
    import torchpar_top.probes.agent.usercode_sampling as sampling

    def broken() -> bool:
        raise AttributeError("partially initialized module")  # as during an import of torch._dynamo

    monkeypatch.setattr(sampling, "compiled_code_seen", broken)
    clock.now += 1
    counting.tick()  # no exception here
    assert "partially initialized" in counting.failed and not counting.on and _stack() == 0
    clock.now += 100
    counting.tick()
    assert not counting.on  # slicing has stopped


class _Node(torch.autograd.Function):
    """A custom Function whose backward runs ``hook`` (as FSDP's hooks run user-visible Python inside
    the autograd engine, where the sampler's signal may land)."""

    hook = staticmethod(lambda: None)

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        _Node.hook()
        return grad * 2


def _backward_running(hook) -> None:
    _Node.hook = staticmethod(hook)
    try:
        x = torch.ones(3, requires_grad=True)
        _Node.apply(x).sum().backward()
    finally:
        _Node.hook = staticmethod(lambda: None)


def test_it_never_switches_on_inside_a_backward_node(rig):
    """The autograd engine puts the thread's state back after each node, mode stack included: a mode
    pushed inside one is gone when it returns (pytorch/examples' FSDP2: every later tick, and a profile
    hook on every Python call, then waited for a switch off that could never happen)."""
    clock, _mode, counting = rig
    states = []
    _backward_running(lambda: (counting.tick(), states.append((counting.on, _stack()))))
    assert states == [(False, 0)] and counting.stood_aside == 1
    assert not counting.on and _stack() == 0
    clock.now += 1.0  # its next slice, as after standing aside for a mode
    counting.tick()
    assert counting.on and _stack() == 1  # outside backward: on as usual


def test_a_mode_that_something_took_off_the_stack_is_taken_as_off(rig, monkeypatch):
    clock, mode, counting = rig
    mode.dispatching = False  # as the real counter says outside its own calls
    monkeypatch.setattr("torchpar_top.probes.agent.usercode_sampling._current_node", lambda: None)
    _backward_running(counting.tick)  # pushed inside a node (as a torch without the node check would)
    assert counting.on and _stack() == 0  # the engine put its state back: ours is gone
    clock.now += 1
    assert not counting.tick_off() and counting.dropped == 0  # the profile hook never judges it dropped
    counting.tick()
    assert counting.on and counting.dropped == 0  # once absent: it may be between its call and the push
    counting.tick()
    assert (
        not counting.on and counting.dropped == 1 and counting.covered == 0.0
    )  # twice: off, nothing claimed
    assert not counting.off_due()
    mode.dispatching = True  # inside its own call the stack is short too: then it waits, as before
    clock.now += 100
    counting.tick()
    assert counting.on and _stack() == 1
    mode.__exit__(None, None, None)  # (the call's own pop, as torch does for a dispatch)
    clock.now += 1
    counting.tick()
    assert counting.on and counting.dropped == 1
    mode.__enter__()  # the call returned: ours is back on top, and goes off at the next tick
    counting.tick()
    assert not counting.on and _stack() == 0


def test_a_mode_found_back_on_top_is_adopted(rig):
    clock, mode, counting = rig
    mode.__enter__()  # on the stack, though the counter took it for off (a drop judged wrongly)
    clock.now += 100
    counting.tick()
    assert counting.on and counting.stood_aside == 0 and _stack() == 1
    clock.now += 1
    counting.tick()
    assert not counting.on and _stack() == 0


def test_a_slice_running_into_backward_ends_after_it(rig):
    """Inside a node the engine runs with a mode stack of its own (empty, whatever the thread's): a switch
    off there would take ours for dropped; it waits until backward returned, where ours is on top."""
    clock, mode, counting = rig
    mode.dispatching = False
    counting.tick()
    assert counting.on and _stack() == 1
    clock.now += 1
    inside = []
    _backward_running(lambda: (counting.tick(), inside.append((counting.on, _stack()))))
    assert inside == [(True, 0)] and counting.dropped == 0
    assert counting.on and _stack() == 1  # back on the thread's stack
    counting.tick()
    assert not counting.on and _stack() == 0 and counting.covered == pytest.approx(1.0)


def test_the_profile_hook_gives_up_on_a_mode_that_never_comes_back_on_top(rig, monkeypatch):
    clock, _mode, counting = rig
    monkeypatch.setattr("torchpar_top.probes.agent.usercode_sampling.HOOK_EVENTS", 50)
    counting.tick()
    other = Counter()
    other.__enter__()  # the user's mode above ours for long: the switch off waits for it
    try:
        clock.now += 1
        switch = SwitchSignal(counting)
        switch.finish_off_soon()
        assert sys.getprofile() == switch._finish_off
        for _ in range(100):
            _stack()  # Python events for the hook (each call and return)
        assert sys.getprofile() is None and counting.on  # given up, not on every call for good
    finally:
        sys.setprofile(None)
        other.__exit__(None, None, None)
