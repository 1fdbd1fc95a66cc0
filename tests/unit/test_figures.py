"""The figures model/ derives once (model/figures.py) and the one builder that carries them."""

from __future__ import annotations

import dataclasses

import pytest
from fakes.fake_session import make_snapshot
from torchpar_top.contract.snapshot import ChildStatus, ExecutorView, ModeStats, RankView, SyncSite
from torchpar_top.contract.vocab import ChildState, ExecutorKind, Mode, Quantity, ThroughputUnit
from torchpar_top.model import figures
from torchpar_top.model.snapshot import SHOWN_LOG, build, rebuild


def _ex(name: str, value: int, capacity: int | None, kind: ExecutorKind = ExecutorKind.EMULATED_STREAM, **kw):
    fields = {"history": (), "busy": (), "blocked": None} | kw
    return ExecutorView(name, kind, Quantity.DEPTH, value, capacity, 0, 0, True, **fields)


def test_window_and_mean() -> None:
    assert list(figures.window(list(range(100)), 0.1)) == list(range(50, 100))  # the last 5 s at 10 Hz
    assert figures.windows(0.0) == figures.DEFAULT_WINDOWS
    assert figures.mean([]) is None and figures.mean([1.0, 3.0]) == 2.0


def test_lanes_are_means_over_the_window_per_lane() -> None:
    busy = (0.0,) * 10 + (1.0,) * 50  # the last 50 windows (5 s at 10 Hz) all busy
    e = _ex("s0", 1, 8, busy=busy, running=(0.5,) * 60, core_wait=(0.25,) * 60)
    plain = _ex("s1", 1, 8, busy=(0.5,) * 60)
    lanes = figures.lanes([e, plain], busy, (0.2,) * 60, (), (0.3,) * 60, (0.4,) * 60, (), 0.1)
    assert lanes.windows == 50
    assert lanes.frontend.busy == 1.0 and lanes.frontend.wait == pytest.approx(0.2)
    assert lanes.frontend.core_wait is None  # no schedstat: no split
    assert lanes.of(e) is not None and (lanes.of(e).busy, lanes.of(e).running, lanes.of(e).core_wait) == (
        1.0,
        0.5,
        0.25,
    )
    assert lanes.of(plain).running is None and lanes.of(plain).busy == 0.5
    assert (lanes.overlap, lanes.overlap_high, lanes.overlap_in_progress) == (
        pytest.approx(0.3),
        pytest.approx(0.4),
        None,
    )


def test_queues_summed_leave_out_the_eager_cpus_capacity() -> None:
    assert figures.queue_depth([]) is None
    q = figures.queue_depth([_ex("a", 3, 8), _ex("b", 2, 4), _ex("cpu", 0, None, ExecutorKind.EAGER)])
    assert q is not None and (q.value, q.capacity) == (5, 12)
    q = figures.queue_depth([_ex("a", 3, 8), _ex("pool", 7, None, ExecutorKind.INTEROP_POOL)])
    assert q is not None and (q.value, q.capacity) == (10, None)  # unbounded


def test_primary_rank_ranks_running_and_core_load() -> None:
    assert figures.primary_rank([None]) is None and figures.primary_rank([3, None, 1]) == 1
    ranks = [
        RankView(0, 1, ChildState.RUNNING, None, ThroughputUnit.ITEMS, 0),
        RankView(1, 2, ChildState.EXITED, None, ThroughputUnit.ITEMS, 0),
    ]
    assert figures.ranks_running(ranks) == 1
    assert figures.core_load([]) is None and figures.core_load([100.0, 50.0]) == 75.0


def test_steady_weights_the_modes_by_their_seconds_and_ratio_needs_both() -> None:
    a, s = ModeStats(Mode.ASYNC, 30.0, 10.0, 100.0, 0.1), ModeStats(Mode.SYNC, 10.0, 5.0, 1.0, None)
    steady = figures.steady([a, s])
    assert steady is not None
    assert (steady.seconds, steady.done) == (40.0, 350.0)
    assert steady.throughput == pytest.approx(350.0 / 40.0)
    assert steady.mean_depth == pytest.approx((100.0 * 30 + 1.0 * 10) / 40)
    assert steady.frontend_wait == pytest.approx(0.1)  # only the mode that measured it
    assert figures.steady([ModeStats(Mode.ASYNC, 0.0, None, None, None)]) is None
    assert figures.ratio([a, s]) == 2.0 and figures.ratio([a]) is None


def test_build_derives_and_refuses_a_derived_field() -> None:
    common = dict(t=1.0, experiment="x", description="", mode=Mode.ASYNC, paused=False, interval=0.1)
    child = ChildStatus(None, ChildState.RUNNING)
    snap = build(**common, child=child, cores=(50.0, 100.0), executors=(_ex("a", 3, 8),))
    assert snap.core_load == 75.0 and snap.depth is not None and snap.depth.value == 3
    assert snap.lanes is not None and snap.steady is None
    with pytest.raises(TypeError, match="derived by build"):
        build(**common, child=child, core_load=1.0)


def test_rebuild_derives_again_and_cuts_the_log() -> None:
    snap = make_snapshot()
    old = dataclasses.replace(snap, core_load=None, lanes=None)  # as a recording of an older version
    again = rebuild(old)
    assert again.core_load == snap.core_load and again.lanes == snap.lanes
    many = tuple(dataclasses.replace(snap.log[0], seq=i) for i in range(SHOWN_LOG + 50))
    assert len(rebuild(snap, log=many).log) == SHOWN_LOG


def test_build_lists_sync_sites_by_rate_then_count() -> None:
    common = dict(t=1.0, experiment="x", description="", mode=Mode.ASYNC, paused=False, interval=0.1)
    sites = (
        SyncSite("b.py:2", "item()", 5, 1.0),
        SyncSite("a.py:1", "item()", 9, 1.0, rank=1),
        SyncSite("a.py:1", "item()", 9, 1.0, rank=0),
        SyncSite("c.py:3", "cpu()", 1, 7.0),
    )
    snap = build(**common, child=ChildStatus(None, ChildState.RUNNING), syncpoints=sites)
    assert [(s.where, s.rank) for s in snap.syncpoints] == [
        ("c.py:3", None),
        ("a.py:1", 0),
        ("a.py:1", 1),
        ("b.py:2", None),
    ]
