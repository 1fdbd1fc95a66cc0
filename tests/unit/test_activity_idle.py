"""Busy time of items that come one at a time with short idle gaps between (merged for the lanes, not
counted as busy): a GPU stream synchronised after every op read 0.99 busy on an H100 where its profiler
trace had work on the GPU 0.56 of the window."""

from __future__ import annotations

import pytest
from torchpar_top.probes.agent.activity import MERGE_GAP, ActivityRecorder
from torchpar_top.probes.agent.executor import Executor


def _sync_loop(rec: ActivityRecorder, items: int, work: float, gap: float, t: float = 100.0) -> float:
    for _ in range(items):
        rec.add(t, t + work)
        t += work + gap
    return t


def test_gaps_merged_for_the_lane_are_not_busy():
    rec = ActivityRecorder()
    assert MERGE_GAP > 50e-6
    end = _sync_loop(rec, 1000, 100e-6, 50e-6)
    assert len(rec.intervals(100.0, end)) == 1  # one merged run for the lane
    assert rec.busy(100.0, end) == pytest.approx(1000 * 100e-6, rel=1e-6)  # two thirds, not all


def test_a_window_cutting_a_merged_run_counts_its_share():
    rec = ActivityRecorder()
    end = _sync_loop(rec, 1000, 100e-6, 50e-6)
    mid = (100.0 + end) / 2
    assert rec.busy(100.0, mid) == pytest.approx((mid - 100.0) * 2 / 3, rel=1e-3)


def test_gaps_longer_than_the_merge_stay_apart_and_items_in_flight_count():
    rec = ActivityRecorder()
    rec.add(0.0, 1.0)
    rec.add(2.0, 3.0)  # a 1 s gap: two intervals, nothing idle inside either
    rec.begin(4.0)  # running at the window's end
    assert rec.busy(0.0, 5.0) == pytest.approx(3.0)
    assert rec.intervals(0.0, 5.0) == [(0.0, 1.0), (2.0, 3.0), (4.0, 5.0)]


def test_the_executor_row_reads_the_busy_time_not_the_merged_runs():
    ex = Executor("cuda:0", 1024)
    end = _sync_loop(ex.activity, 1000, 100e-6, 50e-6)
    row, lanes = ex.row(100.0, end)
    assert row.busy == pytest.approx(2 / 3, rel=1e-3)
    assert len(lanes) == 1
