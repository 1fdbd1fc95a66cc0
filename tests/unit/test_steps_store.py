"""The store's step figures from synthetic samples: rates over a common span (lockstep ranks agree),
window vs run phases, the straggler from per-rank windows (none for identical ranks), memory growth."""

import dataclasses

import pytest
from fakes.steps import Rank, hello
from torchpar_top.contract import messages as m
from torchpar_top.contract.vocab import PHASES
from torchpar_top.model.steps import MEMORY_WARMUP_STEPS, MIN_WINDOWS, RankSteps, slope_per_min
from torchpar_top.model.store import SessionStore


def feed(store, ranks, seconds):
    """``seconds`` of samples from every rank (their windows are the fake's default, 0.1 s)."""
    for _ in range(round(seconds / 0.1)):
        for i, r in enumerate(ranks):
            store.on_message(r.sample(), source=i)


def one_rank():
    st = SessionStore("run")
    st.on_message(hello(100))
    return st


def two_ranks(a, b):
    st = SessionStore("run")
    st.on_message(hello(100, 0), source=0)
    st.on_message(hello(101, 1), source=1)
    return st, [a, b]


def test_lockstep_ranks_read_the_same_rate_whatever_their_sample_phase():
    # same steps (every 27 ms) but samples taken 60 ms apart: each rank's own last window disagrees
    st, ranks = two_ranks(Rank(step=0.027, offset=0.0), Rank(step=0.027, offset=0.06))
    ranks[1].next_end = ranks[0].next_end  # the steps end at the same moments on both
    feed(st, ranks, 6)
    snap = st.snapshot()
    a, b = (r.steps.per_second for r in snap.ranks)
    assert a == b
    assert a == pytest.approx(1 / 0.027, rel=0.05)
    assert snap.steps.per_second == a and snap.throughput == a and snap.throughput_unit == "steps/s"
    assert [r.throughput for r in snap.ranks] == [a, b]


def test_window_phases_follow_the_last_seconds_run_phases_the_whole_run():
    st = SessionStore("run")
    st.on_message(hello(100))
    r = Rank(step=0.02, forward=0.015, data=0.005)
    for _ in range(50):  # 5 s of forward 15 ms
        st.on_message(r.sample())
    r.per_step = {"forward": 0.005, "data": 0.015}
    for _ in range(50):  # 5 s of data 15 ms
        st.on_message(r.sample())
    s = st.snapshot().steps
    assert s.source.value == "backward" and s.count == r.count
    assert s.phases.data == pytest.approx(0.015) and s.phases.forward == pytest.approx(0.005)
    assert s.run_phases.data == pytest.approx(0.010, rel=0.02)
    assert s.run_phases.forward == pytest.approx(0.010, rel=0.02)
    assert s.seconds == pytest.approx(0.020) and s.run_seconds == pytest.approx(0.020)
    assert sum(getattr(s.phases, p) for p in PHASES) == pytest.approx(s.seconds)


def test_slow_steps_keep_their_window_figures():
    st = SessionStore("run")
    st.on_message(hello(100))
    r = Rank(step=3.0, forward=3.0)
    for _ in range(70):
        st.on_message(r.sample())
    s = st.snapshot().steps
    assert s.count == 2 and s.seconds == pytest.approx(3.0)


def test_slow_steps_are_rated_over_a_longer_span():
    st = SessionStore("run")
    st.on_message(hello(100))
    r = Rank(step=1.5, forward=1.5)
    rates = []
    for i in range(200):  # 20 s: 13 steps
        st.on_message(r.sample())
        if i >= 100:
            rates.append(st.snapshot().steps.per_second)
    assert all(x == pytest.approx(1 / 1.5, rel=0.35) for x in rates), (min(rates), max(rates))


def test_the_straggler_is_named_from_the_ranks_windows():
    fast = {"forward": 0.002, "backward": 0.003, "comm": 0.010, "optimizer": 0.001}
    slow = {"forward": 0.010, "backward": 0.003, "comm": 0.002, "optimizer": 0.001}
    st, ranks = two_ranks(
        Rank(step=0.016, jitter=0.2, seed=1, **fast), Rank(step=0.016, jitter=0.2, seed=2, **slow)
    )
    feed(st, ranks, 10)
    found = st.snapshot().straggler
    assert found is not None and (found.rank, found.cause) == (1, "forward")
    assert found.ratio == pytest.approx(5, rel=0.2)
    assert found.costs == pytest.approx(0.008, rel=0.2)


def test_a_straggler_that_waits_for_a_core_is_said_to_be_held_back_by_contention():
    # the same work on both ranks, but rank 1 gets half a core: everything it does takes twice as long and
    # its frontend waits for the core (run-queue delay) as long as it runs
    fast = {"forward": 0.002, "backward": 0.003, "comm": 0.008, "optimizer": 0.001}
    slow = {"forward": 0.004, "backward": 0.006, "comm": 0.002, "optimizer": 0.002}
    st, ranks = two_ranks(
        Rank(step=0.014, jitter=0.2, seed=1, core_wait=0.02, **fast),
        Rank(step=0.014, jitter=0.2, seed=2, core_wait=0.43, **slow),
    )
    feed(st, ranks, 10)
    found = st.snapshot().straggler
    assert found is not None and (found.rank, found.cause) == (1, "backward")
    # (0.43 - 0.02) of each 14 ms step: 5.7 ms, against 6 ms more in forward, backward and optimizer
    assert found.core_wait == pytest.approx(0.41 * 0.014, rel=0.1)


@pytest.mark.parametrize("waits", [(0.02, 0.05), (None, None), (0.02, None)])
def test_a_straggler_slow_in_its_own_code_is_not_called_contention(waits):
    # a longer forward (a sleep, more work) with no more wait for a core, or the waits not measured
    fast = {"forward": 0.002, "backward": 0.003, "comm": 0.010, "optimizer": 0.001}
    slow = {"forward": 0.010, "backward": 0.003, "comm": 0.002, "optimizer": 0.001}
    st, ranks = two_ranks(
        Rank(step=0.016, jitter=0.2, seed=1, core_wait=waits[0], **fast),
        Rank(step=0.016, jitter=0.2, seed=2, core_wait=waits[1], **slow),
    )
    feed(st, ranks, 10)
    found = st.snapshot().straggler
    assert found is not None and (found.rank, found.cause) == (1, "forward")
    assert found.core_wait is None


def test_identical_ranks_have_no_straggler():
    same = {"forward": 0.004, "backward": 0.006, "comm": 0.002, "optimizer": 0.001}
    st, ranks = two_ranks(
        Rank(step=0.013, jitter=0.3, seed=3, **same), Rank(step=0.013, jitter=0.3, seed=4, **same)
    )
    feed(st, ranks, 10)
    assert st.snapshot().straggler is None
    assert st.snapshot().straggler_windows >= MIN_WINDOWS  # judged: nobody, not "not yet"


def test_the_straggler_is_judged_once_enough_windows_were_compared():
    fast = {"forward": 0.002, "backward": 0.003, "comm": 0.010, "optimizer": 0.001}
    slow = {"forward": 0.010, "backward": 0.003, "comm": 0.002, "optimizer": 0.001}
    st, ranks = two_ranks(Rank(step=0.016, seed=1, **fast), Rank(step=0.016, seed=2, **slow))
    assert st.snapshot().straggler_windows == 0
    seen = []
    for _ in range(8):
        feed(st, ranks, 1)
        snap = st.snapshot()
        seen.append((snap.straggler_windows, snap.straggler is not None))
    counts = [n for n, _ in seen]
    assert counts == sorted(counts) and counts[-1] > MIN_WINDOWS, seen
    # named from the MIN_WINDOWS-th compared window on, never before
    assert all(named == (n >= MIN_WINDOWS) for n, named in seen), seen


def test_ranks_that_ended_are_rated_up_to_their_last_step():
    """A DDP rank raised right after a step; its peer waited in the all-reduce for a second, then failed
    too: both stepped at 100/s until then, and both read it (not 50/s for the one that waited)."""
    st, ranks = two_ranks(Rank(step=0.01, seed=1), Rank(step=0.01, seed=2))
    feed(st, ranks, 5)
    ranks[1].next_end += 1000  # rank 1 raised: no step more
    st.on_message(ranks[1].sample(), source=1)
    st.on_source_closed(1)
    ranks[0].next_end += 1000  # rank 0 blocks in the all-reduce, still sampled
    for _ in range(10):
        st.on_message(ranks[0].sample(), source=0)
    st.on_source_closed(0)
    rates = [r.steps.per_second for r in st.snapshot().ranks]
    assert rates == [pytest.approx(100, rel=0.06)] * 2, rates


def test_a_rank_is_stalled_after_ten_of_its_steps_and_three_seconds_without_one():
    fast, slow = Rank(step=0.01, seed=1), Rank(step=0.5, seed=2)
    st, ranks = two_ranks(fast, slow)
    feed(st, ranks, 5)
    assert [r.steps.stalled for r in st.snapshot().ranks] == [None, None]
    for r in ranks:
        r.next_end += 1000  # neither steps again; both still sampled
    feed(st, ranks, 4)
    fast_view, slow_view = (r.steps for r in st.snapshot().ranks)
    assert fast_view.stalled == pytest.approx(4.0, abs=0.15)  # 3 s at least
    assert fast_view.per_second == 0.0  # not the rate of the last 4 steps found further back
    assert slow_view.stalled is None  # 4 s is 8 of its 0.5 s steps: not yet
    feed(st, ranks, 1.5)
    assert st.snapshot().ranks[1].steps.stalled == pytest.approx(5.5, abs=0.55)
    st.on_source_closed(1)  # stopped while stalled (by torchpar-top, a signal): said as it ended
    assert st.snapshot().ranks[1].steps.stalled == pytest.approx(5.5, abs=0.55)
    st.on_message(m.Exit(status=0, reason=""), source=0)  # its code returned: its tail was no hang
    st.on_source_closed(0)
    assert st.snapshot().ranks[0].steps.stalled is None


def test_a_stall_that_a_stop_ended_is_still_said_once_the_rank_ended():
    """A DDP job hung after a few steps. The stop killed the sleeper, so the waiting rank's all-reduce
    returned and closed one 8 s step before the stop took it at its next step: that rank's run mean became
    seconds, its last step no stall by it, and the run read *no clear bottleneck*. It was a hang."""
    st, ranks = two_ranks(Rank(step=0.02, seed=1), Rank(step=0.02, seed=2))
    feed(st, ranks, 0.5)  # a few steps
    for r in ranks:
        r.next_end += 1000
    feed(st, ranks, 8)
    assert all(r.steps.stalled == pytest.approx(8.0, abs=0.15) for r in st.snapshot().ranks)
    for r in ranks:  # the stop: one last step closes on each
        r.next_end = r.t + 0.09  # the next would be past the sample: one step
    feed(st, ranks, 0.1)
    for r in ranks:
        r.next_end += 1000
    assert all(
        r.steps.stalled is None for r in st.snapshot().ranks
    )  # running: it stepped, as after a checkpoint
    st.on_message(m.Exit(status=0, reason="stopped by torchpar-top"), source=0)
    st.on_source_closed(0)
    st.on_message(m.Exit(status=0, reason=""), source=1)  # its code returned: not a hang
    st.on_source_closed(1)
    stopped, returned = (r.steps for r in st.snapshot().ranks)
    assert stopped.stalled == pytest.approx(8.09, abs=0.15) and returned.stalled is None


def test_a_long_step_among_others_is_no_stall():
    """A step of 5 s (a checkpoint) followed by ordinary ones: once it ended, nothing is said."""
    st, ranks = two_ranks(Rank(step=0.02, seed=1), Rank(step=0.02, seed=2))
    feed(st, ranks, 1)
    ranks[0].next_end += 5
    feed(st, ranks, 6)
    st.on_message(m.Exit(status=0, reason="stopped by torchpar-top"), source=0)
    st.on_source_closed(0)
    assert st.snapshot().ranks[0].steps.stalled is None


def test_memory_growth_is_the_slope_of_rss():
    st = one_rank()
    r = Rank(leak=1_000_000.0)  # a megabyte a second
    feed(st, [r], 10)
    (mem,) = st.snapshot().memory
    assert mem.rss_growth_bytes_per_min == pytest.approx(60_000_000, rel=0.02)
    assert mem.rss_bytes == int(r.rss)


def test_memory_taken_before_the_tenth_step_is_set_up_not_growth():
    """Importing and the first steps allocate hundreds of MB: a steady run after them reads no growth."""
    st = one_rank()
    r = Rank(step=0.1, rss=100_000_000, leak=200_000_000.0)  # 200 MB a second, for the first steps
    feed(st, [r], MEMORY_WARMUP_STEPS * r.step)
    r.leak = 0.0
    feed(st, [r], 10)
    (mem,) = st.snapshot().memory
    assert mem.rss_growth_bytes_per_min == pytest.approx(0.0, abs=1.0)


def test_memory_that_rises_early_and_flattens_reads_little_growth_a_leak_its_slope():
    """The allocator's warm-up (a rise over the first seconds that stops) is not a leak; a leak that
    starts late in the run still reads its full slope."""
    st = one_rank()
    r = Rank(leak=100_000.0)  # 100 KB a second for the first 10 s, then flat
    feed(st, [r], 10)
    r.leak = 0.0
    feed(st, [r], 30)
    (mem,) = st.snapshot().memory
    assert mem.rss_growth_bytes_per_min == pytest.approx(0.0, abs=1.0)
    r.leak = 1_000_000.0  # then a real leak, for the rest of a run as long again
    feed(st, [r], 40)
    (mem,) = st.snapshot().memory
    assert mem.rss_growth_bytes_per_min == pytest.approx(60_000_000, rel=0.02)


def test_slope_needs_points_and_time():
    assert slope_per_min([(0, 1), (0.5, 2)]) is None
    assert slope_per_min([(0, 5), (1, 5), (2, 5)]) == 0


def test_sampled_ops_throughput_is_smoothed_like_the_scoreboard():
    st = SessionStore("run")
    st.on_message(hello(100))
    r = Rank(step=100.0)  # no steps: ops/s only
    for i in range(40):  # the op counter's slices catch 50 or 1000 ops/s in turn
        st.on_message(r.sample(unit="ops/s", throughput=1000.0 if i % 2 else 50.0))
    snap = st.snapshot()
    assert snap.steps is None and snap.throughput_unit == "ops/s"
    assert snap.throughput == pytest.approx(525.0)
    board = next(b for b in snap.scoreboard if b.seconds)
    assert board.throughput == pytest.approx(snap.throughput, rel=0.05)


def test_recent_steps_are_kept_once_each():
    rs = RankSteps()
    r = Rank(step=0.03)
    for _ in range(10):
        msg = r.sample()
        rs.add(msg.t, msg.window, msg.steps, msg.memory)
    ends = [x.end for x in rs.recent]
    assert ends == sorted(set(ends)) and len(ends) == r.count


def test_sampled_ops_are_a_mean_over_the_last_ten_seconds_as_the_scoreboard_over_the_run():
    # counted in the op counter's slices (op_coverage set): 8 s at 100 ops/s, then 2 s at 1900
    st = SessionStore("run")
    st.on_message(hello(100))
    r = Rank(step=100.0)
    for i in range(101):
        rate = 100.0 if i < 81 else 1900.0
        st.on_message(r.sample(unit="ops/s", throughput=rate, op_coverage=0.05 if i % 10 == 0 else 0.0))
    snap = st.snapshot()
    assert snap.throughput == pytest.approx((80 * 100 + 20 * 1900) / 100)
    board = next(b for b in snap.scoreboard if b.seconds)
    assert board.throughput == pytest.approx(snap.throughput, rel=0.02)


def test_a_loop_faster_than_the_ends_a_sample_carries_is_rated_from_its_counts():
    st = SessionStore("run")
    st.on_message(hello(100))
    r = Rank(step=0.0001, forward=0.0001)  # 1,000 steps a sample, 512 ends carried
    for _ in range(40):
        st.on_message(r.sample())
    assert st.snapshot().steps.per_second == pytest.approx(10_000, rel=0.02)


def test_the_scoreboard_starts_again_in_steps_when_the_first_step_comes():
    # sampled ops/s (50,000 a second) until the first step ends at 0.35 s, then a step every 0.35 s: the
    # scoreboard and the header read steps/s, with none of the ops in them (it read 1,715 "steps/s" beside
    # a header's 45 on pytorch/examples' word_language_model)
    st = one_rank()
    r = Rank(step=0.35, forward=0.35)
    for _ in range(100):
        st.on_message(r.sample(unit="ops/s", throughput=50_000.0))
    snap = st.snapshot()
    assert snap.throughput_unit == "steps/s"
    (mode,) = [m for m in snap.scoreboard if m.mode == "async"]
    assert mode.throughput == pytest.approx(1 / 0.35, rel=0.1)
    assert mode.seconds == pytest.approx(10.0 - 0.4, abs=1e-6)  # from the window after the first step
    assert max(snap.throughput_history) < 15  # no ops/s left in the steps/s history
    assert snap.throughput == pytest.approx(1 / 0.35, rel=0.2)


def test_a_new_step_source_starts_the_scoreboard_and_the_runs_mean_step_again():
    """Backward calls counted before a late first optimizer step (gradient accumulation): the agent's
    count goes on, but the steps counted, the scoreboard's rate and the run's mean step are the optimizer's
    steps' alone from then on."""
    st = one_rank()
    r = Rank(step=0.01)
    feed(st, [r], 1.0)  # 100 backward calls a second
    assert st.snapshot().steady.throughput == pytest.approx(100, rel=0.15)
    r.source, r.step, r.per_step = "optimizer", 0.2, {"forward": 0.2}
    r.next_end = r.t + r.step
    feed(st, [r], 4.0)  # 5 optimizer steps a second
    snap = st.snapshot()
    assert snap.steps.source.value == "optimizer" and r.before == 100  # the backward calls
    assert snap.steps.count == r.count - 100 == 19  # 0.2 s steps over ~4 s
    assert snap.steady.throughput == pytest.approx(5, rel=0.15)
    assert snap.steady.seconds < 4.0  # the window of the change counts in neither source's figure
    assert snap.steps.run_seconds == pytest.approx(0.2, rel=0.1)  # the run's mean step: the new source's
    assert snap.steps.run_phases.forward == pytest.approx(0.2, rel=0.1)  # not 10 ms backward calls'


def test_steps_the_agent_held_back_are_not_counted_again_when_it_sends_them():
    """A source that may still be replaced (backward calls) is held back for a second: the agent's
    samples carry its rate in steps/s but no steps; the sample that releases them carries the count so
    far. A short run (600 steps in 0.24 s) had its one steady window credited with every step, 864 steps
    in 0.15 s: more than the run did."""
    import dataclasses

    st = one_rank()
    r = Rank(step=0.001, forward=0.001)  # 100 steps a window
    held = 0
    for _ in range(3):
        msg = r.sample()
        rate = (r.count - held) / msg.window
        held = r.count
        st.on_message(dataclasses.replace(msg, steps=None, unit="steps/s", throughput=rate))
    feed(st, [r], 1.0)
    snap = st.snapshot()
    assert snap.steps.count == r.count == 1300
    assert snap.steady.done <= r.count
    assert snap.steady.throughput == pytest.approx(1000, rel=0.05)


def test_the_first_step_of_a_source_that_took_over_is_not_in_the_runs_mean():
    """LBFGS: its closure's backward calls went out as steps before its first optimizer step ended; that
    first optimizer step began at the last closure's backward end, not at a step of its own, so it is
    short (its optimizer part alone). Three ~55 s steps read a mean of 18.6 s with it."""
    st = one_rank()
    r = Rank(step=0.05, forward=0.05)
    feed(st, [r], 1.0)  # 20 backward calls
    r.source, r.per_step = "optimizer", {"optimizer": 0.01}
    r.next_end = r.t + 0.01  # the first optimizer step ends just after the last backward call
    st.on_message(r.sample(), source=0)
    r.step, r.per_step = 1.0, {"forward": 0.5, "backward": 0.49, "optimizer": 0.01}
    r.next_end += 1.0 - 0.05  # then a whole step a second after it
    feed(st, [r], 5.0)
    snap = st.snapshot()
    assert snap.steps.source.value == "optimizer"
    # the 20 backward calls are not optimizer steps: the count is the optimizer's alone (25 before)
    assert snap.steps.count == r.count - 20 and r.before == 20
    assert snap.steps.run_seconds == pytest.approx(1.0, rel=0.02)
    assert snap.steps.run_phases.forward == pytest.approx(0.5, rel=0.02)


def test_a_before_above_the_count_reads_no_steps_not_a_negative_count():
    """A malformed sample (``Steps.before`` above ``count``: no agent sends it) cannot make the steps
    counted negative."""
    st = one_rank()
    r = Rank(step=0.05)
    for _ in range(20):
        msg = r.sample()
        if msg.steps is not None:
            msg = dataclasses.replace(msg, steps=dataclasses.replace(msg.steps, before=10**9))
        st.on_message(msg, source=0)
    assert st.snapshot().steps.count == 0
