"""Profiler traces analysed: launch queue depth (HTA's definition), busy lanes, overlap, sync points.

The ground floor of torchpar-top: pure standard library, imports nothing else from the package, so that
the session, the probes and the TUI can all build on it. Start with :func:`analyse_path`::

    from torchpar_top.analysis import analyse_path, summary
    a = analyse_path("rank-0.json.gz")          # or a folder of rank-N.json.gz
    summary(a)                                  # one JSON-able dict
    a.window(a.start, a.start + 10_000)         # one replay frame: the first 10 ms

Times are trace microseconds unless a name says seconds.
"""

from torchpar_top.analysis.analyse import Analysis, RankAnalysis, analyse, analyse_path, analyse_rank
from torchpar_top.analysis.events import (
    GPU_CATS,
    LAUNCH_NAMES,
    OP_CATS,
    SYNC_NAMES,
    Event,
    events_from_chrome,
)
from torchpar_top.analysis.frontend import (
    NO_OP,
    FrontendLane,
    SyncPoint,
    SyncTotal,
    frontend_lanes,
    sync_sites,
)
from torchpar_top.analysis.intervals import Intervals, at_least
from torchpar_top.analysis.lanes import DeviceLane, Overlap, StreamLane, device_lanes, overlap, stream_lanes
from torchpar_top.analysis.loading import RankTrace, Trace, TraceError, load_rank, load_trace
from torchpar_top.analysis.queue import QueueSeries, queue_series
from torchpar_top.analysis.summary import NO_GPU_NOTE, summary
from torchpar_top.analysis.window import (
    DeviceWindow,
    FrontendWindow,
    RankWindow,
    StreamWindow,
    Window,
    window,
)
from torchpar_top.contract.vocab import QUEUE_CAP

__all__ = [
    "GPU_CATS",
    "LAUNCH_NAMES",
    "NO_GPU_NOTE",
    "NO_OP",
    "OP_CATS",
    "QUEUE_CAP",
    "SYNC_NAMES",
    "Analysis",
    "DeviceLane",
    "DeviceWindow",
    "Event",
    "FrontendLane",
    "FrontendWindow",
    "Intervals",
    "Overlap",
    "QueueSeries",
    "RankAnalysis",
    "RankTrace",
    "RankWindow",
    "StreamLane",
    "StreamWindow",
    "SyncPoint",
    "SyncTotal",
    "Trace",
    "TraceError",
    "Window",
    "analyse",
    "analyse_path",
    "analyse_rank",
    "at_least",
    "device_lanes",
    "events_from_chrome",
    "frontend_lanes",
    "load_rank",
    "load_trace",
    "overlap",
    "queue_series",
    "stream_lanes",
    "summary",
    "sync_sites",
    "window",
]
