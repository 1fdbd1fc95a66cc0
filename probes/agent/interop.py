"""The inter-op pool: TorchScript ``fork`` futures, outstanding until ``done()``.

From plain Python ``torch.jit.fork`` runs synchronously; inside a scripted function it returns a future
at once and the work runs on the inter-op pool (threads named ``PTThreadPool``). We see the futures,
not the moment each task starts, so the quantity is *outstanding* (``O = L - C``), and the busy lane
is the time at least one task was in flight (forked, not yet seen done: done-ness is polled when the
agent samples and whenever the frontend asks, so a gap shorter than that can be missed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from torchpar_top.contract.vocab import ExecutorKind, Quantity
from torchpar_top.probes.agent.activity import ActivityRecorder, waiting
from torchpar_top.probes.agent.executor import Executor


class InterOpPool(Executor):
    """Tracks futures forked onto the inter-op pool."""

    kind = ExecutorKind.INTEROP_POOL
    quantity = Quantity.OUTSTANDING

    def __init__(self, name: str = "inter-op pool", *, wait: ActivityRecorder | None = None) -> None:
        super().__init__(name, capacity=None)
        self._lock = threading.Lock()
        self._pending: list[Any] = []
        self._wait = wait

    def track(self, futures: Sequence[Any]) -> None:
        """Count futures just returned by a scripted function that forked them."""
        now = time.perf_counter()
        with self._lock:
            if not self._pending:
                self.activity.begin(now)
            self._pending.extend(futures)
            self.launched += len(futures)
            self.started += len(futures)  # unknown; S is not reported for this executor

    def refresh(self) -> None:
        """Count the futures that are done now (polled: a done-callback per future would run Python on
        the inter-op threads, under the GIL, for every task)."""
        with self._lock:
            if not self._pending:
                return
            still = [f for f in self._pending if not f.done()]
            self.completed += len(self._pending) - len(still)
            self._pending = still
            if not still:
                self.activity.end(time.perf_counter())

    def outstanding(self) -> int:
        """Futures not yet done."""
        self.refresh()
        return max(0, self.launched - self.completed)

    def wait_oldest(self) -> None:
        """Block on the oldest pending future (back-pressure for an unbounded pool)."""
        with self._lock:
            fut = self._pending[0] if self._pending else None
        if fut is not None:
            self._block(fut.wait)
        self.refresh()

    def synchronize(self) -> None:
        """Wait on every pending future."""
        with self._lock:
            pending = list(self._pending)
        if pending:
            self._block(lambda: [f.wait() for f in pending])
        self.refresh()

    def _block(self, fn: Any) -> None:
        with waiting(self._wait):
            fn()
