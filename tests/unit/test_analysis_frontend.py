"""Sync points attributed to the innermost enclosing op; frontend lanes; the interval arithmetic below."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from torchpar_top.analysis import (
    NO_OP,
    Intervals,
    at_least,
    events_from_chrome,
    frontend_lanes,
    load_trace,
    sync_sites,
)
from torchpar_top.analysis.events import OP_CATS, SYNC_NAMES
from torchpar_top.analysis.queue import _range_max, _sparse_table

DATA = Path(__file__).resolve().parents[1] / "data" / "hta"


def ev(name, ts, dur, cat="cpu_op", tid=1, pid=7):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": {}}


def test_each_sync_goes_to_the_innermost_op_or_python_function_around_it():
    events = [
        ev("train_step", 0, 100, cat="python_function"),
        ev("aten::item", 10, 20),
        ev("aten::_local_scalar_dense", 10, 20),  # same span as its parent: the inner one wins
        ev("cudaMemcpyAsync", 11, 2, cat="cuda_runtime"),  # a launch, not a sync
        ev("cudaStreamSynchronize", 13, 10, cat="cuda_runtime"),
        ev("loss.backward", 40, 30, cat="python_function"),
        ev("cudaDeviceSynchronize", 50, 5, cat="cuda_runtime"),
        ev("aten::copy_", 80, 5),
        ev("cudaMemcpy", 80, 5, cat="cuda_runtime"),  # starts and ends with its op
        ev("cudaEventSynchronize", 84, 4, cat="cuda_runtime"),  # sticks out of aten::copy_: train_step
        ev("cudaStreamSynchronize", 120, 1, cat="cuda_runtime"),  # after everything
        ev("cudaStreamSynchronize", 60, 2, cat="cuda_runtime", tid=2),  # another thread: its own lane
        ev("hipDeviceSynchronize", 0, 1, cat="cuda_runtime", tid=3),
        ev("aten::mm", 0, 9, tid=3),
    ]
    lanes = frontend_lanes(events_from_chrome(events))
    by_tid = {lane.tid: lane for lane in lanes}
    assert lanes[0].tid == 1 and lanes[0].launches == 1  # the thread with most launches first
    assert [(p.call, p.site) for p in by_tid[1].sync_points] == [
        ("cudaStreamSynchronize", "aten::_local_scalar_dense"),
        ("cudaDeviceSynchronize", "loss.backward"),
        ("cudaMemcpy", "aten::copy_"),
        ("cudaEventSynchronize", "train_step"),
        ("cudaStreamSynchronize", NO_OP),
    ]
    assert [(p.call, p.site) for p in by_tid[2].sync_points] == [("cudaStreamSynchronize", NO_OP)]
    assert [(p.call, p.site) for p in by_tid[3].sync_points] == [("hipDeviceSynchronize", "aten::mm")]
    assert by_tid[1].ops.pairs() == [(10, 30), (80, 85)]  # cpu_op only: Python functions are not ops
    assert by_tid[1].syncs.total == 10 + 5 + 8 + 1  # cudaMemcpy and cudaEventSynchronize overlap
    sites = sync_sites(lanes)
    assert (sites[0].site, sites[0].call, sites[0].count) == (
        "aten::_local_scalar_dense",
        "cudaStreamSynchronize",
        1,
    )
    assert sum(s.count for s in sites) == 7
    assert [s.seconds for s in sites] == sorted((s.seconds for s in sites), reverse=True)


def test_threads_that_neither_launch_nor_sync_have_no_lane():
    events = [ev("aten::mm", 0, 5, tid=9), ev("cudaEventQuery", 1, 1, cat="cuda_runtime", tid=9)]
    assert frontend_lanes(events_from_chrome(events)) == ()


def _innermost(ops, s):
    """The oracle: scan every op of the thread, keep the shortest that contains the call (the latest to
    start, then the latest in the file, among equal ones)."""
    around = [
        (o.dur, -o.ts, -i, o.name)
        for i, o in enumerate(ops)
        if o.ts <= s.ts and s.ts + s.dur <= o.ts + o.dur + 1e-3
    ]
    return min(around)[3] if around else NO_OP


@pytest.mark.parametrize(
    "name",
    [
        "a100_alexnet_2_streams.json.gz",
        "a100_sxm4_5_streams.json.gz",
        "mi250_rocm.json.gz",
        "a100_triton_culaunchkernel.json.gz",
    ],
)
def test_attribution_on_real_traces_matches_a_brute_force_scan(name):
    (rank,) = load_trace(DATA / name).ranks
    lanes = frontend_lanes(rank.events)
    points = [p for lane in lanes for p in lane.sync_points]
    assert points, "every one of these traces has sync calls"
    for lane in lanes:
        ops = [e for e in rank.events if e.cat in OP_CATS and (e.pid, e.tid) == (lane.pid, lane.tid)]
        mine = [e for e in rank.events if (e.pid, e.tid) == (lane.pid, lane.tid)]
        syncs = sorted((e for e in mine if e.name in SYNC_NAMES and e.stream is None), key=lambda e: e.ts)
        assert [(p.call, p.ts) for p in lane.sync_points] == [(s.name, s.ts) for s in syncs]
        assert [p.site for p in lane.sync_points] == [_innermost(ops, s) for s in syncs]


def test_real_sync_sites():
    (rank,) = load_trace(DATA / "a100_alexnet_2_streams.json.gz").ranks
    sites = {(s.site, s.call): s.count for s in sync_sites(frontend_lanes(rank.events))}
    assert sites == {("aten::copy_", "cudaStreamSynchronize"): 16, (NO_OP, "cudaDeviceSynchronize"): 5}
    (rank,) = load_trace(DATA / "mi250_rocm.json.gz").ranks
    sites = {(s.site, s.call): s.count for s in sync_sites(frontend_lanes(rank.events))}
    assert sites == {("aten::copy_", "hipMemcpyWithStream"): 2, (NO_OP, "hipDeviceSynchronize"): 1}


def test_union_merges_overlapping_and_touching_intervals_and_drops_empty_ones():
    i = Intervals.union([(5, 7), (0, 2), (1, 3), (3, 4), (9, 9), (10, 8), (6, 6.5)])
    assert i.pairs() == [(0, 4), (5, 7)]
    assert i.total == 6 and len(i) == 2
    assert [i.covered_until(t) for t in (-1, 0, 2, 4, 4.5, 6, 100)] == [0, 0, 2, 4, 4, 5, 6]
    assert i.covered(1, 6) == 4 and i.covered(6, 1) == 0
    assert Intervals.union([]).total == 0 and Intervals().covered(0, 10) == 0


def test_at_least_k_lanes_is_an_exact_sweep():
    a = Intervals.union([(0, 10)])
    b = Intervals.union([(5, 15), (20, 30)])
    c = Intervals.union([(8, 9), (10, 12), (25, 26)])
    assert at_least(2, [a, b, c]).pairs() == [(5, 12), (25, 26)]  # (5,10) and (10,12) join at 10
    assert at_least(3, [a, b, c]).pairs() == [(8, 9)]
    assert at_least(1, [a, b, c]).pairs() == [(0, 15), (20, 30)]
    assert at_least(2, [a, Intervals.union([(10, 20)])]).total == 0  # touching lanes do not overlap
    assert at_least(2, [a]).total == 0


def test_at_least_agrees_with_a_fine_grid_on_random_lanes():
    rng = random.Random(7)
    for _ in range(20):
        lanes = [
            Intervals.union((s, s + rng.randint(1, 8)) for s in rng.sample(range(100), 12)) for _ in range(4)
        ]
        for k in (2, 3):
            grid = sum(1 for t in range(200) if sum(lane.covered(t, t + 1) == 1 for lane in lanes) >= k)
            assert at_least(k, lanes).total == grid


def test_range_max_table_against_brute_force():
    rng = random.Random(3)
    values = tuple(rng.randint(-5, 50) for _ in range(300))
    table = _sparse_table(values)
    for _ in range(500):
        lo = rng.randrange(300)
        hi = rng.randrange(lo + 1, 301)
        assert _range_max(table, lo, hi) == max(values[lo:hi])
