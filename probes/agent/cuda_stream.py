"""One watched CUDA stream as an executor: markers give ``C``, lanes come from marker completions.

See :mod:`torchpar_top.probes.agent.cuda` for the method and its costs. A busy run starts at the first
launch after the stream caught up and ends when its last marker completes. Timing-enabled markers,
where a run's end must be exact: an item's end recorded by the frontend when the stream had caught up
(a sparse or SYNC loop), and one "tail" marker when the frontend stops feeding a backlog. Markers in a
backlog are timing-disabled and complete at the poll that sees them (or at a later timed marker's time).

Untested on hardware: verified against ``tests/fakes/fake_cuda.py`` only.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchpar_top.contract.vocab import Counted, ExecutorKind, Quantity
from torchpar_top.probes.agent.activity import ActivityRecorder, waiting
from torchpar_top.probes.agent.executor import Executor
from torchpar_top.probes.agent.hta import QUEUE_CAP as CAPACITY

if TYPE_CHECKING:
    from torchpar_top.probes.agent.cuda import CudaMonitor

#: Markers waiting per stream at most (each takes a slot of the launch queue).
MAX_PENDING = 16


@dataclass
class _Marker:
    event: Any
    launched: int
    recorded: float
    first_launch: float | None
    timed: bool
    tail: bool = False


class DeviceClock:
    """Host time of timing-enabled events of one device, from one reference event recorded when idle."""

    def __init__(self, cuda: Any, device: int, stream: Any, clock: Callable[[], float]) -> None:
        cuda.synchronize(device)
        self.ref = cuda.Event(enable_timing=True)
        t0 = clock()
        self.ref.record(stream)
        self.ref.synchronize()
        t1 = clock()
        self.host0, self.error = (t0 + t1) / 2, (t1 - t0) / 2

    def host_time(self, event: Any) -> float:
        """When ``event`` (timing-enabled, completed, same device) completed, on the host clock.

        Raises what ``torch.cuda.Event.elapsed_time`` raises: ValueError for an event without timing
        or never recorded, RuntimeError for one not completed (c10/cuda/CUDAEvent.h).
        """
        return self.host0 + self.ref.elapsed_time(event) / 1000.0


class CudaStream(Executor):
    """One watched CUDA stream: ``outstanding`` torch calls, capacity 1024, never emulated; whether
    launch blocked on a full queue is not observable (``blocking_observed`` False: ``blocked`` is sent as
    null)."""

    kind = ExecutorKind.CUDA_STREAM
    quantity = Quantity.OUTSTANDING
    counts = Counted.TORCH_CALLS  # the launch counter is a function mode: torch calls, not kernels
    blocking_observed = False  # completion markers cannot see a launch blocked on a full queue

    def __init__(
        self,
        name: str,
        device: int,
        stream: Any,
        monitor: CudaMonitor,
        wait: ActivityRecorder | None = None,
    ) -> None:
        self.device, self.stream, self._m = device, stream, monitor
        self.key = (device, stream.stream_id)
        """The launch counter's key for this stream."""
        super().__init__(name, CAPACITY)
        self.completed = self._last_marked = self.launched  # ops before watching began count as done
        self._wait, self._lock = wait, threading.RLock()
        self._clock = monitor.clocks.get(device)
        self._edges = monitor.timed_edges and self._clock is not None
        self._markers: deque[_Marker] = deque()
        self._pool: dict[bool, list[Any]] = {False: [], True: []}
        self._item_ends: deque[int] = deque()
        self._items_done = 0
        self._since: float | None = None
        self._prev_done = float("-inf")
        self.error: str | None = None

    @property
    def launched(self) -> int:
        """``L``: the launch counter's count of torch calls made while this stream was current."""
        return self._m.counter.counts.get(self.key, 0)

    @launched.setter
    def launched(self, value: int) -> None:
        """Ignored: ``L`` belongs to the launch counter (the base class initialises it)."""

    @property
    def started(self) -> int:
        """``S`` is not observable with markers: reported as ``C`` (a lower bound)."""
        return self.completed

    @started.setter
    def started(self, value: int) -> None:
        """Ignored (see the getter)."""

    def launch(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the frontend (its CUDA ops are enqueued); mark its end if caught up
        (not while a CUDA graph is being captured: no event is queried or recorded then)."""
        fn(*args)
        launched = self.launched
        self._item_ends.append(launched)
        if self._edges and launched != self._last_marked:
            capture = self._m.capture
            with capture.lock, self._lock:
                if not capture.active and self._caught_up() and len(self._markers) < MAX_PENDING:
                    self._mark(launched, self._m.clock(), timed=True)

    def items_completed(self) -> int:
        """Launched items (``launch`` calls) whose ops have all completed (read by one thread)."""
        while self._item_ends and self._item_ends[0] <= self.completed:
            self._item_ends.popleft()
            self._items_done += 1
        return self._items_done

    def synchronize(self) -> None:
        """``torch.cuda.synchronize(device)``, recorded as a frontend wait; skipped while a CUDA graph
        is being captured (it would invalidate the capture)."""
        if self._m.capturing():
            return
        launched = self.launched
        with waiting(self._wait, clock=self._m.clock):
            self._m.cuda.synchronize(self.device)
        self._set_completed(launched)

    def poll(self, now: float) -> None:
        """Pop completed markers; mark new launches, or the end of a backlog (marker thread)."""
        with self._lock:
            self._pop_completed(now)
            launched = self.launched
            if launched != self._last_marked:
                if len(self._markers) < MAX_PENDING:
                    self._mark(launched, now, timed=self._edges and self._caught_up())
            elif self._edges and self._markers and not self._markers[-1].timed:
                self._mark(launched, now, timed=True, tail=True)  # the frontend paused: time the run's end

    def _caught_up(self) -> bool:
        """No marker pending (a completed one may still wait to be popped)."""
        return not self._markers or self._markers[-1].event.query()

    def _mark(self, launched: int, now: float, timed: bool, tail: bool = False) -> None:
        first = None if tail else self._m.counter.take_first_launch(self.key)
        pool = self._pool[timed]
        event = pool.pop() if pool else self._m.cuda.Event(enable_timing=timed)
        event.record(self.stream)  # blocks while the stream's launch queue is full
        if not self._markers:  # the stream had caught up: a new busy run
            self._begin(max(self._prev_done, first if first is not None else now))
        self._markers.append(_Marker(event, launched, now, first, timed, tail))
        self._last_marked = launched

    def _pop_completed(self, now: float) -> None:
        done: list[_Marker] = []
        while self._markers and self._markers[0].event.query():
            done.append(self._markers.popleft())
        times, bound = [], now  # an untimed marker completed no later than any later marker
        for m in reversed(done):
            bound = self._exact(m, bound) if m.timed else bound
            times.append(bound)
        times.reverse()
        for i, m in enumerate(done):
            nxt = done[i + 1] if i + 1 < len(done) else (self._markers[0] if self._markers else None)
            self._complete(m, times[i], nxt)
            self._pool[m.timed].append(m.event)

    def _exact(self, m: _Marker, bound: float) -> float:
        """The marker's completion on the host clock, or ``bound`` where torch cannot time it
        (ValueError: untimed or unrecorded event; RuntimeError: not complete, or a CUDA error)."""
        try:
            return min(bound, max(m.recorded, self._clock.host_time(m.event)))  # type: ignore[union-attr]
        except (RuntimeError, ValueError):
            return bound

    def _complete(self, m: _Marker, done: float, nxt: _Marker | None) -> None:
        self._set_completed(m.launched)
        if nxt is not None and nxt.launched == m.launched:
            return  # a tail marker follows: it ends the run
        done = max(done, self._since if self._since is not None else done)
        self.activity.end(done)
        self._since, self._prev_done = None, done
        if nxt is not None:  # more work pending: its run starts when its first op was launched
            self._begin(max(done, nxt.first_launch) if nxt.first_launch is not None else done)

    def _begin(self, t: float) -> None:
        self._since = t
        self.activity.begin(t)

    def _set_completed(self, value: int) -> None:
        with self._lock:
            self.completed = max(self.completed, value)
