"""Busy intervals of one executor (or the frontend's waits), and the overlap between executors.

An interval says an item was *in progress*: taken by the executor and not yet finished. Whether the
executor's thread was on a core all that time is another question (ARCHITECTURE.md, "Running, waiting
for a core, blocked"): :func:`split_busy` and :func:`running_overlap` combine the intervals with the
thread's own run and wait times from ``schedstat`` (:mod:`.cputime`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

#: Two busy intervals closer than this are merged into one (seconds). A gap this short is below what a
#: lane cell (about 100 ms) can show; merging keeps a busy executor to a handful of intervals per window.
MERGE_GAP = 200e-6

Interval = tuple[float, float]


class ActivityRecorder:
    """Records when something was busy, as merged ``(start, end)`` intervals on ``time.perf_counter``.

    One thread writes (``begin``/``end`` or ``add``), the agent's sampler reads (``busy_in``). A lock
    keeps the open interval consistent between them; it costs well under a microsecond per call.
    """

    def __init__(self, keep: float = 10.0) -> None:
        self._lock = threading.Lock()
        self._closed: deque[Interval] = deque()
        self._idle: deque[float] = deque()
        """Per closed interval, the idle time merging swallowed inside it (the gaps under MERGE_GAP)."""
        self._open: Interval | None = None  # the merged interval still growing
        self._open_idle = 0.0
        self._since: float | None = None  # start of the item running now, if any
        self._keep = keep

    def begin(self, t: float) -> None:
        """Mark the start of an item of work."""
        self._since = t

    def end(self, t: float) -> None:
        """Mark the end of the item started by :meth:`begin`."""
        start, self._since = self._since, None
        if start is not None:
            self.add(start, t)

    def add(self, start: float, end: float) -> None:
        """Record one busy interval (merged into the open one when the gap is under MERGE_GAP; the gap
        is remembered as idle, so that :meth:`busy` does not count it)."""
        with self._lock:
            cur = self._open
            if cur is not None and start - cur[1] <= MERGE_GAP:
                if start > cur[1]:
                    self._open_idle += start - cur[1]
                self._open = (cur[0], max(cur[1], end))
                return
            if cur is not None:
                self._closed.append(cur)
                self._idle.append(self._open_idle)
            self._open, self._open_idle = (start, end), 0.0

    def _items(self, t1: float) -> tuple[list[Interval], list[float]]:
        """The kept intervals (the open one last, an item running at ``t1`` after it) and their idle."""
        with self._lock:
            while self._closed and self._closed[0][1] < t1 - self._keep:
                self._closed.popleft()
                self._idle.popleft()
            items, idle = list(self._closed), list(self._idle)
            if self._open is not None:
                items.append(self._open)
                idle.append(self._open_idle)
            since = self._since
        if since is not None:
            items.append((since, t1))
            idle.append(0.0)
        return items, idle

    def intervals(self, t0: float, t1: float) -> list[Interval]:
        """Busy intervals clipped to ``[t0, t1]``, including an item still running at ``t1`` (merged
        across gaps under MERGE_GAP: what a lane draws)."""
        return clip(self._items(t1)[0], t0, t1)

    def busy(self, t0: float, t1: float) -> float:
        """Seconds busy in ``[t0, t1]``: the intervals less the gaps merged into them (pro rata where an
        interval is cut by the window). Items that come one at a time with a short idle gap between (a
        GPU stream synchronised after each op) would otherwise read as busy all the time: on an H100 the
        async experiment in SYNC read 0.99 busy while its profiler trace had work on the GPU 0.56 of
        the window."""
        items, idle = self._items(t1)
        total = 0.0
        for (a, b), gap in zip(items, idle, strict=True):
            lo, hi = max(a, t0), min(b, t1)
            if hi > lo:
                total += (hi - lo) * (1.0 - gap / (b - a))
        return total


@contextmanager
def waiting(
    *recorders: ActivityRecorder | None, clock: Callable[[], float] = time.perf_counter
) -> Iterator[None]:
    """Record the enclosed wait in each recorder *as it happens*.

    A wait recorded only when it ends would be missed by a sample taken while it lasts, and the next
    window would clip away the part before it; begin/end makes a sample mid-wait count it up to now.
    """
    live = [r for r in recorders if r is not None]
    for r in live:
        r.begin(clock())
    try:
        yield
    finally:
        for r in live:
            r.end(clock())


def clip(intervals: Iterable[Interval], t0: float, t1: float) -> list[Interval]:
    """Intervals cut to ``[t0, t1]``, empty ones dropped."""
    out = []
    for start, end in intervals:
        a, b = max(start, t0), min(end, t1)
        if b > a:
            out.append((a, b))
    return out


def busy_time(intervals: Sequence[Interval]) -> float:
    """Total length of the union of ``intervals``."""
    return covered(list(intervals), 1)


def covered(intervals: list[Interval], at_least: int) -> float:
    """Time during which at least ``at_least`` of the intervals are active (a sweep over the ends)."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    total, count, last = 0.0, 0, None
    for t, step in events:
        if last is not None and count >= at_least:
            total += t - last
        count += step
        last = t
    return total


def overlap_time(per_executor: Sequence[Sequence[Interval]]) -> float:
    """Time during which two or more executors were busy at once.

    Each executor's own intervals are first merged to their union, so one executor never overlaps
    itself.
    """
    merged: list[Interval] = []
    for intervals in per_executor:
        merged.extend(union(intervals))
    return covered(merged, 2)


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of intervals as sorted, disjoint intervals."""
    out: list[Interval] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def split_busy(busy: float, run: float, wait: float) -> tuple[float, float]:
    """An executor's in-progress share of a window split into *running* and *waiting for a core*.

    Args:
        busy: share of the window with an item in progress (from its intervals).
        run: share of the window its thread was on a core (``schedstat`` field 1 over the window).
        wait: share of the window its thread was runnable but waiting for a core (field 2).

    Returns:
        ``(running, core_wait)`` with ``running = min(busy, run)`` and ``core_wait = min(busy - running,
        wait)``: the thread's own time, capped by the time it had work. The rest of ``busy`` is time an
        item was in progress while its thread was blocked (the GIL, a lock). Run time between items (the
        executor loop's own few microseconds per item) counts as running: the shares come as window
        totals, so they cannot be placed inside the intervals.
    """
    running = min(busy, max(0.0, run))
    return running, min(busy - running, max(0.0, wait))


def running_overlap(
    per_executor: Sequence[Sequence[Interval]], running: Sequence[float | None]
) -> tuple[float, float]:
    """Time during which two or more executors were *running on a core* at once: ``(least, most)``.

    ``per_executor`` are the executors' in-progress intervals; ``running`` their running time in the
    window in seconds (``None`` where the intervals are themselves running time: a CUDA stream's
    kernels run on the device). With nothing measured both are :func:`overlap_time`, exactly.

    Otherwise only window totals are known, not *when* in its intervals a thread ran, so the overlap
    is bounded, not measured. With ``R_i`` each executor's running time, ``U`` the time at least one
    had work in progress, ``B`` the time two or more had (:func:`overlap_time`) and ``n`` executors:

    - least: ``sum(R) <= U + (n - 1) * T2`` gives ``T2 >= (sum(R) - U) / (n - 1)``. For two executors
      it is exact whenever, while either had work, at least one of them was on a core (both competing
      for the cores with other processes: every moment one is off a core, the other is on it); it
      underestimates when both were off a core at once (both blocked on the GIL, both behind other
      work).
    - most: ``T2 <= B``, and every moment two run at once one of them is not the one that ran most, so
      ``T2 <= sum(R) - max(R)``. Exact when the executors ran whenever they could at the same moments.
    """
    n = len(per_executor)
    if n < 2:
        return 0.0, 0.0
    in_progress = overlap_time(per_executor)
    if all(r is None for r in running):
        return in_progress, in_progress
    merged = [union(intervals) for intervals in per_executor]
    runs = [busy_time(m) if r is None else min(r, busy_time(m)) for m, r in zip(merged, running, strict=True)]
    either = busy_time([iv for m in merged for iv in m])
    least = min(in_progress, max(0.0, (sum(runs) - either) / (n - 1)))
    return least, max(least, min(in_progress, sum(runs) - max(runs)))
