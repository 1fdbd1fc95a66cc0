"""The steps panel and the ranks table's step columns, drawn through Pilot from a FakeSession."""

from __future__ import annotations

import dataclasses

from fakes.fake_session import STEP_PHASES, FakeSession, make_run_snapshot, make_steps_snapshot
from pilot import run_async, settle, text_of
from torchpar_top.contract.vocab import PHASES
from torchpar_top.tui.app import TorchparTopApp
from torchpar_top.tui.widgets.ranks import RanksPanel
from torchpar_top.tui.widgets.steps import StepsPanel, cells, shares


def test_cells_split_the_bar_by_shares_exactly() -> None:
    parts = shares(make_steps_snapshot().ranks[1].steps)
    split = dict(cells(parts, 44))
    assert sum(split.values()) == 44
    total = sum(getattr(STEP_PHASES[1], p) for p in PHASES)
    assert abs(split["forward"] - 44 * STEP_PHASES[1].forward / total) <= 1
    assert "transfer" not in split or split["transfer"] <= 1


@run_async
async def test_the_panel_draws_a_bar_per_rank_and_marks_the_straggler() -> None:
    app = TorchparTopApp(FakeSession(make_steps_snapshot()), render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        panel = app.query_one(StepsPanel)
        assert panel.display
        lines = text_of(panel).splitlines()
        assert "forward" in lines[0] and "comm" in lines[0]  # the legend
        r0, r1 = (line for line in lines if line.startswith(("r0", "r1")))
        assert "22.0 ms" in r0 and "43.5/s" in r0 and "straggler" not in r0
        assert "◀ straggler: forward 4.0×" in r1
        assert "backward calls" in str(panel.border_title)
        # the bar: forward (its colour) takes about its share of rank 1's bar
        strip = panel.render_line(lines.index(r1))
        forward_style = panel.style("steps--forward")
        fwd = sum(len(s.text) for s in strip if s.style and s.style.color == forward_style.color)
        bar = sum(len(s.text) for s in strip if s.text and set(s.text) == {"█"})
        assert abs(fwd / bar - STEP_PHASES[1].forward / sum(getattr(STEP_PHASES[1], p) for p in PHASES)) < 0.1
        ranks = text_of(app.query_one(RanksPanel))
        assert "slowest" in ranks and "fwd 55%" in ranks and "comm 50%" in ranks and "22.0 ms" in ranks


@run_async
async def test_a_straggler_held_back_by_contention_is_marked_waiting_for_a_core() -> None:
    snap = make_steps_snapshot()
    snap = dataclasses.replace(snap, straggler=dataclasses.replace(snap.straggler, core_wait=0.0081))
    app = TorchparTopApp(FakeSession(snap), render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        r1 = next(line for line in text_of(app.query_one(StepsPanel)).splitlines() if line.startswith("r1"))
        assert "◀ straggler: waits for a core (forward 4.0×), others wait 9.20 ms/step" in r1, r1


@run_async
async def test_the_title_says_how_many_steps_are_timed_only_where_some_are_not() -> None:
    snap = make_steps_snapshot()

    def timed(share: float | None):
        return dataclasses.replace(
            snap,
            ranks=tuple(
                dataclasses.replace(r, steps=dataclasses.replace(r.steps, timed_share=share))
                for r in snap.ranks
            ),
        )

    session = FakeSession(timed(0.25))
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        panel = app.query_one(StepsPanel)
        assert "(timed in 1 step of 4)" in str(panel.border_title)
        for share in (0.8, 1.0, None):  # every step, or nearly (a share of 0.8 read "1 step of 1")
            session.snapshot_value = timed(share)
            app.refresh_from_session()
            await pilot.pause()
            assert "timed in" not in str(panel.border_title), share


@run_async
async def test_the_ranks_table_shows_a_waits_column_where_a_rank_waits_for_a_core() -> None:
    snap = make_steps_snapshot()
    waits = (0.01, 0.42)
    contended = dataclasses.replace(
        snap, ranks=tuple(dataclasses.replace(r, core_wait=w) for r, w in zip(snap.ranks, waits, strict=True))
    )
    session = FakeSession(contended)
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        lines = text_of(app.query_one(RanksPanel)).splitlines()
        assert "waits" in lines[0]
        r0, r1 = (line for line in lines if line.startswith(("r0", "r1")))
        assert "42%" in r1 and " 1%" in r0
        session.snapshot_value = snap  # nobody waits (or it is not measured): no column
        app.refresh_from_session()
        await pilot.pause()
        assert "waits" not in text_of(app.query_one(RanksPanel)).splitlines()[0]


@run_async
async def test_no_steps_no_panel_and_identical_ranks_say_so() -> None:
    app = TorchparTopApp(FakeSession(make_run_snapshot()), render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        assert not app.query_one(StepsPanel).display
    app = TorchparTopApp(FakeSession(make_steps_snapshot(straggler=False)), render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        panel = app.query_one(StepsPanel)
        assert "no straggler" in str(panel.border_title) and "◀" not in text_of(panel)


@run_async
async def test_a_rank_that_stopped_stepping_says_for_how_long_and_where_it_waits() -> None:
    snap = make_steps_snapshot(straggler=False)
    ranks = tuple(
        dataclasses.replace(
            r,
            at="sleep at ddp_steps.py:66 (forward)" if r.rank == 1 else "running at ddp_steps.py:91 (main)",
            steps=dataclasses.replace(r.steps, stalled=12.34 if r.rank == 1 else None),
        )
        for r in snap.ranks
    )
    app = TorchparTopApp(FakeSession(dataclasses.replace(snap, ranks=ranks)), render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        lines = text_of(app.query_one(StepsPanel)).splitlines()
        r0, r1 = (line for line in lines if line.startswith(("r0", "r1")))
        assert "◀ no step for 12.3 s: sleep at ddp_steps.py:66 (forward)" in r1, r1
        assert "◀" not in r0  # it steps: where it is is not said
        # its bar is its steps' before the stall: drawn faded, the stepping rank's solid
        assert "░" in r1 and "█" not in r1 and "█" in r0 and "░" not in r0
        table = text_of(app.query_one(RanksPanel)).splitlines()
        t0, t1 = (line for line in table if line.startswith(("r0", "r1")))
        assert "stalled" in t1 and "stalled" not in t0  # not its slowest phase before the stall
        assert "no step for" not in str(app.query_one(StepsPanel).border_title)
        ranks = tuple(dataclasses.replace(r, steps=dataclasses.replace(r.steps, stalled=15.0)) for r in ranks)
        app.session.snapshot_value = dataclasses.replace(snap, ranks=ranks)  # type: ignore[attr-defined]
        app.refresh_from_session()
        await pilot.pause()
        assert str(app.query_one(StepsPanel).border_title).endswith("· no step for 15.0 s")


@run_async
async def test_before_the_straggler_is_judged_the_title_says_so_not_no_straggler() -> None:
    snap = make_steps_snapshot(straggler=False)
    session = FakeSession(dataclasses.replace(snap, straggler_windows=3))
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        title = str(app.query_one(StepsPanel).border_title)
        assert "straggler: judging, 3 of 5 s" in title and "no straggler" not in title, title


@run_async
async def test_short_screens_put_the_panel_aside_the_ranks_keep_the_slowest_phase() -> None:
    snap = make_steps_snapshot()
    app = TorchparTopApp(FakeSession(dataclasses.replace(snap)), render_interval=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert not app.query_one(StepsPanel).display
        assert "fwd 55%" in text_of(app.query_one(RanksPanel))


def _rated(snap, per_second: float):
    """``snap`` with every rank's (and the header's) step rate at ``per_second``."""
    ranks = tuple(
        dataclasses.replace(
            r, throughput=per_second, steps=dataclasses.replace(r.steps, per_second=per_second)
        )
        for r in snap.ranks
    )
    return dataclasses.replace(
        snap,
        ranks=ranks,
        throughput=per_second,
        steps=dataclasses.replace(snap.steps, per_second=per_second),
    )


@run_async
async def test_the_header_shows_the_step_rate_the_steps_panel_shows() -> None:
    """The steps panel is redrawn twice a second on the timer, the header every frame: the header's step
    rate is the one the panel shows, not the newest snapshot's (they read 121 and 110 on one screen)."""
    from torchpar_top.tui.widgets.header import HeaderBar

    now = [100.0]
    session = FakeSession(_rated(make_steps_snapshot(), 40.0))
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        header, panel = app.query_one(HeaderBar), app.query_one(StepsPanel)
        panel.clock = app.query_one(RanksPanel).clock = lambda: now[0]

        def rates() -> tuple[str, str]:
            head = text_of(header).split(" steps/s")[0].split()[-1]
            r0 = next(line for line in text_of(panel).splitlines() if line.startswith("r0"))
            return head, r0.split()[-1].removesuffix("/s")

        held = 0
        for t, rate in ((100.0, 41.0), (100.1, 42.0), (100.3, 43.0), (100.5, 44.0), (100.7, 45.0)):
            now[0] = t
            session.snapshot_value = _rated(session.snapshot_value, rate)
            app.refresh_from_session(timed=True)
            await pilot.pause()
            head, shown = rates()
            assert head == shown, (t, text_of(header))
            held += shown != f"{rate:.1f}"
        assert held >= 2  # the panel kept a turn's figure (and the header with it) at least twice
        assert rates()[0] == "44.0"  # the figure of 100.5's turn at 100.7
        session.snapshot_value = _rated(session.snapshot_value, 60.0)  # a key's redraw: at once, both
        app.refresh_from_session()
        await pilot.pause()
        assert rates() == ("60.0", "60.0")
