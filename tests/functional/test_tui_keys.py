"""Keys, the command palette and odd terminals, driven through Pilot against a FakeSession.

The render timer is off (``render_interval=None``): each test calls ``refresh_from_session()`` when it
wants a redraw, so nothing here depends on timing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from typing import Awaitable, Callable

from fakes.fake_session import FakeSession, make_snapshot
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.widget import Widget

from torchpar_top.session.model import LogLine
from torchpar_top.tui.app import TorchparTopApp
from torchpar_top.tui.screens.help import HelpScreen
from torchpar_top.tui.screens.picker import PickerScreen
from torchpar_top.tui.widgets.cores import CoresPanel
from torchpar_top.tui.widgets.gpus import GpusPanel
from torchpar_top.tui.widgets.header import HeaderBar
from torchpar_top.tui.widgets.log import LogPanel
from torchpar_top.tui.widgets.queues import QueuesPanel
from torchpar_top.tui.widgets.threads import SYNC_NOTE, ThreadsPanel

SIZE = (120, 36)


def run_async(test: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    """Run an async test body in a fresh event loop (no pytest async plugin needed)."""

    @functools.wraps(test)
    def wrapper() -> None:
        asyncio.run(test())  # type: ignore[arg-type]

    return wrapper


def text_of(widget: Widget) -> str:
    """Every content line the widget draws, as plain text."""
    return "\n".join(widget.render_line(y).text for y in range(widget.size.height))


def log_text(log: LogPanel) -> str:
    """The log's lines as plain text."""
    return "\n".join(strip.text for strip in log.lines)


def header(app: TorchparTopApp) -> str:
    """The header line."""
    return text_of(app.query_one(HeaderBar))


def make_app(**snapshot_args: object) -> tuple[TorchparTopApp, FakeSession]:
    """An app on a fake session, timer off."""
    session = FakeSession(make_snapshot(**snapshot_args))  # type: ignore[arg-type]
    return TorchparTopApp(session, render_interval=None), session


@run_async
async def test_mount_starts_session_and_draws_async() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert session.names()[0] == "start"
        text = header(app)
        assert "torchpar-top" in text and "ASYNC" in text and "12.4 it/s" in text
        assert "depth 1024/1024" in text
    assert session.names().count("close") == 1


@run_async
async def test_s_toggles_sync() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s")
        assert ("toggle_sync",) in session.calls
        app.refresh_from_session()
        await pilot.pause()
        text = header(app)
        assert "SYNC" in text and "ASYNC" not in text
        # a frontend at ~100% of a core while in SYNC gets the note
        session.snapshot_value = make_snapshot(mode="sync")
        app.refresh_from_session()
        await pilot.pause()
        assert SYNC_NOTE in text_of(app.query_one(ThreadsPanel))


@run_async
async def test_plus_equals_minus_change_threads() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("plus", "equals_sign", "minus")
        assert [c for c in session.calls if c[0] == "change_threads"] == [
            ("change_threads", 1),
            ("change_threads", 1),
            ("change_threads", -1),
        ]
        await pilot.pause()
        assert "intra-op 3" in str(app.query_one(ThreadsPanel).border_title)


@run_async
async def test_w_then_enter_switches_experiment() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, PickerScreen)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, PickerScreen)
        assert ("switch_experiment", "multi-device") in session.calls
        assert "multi-device" in header(app)


@run_async
async def test_w_then_escape_cancels() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, PickerScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, PickerScreen)
        assert "switch_experiment" not in session.names()


@run_async
async def test_p_pauses_and_resumes() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await pilot.pause()
        assert ("set_paused", True) in session.calls
        assert "PAUSED" in header(app)
        await pilot.press("p")
        await pilot.pause()
        assert [c for c in session.calls if c[0] == "set_paused"] == [("set_paused", True), ("set_paused", False)]
        assert "PAUSED" not in header(app)


@run_async
async def test_question_mark_opens_help() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        from torchpar_top.tui.screens.help import HELP

        assert "waiting, not working" in HELP and "ASYNC" in HELP and "outstanding" in HELP
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@run_async
async def test_q_quits_and_closes_once() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert session.names().count("close") == 1
    assert app.return_code == 0


async def _palette_hits(pilot: Pilot, query: str) -> list[str]:
    """Open the command palette, type ``query``, wait for hits; returns their texts."""
    await pilot.press("ctrl+p")
    await pilot.pause()
    assert isinstance(pilot.app.screen, CommandPalette)
    await pilot.press(*query)
    commands = pilot.app.screen.query_one(CommandList)
    for _ in range(200):  # the palette searches in a worker; wait for it, without a clock
        await pilot.pause()
        if commands.option_count:
            break
    return [str(commands.get_option_at_index(i).prompt) for i in range(commands.option_count)]


@run_async
async def test_command_palette_toggles_sync() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        hits = await _palette_hits(pilot, "toggle sync")
        assert any("Toggle sync" in h for h in hits)
        await pilot.press("enter")
        await pilot.pause()
        assert ("toggle_sync",) in session.calls


@run_async
async def test_command_palette_offers_every_experiment() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        hits = await _palette_hits(pilot, "run experiment")
        for name in ("async", "multi-device", "intra-op", "inter-op"):
            assert f"Run experiment: {name}" in [h.splitlines()[0] for h in hits], hits


@run_async
async def test_command_palette_runs_an_experiment() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        hits = await _palette_hits(pilot, "Run experiment: inter-op")
        assert hits[0].splitlines()[0] == "Run experiment: inter-op"
        await pilot.press("enter")
        await pilot.pause()
        assert ("switch_experiment", "inter-op") in session.calls


@run_async
async def test_tiny_terminal_does_not_crash() -> None:
    app, session = make_app(executors=2, gpus=2, child_state="exited", exit_code=1)
    async with app.run_test(size=(40, 12)) as pilot:
        app.refresh_from_session()
        await pilot.pause()
        await pilot.press("s", "plus", "minus", "p")
        await pilot.press("question_mark")
        await pilot.pause()
        await pilot.press("escape", "w")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        await pilot.resize_terminal(20, 5)
        app.refresh_from_session()
        await pilot.pause()
    assert session.names().count("close") == 1


@run_async
async def test_many_cores_render() -> None:
    for cores in (64, 256):
        app, _ = make_app(cores=cores)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            panel = app.query_one(CoresPanel)
            assert panel.border_title is not None and f"CPU  {cores} cores" in str(panel.border_title)
            text = text_of(panel)
            assert " 0" in text or "0 " in text
            # every core is drawn: the last index appears in a label (per-cell or row start)
            assert str(cores - 1) in text or cores == 256


@run_async
async def test_queue_panel_is_honest_about_kinds() -> None:
    app, _ = make_app(executors=1, unbounded=True, eager=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = text_of(app.query_one(QueuesPanel))
        assert "depth" in text and "outstanding" in text
        assert "synchronous: depth 0" in text
        assert "full: launch blocks 61% of the time" in text
        assert "1024 / 1024" in text and "3 / ∞" in text


@run_async
async def test_gpus_and_no_gpu_status() -> None:
    app, _ = make_app(gpus=2)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = text_of(app.query_one(GpusPanel))
        assert text.count("kernel-active") == 2 and "cuda:1" in text and "61°C" in text
    app, _ = make_app(gpus=0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "no GPU: NVML library not found" in text_of(app.query_one(GpusPanel))


@run_async
async def test_log_appends_new_lines_and_child_exit() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = app.query_one(LogPanel)
        assert "TypedStorage" in log_text(log)
        app.refresh_from_session()  # same lines again: nothing appended
        await pilot.pause()
        assert log_text(log).count("TypedStorage") == 1
        snap = make_snapshot(child_state="exited", exit_code=1)
        session.snapshot_value = dataclasses.replace(snap, log=snap.log + (LogLine(6, "stdout", "bye"),))
        app.refresh_from_session()
        await pilot.pause()
        text = log_text(log)
        assert "bye" in text and "child exited with code 1" in text and "RuntimeError: out of memory" in text
        assert "child exited 1" in header(app)
        app.refresh_from_session()
        await pilot.pause()
        assert log_text(log).count("child exited with code 1") == 1


@run_async
async def test_render_timer_runs_and_close_is_called_once() -> None:
    session = FakeSession(make_snapshot())
    app = TorchparTopApp(session, render_interval=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "ASYNC" in header(app)
        app.exit()
    assert session.names().count("start") == 1
    assert session.names().count("close") == 1
