"""Exact launch-queue depth from a ``torch.profiler`` window, for the agent's ``h`` key.

The analysis itself (HTA's definition: +1 at a runtime launch, -1 when its GPU op starts; time at the
1024 cap) lives in :mod:`torchpar_top.analysis.queue`, the one implementation shared with ``torchpar-top
replay``. This module adapts the profiler's output to it and words the result for the log pane.
Times are microseconds as in the trace.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterable
from typing import Any

from torchpar_top.analysis import QUEUE_CAP, Event, QueueSeries, events_from_chrome, queue_series

__all__ = [
    "QUEUE_CAP",
    "Event",
    "QueueSeries",
    "analyse_file",
    "from_chrome_trace",
    "from_kineto_events",
    "main",
    "queue_depth",
    "summary",
]


def from_chrome_trace(trace: dict[str, Any] | list[dict[str, Any]]) -> list[Event]:
    """Events of a Chrome trace (``{"traceEvents": [...]}`` or the list itself); only ``ph == "X"``."""
    return list(events_from_chrome(trace))


def from_kineto_events(events: Iterable[Any]) -> list[Event]:
    """Events of ``prof.profiler.kineto_results.events()``; GPU events carry the stream as resource id.

    Untested on hardware (no CUDA events on this machine); the Chrome trace path is the one to trust.
    """
    out = []
    for e in events:
        gpu = "CUDA" in str(e.device_type())
        name = e.name()
        cat = (
            (
                "gpu_memcpy"
                if name.startswith("Memcpy")
                else "gpu_memset"
                if name.startswith("Memset")
                else "kernel"
            )
            if gpu
            else "cpu"
        )
        out.append(
            Event(
                name=name,
                cat=cat,
                ts=e.start_ns() / 1000.0,
                dur=e.duration_ns() / 1000.0,
                pid=None,
                tid=None,
                correlation=e.correlation_id() or None,
                device=e.device_index() if gpu else None,
                stream=e.device_resource_id() if gpu else None,
            )
        )
    return out


def queue_depth(events: Iterable[Event], cap: int = QUEUE_CAP) -> dict[tuple[int, int], QueueSeries]:
    """Queue depth per ``(device, stream)`` of one process's events (:func:`~.analysis.queue_series`)."""
    return queue_series(events, cap=cap)


def summary(series: dict[tuple[int, int], QueueSeries], cap: int = QUEUE_CAP) -> list[str]:
    """One line per stream, for the log pane."""
    return [
        f"cuda:{s.device} stream {s.stream}: max depth {s.max_depth}, at the {cap} cap "
        f"{s.time_at_cap / 1000:.1f} ms ({100 * s.share_at_cap:.0f}% of {s.span / 1000:.0f} ms)"
        for s in series.values()
    ]


def analyse_file(path: str, cap: int = QUEUE_CAP) -> tuple[list[str], int]:
    """A window's Chrome trace file (gzipped where the name ends in ``.gz``): :func:`summary`'s lines and
    the launch calls it holds."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        trace = json.load(f)
    events = from_chrome_trace(trace)
    return summary(queue_depth(events, cap), cap), sum(1 for e in events if e.is_launch)


def main(argv: list[str] | None = None) -> int:
    """``python -m torchpar_top.probes.agent.hta TRACE [CAP]``: one JSON line, ``{"lines": [...],
    "launches": N}``. The agent runs it in a process of its own, so that reading a window's trace (tens
    of MB of JSON on a GPU) does not hold the workload's GIL: no torch is imported here."""
    args = sys.argv[1:] if argv is None else argv
    if not args or len(args) > 2:
        print("usage: python -m torchpar_top.probes.agent.hta TRACE [CAP]", file=sys.stderr)
        return 2
    lines, launches = analyse_file(args[0], int(args[1]) if len(args) > 1 else QUEUE_CAP)
    print(json.dumps({"lines": lines, "launches": launches}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
