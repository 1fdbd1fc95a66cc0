"""Queue depth from profiler traces, HTA's way, on known schedules; and a real CPU profiler window."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torchpar_top.probes.agent import hta
from torchpar_top.probes.agent.cuda import profile_queue


def _launch(name: str, ts: float, corr: int) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "ts": ts,
        "dur": 4,
        "pid": 1,
        "tid": 1,
        "args": {"correlation": corr, "cbid": 211},
    }


def _gpu(ts: float, dur: float, corr: int, stream: int = 7, device: int = 0, cat: str = "kernel") -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": "void gemm_kernel<...>",
        "ts": ts,
        "dur": dur,
        "pid": device,
        "tid": stream,
        "args": {"correlation": corr, "stream": stream, "device": device},
    }


def test_depth_over_time_per_stream() -> None:
    """Three launches at 0, 1, 2 µs; their kernels start at 10, 20, 30 µs (10 µs each)."""
    trace = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
            *(_launch("cudaLaunchKernel", t, 100 + t) for t in (0, 1, 2)),
            *(_gpu(10 * (i + 1), 10, 100 + i) for i in range(3)),
        ]
    }
    series = hta.queue_depth(hta.from_chrome_trace(trace))
    ((key, s),) = series.items()
    assert key == (0, 7)
    assert s.points == ((0, 1), (1, 2), (2, 3), (10, 2), (20, 1), (30, 0))
    assert s.max_depth == 3
    assert s.span == 40  # first event at 0, last ends at 30 + 10
    assert s.time_at_cap == 0


def test_time_at_cap_and_relative_share() -> None:
    events = [_launch("cudaLaunchKernel", t, t) for t in range(4)]
    events += [_gpu(20 + 5 * i, 5, i) for i in range(4)]
    s = hta.queue_depth(hta.from_chrome_trace(events), cap=3)[(0, 7)]
    # depth reaches 3 at t=2 and 4 at t=3, drops to 3 at 20 and to 2 at 25: at or above the cap 2..25
    assert s.time_at_cap == 23
    assert s.share_at_cap == pytest.approx(23 / 40)
    assert hta.summary({(0, 7): s}, cap=3) == [
        "cuda:0 stream 7: max depth 4, at the 3 cap 0.0 ms (57% of 0 ms)"
    ]


def test_streams_devices_memcpy_and_unmatched_events() -> None:
    events = [
        _launch("cudaLaunchKernel", 0, 1),
        _gpu(5, 1, 1, stream=7),
        _launch("cudaMemcpyAsync", 1, 2),
        _gpu(6, 1, 2, stream=13, cat="gpu_memcpy"),
        _launch("cudaLaunchKernel", 2, 3),
        _gpu(7, 1, 3, stream=7, device=1),
        _launch("cudaLaunchKernel", 3, 4),  # its kernel is not in the trace: ignored (HTA's semi-join)
        _gpu(8, 1, 99, stream=7),  # a GPU event without a launch: ignored
        _launch("cudaStreamSynchronize", 4, 5),  # not a launch
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "step",
            "ts": 0,
            "dur": 9,
            "args": {"stream": 7, "correlation": 1},
        },
    ]
    series = hta.queue_depth(hta.from_chrome_trace(events))
    assert sorted(series) == [(0, 7), (0, 13), (1, 7)]
    assert series[(0, 7)].points == ((0, 1), (5, 0))
    assert series[(0, 13)].points == ((1, 1), (6, 0))
    assert series[(1, 7)].max_depth == 1


def test_launch_and_start_at_the_same_time() -> None:
    events = [_launch("cudaLaunchKernel", 5, 1), _gpu(5, 1, 1)]
    assert hta.queue_depth(hta.from_chrome_trace(events))[(0, 7)].points == ((5, 0),)


def test_empty_and_cpu_only_traces() -> None:
    assert hta.queue_depth([]) == {}
    assert hta.queue_depth(hta.from_chrome_trace({"traceEvents": [_launch("aten::mm", 0, 1)]})) == {}


def test_kineto_events_adapter() -> None:
    def ev(name: str, ts_ns: int, corr: int, device_type: str, device: int = -1, resource: int = 0):
        return SimpleNamespace(
            name=lambda: name,
            start_ns=lambda: ts_ns,
            duration_ns=lambda: 1000,
            correlation_id=lambda: corr,
            device_type=lambda: f"DeviceType.{device_type}",
            device_index=lambda: device,
            device_resource_id=lambda: resource,
        )

    events = hta.from_kineto_events(
        [
            ev("cudaLaunchKernel", 0, 5, "CPU"),
            ev("gemm", 3000, 5, "CUDA", device=1, resource=7),
        ]
    )
    assert hta.queue_depth(events)[(1, 7)].points == ((0.0, 1), (3.0, 0))


def test_profile_window_runs_for_real_on_cpu() -> None:
    """The profiler plumbing (start, stop, export, parse) on this machine; no CUDA events here."""
    stop = threading.Event()

    def work() -> None:
        a = torch.randn(64, 64)
        while not stop.is_set():
            torch.mm(a, a)

    worker = threading.Thread(target=work)
    worker.start()
    try:
        assert profile_queue(0.05, cuda=False)[:3] == ([], 0, None)
    finally:
        stop.set()
        worker.join()


# -- reading a window's trace in a process of its own ---------------------------------------------

TRACE = Path(__file__).resolve().parents[1] / "data" / "hta" / "a100_alexnet_2_streams.json.gz"


def test_a_windows_trace_is_read_in_a_process_of_its_own_with_the_same_result():
    from torchpar_top.probes.agent import cuda

    apart = cuda.analyse_apart(str(TRACE))
    lines, launches = hta.analyse_file(str(TRACE))
    assert apart[:3] == (lines, launches, None)
    assert launches > 0 and len(lines) == 2 and lines[0].startswith("cuda:0 stream ")


def test_the_reading_process_imports_no_torch():
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "torchpar_top.probes.agent.hta", str(TRACE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "torchpar_top.analysis" in imported and "torch" not in imported
    assert json.loads(done.stdout)["launches"] == hta.analyse_file(str(TRACE))[1]


def test_without_a_process_of_its_own_the_trace_is_read_here_and_the_result_says_why(monkeypatch):
    from torchpar_top.probes.agent import cuda

    def broken(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 1, "", "ModuleNotFoundError: No module named 'torchpar_top'")

    monkeypatch.setattr(cuda.subprocess, "run", broken)
    window = cuda.analyse_apart(str(TRACE))
    assert (window.lines, window.launches) == hta.analyse_file(str(TRACE))
    assert window.in_process == "ModuleNotFoundError: No module named 'torchpar_top'"

    def gone(cmd, **kw):
        raise FileNotFoundError(2, "No such file or directory", cmd[0])

    monkeypatch.setattr(cuda.subprocess, "run", gone)
    assert cuda.analyse_apart(str(TRACE)).in_process.startswith("FileNotFoundError")


def test_a_reading_that_hangs_is_cut_off_and_reported(monkeypatch):
    from torchpar_top.probes.agent import cuda

    def slow(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(cuda.subprocess, "run", slow)
    with pytest.raises(RuntimeError, match="reading the trace took over 7 s"):
        cuda.analyse_apart(str(TRACE), timeout=7)
