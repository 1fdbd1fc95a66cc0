"""What every executor has: monotone counters L, S, C, busy intervals, and a way to synchronize.

Queue depth ``Q = L - S`` and outstanding ``O = L - C`` (DESIGN.md, "One definition of queue depth").
Each executor says which of the two it can see (``quantity``).
"""

from __future__ import annotations

import time
from typing import Any

from torchpar_top.probes.agent.activity import ActivityRecorder

QUANTITY_DEPTH = "depth"
QUANTITY_OUTSTANDING = "outstanding"


class Executor:
    """Base class: counters, activity, and the fields the wire protocol reports."""

    kind = "executor"
    quantity = QUANTITY_DEPTH
    emulated = False
    counts = "items"
    """What ``launched``/``started``/``completed`` count: ``items`` (launch calls), or ``calls`` (torch
    calls, not kernels: a CUDA stream fed by the launch counter)."""
    blocked_measured = True
    """False where blocking on a full queue cannot be observed (CUDA markers): ``blocked`` then reads 0
    and means "not measured", not "never blocked"."""

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
        done = self.started if self.quantity == QUANTITY_DEPTH else self.completed
        return max(0, self.launched - done)

    def refresh(self) -> None:
        """Bring ``completed`` up to date where it is polled rather than pushed (the sampler calls it)."""

    def synchronize(self) -> None:
        """Block until everything launched has completed."""

    def close(self) -> None:
        """Stop the executor's threads (after draining or dropping its work)."""

    def declare(self) -> dict[str, Any]:
        """This executor as the ``hello`` message lists it."""
        return {
            "name": self.name,
            "kind": self.kind,
            "quantity": self.quantity,
            "capacity": self.capacity,
            "emulated": self.emulated,
            "counts": self.counts,
            "blocked_measured": self.blocked_measured,
        }


class EagerDevice(Executor):
    """The CPU running eager ops on the calling thread: ``L = S = C``, depth 0, shown honestly.

    Use ``with device.op(): ...`` around each op (or batch of ops) the frontend runs.
    """

    kind = "eager"

    def op(self) -> "_EagerOp":
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
