"""A panel joins its content lines to their border and padding itself (``SnapshotPanel.render_lines``):
every line it gives must be the line Textual's own ``StylesCache`` draws, whole or cropped, in every
theme and line filter, and where a style changes the content itself, Textual draws.

Driven through Pilot against a FakeSession with the render timer off.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fakes.fake_session import FakeSession, make_run_snapshot, make_snapshot
from pilot import run_async, settle
from textual.geometry import Region
from textual.pilot import Pilot
from textual.strip import Strip
from torchpar_top.contract.snapshot import Snapshot
from torchpar_top.tui import app as app_module
from torchpar_top.tui.app import TorchparTopApp
from torchpar_top.tui.widgets.panel import SnapshotPanel

SIZE = (120, 36)


@asynccontextmanager
async def _screen(snapshot: Snapshot) -> AsyncIterator[tuple[TorchparTopApp, Pilot]]:
    """The app drawing ``snapshot`` (render timer off) in a SIZE terminal, laid out and drawn."""
    app = TorchparTopApp(FakeSession(snapshot), render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        yield app, pilot


def _textual(panel: SnapshotPanel, crop: Region) -> list[Strip]:
    """What Textual's own render draws for ``crop`` of ``panel``, from nothing cached."""
    panel._styles_cache.clear()
    return panel._styles_cache.render_widget(panel, crop)


def _crops(panel: SnapshotPanel) -> list[Region]:
    """The whole panel, its content rows, a band across border and content, a cut in x, one line."""
    width, height = panel.region.size
    return [
        Region(0, 0, width, height),
        Region(0, 1, width, height - 2),
        Region(0, height - 2, width, 2),
        Region(3, 0, width - 7, height),
        Region(5, 1, 9, 1),
    ]


def _bordered(app: TorchparTopApp) -> list[SnapshotPanel]:
    """The panels shown with a border and at least one content row."""
    return [
        p
        for p in app.query(SnapshotPanel)
        if p.display and p.region.height > p.styles.gutter.height and p.styles.gutter.left
    ]


def _assert_as_textual(app: TorchparTopApp) -> int:
    """Every crop of every bordered panel draws what Textual draws, through the join (not Textual's
    path). Returns how many panels were compared."""
    panels = _bordered(app)
    assert panels, "no bordered panel on screen"
    for panel in panels:
        assert panel.sides() is not None, panel.id
        for crop in _crops(panel):
            ours = panel.render_lines(crop)
            assert ours == _textual(panel, crop), (panel.id, crop)
            assert [s.cell_length for s in ours] == [crop.width] * crop.height
    return len(panels)


@run_async
async def test_every_panel_draws_what_textual_draws():
    session = FakeSession(make_snapshot(executors=2, gpus=2))
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert _assert_as_textual(app) >= 5
        session.snapshot_value = make_run_snapshot()  # other panels, other rows
        await settle(pilot)
        _assert_as_textual(app)


@run_async
async def test_themes_and_line_filters_are_followed():
    async with _screen(make_snapshot(executors=2)) as (app, pilot):
        panel = _bordered(app)[0]
        dark = panel.sides()
        assert dark is not None
        app.theme = "textual-light"  # another border colour and background
        await settle(pilot)
        light = panel.sides()
        assert light is not None and light.left != dark.left
        _assert_as_textual(app)
        app.theme = "ansi-dark"  # the terminal's own colours: Textual's truecolor filter turns off
        await settle(pilot)
        ansi = panel.sides()
        assert ansi is not None and len(ansi.filters) < len(dark.filters)
        _assert_as_textual(app)


def test_no_color_filter_is_applied_to_the_content_too(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")  # Textual adds its monochrome filter when the app is made

    async def body() -> None:
        async with _screen(make_snapshot(executors=2)) as (app, _):
            sides = _bordered(app)[0].sides()
            assert sides is not None and len(sides.filters) == 2
            _assert_as_textual(app)

    asyncio.run(body())


@run_async
async def test_a_style_that_changes_the_content_leaves_the_drawing_to_textual():
    async with _screen(make_snapshot(executors=2)) as (app, pilot):
        panels = _bordered(app)
        panels[0].styles.tint = "red 40%"
        panels[1].styles.text_opacity = "50%"
        await settle(pilot)
        for panel in panels[:2]:
            assert panel.sides() is None, panel.id
            for crop in _crops(panel):
                assert panel.render_lines(crop) == _textual(panel, crop)
        panels[0].styles.tint = "red 0%"  # back to plain: joined again
        await settle(pilot)
        assert panels[0].sides() is not None


@run_async
async def test_a_changed_line_is_drawn_new_after_a_resize():
    async with _screen(make_snapshot(executors=2)) as (app, pilot):
        before = {p.id: p.sides() for p in _bordered(app)}
        await pilot.resize_terminal(100, 30)
        await settle(pilot)
        after = _bordered(app)
        assert any(p.sides() is not before.get(p.id) for p in after)
        _assert_as_textual(app)


class _TintableApp(TorchparTopApp):
    """The app with one more rule: a class that changes only a panel's background (not its border,
    padding or filters), so only a style update can tell the sides are stale."""

    CSS_PATH = str(Path(app_module.__file__).with_name("app.tcss"))  # the app's, not one beside this file
    CSS = "SnapshotPanel.-test-background { background: red; }"


@run_async
async def test_a_style_update_draws_the_sides_again():
    app = _TintableApp(FakeSession(make_snapshot(executors=2)), render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        panel = _bordered(app)[0]
        before = panel.sides()
        panel.add_class("-test-background")
        await settle(pilot)
        after = panel.sides()
        assert before is not None and after is not None and after.left != before.left
        _assert_as_textual(app)
