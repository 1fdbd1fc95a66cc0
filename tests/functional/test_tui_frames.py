"""What a frame costs, kept honest: the line compositor writes what Textual's own would, panels with
means redraw twice a second on the timer, a line that comes and goes does not relayout every frame.

Driven through Pilot against a FakeSession with the render timer off: each test draws when it wants.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re

from fakes.fake_session import FakeSession, make_run_snapshot, make_snapshot
from pilot import settle
from textual import messages
from textual._compositor import Compositor
from torchpar_top.tui.app import TorchparTopApp
from torchpar_top.tui.compositor import LineCompositor, LineScreen
from torchpar_top.tui.widgets.cores import CoresPanel
from torchpar_top.tui.widgets.panel import SHRINK_AFTER, Pad, SnapshotPanel
from torchpar_top.tui.widgets.queues import QueuesPanel
from torchpar_top.tui.widgets.threads import ThreadsPanel

SIZE = (120, 36)


def _moved(snap, k: int):
    """``snap`` with what changes from one frame to the next: loads, histories, the log."""

    def rot(values):
        return values[k:] + values[:k]

    return dataclasses.replace(
        snap,
        cores=tuple((c + 17 * k) % 100 for c in snap.cores),
        executors=tuple(
            dataclasses.replace(
                e,
                value=(e.value + 100 * k) % 1024,
                history=rot(e.history),
                busy=rot(e.busy),
                running=rot(e.running),
            )
            for e in snap.executors
        ),
        frontend_busy=rot(snap.frontend_busy),
        throughput=(snap.throughput or 0) + k,
        log=snap.log
        + tuple(
            dataclasses.replace(snap.log[-1], seq=snap.log[-1].seq + i + 1, text=f"line {i}")
            for i in range(k)
        ),
    )


_IDLE_MOVE = re.compile(r"\x1b\[\d+;\d+H(?=\x1b\[\d+;\d+H|\n|$)")


def _drawn(output: str) -> str:
    """A partial update's bytes without its idle cursor moves: a move followed by nothing written (then
    another absolute move, or the end of the span's line) draws nothing. Textual writes one where a
    span ends exactly at the start of a widget's cut (an empty crop of that widget's strip); when that
    widget is not rendered (nothing of it changed, or it lies behind a widget that did) there is no
    strip and no move."""
    return _IDLE_MOVE.sub("", output)


def _composed(app: TorchparTopApp) -> list:
    """The updates ``app`` writes to the terminal from now on (each compose's), as a list kept current."""
    updates: list = []
    display = app._display
    app._display = lambda screen, update: (updates.append(update), display(screen, update))[1]
    return updates


def test_a_partial_update_writes_what_textuals_own_would():
    """Each frame's compose (at the end of refresh_from_session) is also rendered by Textual's own
    partial update from the same changed regions: the same spans, the same bytes."""

    async def body() -> None:
        base = make_snapshot(executors=2)
        session = FakeSession(base)
        app = TorchparTopApp(session, render_interval=None)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = app.screen
            comp = screen._compositor
            assert isinstance(comp, LineCompositor)
            pairs = []

            def both():
                dirty = set(comp._dirty_regions)
                ours = LineCompositor.render_partial_update(comp)
                comp._dirty_regions.update(dirty)
                theirs = Compositor.render_partial_update(comp)  # Textual's, rendering every line
                pairs.append((dirty, ours, theirs))
                return ours

            comp.render_partial_update = both
            for k in (1, 2, 3):
                session.snapshot_value = _moved(base, k)
                pairs.clear()
                app.refresh_from_session()  # composes before it returns
                assert len(pairs) == 1, "not one compose in the frame"
                dirty, ours, theirs = pairs[0]
                assert dirty, "nothing changed"
                assert ours is not None and theirs is not None
                assert ours.spans == theirs.spans
                assert _drawn(ours.render_segments(app.console)) == _drawn(
                    theirs.render_segments(app.console)
                )
                await pilot.pause()

    asyncio.run(body())


def test_a_changed_line_is_composed_without_a_message_to_its_panel():
    """LineScreen.repaint and frame: the panels whose lines changed go straight to the compose at the end of
    the frame (no Prompt to their own tasks, no Update to the screen's, no wake-up of the update timer),
    and the compose writes exactly those lines."""

    async def body() -> None:
        base = make_snapshot(executors=2)
        session = FakeSession(base)
        app = TorchparTopApp(session, render_interval=None)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, LineScreen)
            cores = app.query_one(CoresPanel)
            posted: list[object] = []
            for widget in (*app.query(SnapshotPanel), screen):
                widget.post_message = lambda m, post=widget.post_message: (posted.append(m), post(m))[1]
            updates = _composed(app)
            for step in (11, 37):  # the first change after start may relayout (the panel learns its rows)
                moved = dataclasses.replace(base, cores=tuple((c + step) % 100 for c in base.cores))
                session.snapshot_value = moved
                app.refresh_from_session()
                if step == 11:
                    await pilot.pause()
                    posted.clear()
                    updates.clear()
            # composed in the frame itself: nothing left dirty, the update timer not woken for it
            assert updates, "nothing composed"
            assert not screen._dirty_widgets and not screen._update_timer._active.is_set()
            await pilot.pause()
            assert not [m for m in posted if isinstance(m, (messages.Prompt, messages.Update))]
            drawn = {y for update in updates for y, _, _ in update.spans}
            top, bottom = cores.content_region.y, cores.content_region.bottom
            assert drawn and drawn <= set(range(top, bottom)), (drawn, top, bottom)
            text = "\n".join(cores.render_line(y).text for y in range(cores.size.height))
            assert f"{(base.cores[0] + 37) % 100:.0f}%" in text

    asyncio.run(body())


def test_a_frame_that_cannot_compose_leaves_its_lines_to_the_update_timer():
    """Inside an app batch (Textual composes nothing until it ends) the frame's compose does nothing: the
    changed lines stay dirty, the update timer is resumed, and they are written after the batch."""

    async def body() -> None:
        base = make_snapshot(executors=2)
        session = FakeSession(base)
        app = TorchparTopApp(session, render_interval=None)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            screen = app.screen
            cores = app.query_one(CoresPanel)
            updates = _composed(app)
            for step in (11, 41):  # the first change after start may relayout (the panel learns its rows)
                session.snapshot_value = dataclasses.replace(
                    base, cores=tuple((c + step) % 100 for c in base.cores)
                )
                if step == 11:
                    app.refresh_from_session()
                    await settle(pilot)
                    continue
                updates.clear()
                with app.batch_update():
                    app.refresh_from_session()
                    assert not updates
                    assert cores in screen._dirty_widgets and screen._update_timer._active.is_set()
            await pilot.pause()
            assert updates, "nothing composed after the batch"
            assert not screen._dirty_widgets
            drawn = {y for update in updates for y, _, _ in update.spans}
            assert drawn & set(range(cores.content_region.y, cores.content_region.bottom))

    asyncio.run(body())


def test_inner_size_is_textuals_size_for_every_panel_laid_out():
    async def body() -> None:
        app = TorchparTopApp(FakeSession(make_run_snapshot()), render_interval=None)
        async with app.run_test(size=SIZE) as pilot:
            for size in (SIZE, (90, 28), SIZE):
                await pilot.resize_terminal(*size)
                await settle(pilot)
                laid_out = [p for p in app.query(SnapshotPanel) if p.display and p.size.width]
                assert len(laid_out) >= 4
                assert [p.inner_size() for p in laid_out] == [p.size for p in laid_out], size

    asyncio.run(body())


def test_panels_of_means_redraw_twice_a_second_on_the_timer():
    async def body() -> None:
        snap = make_snapshot()
        session = FakeSession(snap)
        app = TorchparTopApp(session, render_interval=None)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            threads = app.query_one(ThreadsPanel)
            now = [100.0]
            threads.clock = lambda: now[0]

            def frontend_text() -> str:
                return next(
                    threads.render_line(y).text
                    for y in range(threads.size.height)
                    if "frontend" in threads.render_line(y).text
                )

            def with_frontend(percent: float):
                groups = tuple(
                    dataclasses.replace(g, cpu_percent=percent) if g.role == "frontend (main)" else g
                    for g in snap.thread_groups
                )
                return dataclasses.replace(snap, thread_groups=groups)

            session.snapshot_value = with_frontend(55.0)
            app.refresh_from_session(timed=True)
            await pilot.pause()
            assert "55%" in frontend_text()
            now[0] += 0.2
            session.snapshot_value = with_frontend(66.0)
            app.refresh_from_session(timed=True)  # a frame 0.2 s later: the panel keeps its figures
            await pilot.pause()
            assert "55%" in frontend_text()
            now[0] += 0.4
            app.refresh_from_session(timed=True)  # 0.6 s after its last redraw: redrawn
            await pilot.pause()
            assert "66%" in frontend_text()
            session.snapshot_value = with_frontend(77.0)
            app.refresh_from_session()  # not the timer (a key, a test): at once
            await pilot.pause()
            assert "77%" in frontend_text()

    asyncio.run(body())


def test_a_line_that_comes_and_goes_keeps_the_panel_tall_for_a_while():
    async def body() -> None:
        starved = make_run_snapshot()  # the threads panel's "starved" note is one more line
        calm = dataclasses.replace(starved, starved=None)
        session = FakeSession(starved)
        app = TorchparTopApp(session, render_interval=None)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            threads = app.query_one(ThreadsPanel)
            now = [10.0]
            threads.clock = lambda: now[0]
            app.refresh_from_session(force=True)
            tall = threads.rows_at(threads.size.width)
            session.snapshot_value = calm
            now[0] += 1.0
            app.refresh_from_session()
            rows = threads._rows_cache[1]
            assert len(rows) == tall and isinstance(rows[-1], Pad)  # kept: no relayout
            now[0] += SHRINK_AFTER
            session.snapshot_value = dataclasses.replace(calm)  # the next sample, the same figures
            app.refresh_from_session()
            assert threads.rows_at(threads.size.width) == tall - 1  # shrinks once it has lasted

    asyncio.run(body())


def test_a_panel_that_skipped_its_builds_still_keeps_its_height_for_a_while():
    """The launch queue builds nothing while its figures stay the same (drawn_key); the height it keeps
    when a line goes is counted from the last frame that still needed it, not from its last build."""

    async def body() -> None:
        noted = dataclasses.replace(make_run_snapshot(), notice="a notice: one more line")
        session = FakeSession(noted)
        app = TorchparTopApp(session, render_interval=None)
        async with app.run_test(size=SIZE) as pilot:
            queues = app.query_one(QueuesPanel)
            now = [10.0]
            queues.clock = lambda: now[0]
            await settle(pilot)
            tall = queues.rows_at(queues.size.width)
            for _ in range(10):  # ten seconds of the same figures: nothing built
                now[0] += 1.0
                session.snapshot_value = dataclasses.replace(noted)
                app.refresh_from_session()
            session.snapshot_value = dataclasses.replace(noted, notice="")
            now[0] += 1.0
            app.refresh_from_session()
            rows = queues._rows_cache[1]
            assert len(rows) == tall and isinstance(rows[-1], Pad)  # kept: no relayout

    asyncio.run(body())


def test_cached_background_opacity_and_style_follow_a_theme_and_a_class_change():
    """Panels keep Textual's ancestor-walked background, opacity and base style between style updates; a
    new theme or a class on the screen restyles them, and the cache with them."""
    from textual.dom import DOMNode
    from textual.widget import Widget
    from torchpar_top.tui.widgets.panel import SnapshotPanel

    def truth(panel):
        return (
            DOMNode.background_colors.fget(panel),
            Widget.opacity.fget(panel),
            DOMNode.rich_style.fget(panel),
        )

    def cached(panel):
        return panel.background_colors, panel.opacity, panel.rich_style

    async def body() -> None:
        app = TorchparTopApp(FakeSession(make_snapshot(executors=2)), render_interval=None)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panels = [p for p in app.query(SnapshotPanel) if p.display]
            assert panels
            before = {id(p): cached(p) for p in panels}
            assert all(cached(p) == truth(p) for p in panels)
            app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
            await settle(pilot)
            assert all(cached(p) == truth(p) for p in panels)
            assert any(cached(p)[0] != before[id(p)][0] for p in panels)  # the theme did change them
            assert any(cached(p)[2] != before[id(p)][2] for p in panels)
            app.screen.set_class(True, "-short")
            await settle(pilot)
            assert all(cached(p) == truth(p) for p in panels)

    asyncio.run(body())
