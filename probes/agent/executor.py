"""What every executor has: monotone counters L, S, C, busy intervals, and a way to synchronize.

Queue depth ``Q = L - S`` and outstanding ``O = L - C`` (ARCHITECTURE.md, "One definition of queue
depth"). Each executor says which of the two it can see (``quantity``), and :meth:`Executor.value` is the
one place either is computed.
"""

from __future__ import annotations

import time

from torchpar_top.contract.messages import ExecutorRow
from torchpar_top.contract.vocab import Counted, ExecutorKind, Quantity, Role
from torchpar_top.probes.agent.activity import ActivityRecorder, busy_time, union


class Executor:
    """Base class: counters, activity, and the fields the wire protocol reports."""

    kind: ExecutorKind = ExecutorKind.EAGER
    quantity: Quantity = Quantity.DEPTH
    emulated = False
    counts: Counted = Counted.ITEMS
    """What one launch is (``torch calls`` for a function-mode counter)."""
    blocking_observed = True
    """Whether :attr:`blocked` can see the frontend blocked on a full queue (CUDA markers cannot)."""
    drains_on_sync = True
    """Whether a switch to SYNC waits for this executor's backlog (a DataLoader keeps prefetching)."""
    thread_role: Role = Role.STREAM_EXECUTOR
    """The role of this executor's own threads (:attr:`tids`) in the threads panel."""
    runs_items_on_own_thread = False
    """Whether every item runs on this executor's one thread (``tids[0]``), so that thread's run and
    wait times split the busy share into running and waiting for a core (an emulated stream)."""

    def __init__(self, name: str, capacity: int | None = None) -> None:
        self.name = name
        self.capacity = capacity
        self.launched = 0
        """L: launch calls that returned (written by the frontend only)."""
        self.started = 0
        """S: items that began executing (written by the executor only)."""
        self.completed = 0
        """C: items that finished (written by the executor only)."""
        self.activity = ActivityRecorder()
        """When this executor was executing work."""
        self.blocked = ActivityRecorder()
        """When the frontend was blocked launching into this executor because it was full."""
        self.tids: list[int] = []
        """Native thread ids of this executor's own threads, for the thread panel's roles."""

    def value(self) -> int:
        """The current Q or O, whichever ``quantity`` says. Counters are read C/S first, then L."""
        done = self.started if self.quantity == Quantity.DEPTH else self.completed
        return max(0, self.launched - done)

    def ready(self) -> int | None:
        """Items finished and waiting for the frontend (a DataLoader's batches); None where there are none."""
        return None

    def row(self, t0: float, t1: float) -> tuple[ExecutorRow, list[tuple[float, float]]]:
        """This executor over the window ``[t0, t1]``: its sample row and its merged busy intervals."""
        window = max(t1 - t0, 1e-9)
        busy = union(self.activity.intervals(t0, t1))
        blocked = (
            min(1.0, busy_time(self.blocked.intervals(t0, t1)) / window) if self.blocking_observed else None
        )
        completed = self.completed  # read before value() reads L: completed never exceeds launched
        row = ExecutorRow(
            name=self.name,
            kind=self.kind,
            quantity=self.quantity,
            value=self.value(),
            capacity=self.capacity,
            launched=max(self.launched, completed),
            completed=completed,
            busy=min(1.0, self.activity.busy(t0, t1) / window),
            blocked=blocked,
            emulated=self.emulated,
            counts=self.counts,
            ready=self.ready(),
        )
        return row, busy

    def refresh(self) -> None:
        """Bring ``completed`` up to date where it is polled rather than pushed (the sampler calls it)."""

    def synchronize(self) -> None:
        """Block until everything launched has completed."""

    def close(self) -> None:
        """Stop the executor's threads (after draining or dropping its work)."""


class EagerDevice(Executor):
    """The CPU running eager ops on the calling thread: ``L = S = C``, depth 0, shown honestly.

    Use ``with device.op(): ...`` around each op (or batch of ops) the frontend runs.
    """

    kind = ExecutorKind.EAGER

    def op(self) -> _EagerOp:
        """Context manager counting one op and recording the time it ran."""
        return _EagerOp(self)


class _EagerOp:
    __slots__ = ("_dev", "_t0")

    def __init__(self, dev: EagerDevice) -> None:
        self._dev = dev
        self._t0 = 0.0

    def __enter__(self) -> None:
        dev = self._dev
        dev.launched += 1
        dev.started += 1
        self._t0 = time.perf_counter()
        dev.activity.begin(self._t0)

    def __exit__(self, *exc: object) -> None:
        dev = self._dev
        dev.activity.end(time.perf_counter())
        dev.completed += 1
