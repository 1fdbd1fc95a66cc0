"""The analysis of a hand-made trace whose answers are known, the windowed view, and the summary."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from torchpar_top.analysis import NO_OP, analyse, analyse_path, load_trace, summary
from torchpar_top.analysis.events import events_from_chrome
from torchpar_top.analysis.loading import RankTrace, Trace

DATA = Path(__file__).resolve().parents[1] / "data" / "hta"


def cpu(name, ts, dur, cat="cpu_op", corr=None, tid=1):
    args = {} if corr is None else {"correlation": corr}
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 100, "tid": tid, "args": args}


def gpu(ts, dur, corr, stream, device=0, cat="kernel"):
    return {
        "ph": "X",
        "cat": cat,
        "name": f"op{corr}",
        "ts": ts,
        "dur": dur,
        "pid": device,
        "tid": stream,
        "args": {"correlation": corr, "stream": stream, "device": device},
    }


#: One thread, one device, streams 7 and 13; every figure below is worked out by hand.
TINY = [
    cpu("aten::mm", 0, 10),
    cpu("cudaLaunchKernel", 2, 1, "cuda_runtime", corr=1),  # -> s7 [20, 50)
    cpu("aten::add", 10, 10),
    cpu("cudaLaunchKernel", 12, 1, "cuda_runtime", corr=2),  # -> s7 [50, 60), touching the first
    cpu("cudaMemcpyAsync", 14, 1, "cuda_runtime", corr=3),  # -> s13 [30, 70)
    gpu(20, 30, 1, 7),
    gpu(50, 10, 2, 7),
    gpu(30, 40, 3, 13, cat="gpu_memcpy"),
    cpu("aten::item", 40, 35),
    cpu("aten::_local_scalar_dense", 41, 33),
    cpu("cudaStreamSynchronize", 45, 25, "cuda_runtime", corr=4),
    cpu("cudaDeviceSynchronize", 80, 5, "cuda_runtime", corr=5),  # outside any op
]


def tiny(events=TINY, rank=0):
    return analyse(Trace("tiny", (RankTrace(rank, "tiny", tuple(events_from_chrome(events)), {}),)))


def test_queues_lanes_overlap_and_frontend_of_the_tiny_trace():
    a = tiny()
    (r,) = a.ranks
    assert (r.start, r.end, r.duration) == (0, 85, 85)
    s7, s13 = r.streams
    assert (s7.device, s7.stream, s13.stream) == (0, 7, 13)
    assert s7.queue.points == ((2, 1), (12, 2), (20, 1), (50, 0))
    assert (s7.queue.launches, s7.queue.max_depth, s7.queue.mean_depth) == (2, 2, 1.0)  # rows 1, 2, 1, 0
    assert s13.queue.points == ((14, 1), (30, 0)) and s13.queue.mean_depth == 0.5
    assert s7.busy.pairs() == [(20, 60)] and s13.busy.pairs() == [(30, 70)]
    (d,) = r.devices
    assert d.active.pairs() == [(20, 70)] and d.active_seconds == pytest.approx(50e-6)
    assert r.overlap.streams.pairs() == [(30, 60)] and r.overlap.devices is None
    (f,) = r.frontend
    assert (f.pid, f.tid, f.launches) == (100, 1, 3)
    assert f.ops.pairs() == [(0, 20), (40, 75)] and f.syncs.pairs() == [(45, 70), (80, 85)]
    assert [(p.call, p.site) for p in f.sync_points] == [
        ("cudaStreamSynchronize", "aten::_local_scalar_dense"),
        ("cudaDeviceSynchronize", NO_OP),
    ]


def test_windows_of_the_tiny_trace():
    a = tiny()
    w = a.window(10, 40)  # 30 µs
    s7, s13 = w.streams
    assert (s7.depth, s7.max_depth, s7.busy) == (1, 2, pytest.approx(20 / 30))
    assert (s13.depth, s13.max_depth, s13.busy) == (0, 1, pytest.approx(10 / 30))
    assert w.devices[0].active == pytest.approx(20 / 30)
    assert w.ranks[0].streams_overlap == pytest.approx(10 / 30) and w.ranks[0].devices_overlap is None
    (f,) = w.frontend
    assert (f.busy, f.sync, f.sync_points) == (pytest.approx(10 / 30), 0, ())

    w = a.window(40, 90)  # 50 µs, reaching past the trace's end
    s7, s13 = w.streams
    assert (s7.depth, s7.max_depth, s7.busy) == (0, 1, pytest.approx(20 / 50))
    (f,) = w.frontend
    assert (f.busy, f.sync) == (pytest.approx(35 / 50), pytest.approx(30 / 50))
    assert [p.ts for p in w.sync_points] == [45, 80]

    w = a.window(-50, 0)  # before the trace: all idle, depth 0
    assert all(s.depth == s.max_depth == 0 and s.busy == 0 for s in w.streams)
    assert w.frontend[0].busy == 0 and w.ranks[0].streams_overlap == 0

    assert a.window(12, 12.5).streams[0].max_depth == 2  # a window inside one step
    with pytest.raises(ValueError, match="must end after it starts"):
        a.window(5, 5)


def test_two_devices_overlap_by_an_exact_sweep():
    events = [*TINY, cpu("cudaLaunchKernel", 16, 1, "cuda_runtime", corr=6), gpu(55, 20, 6, 7, device=1)]
    (r,) = tiny(events).ranks
    assert [(s.device, s.stream) for s in r.streams] == [(0, 7), (0, 13), (1, 7)]
    assert [d.active.pairs() for d in r.devices] == [[(20, 70)], [(55, 75)]]
    # streams busy: (0,7) [20,60), (0,13) [30,70), (1,7) [55,75): two or more on [30,70)
    assert r.overlap.streams.pairs() == [(30, 70)]
    assert r.overlap.devices.pairs() == [(55, 70)]
    w = analyse(Trace("t", (RankTrace(0, "t", tuple(events_from_chrome(events)), {}),))).window(50, 60)
    assert w.ranks[0].devices_overlap == pytest.approx(5 / 10) and w.ranks[0].streams_overlap == 1
    assert summary(tiny(events))["ranks"][0]["overlap"] == {"streams": 40 / 85, "devices": 15 / 85}


def test_summary_of_the_tiny_trace_is_plain_json():
    s = summary(tiny())
    assert json.loads(json.dumps(s)) == s
    assert s["gpu_activity"] is True and s["note"] is None and s["cap"] == 1024
    assert s["streams"] == [
        {
            "rank": 0,
            "device": 0,
            "stream": 7,
            "launches": 2,
            "max_depth": 2,
            "mean_depth": 1.0,
            "seconds_at_cap": 0.0,
            "busy_seconds": pytest.approx(40e-6),
        },
        {
            "rank": 0,
            "device": 0,
            "stream": 13,
            "launches": 1,
            "max_depth": 1,
            "mean_depth": 0.5,
            "seconds_at_cap": 0.0,
            "busy_seconds": pytest.approx(40e-6),
        },
    ]
    (r,) = s["ranks"]
    assert r["duration"] == pytest.approx(85e-6)
    assert r["overlap"] == {"streams": pytest.approx(30 / 85), "devices": None}
    assert r["devices"] == [
        {"device": 0, "kernel_active": pytest.approx(50 / 85), "active_seconds": pytest.approx(50e-6)}
    ]
    assert r["sync_points"] == [
        {
            "site": "aten::_local_scalar_dense",
            "call": "cudaStreamSynchronize",
            "count": 1,
            "seconds": pytest.approx(25e-6),
        },
        {"site": NO_OP, "call": "cudaDeviceSynchronize", "count": 1, "seconds": pytest.approx(5e-6)},
    ]


@pytest.mark.parametrize("name", ["a100_sxm4_5_streams.json.gz", "gpu_2_ranks", "mi250_rocm.json.gz"])
def test_consecutive_windows_add_up_to_the_whole_trace(name):
    a = analyse_path(DATA / name)
    n = 100
    edges = [a.start + (a.end - a.start) * i / n for i in range(n + 1)]
    windows = [a.window(t0, t1) for t0, t1 in itertools.pairwise(edges)]
    for i, lane in enumerate(a.streams()):
        busy = sum(w.streams[i].busy * (w.t1 - w.t0) for w in windows)
        assert busy == pytest.approx(lane.busy.total, rel=1e-9)
        if lane.queue:
            assert max(w.streams[i].max_depth for w in windows) == max(lane.queue.depths)
            assert windows[-1].streams[i].depth == lane.queue.depths[-1]
    for j, f in enumerate(f for r in a.ranks for f in r.frontend):
        assert sum(len(w.frontend[j].sync_points) for w in windows) == len(f.sync_points)
        assert sum(w.frontend[j].sync * (w.t1 - w.t0) for w in windows) == pytest.approx(f.syncs.total)
    for k, r in enumerate(a.ranks):
        overlap = sum(w.ranks[k].streams_overlap * (w.t1 - w.t0) for w in windows)
        assert overlap == pytest.approx(r.overlap.streams.total, rel=1e-9, abs=1e-6)


def test_the_depth_of_a_real_stream_in_a_window_is_the_step_function_there():
    (lane, *_) = analyse_path(DATA / "a100_sxm4_5_streams.json.gz").streams()
    q = lane.queue
    assert (lane.stream, q.max_depth) == (7, 946)
    times, depths = q.times, q.depths
    for i in range(0, len(times) - 40, 997):  # windows that start between two changes
        t0, t1 = (times[i] + times[i + 1]) / 2, times[i + 37]
        assert q.max_between(t0, t1) == max(depths[i : i + 38])
        assert q.depth_at(t1) == depths[i + 37]


def test_load_trace_then_analyse_equals_analyse_path():
    assert analyse(load_trace(DATA / "a100_alexnet_2_streams.json.gz")) == analyse_path(
        DATA / "a100_alexnet_2_streams.json.gz"
    )


def test_launches_starts_and_time_at_the_cap_within_a_window():
    """The counters behind a replay frame: L and S up to a time, and the time at the cap in a window."""
    a = analyse(Trace("tiny", (RankTrace(0, "tiny", tuple(events_from_chrome(TINY)), {}),)), cap=2)
    s7, s13 = a.streams()
    q = s7.queue
    assert (q.launch_times, q.start_times) == ((2, 12), (20, 50))
    assert [(q.launched_by(t), q.started_by(t)) for t in (1, 2, 12, 19, 20, 50, 99)] == [
        (0, 0),
        (1, 0),
        (2, 0),
        (2, 0),
        (2, 1),
        (2, 2),
        (2, 2),
    ]
    for t in (1, 2, 12, 19, 20, 50, 99):
        assert q.launched_by(t) - q.started_by(t) == q.depth_at(t)
    # at depth 2 (the cap here) from 12 to 20
    assert q.time_at_cap_between(0, 100) == 8 == q.time_at_cap
    assert q.time_at_cap_between(15, 30) == 5 and q.time_at_cap_between(20, 30) == 0
    assert s13.queue.time_at_cap_between(0, 100) == 0


def test_launch_and_start_counts_of_a_real_stream_match_its_depth():
    (lane, *_) = analyse_path(DATA / "a100_sxm4_5_streams.json.gz").streams()
    q = lane.queue
    assert len(q.launch_times) == len(q.start_times) == q.launches == 6050
    for i in range(0, len(q.times), 811):
        t = q.times[i]
        assert q.launched_by(t) - q.started_by(t) == q.depths[i]
    assert q.time_at_cap_between(q.times[0], q.times[-1]) == 0  # never at 1024 (max 946)
