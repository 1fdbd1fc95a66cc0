"""Launch queue depth per stream, with Holistic Trace Analysis' definition and statistics.

HTA (``hta/analyzers/trace_counters.py``, 0.5.0): +1 at each runtime launch that has a correlated GPU
op, -1 when that GPU op starts; the depth is the running sum in time order. HTA's summary
(``get_queue_length_summary``) describes the running sum over every +1/-1 event: ``count`` is twice the
launches, ``mean`` and ``max`` are taken over those events, time plays no part, and events at the same
timestamp each count. HTA orders them with pandas' default (unstable) sort, so its order at equal
timestamps is arbitrary; here a launch comes first (a GPU op cannot start before its own launch, so the
depth never dips below zero on a tie). Time at the cap is the time the depth stays at or above 1024
(HTA's ``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM``), during which a further launch blocks.

Where the events sit in the file plays no part. HTA's does: it misses the launch whose GPU op is the
file's first event (that launch's ``index_correlation`` is 0, which HTA's launch query reads as "no
linked event"), and that op with it; Kineto writes such files (tests/data/h200/README.md). Such a
launch counts here, and on such a trace HTA counts one launch fewer.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from torchpar_top.analysis.events import Event, span
from torchpar_top.analysis.intervals import Intervals
from torchpar_top.contract.vocab import QUEUE_CAP  # HTA's per-stream limit: 1022-1024, undocumented


@dataclass(frozen=True)
class QueueSeries:
    """Queue depth of one stream over a trace: a step function, and HTA's statistics of it."""

    rank: int
    device: int
    stream: int
    launches: int
    """Launches with a matching GPU op on this stream."""
    times: tuple[float, ...]
    """When the depth changes (µs), increasing; at equal times only the last value is kept."""
    depths: tuple[int, ...]
    """The depth from ``times[i]`` on (0 before the first)."""
    max_depth: int
    """HTA's max: over every +1/-1 event, a launch counted before a start at the same time."""
    mean_depth: float
    """HTA's mean: over every +1/-1 event (not weighted by time)."""
    cap: int
    time_at_cap: float
    """µs with depth >= ``cap``."""
    span: float
    """µs covered by the trace the series comes from (for shares)."""
    launch_times: tuple[float, ...] = ()
    """When each counted launch was made (µs), increasing: the +1 steps."""
    start_times: tuple[float, ...] = ()
    """When each launched GPU op started (µs), increasing: the -1 steps."""

    @property
    def points(self) -> tuple[tuple[float, int], ...]:
        """``(time, depth from then on)`` pairs."""
        return tuple(zip(self.times, self.depths, strict=True))

    @property
    def share_at_cap(self) -> float:
        """Share of the trace spent at the cap."""
        return self.time_at_cap / self.span if self.span > 0 else 0.0

    def depth_at(self, t: float) -> int:
        """The depth at time ``t`` (after every change at ``t``)."""
        i = bisect_right(self.times, t) - 1
        return self.depths[i] if i >= 0 else 0

    def max_between(self, t0: float, t1: float) -> int:
        """The highest depth of the step function within ``[t0, t1]``."""
        lo = bisect_right(self.times, t0)
        hi = bisect_right(self.times, t1)
        top = self.depth_at(t0)
        if hi > lo:
            top = max(top, _range_max(self._table, lo, hi))
        return top

    def time_at_or_above(self, level: int) -> float:
        """µs the depth stays at or above ``level``."""
        t, d = self.times, self.depths
        return sum(t[i + 1] - t[i] for i in range(len(t) - 1) if d[i] >= level)

    def launched_by(self, t: float) -> int:
        """Launches made at or before ``t`` (the L of ``Q = L - S``)."""
        return bisect_right(self.launch_times, t)

    def started_by(self, t: float) -> int:
        """Launched GPU ops started at or before ``t`` (the S of ``Q = L - S``)."""
        return bisect_right(self.start_times, t)

    def time_at_cap_between(self, t0: float, t1: float) -> float:
        """µs within ``[t0, t1]`` with the depth at or above the cap (a launch would block)."""
        return self._at_cap.covered(t0, t1)

    @cached_property
    def _at_cap(self) -> Intervals:
        t, d = self.times, self.depths
        return Intervals.union((t[i], t[i + 1]) for i in range(len(t) - 1) if d[i] >= self.cap)

    @cached_property
    def _table(self) -> list[list[int]]:
        return _sparse_table(self.depths)


def queue_series(
    events: Iterable[Event], rank: int = 0, cap: int = QUEUE_CAP, trace_span: float | None = None
) -> dict[tuple[int, int], QueueSeries]:
    """Queue depth per ``(device, stream)`` of one rank's events, sorted by key.

    Args:
        events: the rank's events (launches and GPU ops are picked out).
        rank: the rank, recorded in each series.
        cap: the launch queue limit for :attr:`QueueSeries.time_at_cap`.
        trace_span: µs the trace covers; by default first start to last end of ``events``.
    """
    events = list(events)
    launches: dict[int, Event] = {}
    for e in events:
        if e.correlation is not None and e.is_launch:
            launches.setdefault(e.correlation, e)
    steps: dict[tuple[int, int], list[tuple[float, int]]] = defaultdict(list)
    for g in events:
        # HTA's semi-join: both ends present (a GPU op has a device with its stream)
        if g.stream is not None and g.device is not None and g.correlation in launches:
            key = (g.device, g.stream)
            steps[key].append((launches[g.correlation].ts, -1))  # (ts, -delta): a launch sorts first
            steps[key].append((g.ts, 1))
    if trace_span is None:
        first, last = span(events)
        trace_span = last - first
    return {key: _series(rank, key, sorted(rows), cap, trace_span) for key, rows in sorted(steps.items())}


def _series(
    rank: int, key: tuple[int, int], rows: list[tuple[float, int]], cap: int, trace_span: float
) -> QueueSeries:
    times: list[float] = []
    depths: list[int] = []
    depth = top = total = 0
    for ts, minus_delta in rows:
        depth -= minus_delta
        total += depth
        if depth > top:
            top = depth
        if times and times[-1] == ts:
            depths[-1] = depth
        else:
            times.append(ts)
            depths.append(depth)
    at_cap = sum(times[i + 1] - times[i] for i in range(len(times) - 1) if depths[i] >= cap)
    launch_times = tuple(ts for ts, minus_delta in rows if minus_delta < 0)
    start_times = tuple(ts for ts, minus_delta in rows if minus_delta > 0)
    return QueueSeries(
        rank,
        key[0],
        key[1],
        len(rows) // 2,
        tuple(times),
        tuple(depths),
        top,
        total / len(rows),
        cap,
        at_cap,
        trace_span,
        launch_times,
        start_times,
    )


def _sparse_table(values: tuple[int, ...]) -> list[list[int]]:
    """``table[j][i]`` is the max of ``values[i : i + 2**j]``."""
    table = [list(values)]
    step = 1
    while 2 * step <= len(values):
        prev = table[-1]
        table.append(list(map(max, prev[: len(prev) - step], prev[step:])))
        step *= 2
    return table


def _range_max(table: list[list[int]], lo: int, hi: int) -> int:
    """Max of ``values[lo:hi]`` (``hi > lo``) in two lookups."""
    j = (hi - lo).bit_length() - 1
    return max(table[j][lo], table[j][hi - (1 << j)])
