"""DataLoader prefetch as an executor, and the time the frontend waits for the next batch.

A loader with worker processes is one executor ``dataloader:N`` (kind ``dataloader``, quantity
``outstanding``) over all its iterators (epochs). ``L`` = index tasks sent to the workers, ``C`` =
batches the workers finished (fetched by the main process or waiting in the result queue), so
``O = L - C`` is the work in the workers and ``ready`` = finished batches not yet consumed. Input-bound:
``O`` at the cap (``prefetch_factor * num_workers``) and ``ready`` 0; compute-bound: the reverse.

These read private attributes of ``_MultiProcessingDataLoaderIter`` (``_send_idx``,
``_tasks_outstanding``, ``_worker_result_queue``, ``_data_queue``); when one is missing the executor
degrades to counting consumed batches (``L = C``, no ``ready``). The time the frontend thread spends in
``__next__`` (any loader, also ``num_workers=0``), and in ``__iter__`` while it starts the workers, is
its data wait (``data_wait``) and the ``data`` phase of its step. Only a loader with workers makes the
frontend *wait* (``frontend.wait``): one with ``num_workers=0`` loads on the frontend itself, which is
data time, not time blocked on a device.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data import dataloader as _dl
from torchpar_top.contract.vocab import ExecutorKind, Quantity, Role, StepSource
from torchpar_top.probes.agent.activity import ActivityRecorder
from torchpar_top.probes.agent.executor import Executor
from torchpar_top.probes.agent.usercode_steps import DATA, StepClock

_MultiIter = _dl._MultiProcessingDataLoaderIter

#: The attribute a watched multi-process loader iterator carries its executor in.
EXECUTOR_ATTR = "_tpt_executor"


class DataLoaderExecutor(Executor):
    """The prefetch queue of one DataLoader with workers; counters refreshed by :meth:`refresh`."""

    kind = ExecutorKind.DATALOADER
    quantity = Quantity.OUTSTANDING
    drains_on_sync = False  # its workers keep prefetching: SYNC does not wait for them
    thread_role = Role.PIN_MEMORY

    def __init__(self, name: str, capacity: int | None) -> None:
        super().__init__(name, capacity)
        self._lock = threading.Lock()
        self._it: weakref.ref | None = None
        self._base = 0  # tasks of earlier iterators (all completed or dropped)
        self._consumed = 0  # batches of the current iterator handed to the user
        self._sent = 0  # last seen tasks sent by the current iterator
        self.batches_ready: int | None = None
        """Batches finished by the workers and not yet consumed (None when it cannot be read)."""
        self.degraded = False

    def ready(self) -> int | None:
        """Batches fetched and not yet consumed (None when the loader's internals are not readable)."""
        return self.batches_ready

    def attach(self, it: Any) -> None:
        """Follow a new iterator (a new epoch); the previous one's leftovers count as completed."""
        with self._lock:
            self._close_out()
            self._it = weakref.ref(it)
            self._consumed = self._sent = 0

    def detach(self) -> None:
        """The current iterator is exhausted, reset or abandoned."""
        with self._lock:
            self._close_out()

    def _close_out(self) -> None:
        """Fold the current iterator into the base: its unconsumed tasks count as completed (dropped)."""
        it = self._it() if self._it is not None else None
        with contextlib.suppress(AttributeError, TypeError, ValueError):
            self._sent = max(self._sent, int(it._send_idx)) if it is not None else self._sent
        self._base += max(self._sent, self._consumed)
        self._it, self._sent, self._consumed = None, 0, 0
        self.launched = self.started = self.completed = self._base
        self.batches_ready = 0 if not self.degraded else None

    def consumed_one(self) -> None:
        """The frontend received one batch from the current iterator."""
        self._consumed += 1

    def refresh(self) -> None:
        """Read the iterator's state into ``launched``/``completed``/``ready`` (sampler thread)."""
        with self._lock:
            it = self._it() if self._it is not None else None
            if it is None:
                if self._it is not None:  # abandoned without being exhausted
                    self._close_out()
                return
            consumed = self._consumed
            try:
                sent = int(it._send_idx)
                in_workers = max(0, int(it._tasks_outstanding) - _finished_waiting(it))
            except (AttributeError, TypeError, ValueError, NotImplementedError, OSError, RuntimeError):
                self.degraded = True
                sent, in_workers = consumed, 0
            sent = max(sent, consumed)
            if self.capacity:
                in_workers = min(in_workers, self.capacity)
            self._sent = sent
            pin = getattr(it, "_pin_memory_thread", None)
            if pin is not None and getattr(pin, "native_id", None) and not self.tids:
                self.tids = [pin.native_id]
            self.launched = self._base + sent
            self.completed = self.started = self._base + sent - in_workers
            self.batches_ready = None if self.degraded else max(0, sent - consumed - in_workers)


def _finished_waiting(it: Any) -> int:
    """Batches the workers finished that the main process has not fetched from its queues yet.

    0 where a queue cannot tell its size (``qsize`` raises NotImplementedError on macOS): those
    batches then count as in the workers.
    """
    queues = [it._worker_result_queue]
    if getattr(it, "_pin_memory", False) and it._data_queue is not it._worker_result_queue:
        queues.append(it._data_queue)
    n = 0
    for q in queues:
        with contextlib.suppress(NotImplementedError, OSError):
            n += q.qsize()
    return n


class DataLoaderWatch:
    """Patches ``DataLoader.__iter__`` and the iterators' ``__next__`` while installed."""

    def __init__(self, add_executor: Callable[[Executor], Any], frontend_ident: int) -> None:
        self.add_executor = add_executor
        self.frontend_ident = frontend_ident
        self.wait = ActivityRecorder()
        """When the frontend thread was inside a DataLoader's ``__next__``."""
        self.executors: list[DataLoaderExecutor] = []
        self._by_loader: weakref.WeakKeyDictionary[Any, DataLoaderExecutor] = weakref.WeakKeyDictionary()
        self._orig_iter: Any = None
        self._orig_next: Any = None
        self.inside = 0
        """How deep the frontend is in a loader's ``__iter__``/``__next__`` (not a place to interrupt)."""
        self.also_wait: ActivityRecorder | None = None
        """Also records each wait (the agent's frontend-wait recorder; the frontend thread writes it)."""
        self.on_frontend: Callable[[], None] | None = None
        """Called on the frontend thread at each batch it asks for (a switch point for the op counter)."""
        self.steps: StepClock | None = None
        """The step clock: time in a loader is the ``data`` phase, each batch a step of the
        ``dataloader`` source."""

    def install(self) -> None:
        """Wrap the two methods (once)."""
        if self._orig_iter is not None:
            return
        self._orig_iter, self._orig_next = DataLoader.__iter__, _dl._BaseDataLoaderIter.__next__
        orig_iter, orig_next, watch = self._orig_iter, self._orig_next, self

        def __iter__(loader: Any) -> Any:
            """``DataLoader.__iter__``, following multi-process iterators; starting workers is data wait."""
            ex = watch._executor_for(loader)
            if ex is not None:
                ex.detach()  # before a persistent iterator's reset zeroes its counters
            frontend = threading.get_ident() == watch.frontend_ident
            workers = getattr(loader, "num_workers", 0) > 0
            if frontend:  # starting the workers is waiting for the input pipeline too
                watch._wait_begin(time.perf_counter(), workers)
            try:
                it = orig_iter(loader)
            finally:
                if frontend:
                    watch._wait_end(time.perf_counter(), workers)
            if ex is not None and isinstance(it, _dl._MultiProcessingDataLoaderIter):
                ex.attach(it)
                setattr(it, EXECUTOR_ATTR, ex)
            return it

        def __next__(it: Any) -> Any:
            """``__next__`` of every loader iterator: the frontend's time in it is data wait."""
            frontend = threading.get_ident() == watch.frontend_ident
            if frontend:
                if watch.on_frontend is not None:
                    watch.on_frontend()  # a switch point on the frontend (the op counter's slices)
                workers = isinstance(it, _MultiIter)
                watch._wait_begin(time.perf_counter(), workers)
            try:
                data = orig_next(it)
            except StopIteration:
                ex = getattr(it, EXECUTOR_ATTR, None)
                if ex is not None:
                    ex.detach()
                raise
            finally:
                if frontend:
                    watch._wait_end(time.perf_counter(), workers)
            ex = getattr(it, EXECUTOR_ATTR, None)
            if ex is not None:
                ex.consumed_one()
            if frontend and watch.steps is not None:
                watch.steps.step(StepSource.DATALOADER)  # after the data phase ended in _wait_end
            return data

        DataLoader.__iter__ = __iter__  # type: ignore[method-assign]
        _dl._BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign, assignment]

    def uninstall(self) -> None:
        """Put the original methods back."""
        if self._orig_iter is not None:
            DataLoader.__iter__ = self._orig_iter  # type: ignore[method-assign]
            _dl._BaseDataLoaderIter.__next__ = self._orig_next  # type: ignore[method-assign]
            self._orig_iter = self._orig_next = None

    def _wait_begin(self, t: float, workers: bool = True) -> None:
        """The frontend entered a loader's ``__iter__``/``__next__`` (of a loader with worker processes,
        or one that loads in this process: then it is not waiting, it is loading, and that is data
        time but no frontend wait)."""
        # begin/end, not add afterwards: a sample taken mid-wait must see the wait so far
        self.inside += 1
        self.wait.begin(t)
        if workers and self.also_wait is not None:
            self.also_wait.begin(t)
        if self.steps is not None:
            self.steps.enter(DATA)

    def _wait_end(self, t: float, workers: bool = True) -> None:
        """The frontend left it."""
        self.inside -= 1
        self.wait.end(t)
        if workers and self.also_wait is not None:
            self.also_wait.end(t)
        if self.steps is not None:
            self.steps.exit(DATA)

    def _executor_for(self, loader: Any) -> DataLoaderExecutor | None:
        """The executor of a loader with workers (made at its first ``iter``), None without workers."""
        if getattr(loader, "num_workers", 0) <= 0:
            return None
        ex = self._by_loader.get(loader)
        if ex is None:
            prefetch = getattr(loader, "prefetch_factor", None) or 2
            ex = DataLoaderExecutor(f"dataloader:{len(self.executors)}", prefetch * loader.num_workers)
            self._by_loader[loader] = ex
            self.executors.append(ex)
            self.add_executor(ex)
        return ex

    def refresh(self, t0: float, t1: float) -> None:
        """Update every loader's counters; a loader with work in its workers was busy in ``[t0, t1]``."""
        for ex in self.executors:
            ex.refresh()
            if ex.launched > ex.completed:
                ex.activity.add(t0, t1)
