"""The windowed view for replaying a trace: what happened between two trace times, per frame.

Every figure is a bisect on sorted arrays (busy time from prefix sums, the window's highest depth from a
sparse table), so a frame costs O(lanes x log events) whatever the window's length. Shares are of the
window's length: time outside the trace counts as idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchpar_top.analysis.frontend import SyncPoint

if TYPE_CHECKING:
    from torchpar_top.analysis.analyse import Analysis


@dataclass(frozen=True)
class StreamWindow:
    """One stream within the window."""

    rank: int
    device: int
    stream: int
    depth: int
    """Queue depth at the window's end."""
    max_depth: int
    """Highest queue depth within the window."""
    busy: float
    """Share of the window with work running on the stream."""


@dataclass(frozen=True)
class DeviceWindow:
    """One device within the window."""

    rank: int
    device: int
    active: float
    """Share of the window with at least one op running on the device."""


@dataclass(frozen=True)
class FrontendWindow:
    """One frontend thread within the window."""

    rank: int
    pid: Any
    tid: Any
    busy: float
    """Share of the window inside CPU ops."""
    sync: float
    """Share of the window blocked in sync calls."""
    sync_points: tuple[SyncPoint, ...]
    """Sync points that start within ``[t0, t1)`` (consecutive windows never count one twice)."""


@dataclass(frozen=True)
class RankWindow:
    """One rank's overlap within the window."""

    rank: int
    streams_overlap: float
    """Share of the window with two or more streams busy."""
    devices_overlap: float | None
    """Share of the window with two or more devices busy; None with fewer than two devices."""


@dataclass(frozen=True)
class Window:
    """Everything the replay draws for one frame, ``[t0, t1]`` in trace µs."""

    t0: float
    t1: float
    ranks: tuple[RankWindow, ...]
    streams: tuple[StreamWindow, ...]
    devices: tuple[DeviceWindow, ...]
    frontend: tuple[FrontendWindow, ...]

    @property
    def sync_points(self) -> tuple[SyncPoint, ...]:
        """Every frontend thread's sync points in the window, in time order."""
        return tuple(sorted((p for f in self.frontend for p in f.sync_points), key=lambda p: p.ts))


def window(analysis: Analysis, t0: float, t1: float) -> Window:
    """The window ``[t0, t1]`` of an analysed trace.

    Args:
        analysis: the analysed trace.
        t0: the window's start, trace µs.
        t1: the window's end, trace µs; must be greater than ``t0``.

    Returns:
        Per stream, device, frontend thread and rank, the shares and depths of the window.
    """
    if not t1 > t0:
        raise ValueError(f"the window must end after it starts: [{t0}, {t1}]")
    length = t1 - t0
    ranks: list[RankWindow] = []
    streams: list[StreamWindow] = []
    devices: list[DeviceWindow] = []
    frontend: list[FrontendWindow] = []
    for r in analysis.ranks:
        devs = r.overlap.devices
        ranks.append(
            RankWindow(
                r.rank,
                r.overlap.streams.covered(t0, t1) / length,
                devs.covered(t0, t1) / length if devs is not None else None,
            )
        )
        for s in r.streams:
            q = s.queue
            streams.append(
                StreamWindow(
                    r.rank,
                    s.device,
                    s.stream,
                    q.depth_at(t1) if q else 0,
                    q.max_between(t0, t1) if q else 0,
                    s.busy.covered(t0, t1) / length,
                )
            )
        devices.extend(DeviceWindow(r.rank, d.device, d.active.covered(t0, t1) / length) for d in r.devices)
        frontend.extend(
            FrontendWindow(
                r.rank,
                f.pid,
                f.tid,
                f.ops.covered(t0, t1) / length,
                f.syncs.covered(t0, t1) / length,
                f.sync_points_between(t0, t1),
            )
            for f in r.frontend
        )
    return Window(t0, t1, tuple(ranks), tuple(streams), tuple(devices), tuple(frontend))
