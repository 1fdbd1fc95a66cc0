"""find_straggler names the rank that holds the others back, with its cause, and no one on noise."""

import random

import pytest
from torchpar_top.contract.messages import StepPhases
from torchpar_top.model.steps import MIN_WINDOWS, compared_windows, find_straggler, mean_per_step


def window(steps=10, jitter=0.0, rng=None, **per_step):
    """``steps`` steps whose phases take ``per_step`` seconds each, times a random factor 1 ± jitter."""
    rng = rng or random.Random(0)
    return steps, StepPhases(
        **{p: v * steps * (1 + rng.uniform(-jitter, jitter)) for p, v in per_step.items()}
    )


# The DESIGN's measured DDP figures (ms per step): rank 1 has a 4x forward, rank 0 waits in all-reduce.
FAST = dict(forward=0.0009, backward=0.0014, comm=0.0106, optimizer=0.0004)
SLOW = dict(forward=0.0035, backward=0.0066, comm=0.0028, optimizer=0.0003)


def test_a_slow_forward_is_named_not_the_rank_that_waits_for_it():
    rng = random.Random(1)
    windows = {0: [window(rng=rng, jitter=0.2, **FAST) for _ in range(20)]}
    windows[1] = [window(rng=rng, jitter=0.2, **SLOW) for _ in range(20)]
    found = find_straggler(windows)
    assert found is not None and found.rank == 1
    assert found.cause == "backward"  # the largest excess: 6.6 vs 1.4 ms (forward 3.5 vs 0.9 is the other)
    assert found.ratio == pytest.approx(0.0066 / 0.0014, rel=0.15)
    assert found.costs == pytest.approx(0.0106 - 0.0028, rel=0.15)


def test_slow_data_on_one_of_four_ranks():
    rng = random.Random(2)
    base = dict(data=0.001, forward=0.004, backward=0.008, optimizer=0.001)
    windows = {r: [window(rng=rng, jitter=0.3, comm=0.010, **base) for _ in range(30)] for r in (0, 1, 3)}
    windows[2] = [window(rng=rng, jitter=0.3, comm=0.0005, **{**base, "data": 0.011}) for _ in range(30)]
    found = find_straggler(windows)
    assert (found.rank, found.cause) == (2, "data")
    assert found.ratio == pytest.approx(11, rel=0.3)


@pytest.mark.parametrize("jitter", [0.05, 0.3, 0.6])
def test_identical_ranks_give_no_straggler_whatever_their_noise(jitter):
    rng = random.Random(3)
    same = dict(data=0.002, forward=0.004, backward=0.008, comm=0.003, optimizer=0.001)
    windows = {r: [window(rng=rng, jitter=jitter, **same) for _ in range(200)] for r in range(4)}
    assert find_straggler(windows) is None


def test_one_rank_or_too_few_windows_name_nobody():
    windows = {0: [window(**FAST)] * 50}
    assert find_straggler(windows) is None
    windows = {0: [window(**FAST)] * (MIN_WINDOWS - 1), 1: [window(**SLOW)] * (MIN_WINDOWS - 1)}
    assert find_straggler(windows) is None
    windows = {0: [window(**FAST)] * MIN_WINDOWS, 1: [window(**SLOW)] * MIN_WINDOWS}
    assert find_straggler(windows).rank == 1


def test_the_windows_compared_are_those_every_rank_stepped_in():
    """What says "not judged yet" apart from "nobody": a None before MIN_WINDOWS compared windows."""
    idle = (0, StepPhases())
    assert compared_windows({}) == 0
    assert compared_windows({0: [window(**FAST)] * 9}) == 0  # one rank: nothing to compare
    assert compared_windows({0: [window(**FAST)] * 9, 1: [idle] * 9}) == 0  # the other never stepped
    # rank 1 joined later (its first windows idle) and missed one: the last 6 of each are compared
    windows = {0: [window(**FAST)] * 9, 1: [idle, idle, window(**SLOW), idle, *[window(**SLOW)] * 2]}
    assert compared_windows(windows) == 3
    assert find_straggler(windows) is None
    windows[1] += [window(**SLOW)] * 2
    assert compared_windows(windows) == MIN_WINDOWS
    assert find_straggler(windows).rank == 1


def test_windows_without_steps_are_left_out():
    idle = (0, StepPhases())
    windows = {0: [window(**FAST), idle] * 10, 1: [window(**SLOW), idle] * 10}
    assert find_straggler(windows).rank == 1
    assert mean_per_step([idle]) == {}


def test_contention_is_the_cause_only_where_the_extra_wait_for_a_core_accounts_for_the_extra_time():
    rng = random.Random(4)
    windows = {0: [window(rng=rng, jitter=0.2, **FAST) for _ in range(20)]}
    windows[1] = [window(rng=rng, jitter=0.2, **SLOW) for _ in range(20)]
    # rank 1 is 7.8 ms a step slower in forward + backward (the optimizer is 0.1 ms faster)
    slower = (0.0035 - 0.0009) + (0.0066 - 0.0014)
    for extra, said in [(0.8 * slower, True), (0.5 * slower, True), (0.4 * slower, False), (0.0, False)]:
        waits = {0: [0.0002 * 10] * 20, 1: [(0.0002 + extra) * 10] * 20}  # seconds in each 10-step window
        found = find_straggler(windows, waits)
        assert found is not None and found.rank == 1
        if said:
            assert found.core_wait == pytest.approx(extra), extra
        else:
            assert found.core_wait is None, extra


def test_contention_needs_every_compared_window_measured():
    windows = {0: [window(**FAST)] * 10, 1: [window(**SLOW)] * 10}
    waits = {0: [0.0] * 10, 1: [0.07] * 10}
    assert find_straggler(windows, waits).core_wait == pytest.approx(0.007)
    assert find_straggler(windows, {0: [0.0] * 10, 1: [0.07] * 9 + [None]}).core_wait is None
    assert find_straggler(windows, {0: [0.0] * 9, 1: [0.07] * 10}).core_wait is None  # not aligned
    assert find_straggler(windows, {1: [0.07] * 10}).core_wait is None
    assert find_straggler(windows).core_wait is None
