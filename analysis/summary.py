"""One JSON-able summary of an analysed trace (what ``torchpar-top replay PATH --summary`` prints)."""

from __future__ import annotations

from typing import Any

from torchpar_top.analysis.analyse import Analysis, RankAnalysis
from torchpar_top.analysis.lanes import StreamLane

#: What the summary says about a trace without GPU ops.
NO_GPU_NOTE = "no GPU activity in this trace (no kernel, memcpy or memset events): no queues or lanes to show"
#: Why a trace can hold launch calls and no GPU op: seen on an H100 (torch 2.11, CUDA 13.0's CUPTI) in
#: the second of two profiler windows of one process, 2 times in 3; the same loop profiled alone kept
#: every kernel. Not explained; the window's queue cannot be measured from such a trace.
LOST_GPU_RECORDS = "the profiler lost its GPU records (profile again)"
#: How many sync sites a rank lists.
TOP_SYNC_SITES = 10


def summary(analysis: Analysis, top: int = TOP_SYNC_SITES) -> dict[str, Any]:
    """The analysis as one dict of plain JSON types (times in seconds, shares from 0 to 1).

    Returns:
        ``{"trace", "gpu_activity", "note", "cap", "streams": [...], "ranks": [...]}``. Per (rank,
        stream): device, launches, max_depth, mean_depth (HTA's), seconds_at_cap, busy_seconds. Per
        rank: duration, overlap (streams, devices), devices with their kernel-active share, frontend
        threads and the top sync sites.
    """
    return {
        "trace": analysis.path,
        "gpu_activity": analysis.has_gpu,
        "note": None if analysis.has_gpu else _no_gpu_note(analysis),
        "cap": analysis.cap,
        "streams": [_stream(s) for s in analysis.streams()],
        "ranks": [_rank(r, top) for r in analysis.ranks],
    }


def _no_gpu_note(analysis: Analysis) -> str:
    """Why the trace has no queues: no GPU work, or launches whose GPU ops the profiler lost."""
    launches = sum(f.launches for r in analysis.ranks for f in r.frontend)
    if not launches:
        return NO_GPU_NOTE
    return (
        f"no GPU activity in this trace although its threads made {launches} launch calls: {LOST_GPU_RECORDS}"
    )


def _stream(s: StreamLane) -> dict[str, Any]:
    q = s.queue
    return {
        "rank": s.rank,
        "device": s.device,
        "stream": s.stream,
        "launches": q.launches if q else 0,
        "max_depth": q.max_depth if q else 0,
        "mean_depth": q.mean_depth if q else 0.0,
        "seconds_at_cap": q.time_at_cap / 1e6 if q else 0.0,
        "busy_seconds": s.busy_seconds,
    }


def _rank(r: RankAnalysis, top: int) -> dict[str, Any]:
    duration = r.duration

    def share(us: float) -> float:
        return us / duration if duration > 0 else 0.0

    devices = r.overlap.devices
    return {
        "rank": r.rank,
        "path": r.path,
        "duration": duration / 1e6,
        "overlap": {
            "streams": share(r.overlap.streams.total),
            "devices": share(devices.total) if devices is not None else None,
        },
        "devices": [
            {"device": d.device, "kernel_active": share(d.active.total), "active_seconds": d.active_seconds}
            for d in r.devices
        ],
        "frontend": [
            {
                "pid": _plain(f.pid),
                "tid": _plain(f.tid),
                "launches": f.launches,
                "busy_seconds": f.busy_seconds,
                "sync_seconds": f.sync_seconds,
                "sync_points": len(f.sync_points),
            }
            for f in r.frontend
        ],
        "sync_points": [
            {"site": s.site, "call": s.call, "count": s.count, "seconds": s.seconds}
            for s in r.sync_sites()[:top]
        ],
    }


def _plain(value: Any) -> Any:
    """A pid or tid as JSON has it: numbers and strings stay, anything else becomes a string."""
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else str(value)
