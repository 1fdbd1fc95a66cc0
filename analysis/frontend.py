"""The frontend lane: the host threads that launch work, their time in ops, and their sync points.

A sync point is a host call that blocks until the device catches up (``cudaStreamSynchronize``,
a blocking ``cudaMemcpy``...: :data:`~.events.SYNC_NAMES`). Each is attributed to the innermost CPU op
or Python function on the same thread that contains it in time (``aten::item``, ``aten::nonzero``...).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from torchpar_top.analysis.events import OP_CATS, Event
from torchpar_top.analysis.intervals import Intervals

#: Slack for "contains" (µs): float rounding of nanosecond timestamps can push a child 1 ns past its parent.
CONTAINS_SLACK = 1e-3
#: Site of a sync call no op contains.
NO_OP = "(no enclosing op)"


@dataclass(frozen=True)
class SyncPoint:
    """One blocking call on the host."""

    rank: int
    pid: Any
    tid: Any
    call: str
    """The runtime call, e.g. ``cudaStreamSynchronize``."""
    ts: float
    dur: float
    site: str
    """The innermost CPU op or Python function around it, or :data:`NO_OP`."""


@dataclass(frozen=True)
class SyncTotal:
    """Sync points with the same site and call, counted and timed together."""

    site: str
    call: str
    count: int
    seconds: float


@dataclass(frozen=True)
class FrontendLane:
    """One host thread that launches device work or waits for it."""

    rank: int
    pid: Any
    tid: Any
    launches: int
    ops: Intervals
    """Union of its CPU ops (``cpu_op`` events)."""
    syncs: Intervals
    """Union of its sync calls: time blocked on the device."""
    sync_points: tuple[SyncPoint, ...]
    """Its sync points in time order."""

    @property
    def busy_seconds(self) -> float:
        """Seconds inside CPU ops (the time in syncs included)."""
        return self.ops.total / 1e6

    @property
    def sync_seconds(self) -> float:
        """Seconds blocked in sync calls."""
        return self.syncs.total / 1e6

    def sync_points_between(self, t0: float, t1: float) -> tuple[SyncPoint, ...]:
        """Its sync points that start within ``[t0, t1)``."""
        starts = self._starts
        return self.sync_points[bisect_left(starts, t0) : bisect_left(starts, t1)]

    @cached_property
    def _starts(self) -> list[float]:
        return [p.ts for p in self.sync_points]


def frontend_lanes(events: Iterable[Event], rank: int = 0) -> tuple[FrontendLane, ...]:
    """A lane per thread with launches or sync calls, the thread with most launches first."""
    threads: dict[tuple[Any, Any], list[Event]] = defaultdict(list)
    for e in events:
        if e.stream is None:
            threads[(e.pid, e.tid)].append(e)
    lanes = []
    for (pid, tid), evs in threads.items():
        launches = sum(1 for e in evs if e.is_launch)
        syncs = [e for e in evs if e.is_sync]
        if not launches and not syncs:
            continue
        points = tuple(sorted(_attribute(rank, pid, tid, evs, syncs), key=lambda p: p.ts))
        lanes.append(
            FrontendLane(
                rank,
                pid,
                tid,
                launches,
                Intervals.union((e.ts, e.ts + e.dur) for e in evs if e.cat == "cpu_op"),
                Intervals.union((s.ts, s.ts + s.dur) for s in syncs),
                points,
            )
        )
    lanes.sort(key=lambda lane: (-lane.launches, str(lane.pid), str(lane.tid)))
    return tuple(lanes)


def sync_sites(lanes: Iterable[FrontendLane]) -> list[SyncTotal]:
    """Sync points grouped by ``(site, call)``, the most time first."""
    count: dict[tuple[str, str], int] = defaultdict(int)
    time: dict[tuple[str, str], float] = defaultdict(float)
    for lane in lanes:
        for p in lane.sync_points:
            count[(p.site, p.call)] += 1
            time[(p.site, p.call)] += p.dur
    return sorted(
        (SyncTotal(s, c, count[(s, c)], time[(s, c)] / 1e6) for s, c in count),
        key=lambda x: (-x.seconds, -x.count, x.site, x.call),
    )


def _attribute(rank: int, pid: Any, tid: Any, events: list[Event], syncs: list[Event]) -> list[SyncPoint]:
    """Each sync call with the innermost op that contains it: one sweep with a stack of open ops."""
    if not syncs:
        return []
    items = [(e.ts, 0, -e.dur, e) for e in events if e.cat in OP_CATS]  # at equal start: outer op first
    items += [(s.ts, 1, -s.dur, s) for s in syncs]  # ...and ops before the call they may contain
    items.sort(key=lambda x: x[:3])
    stack: list[Event] = []
    points = []
    for ts, kind, _, e in items:
        while stack and stack[-1].ts + stack[-1].dur < ts:
            stack.pop()
        if kind == 0:
            stack.append(e)
            continue
        end = ts + e.dur
        site = next((op.name for op in reversed(stack) if op.ts + op.dur >= end - CONTAINS_SLACK), NO_OP)
        points.append(SyncPoint(rank, pid, tid, e.name, ts, e.dur, site))
    return points
