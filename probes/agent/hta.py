"""Exact launch-queue depth from a ``torch.profiler`` trace, computed as Holistic Trace Analysis does.

HTA (``hta/analyzers/trace_counters.py``): per CUDA stream, +1 at each runtime launch event
(``cudaLaunchKernel``, ``cudaMemcpyAsync``...) that has a correlated GPU event, -1 when that GPU event
(kernel, memcpy, memset) starts; the depth is the running sum in time order, a step function. This is
``Q = L - S`` of ARCHITECTURE.md. Time at the cap is the time the depth stays at or above 1024 (HTA's
``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM``), during which a further launch blocks. Pure functions; times are
microseconds as in the trace. Input: Chrome trace JSON (``prof.export_chrome_trace``) or kineto events.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

#: HTA's per-stream launch queue limit (an undocumented CUDA implementation detail: 1022-1024).
QUEUE_CAP = 1024

#: Runtime/driver calls that enqueue work on a stream (HTA's runtime launch mask, CUDA part).
LAUNCH_NAMES = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaMemcpyAsync", "cudaMemsetAsync",
})


@dataclass(frozen=True)
class TraceEvent:
    """One complete event of a trace: a runtime call on the host, or a GPU op when ``stream`` is set."""

    name: str
    ts: float
    dur: float = 0.0
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None


@dataclass(frozen=True)
class QueueSeries:
    """Queue depth of one stream over the trace."""

    device: int
    stream: int
    points: tuple[tuple[float, int], ...]
    """``(ts, depth from ts on)``, one point per change, time order."""
    max_depth: int
    time_at_cap: float
    """Microseconds with depth >= the cap."""
    duration: float
    """Microseconds covered by the whole trace (HTA's trace duration)."""

    @property
    def relative_at_cap(self) -> float:
        """Share of the trace spent at the cap."""
        return self.time_at_cap / self.duration if self.duration > 0 else 0.0


def from_chrome_trace(trace: dict[str, Any] | list[dict[str, Any]]) -> list[TraceEvent]:
    """Events of a Chrome trace (``{"traceEvents": [...]}`` or the list itself); only ``ph == "X"``."""
    raw = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    out = []
    for e in raw:
        if e.get("ph") != "X" or "ts" not in e:
            continue
        args = e.get("args") or {}
        stream = args.get("stream")
        gpu = isinstance(stream, int) and e.get("cat") != "gpu_user_annotation"
        out.append(TraceEvent(
            name=str(e.get("name", "")), ts=float(e["ts"]), dur=float(e.get("dur", 0.0)),
            correlation=args.get("correlation"),
            device=args.get("device") if gpu else None, stream=stream if gpu else None,
        ))
    return out


def from_kineto_events(events: Iterable[Any]) -> list[TraceEvent]:
    """Events of ``prof.profiler.kineto_results.events()``; GPU events carry the stream as resource id.

    Untested on hardware (no CUDA events on this machine); the Chrome trace path is the one to trust.
    """
    out = []
    for e in events:
        gpu = "CUDA" in str(e.device_type())
        out.append(TraceEvent(
            name=e.name(), ts=e.start_ns() / 1000.0, dur=e.duration_ns() / 1000.0,
            correlation=e.correlation_id() or None,
            device=e.device_index() if gpu else None, stream=e.device_resource_id() if gpu else None,
        ))
    return out


def queue_depth(events: Iterable[TraceEvent], cap: int = QUEUE_CAP) -> dict[tuple[int, int], QueueSeries]:
    """Queue depth per ``(device, stream)``: +1 at a runtime launch, -1 at its GPU op's start."""
    events = list(events)
    if not events:
        return {}
    launches = {e.correlation: e for e in events
                if e.stream is None and e.name in LAUNCH_NAMES and e.correlation is not None}
    steps: dict[tuple[int, int], list[tuple[float, int, int]]] = defaultdict(list)
    for g in events:
        if g.stream is not None and g.correlation in launches:  # HTA's semi-join: both ends present
            key = (g.device if g.device is not None else -1, g.stream)
            steps[key].append((launches[g.correlation].ts, 0, +1))  # at equal ts a launch sorts first
            steps[key].append((g.ts, 1, -1))
    start = min(e.ts for e in events)
    duration = max(e.ts + e.dur for e in events) - start
    return {key: _series(key, sorted(s), cap, duration) for key, s in sorted(steps.items())}


def _series(key: tuple[int, int], steps: list[tuple[float, int, int]], cap: int,
            duration: float) -> QueueSeries:
    points: list[tuple[float, int]] = []
    depth = 0
    for ts, _, delta in steps:
        depth += delta
        if points and points[-1][0] == ts:
            points[-1] = (ts, depth)
        else:
            points.append((ts, depth))
    at_cap = sum(b[0] - a[0] for a, b in zip(points, points[1:]) if a[1] >= cap)
    top = max((d for _, d in points), default=0)
    return QueueSeries(key[0], key[1], tuple(points), top, at_cap, duration)


def summary(series: dict[tuple[int, int], QueueSeries], cap: int = QUEUE_CAP) -> list[str]:
    """One line per stream, for the log pane."""
    return [
        f"cuda:{s.device} stream {s.stream}: max depth {s.max_depth}, at the {cap} cap "
        f"{s.time_at_cap / 1000:.1f} ms ({100 * s.relative_at_cap:.0f}% of {s.duration / 1000:.0f} ms)"
        for s in series.values()
    ]
