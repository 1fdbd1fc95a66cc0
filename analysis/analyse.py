"""A whole trace analysed once: per rank its streams, devices, overlap and frontend lanes.

``analyse_path("trace.json.gz")`` loads and analyses; :meth:`Analysis.window` then answers, per frame of
a replay, what happened between two trace times.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from torchpar_top.analysis.events import span
from torchpar_top.analysis.frontend import FrontendLane, SyncTotal, frontend_lanes, sync_sites
from torchpar_top.analysis.lanes import DeviceLane, Overlap, StreamLane, device_lanes, overlap, stream_lanes
from torchpar_top.analysis.loading import RankTrace, Trace, load_trace
from torchpar_top.analysis.queue import queue_series
from torchpar_top.analysis.window import Window, window
from torchpar_top.contract.vocab import QUEUE_CAP


@dataclass(frozen=True)
class RankAnalysis:
    """One rank's trace analysed."""

    rank: int
    path: str
    start: float
    """First event's start (µs, trace clock)."""
    end: float
    """Last event's end (µs, trace clock)."""
    streams: tuple[StreamLane, ...]
    """Sorted by ``(device, stream)``."""
    devices: tuple[DeviceLane, ...]
    overlap: Overlap
    frontend: tuple[FrontendLane, ...]
    """The thread with most launches first."""

    @property
    def duration(self) -> float:
        """µs from the first event's start to the last one's end."""
        return self.end - self.start

    @property
    def has_gpu(self) -> bool:
        """Whether any GPU op (kernel, memcpy, memset) is in this rank's trace."""
        return bool(self.streams)

    def sync_sites(self) -> list[SyncTotal]:
        """Sync points of all its threads grouped by ``(site, call)``, the most time first."""
        return sync_sites(self.frontend)


@dataclass(frozen=True)
class Analysis:
    """A trace analysed: one :class:`RankAnalysis` per rank, sorted by rank."""

    path: str
    ranks: tuple[RankAnalysis, ...]
    cap: int = QUEUE_CAP

    @property
    def has_gpu(self) -> bool:
        """Whether any rank ran GPU ops; a CPU-only trace has no streams, queues or devices."""
        return any(r.has_gpu for r in self.ranks)

    @property
    def start(self) -> float:
        """Earliest start over the ranks (µs)."""
        return min(r.start for r in self.ranks)

    @property
    def end(self) -> float:
        """Latest end over the ranks (µs)."""
        return max(r.end for r in self.ranks)

    def streams(self) -> list[StreamLane]:
        """Every rank's stream lanes, by ``(rank, device, stream)``."""
        return [s for r in self.ranks for s in r.streams]

    def window(self, t0: float, t1: float) -> Window:
        """What happened within ``[t0, t1]`` (trace µs): depths, busy shares, overlap, syncs."""
        return window(self, t0, t1)


def analyse_rank(trace: RankTrace, cap: int = QUEUE_CAP) -> RankAnalysis:
    """Analyse one rank's events."""
    start, end = span(trace.events)
    queues = queue_series(trace.events, trace.rank, cap, end - start)
    streams = stream_lanes(trace.events, queues, trace.rank)
    devices = device_lanes(streams)
    return RankAnalysis(
        trace.rank,
        trace.path,
        start,
        end,
        streams,
        devices,
        overlap(streams, devices),
        frontend_lanes(trace.events, trace.rank),
    )


def analyse(trace: Trace, cap: int = QUEUE_CAP) -> Analysis:
    """Analyse every rank of a loaded trace."""
    return Analysis(trace.path, tuple(analyse_rank(r, cap) for r in trace.ranks), cap)


def analyse_path(path: str | os.PathLike[str], cap: int = QUEUE_CAP) -> Analysis:
    """Load a trace file or folder and analyse it; raises :class:`~.loading.TraceError`."""
    return analyse(load_trace(path), cap)
