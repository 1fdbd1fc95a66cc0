"""Busy intervals, merging, and the overlap sweep."""

from torchpar_top.probes.agent import activity
from torchpar_top.probes.agent.activity import ActivityRecorder, busy_time, overlap_time, union


def test_union_and_busy_time():
    assert union([(3, 4), (0, 1), (0.5, 2)]) == [(0, 2), (3, 4)]
    assert busy_time([(0, 1), (0.5, 2), (3, 4)]) == 3


def test_overlap_of_two_executors():
    a = [(0.0, 1.0), (2.0, 3.0)]
    b = [(0.5, 2.5)]
    assert overlap_time([a, b]) == 1.0  # 0.5..1 and 2..2.5


def test_an_executor_never_overlaps_itself():
    assert overlap_time([[(0, 2), (1, 3)]]) == 0
    assert overlap_time([[(0, 2), (1, 3)], []]) == 0


def test_recorder_merges_short_gaps_and_clips():
    rec = ActivityRecorder()
    gap = activity.MERGE_GAP / 2
    rec.add(1.0, 1.1)
    rec.add(1.1 + gap, 1.2)  # merged
    rec.add(2.0, 2.5)  # separate
    assert rec.intervals(0, 10) == [(1.0, 1.2), (2.0, 2.5)]
    assert rec.intervals(1.15, 2.25) == [(1.15, 1.2), (2.0, 2.25)]


def test_recorder_counts_an_item_still_running():
    rec = ActivityRecorder()
    rec.begin(5.0)
    assert rec.intervals(4.0, 6.0) == [(5.0, 6.0)]
    rec.end(7.0)
    assert rec.intervals(4.0, 8.0) == [(5.0, 7.0)]
