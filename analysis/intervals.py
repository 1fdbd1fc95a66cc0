"""Sets of time intervals: merged, with prefix sums, so that busy time in any window is two bisects."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Intervals:
    """Disjoint, sorted intervals ``[starts[i], ends[i])``; ``before[i]`` is the time covered before
    ``starts[i]``. Build with :meth:`union`."""

    starts: tuple[float, ...] = ()
    ends: tuple[float, ...] = ()
    before: tuple[float, ...] = ()

    @classmethod
    def union(cls, pairs: Iterable[tuple[float, float]]) -> Intervals:
        """The union of ``(start, end)`` pairs; touching intervals merge, empty ones vanish."""
        starts: list[float] = []
        ends: list[float] = []
        for start, end in sorted(pairs):
            if end <= start:
                continue
            if ends and start <= ends[-1]:
                if end > ends[-1]:
                    ends[-1] = end
            else:
                starts.append(start)
                ends.append(end)
        return cls._of(starts, ends)

    @classmethod
    def _of(cls, starts: list[float], ends: list[float]) -> Intervals:
        before, covered = [], 0.0
        for s, e in zip(starts, ends, strict=True):
            before.append(covered)
            covered += e - s
        return cls(tuple(starts), tuple(ends), tuple(before))

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def total(self) -> float:
        """Time covered."""
        return self.before[-1] + self.ends[-1] - self.starts[-1] if self.starts else 0.0

    def covered_until(self, t: float) -> float:
        """Time covered before ``t``."""
        i = bisect_right(self.starts, t) - 1
        if i < 0:
            return 0.0
        return self.before[i] + min(t, self.ends[i]) - self.starts[i]

    def covered(self, t0: float, t1: float) -> float:
        """Time covered within ``[t0, t1]``."""
        return self.covered_until(t1) - self.covered_until(t0) if t1 > t0 else 0.0

    def pairs(self) -> list[tuple[float, float]]:
        """The intervals as ``(start, end)`` pairs."""
        return list(zip(self.starts, self.ends, strict=True))


def at_least(k: int, lanes: Sequence[Intervals]) -> Intervals:
    """Where ``k`` or more of the lanes are covered at once (an exact sweep over their edges).

    Args:
        k: how many lanes must be covered together (2 for "overlap").
        lanes: each lane's intervals (disjoint within a lane, as :meth:`Intervals.union` makes them).
    """
    edges: list[tuple[float, int]] = []
    for lane in lanes:
        edges.extend((s, 1) for s in lane.starts)
        edges.extend((e, -1) for e in lane.ends)
    edges.sort()  # at equal times an end (-1) comes before a start: touching lanes do not overlap
    starts: list[float] = []
    ends: list[float] = []
    count = 0
    for t, delta in edges:
        was = count
        count += delta
        if was < k <= count:
            if ends and ends[-1] == t:  # continues the previous interval
                ends.pop()
            else:
                starts.append(t)
        elif count < k <= was:
            if t > starts[-1]:
                ends.append(t)
            else:
                starts.pop()
    return Intervals._of(starts, ends)
