"""Queue depth does not depend on where a trace file puts a GPU op: a real H200 window whose first event
is a kernel (tests/data/h200/README.md) counts that kernel's launch, as every other."""

from __future__ import annotations

import gzip
import json
import os

from torchpar_top.analysis import load_trace
from torchpar_top.analysis.events import Event
from torchpar_top.analysis.queue import queue_series

TRACE = os.path.join(os.path.dirname(__file__), os.pardir, "data", "h200", "first_event_is_a_kernel.json.gz")


def test_the_launch_of_a_files_first_kernel_counts():
    with gzip.open(TRACE, "rt") as f:
        first = json.load(f)["traceEvents"][0]
    assert (first["cat"], first["args"]["correlation"], first["args"]["stream"]) == ("kernel", 94, 7)
    events = load_trace(TRACE).ranks[0].events
    launch = next(e for e in events if e.correlation == 94 and e.is_launch)
    q = queue_series(events)[(0, 7)]
    assert q.launches == sum(1 for e in events if e.stream == 7) == 7
    # the window's first launch: depth 1 from the call until its kernel starts (29.6 µs later), then 0
    assert q.launch_times[0] == launch.ts and q.start_times[0] == first["ts"]
    assert q.points[:2] == ((launch.ts, 1), (first["ts"], 0))
    assert (q.max_depth, q.mean_depth) == (1, 0.5)


def _launch(ts: float, corr: int) -> Event:
    return Event("cudaLaunchKernel", "cuda_runtime", ts, 3.0, 1, 1, corr)


def _kernel(ts: float, corr: int) -> Event:
    return Event("k", "kernel", ts, 5.0, 0, 7, corr, 0, 7)


def test_file_order_of_launches_and_gpu_ops_does_not_matter():
    kernels_first = [
        _kernel(10, 1),
        _launch(0, 1),
        _kernel(11, 2),
        _launch(1, 2),
        _launch(2, 3),
        _kernel(20, 3),
    ]
    launches_first = sorted(kernels_first, key=lambda e: (e.stream is not None, e.ts))
    a, b = queue_series(kernels_first)[(0, 7)], queue_series(launches_first)[(0, 7)]
    assert a == b
    assert (a.launches, a.max_depth, a.depths) == (3, 3, (1, 2, 3, 2, 1, 0))
