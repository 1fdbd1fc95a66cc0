"""Busy lanes on the device side: when each stream and each device had GPU work, and their overlap."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from torchpar_top.analysis.events import Event
from torchpar_top.analysis.intervals import Intervals, at_least
from torchpar_top.analysis.queue import QueueSeries


@dataclass(frozen=True)
class StreamLane:
    """One GPU stream of one rank: when it ran work, and its launch queue."""

    rank: int
    device: int
    stream: int
    busy: Intervals
    """Union of its GPU ops (kernels, memcpy, memset), all of them, launched or not."""
    queue: QueueSeries | None
    """Its launch queue; None when no launch in the trace pairs with an op on it."""

    @property
    def busy_seconds(self) -> float:
        """Seconds with work running on the stream."""
        return self.busy.total / 1e6


@dataclass(frozen=True)
class DeviceLane:
    """One GPU of one rank: when any of its streams ran work."""

    rank: int
    device: int
    active: Intervals
    """Union of its streams' busy intervals (kernels, memcpy and memset, as HTA's "kernel time")."""

    @property
    def active_seconds(self) -> float:
        """Seconds with at least one op running on the device."""
        return self.active.total / 1e6


@dataclass(frozen=True)
class Overlap:
    """Where a rank's lanes were busy at the same time."""

    streams: Intervals
    """Two or more streams busy at once."""
    devices: Intervals | None
    """Two or more devices busy at once; None when the rank has fewer than two devices."""


def stream_lanes(
    events: Iterable[Event], queues: dict[tuple[int, int], QueueSeries], rank: int = 0
) -> tuple[StreamLane, ...]:
    """Each stream's busy intervals and queue, sorted by ``(device, stream)``.

    Args:
        events: one rank's events (GPU ops are picked out).
        queues: the rank's queue series by ``(device, stream)`` (:func:`~.queue.queue_series`).
        rank: the rank, recorded in each lane.
    """
    ops: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e.stream is not None and e.device is not None:  # a GPU op has both
            ops[(e.device, e.stream)].append((e.ts, e.ts + e.dur))
    keys = sorted(set(ops) | set(queues))
    return tuple(
        StreamLane(rank, d, s, Intervals.union(ops.get((d, s), ())), queues.get((d, s))) for d, s in keys
    )


def device_lanes(streams: Iterable[StreamLane]) -> tuple[DeviceLane, ...]:
    """Each device's active intervals (the union of its streams'), sorted by device."""
    by_device: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for lane in streams:
        by_device[(lane.rank, lane.device)].extend(lane.busy.pairs())
    return tuple(DeviceLane(r, d, Intervals.union(p)) for (r, d), p in sorted(by_device.items()))


def overlap(streams: Iterable[StreamLane], devices: Iterable[DeviceLane]) -> Overlap:
    """Where two or more streams, and two or more devices, of one rank were busy together."""
    active = [d.active for d in devices]
    return Overlap(at_least(2, [s.busy for s in streams]), at_least(2, active) if len(active) > 1 else None)
