"""Figures derived from measurements, each defined once: the lanes' percentages, the queues summed, the
mean core load, the primary rank, the scoreboard's modes together.

Pure functions of snapshot pieces. :func:`torchpar_top.model.snapshot.build` calls them and carries what
they return in the :class:`~torchpar_top.contract.snapshot.Snapshot`; the screen, headless mode, the
metrics, the verdict and the export read the carried figure and never compute it again. (Verdicts and
notes: :mod:`.derive`; thread groups: :mod:`.threads`; stack waits: :mod:`.stacks`.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from torchpar_top.contract.snapshot import (
    ExecutorView,
    LaneShare,
    LanesView,
    ModeStats,
    QueueDepth,
    RankView,
    SteadyStats,
    SyncSite,
)
from torchpar_top.contract.vocab import ChildState, ExecutorKind, Mode

#: How far back the lanes reach, in seconds of sampling (frames × interval in a replayed trace).
LANES_SECONDS = 5.0
#: Windows a history is read over when the interval is unknown (0).
DEFAULT_WINDOWS = 50

T = TypeVar("T")


class _Valued(Protocol):
    @property
    def value(self) -> int: ...


def windows(interval: float, seconds: float = LANES_SECONDS) -> int:
    """How many values of a history, one per ``interval``, cover the last ``seconds`` (at least one)."""
    return max(1, round(seconds / interval)) if interval > 0 else DEFAULT_WINDOWS


def window(values: Sequence[T], interval: float, seconds: float = LANES_SECONDS) -> Sequence[T]:
    """The values of the last ``seconds`` of a history with one value per ``interval``."""
    return values[-windows(interval, seconds) :]


def mean(values: Sequence[float]) -> float | None:
    """The mean, or ``None`` for no values."""
    return sum(values) / len(values) if values else None


def _recent(values: Sequence[float], n: int) -> float | None:
    return mean(values[-n:])


def lanes(
    executors: Sequence[ExecutorView],
    frontend_busy: Sequence[float],
    frontend_wait: Sequence[float],
    frontend_core_wait: Sequence[float],
    overlap: Sequence[float],
    overlap_high: Sequence[float],
    overlap_in_progress: Sequence[float],
    interval: float,
) -> LanesView:
    """Each lane's means over the last :data:`LANES_SECONDS`: what the lanes panel's right column and
    overlap line show (``run 61% waits 37%``, ``busy 40%``, ``overlap on cores 18–29%``)."""
    n = windows(interval)
    frontend = LaneShare(
        "frontend",
        busy=_recent(frontend_busy, n),
        core_wait=_recent(frontend_core_wait, n) if frontend_core_wait else None,
        wait=_recent(frontend_wait, n),
    )
    rows = tuple(
        LaneShare(
            e.name,
            e.rank,
            busy=_recent(e.busy, n),
            running=_recent(e.running, n) if e.running else None,
            core_wait=_recent(e.core_wait, n) if e.running else None,
        )
        for e in executors
    )
    return LanesView(
        n,
        frontend,
        rows,
        _recent(overlap, n),
        _recent(overlap_high, n),
        _recent(overlap_in_progress, n),
    )


def sync_order(site: SyncSite) -> tuple[float, int, int, str, str]:
    """The order sync sites are listed in: the highest rate first, then the highest count (then rank,
    line and call, for a stable order)."""
    return (-site.per_second, -site.count, site.rank or 0, site.where, site.call)


def total_depth(rows: Iterable[_Valued]) -> int:
    """Queue values summed (executor rows of a sample, or views): a rank's depth, the header's total."""
    return sum(r.value for r in rows)


def queue_depth(executors: Sequence[ExecutorView]) -> QueueDepth | None:
    """Every queue summed over every capacity (``None``: one is unbounded; an eager CPU, always at 0,
    has none); ``None`` without executors."""
    if not executors:
        return None
    caps = [e.capacity for e in executors if e.kind != ExecutorKind.EAGER]  # synchronous: no queue
    capacity = None if any(c is None for c in caps) else sum(c for c in caps if c is not None)
    return QueueDepth(total_depth(executors), capacity)


def core_load(cores: Sequence[float]) -> float | None:
    """Mean load over the cores, percent; ``None`` without a reading."""
    return mean(cores)


def primary_rank(ranks: Iterable[int | None]) -> int | None:
    """The rank whose frontend, lanes and scoreboard are shown: the lowest rank number; ``None`` for a
    single workload (no rank numbers)."""
    return min((r for r in ranks if r is not None), default=None)


def ranks_running(ranks: Sequence[RankView]) -> int:
    """How many agent processes (the workload, or torchrun ranks) run now."""
    return sum(r.state == ChildState.RUNNING for r in ranks)


def steady(scoreboard: Sequence[ModeStats]) -> SteadyStats | None:
    """The scoreboard's modes together, weighted by their seconds; ``None`` before any steady window."""
    board = [m for m in scoreboard if m.seconds > 0]
    seconds = sum(m.seconds for m in board)
    if not seconds:
        return None

    def weighted(values: list[tuple[float | None, float]]) -> float | None:
        known = [(v, s) for v, s in values if v is not None]
        weight = sum(s for _, s in known)
        return sum(v * s for v, s in known) / weight if weight else None

    done = sum(m.throughput * m.seconds for m in board if m.throughput)
    return SteadyStats(
        seconds=seconds,
        done=done,
        throughput=weighted([(m.throughput, m.seconds) for m in board]),
        mean_depth=weighted([(m.mean_depth, m.seconds) for m in board]),
        frontend_wait=weighted([(m.frontend_wait, m.seconds) for m in board]),
    )


def ratio(scoreboard: Sequence[ModeStats]) -> float | None:
    """ASYNC throughput / SYNC throughput, when both were measured (the scoreboard's ``async / sync``)."""
    by_mode = {m.mode: m for m in scoreboard}
    a, s = by_mode.get(Mode.ASYNC), by_mode.get(Mode.SYNC)
    if a and s and a.throughput and s.throughput:
        return a.throughput / s.throughput
    return None
