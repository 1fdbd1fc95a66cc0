"""Busy intervals, merging, and the overlap sweep."""

from pytest import approx
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


# -- running vs waiting for a core, on recorded numbers ------------------------------------------------


def test_busy_splits_into_running_and_waiting_for_a_core():
    # an item in progress the whole window; its thread ran 0.31 of it and waited 0.69 for a core
    assert activity.split_busy(1.0, 0.31, 0.69) == (0.31, 0.69)
    # run time between items (the loop's own) cannot make it run more than it had work
    assert activity.split_busy(0.5, 0.55, 0.0) == (0.5, 0.0)
    # blocked (GIL, a lock) is what neither accounts for
    running, core_wait = activity.split_busy(0.9, 0.4, 0.1)
    assert (running, core_wait) == (0.4, 0.1) and round(0.9 - running - core_wait, 9) == 0.4
    assert activity.split_busy(0.2, 0.1, 0.5) == (0.1, 0.1)  # waits capped by what was in progress


def test_two_streams_sharing_one_core_never_run_at_once():
    """The issue's numbers: both items in progress all the time (overlap in progress 100 %), each thread
    on a core half the time (they take turns on one core, another process has the other)."""
    both = [[(0.0, 1.0)], [(0.0, 1.0)]]
    assert overlap_time(both) == 1.0
    assert activity.running_overlap(both, [0.5, 0.5]) == (0.0, 0.5)  # at least 0 (the truth), at most 0.5


def test_three_threads_on_two_cores_overlap_a_third():
    # two executors and one hog on two saturated cores, fairly shared: each ran 2/3 of the window;
    # whenever the hog ran one executor waited, so both ran at once exactly 1/3 of it
    both = [[(0.0, 1.0)], [(0.0, 1.0)]]
    assert activity.running_overlap(both, [2 / 3, 2 / 3]) == approx((1 / 3, 2 / 3))


def test_free_cores_overlap_is_the_interval_overlap():
    a, b = [(0.0, 0.6)], [(0.2, 1.0)]
    assert activity.running_overlap([a, b], [0.6, 0.8]) == approx((0.4, 0.4))  # ran all their intervals
    assert activity.running_overlap([a, b], [None, None]) == approx((0.4, 0.4))  # nothing read: the sweep
    # a CUDA stream (its kernels' intervals are running time) beside an emulated stream that ran half
    assert activity.running_overlap([a, b], [None, 0.4]) == approx((0.0, 0.4))
    assert activity.running_overlap([a], [0.6]) == (0.0, 0.0)  # one executor overlaps nothing


def test_the_bound_never_exceeds_work_in_progress_at_once():
    a, b = [(0.0, 0.5)], [(0.5, 1.0)]  # never in progress together
    assert activity.running_overlap([a, b], [0.5, 0.5]) == (0.0, 0.0)


def test_both_waiting_behind_other_work_is_a_range_not_a_zero():
    """Both streams in progress all window, each on a core a quarter of it (other processes took the
    cores): they may have run together up to a quarter of the window, or never; the speed-up of the
    phase, not this window, says which."""
    both = [[(0.0, 1.0)], [(0.0, 1.0)]]
    assert activity.running_overlap(both, [0.25, 0.25]) == (0.0, 0.25)
