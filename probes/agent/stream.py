"""An emulated CPU stream: an executor thread running real torch ops from a bounded queue.

Launch is a ``put`` (it blocks when the queue holds ``capacity`` items, like a CUDA stream at its
1024-entry launch queue); synchronize waits until everything launched has completed. ATen kernels
release the GIL, so the frontend really runs ahead of the stream. Always labelled as emulated.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torchpar_top.contract.vocab import QUEUE_CAP, ExecutorKind
from torchpar_top.probes.agent.activity import ActivityRecorder, waiting
from torchpar_top.probes.agent.executor import Executor

#: CUDA's per-stream launch queue capacity, copied by the emulation.
DEFAULT_CAPACITY = QUEUE_CAP

_STOP = object()


class EmulatedStream(Executor):
    """An in-order executor thread fed by a bounded queue."""

    kind = ExecutorKind.EMULATED_STREAM
    emulated = True
    runs_items_on_own_thread = True

    def __init__(
        self,
        name: str,
        capacity: int = DEFAULT_CAPACITY,
        *,
        wait: ActivityRecorder | None = None,
        threads: Callable[[], int] | None = None,
    ) -> None:
        """Start the executor thread.

        Args:
            name: shown on screen, e.g. ``cpu-stream:0``.
            capacity: queue length at which launch blocks.
            wait: where the frontend's waits (full queue or synchronize) are recorded as they happen.
            threads: returns the wanted ``torch.set_num_threads`` value; applied in the executor thread
                before the next item when it changes (the setting is per calling thread for OpenMP).
        """
        super().__init__(name, capacity)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=capacity)
        self._done = threading.Condition()
        self._wait = wait
        self._threads = threads
        self._errors = 0
        self.last_error: str | None = None
        self._go = threading.Event()
        self._go.set()
        self._thread = threading.Thread(target=self._run, name=f"tpt-{name}", daemon=True)
        self._ready = threading.Event()
        self._thread.start()
        self._ready.wait(5)

    def launch(self, fn: Callable[..., Any], *args: Any) -> None:
        """Enqueue ``fn(*args)``; returns at once unless the queue is full."""
        item = (fn, args)
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with waiting(self.blocked, self._wait):
                self._queue.put(item)
        self.launched += 1

    def synchronize(self) -> None:
        """Wait until every launched item has completed."""
        if self.completed >= self.launched:
            return
        with waiting(self._wait), self._done:
            while self.completed < self.launched and self._thread.is_alive():
                self._done.wait(0.5)

    @contextmanager
    def hold(self, timeout: float = 5.0) -> Iterator[None]:
        """Pause the executor: it finishes the item it runs and takes no other until the block ends.
        Launches still queue (and block when full): the backlog waits, as it was."""
        self._go.clear()
        try:
            deadline = time.monotonic() + timeout
            while self.started > self.completed and time.monotonic() < deadline:
                time.sleep(0.0005)
            yield
        finally:
            self._go.set()

    def close(self) -> None:
        """Drop queued work and stop the thread."""
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
        self._queue.put(_STOP)
        self._go.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        self.tids.append(threading.get_native_id())
        self._ready.set()
        applied = None
        while True:
            self._go.wait()
            item = self._queue.get()
            if item is _STOP:
                return
            if self._threads is not None and self._threads() != applied:
                applied = self._threads()
                torch.set_num_threads(applied)
            fn, args = item
            self.started += 1
            t0 = time.perf_counter()
            self.activity.begin(t0)
            try:
                fn(*args)
            except Exception as exc:  # a failing op must not kill the stream
                self._errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            self.activity.end(time.perf_counter())
            with self._done:
                self.completed += 1
                self._done.notify_all()
