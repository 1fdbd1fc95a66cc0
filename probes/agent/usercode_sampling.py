"""Op counting in slices: the op counter is on the frontend for a small share of the time, not always.

A ``TorchFunctionMode`` costs every torch call about a microsecond even when it does nothing (the floor
``benchmarks/bench_usercode.py`` measures), which slows exactly the launch-bound loops whose queue this
tool shows. So :class:`SampledCounting` pushes the :class:`~.usercode_ops.OpCounter` on the frontend's
torch-function-mode stack for :data:`SLICE` seconds at a time, and keeps it off long enough that it is
on :data:`DUTY` of the time. Ops per second and sync points per second are measured in the slices and
scaled by the time they covered; they are labelled *sampled*. ``--every-op`` keeps the counter on.

The mode stack is per thread, so pushing and popping happens on the frontend thread, at moments that
already run our code there: an optimizer step (the step hook) and a DataLoader batch (its ``__next__``
wrapper). A loop with neither gets a real-time signal from the sampler thread when a switch is overdue;
its Python handler runs on the main thread between bytecodes (installed with ``SA_RESTART``, so
interrupted system calls resume). In a loop of torch calls the handler mostly lands inside the counter's
own dispatch, where torch has taken the mode off the stack for the call; the switch off then finishes at
the next Python event outside it, through a one-shot ``sys.setprofile`` hook on the main thread (not
when the user has a profiler of their own). The counter stands aside while another function mode is on
the stack (the user's own): pushing under or over it would change what it sees.

``torch.compile`` guards compiled code on the function-mode stack: code compiled with the counter on
would be compiled again the first time it runs with it off, and the other way round. So once compiled
code has been seen the counter stays as it is (:attr:`SampledCounting.frozen`), and compiled functions
never see a second state; SYNC after every op may still switch it on (one recompilation, on request).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

#: Seconds the counter stays on once switched on (longer when no switch point comes sooner).
SLICE = 0.05
#: Long-run share of the time the counter is on.
DUTY = 0.05
#: ... once training steps are found: steps/s is then the throughput, and the counter serves the sync
#: points (sampled, scaled) alone; at ~3.5 µs per op the counter on 5 % of a launch-bound loop's time
#: was its largest cost (``benchmarks/bench_step_clock.py``; at 2 % still ~2.7 µs of a 190 µs step).
STEPS_DUTY = 0.01
#: ... in slices this long (a fast loop's slice still sees hundreds of steps; the rates and sync points
#: come as often as at 2 % in 50 ms slices: every ~2.5 s).
STEPS_SLICE = 0.025
#: A switch this late (seconds) without a step or batch to do it asks the sampler for a signal.
LATE = 0.1
#: Events the one-shot profile hook waits through for a switch off before it gives up (until the next tick).
HOOK_EVENTS = 10_000
#: The signal used where a loop has no step or batch boundary (real-time, unused by torch and Python).
SIGNAL = getattr(signal, "SIGRTMIN", 34) + 5

_NEVER = float("inf")


def _stack_len() -> int:
    return torch._C._len_torch_function_stack()


#: The autograd node the engine runs now on this thread (None outside backward; missing before torch 2.1).
_current_node: Callable[[], Any] = getattr(torch._C, "_current_autograd_node", lambda: None)


def compiled_code_seen() -> bool:
    """Whether ``torch.compile`` compiled any frame in this process (Dynamo's own counter)."""
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)  # None while importing
    try:
        return counters is not None and counters["frames"]["total"] > 0
    except (KeyError, TypeError):
        return False


class SampledCounting:
    """Switches a function mode on for slices of the frontend's time; accounts for the time covered."""

    def __init__(
        self,
        mode: Any,
        *,
        slice_s: float = SLICE,
        duty: float = DUTY,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.mode = mode
        self.slice, self.duty, self._clock = slice_s, duty, clock
        self.on = False
        """Whether the mode is on the frontend's stack now."""
        self.pinned = False
        """Keep the mode on (``--every-op``, or SYNC after every op, which needs the mode's after-op)."""
        self.covered = 0.0
        """Seconds the mode was on, finished slices only (see :meth:`covered_until`)."""
        self.stood_aside = 0
        """Slices not started because another function mode was on the stack (or the autograd engine ran
        a node on this thread)."""
        self.dropped = 0
        """Slices whose mode something took off the stack (a restored thread-local state)."""
        self._absent = False
        """A tick found the mode neither on the stack nor in its own call (dropped if the next does too)."""
        self.frozen = False
        """Compiled code was seen: the counter keeps its state (on or off) from then on."""
        self.failed = ""
        """Why slicing stopped after an error of ours (the counter is then off), or ''."""
        self.on_freeze: Callable[[bool], None] | None = None
        """Told once, with the state kept, when the counter freezes."""
        self._on_since = 0.0
        self._next_on = clock()
        self.pending: list[Callable[[], None]] = []
        """Calls waiting for the frontend's next switch point (:meth:`run_soon`)."""
        self._pending_since = 0.0
        self.due = 0.0
        """The clock reading from which a tick has a switch to make (see :meth:`_set_due`): with nothing
        :attr:`pending` and the clock before it, :meth:`tick` has nothing to do (a caller that has just
        read the clock may skip the call)."""
        self._lock = threading.Lock()
        self.frontend_ident = threading.get_ident()

    # -- on the frontend thread --------------------------------------------------------------------

    def tick(self) -> None:
        """At a switch point on the frontend: run what waits for it, switch the mode on or off if due.

        It runs inside the user's code (a hook, a signal handler; every training step): when nothing
        waits and no switch is due it returns after one clock read. An error of ours is kept here and
        ends the slicing (the counter goes off), it never reaches the user's code. A stop's
        ``KeyboardInterrupt`` (a pending call) does, as intended.
        """
        if not self.pending and self._clock() < self.due:
            return
        if threading.get_ident() != self.frontend_ident or self.failed:
            return
        try:
            self._tick()
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            self.pinned = self.frozen = False
            with contextlib.suppress(Exception):
                self._switch_off(self._clock())

    def _tick(self) -> None:
        if self.pending:
            with self._lock:
                pending, self.pending = self.pending, []
            for fn in pending:
                fn()
        now = self._clock()
        if not self.frozen and compiled_code_seen():  # only looked at when a switch is due: frozen
            self.frozen = True  # keeps the state as it is, so finding out at the next switch is enough
            if self.on_freeze is not None:
                self.on_freeze(self.on)
        if self.on:
            if not self.pinned and not self.frozen and now - self._on_since >= self.slice:
                self._switch_off(now)
        elif self.pinned or (not self.frozen and now >= self._next_on):
            self._switch_on(now)
        self._set_due()

    def _set_due(self) -> None:
        """When the next tick has something to do (pending calls aside, which it checks itself)."""
        if self.on:
            self.due = _NEVER if self.pinned or self.frozen else self._on_since + self.slice
        elif self.pinned:
            self.due = 0.0  # at once (again, if it had to stand aside)
        else:
            self.due = _NEVER if self.frozen else self._next_on

    def _switch_on(self, now: float) -> None:
        n = _stack_len()
        if n and torch._C._get_function_stack_at(n - 1) is self.mode:
            # ours is on after all (judged dropped, then its state was put back with it): adopt it
            self.on, self._on_since = True, now
            self._set_due()
            return
        # another mode is on (or we are inside a dispatch), or the autograd engine runs a node here (a
        # custom Function's backward, FSDP's hooks: a tick from the signal or a step closed in backward),
        # whose thread-local state it puts back when the node returns, mode stack included: not now
        if n != 0 or _current_node() is not None:
            self.stood_aside += 1
            self._next_on = now + self.slice / self.duty
            return
        self.mode.__enter__()
        self.on, self._on_since = True, now
        self._set_due()

    def off_due(self) -> bool:
        """Whether the running slice should end now."""
        return self.on and not (self.pinned or self.frozen) and self._clock() - self._on_since >= self.slice

    def _switch_off(self, now: float, may_drop: bool = True) -> bool:
        if _current_node() is not None:
            return False  # the engine runs its nodes with a mode stack of its own: after backward
        n = _stack_len()
        if not n and not getattr(self.mode, "dispatching", True):
            # ours is not on the stack and not inside its own call: something that keeps the thread's
            # state put it back as it was (the autograd engine after a node), taking ours off with it;
            # or its call has just returned and torch has not put it back yet (a profile hook's return
            # event, a signal between two bytecodes there). Judged dropped at the second tick that finds
            # it so (never from the profile hook, whose next event may well be that moment): off since
            # then, unknown when, its slice not counted as covered. Left as it was, every tick and a
            # profile hook on every Python call waited for it forever (pytorch/examples' FSDP2 on a CPU:
            # Adam's step 3.3x slower, the op counter 100 % "on")
            if may_drop and self._absent:
                self.dropped += 1
                self._off(now, covered=0.0)
                return True
            if may_drop:
                self._absent = True  # the first tick to find it so: dropped if the next one does too
            return False
        self._absent = False
        if not n or torch._C._get_function_stack_at(n - 1) is not self.mode:
            return False  # something was pushed above ours (or we are inside our own dispatch): later
        self.mode.__exit__(None, None, None)
        self._off(now, covered=now - self._on_since)
        return True

    def _off(self, now: float, covered: float) -> None:
        """The mode is off the stack now: account for its slice (``covered`` seconds of it) and time the
        next one."""
        length = now - self._on_since
        self.covered += covered
        self.on = self._absent = False
        self._next_on = now + length * (1.0 - self.duty) / self.duty  # keeps the long-run duty
        self._set_due()

    def pin(self, pinned: bool) -> None:
        """Keep the mode on from the next switch point (or let it go back to slices)."""
        self.pinned = pinned
        if pinned and not self.on:
            self._next_on = self._clock()
        self._set_due()

    def tick_off(self) -> bool:
        """Switch off now if the mode can be taken off the stack here; True when it is off. Never judges
        the mode dropped (see :meth:`_switch_off`): the profile hook calls it at any event."""
        return self._switch_off(self._clock(), may_drop=False) if self.on else True

    def stop(self) -> None:
        """Take the mode off for good (the user's code ended); on the frontend thread."""
        self.pinned = False
        if self.on:
            self._switch_off(self._clock())

    # -- on any thread --------------------------------------------------------------------------------

    def run_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the frontend thread at its next switch point (or next counted op, when on)."""
        with self._lock:
            if not self.pending:
                self._pending_since = self._clock()
            self.pending.append(fn)
        if self.on:
            self.mode.run_soon(self.tick)

    def covered_until(self, now: float | None = None) -> float:
        """Seconds the mode was on up to ``now``, the running slice included."""
        now = self._clock() if now is None else now
        return self.covered + (now - self._on_since if self.on else 0.0)

    def overdue(self, now: float | None = None) -> bool:
        """Whether a switch (or a pending call) has waited for a step or batch longer than :data:`LATE`."""
        now = self._clock() if now is None else now
        if self.on:
            due = float("inf") if self.pinned or self.frozen else self._on_since + self.slice
        else:
            due = float("inf") if self.frozen and not self.pinned else self._next_on
        if self.pending:
            due = min(due, self._pending_since)
        return now - due > LATE


class SwitchSignal:
    """The fallback switch point: a real-time signal to the main thread, whose handler calls ``tick``."""

    def __init__(self, counting: SampledCounting) -> None:
        self.counting = counting
        self.installed = False
        self._main = threading.main_thread().ident
        self._events = 0

    def install(self) -> bool:
        """Install the handler (on the main thread), unless the signal is taken; True when installed."""
        if threading.get_ident() != self._main:
            return False
        if signal.getsignal(SIGNAL) not in (signal.SIG_DFL, signal.SIG_IGN, None):
            return False  # someone's own handler: leave it alone
        signal.signal(SIGNAL, self._handle)
        signal.siginterrupt(SIGNAL, False)  # SA_RESTART: a system call it interrupts resumes
        self.installed = True
        return True

    def _handle(self, signum: int, frame: Any) -> None:
        self.counting.tick()  # contains its own errors
        self.finish_off_soon()

    def finish_off_soon(self) -> None:
        """After a tick on the main thread: a switch off that could not happen here (inside the
        counter's own dispatch: a step that ends in ``backward``) happens at the next Python event
        outside it (the one-shot profile hook)."""
        with contextlib.suppress(Exception):
            if self.counting.off_due() and sys.getprofile() is None:
                self._events = 0
                sys.setprofile(self._finish_off)

    def _finish_off(self, frame: Any, event: str, arg: Any) -> None:
        """One-shot profile hook on the main thread: switch off at the first event outside a dispatch;
        given up after :data:`HOOK_EVENTS` events that could not (the next tick tries again), so that a
        mode that never comes back on top cannot keep it on every Python call."""
        counting = self.counting
        self._events += 1
        try:
            done = not counting.off_due() or counting.tick_off() or self._events >= HOOK_EVENTS
        except Exception:
            done = True
        if done:
            sys.setprofile(None)

    def poke(self) -> None:
        """From the sampler thread: signal the main thread when a switch is overdue."""
        if self.installed and self._main is not None and self.counting.overdue():
            try:
                signal.pthread_kill(self._main, SIGNAL)
            except (OSError, ValueError):
                self.installed = False

    def uninstall(self) -> None:
        """Ignore the signal from now on (one already sent must not kill the process: its default does)."""
        if self.installed and threading.get_ident() == self._main:
            signal.signal(SIGNAL, signal.SIG_IGN)
            self.installed = False
            if sys.getprofile() == self._finish_off:
                sys.setprofile(None)
