"""The replay keys through Pilot (a FakeSession records the calls), and the replay screen drawn from a real
TraceReplay driven by hand (``clock=False``: no timer, nothing here depends on timing)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fakes.fake_session import FakeSession, make_snapshot
from pilot import run_async, settle, text_of
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.widgets._footer import FooterKey
from torchpar_top.analysis import NO_GPU_NOTE
from torchpar_top.contract.snapshot import ReplayView, Snapshot
from torchpar_top.sources.trace import TraceReplay
from torchpar_top.tui import keys
from torchpar_top.tui.app import SEEK_SHARE, TorchparTopApp
from torchpar_top.tui.screens.picker import PickerScreen
from torchpar_top.tui.widgets.cores import CoresPanel
from torchpar_top.tui.widgets.gpus import GpusPanel
from torchpar_top.tui.widgets.header import HeaderBar
from torchpar_top.tui.widgets.lanes import LanesPanel
from torchpar_top.tui.widgets.log import LogPanel
from torchpar_top.tui.widgets.queues import QueuesPanel
from torchpar_top.tui.widgets.scoreboard import ScoreboardPanel
from torchpar_top.tui.widgets.threads import ThreadsPanel

SIZE = (120, 36)
DATA = Path(__file__).resolve().parents[1] / "data" / "hta"


def replay_snapshot() -> Snapshot:
    """The fake's snapshot, as a replay would serve it (the fake's numbers, a replay's view)."""
    return dataclasses.replace(
        make_snapshot(executors=2), replay=ReplayView("trace.json.gz", 0.0123, 0.0456, 0.01, 0.001)
    )


@run_async
async def test_the_replay_keys_call_the_session() -> None:
    session = FakeSession()
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        for key in (
            "full_stop",
            "comma",
            "left",
            "right",
            "home",
            "left_square_bracket",
            "right_square_bracket",
        ):
            await pilot.press(key)
        await pilot.pause()
    assert [c for c in session.calls if c[0] in ("step", "seek", "seek_start", "change_speed")] == [
        ("step", 1),
        ("step", -1),
        ("seek", -SEEK_SHARE),
        ("seek", SEEK_SHARE),
        ("seek_start",),
        ("change_speed", 0.5),
        ("change_speed", 2.0),
    ]
    assert SEEK_SHARE == 0.05
    assert not app.paused  # a live session: stepping pauses nothing


@run_async
async def test_stepping_a_replay_pauses_it_and_p_then_plays() -> None:
    session = FakeSession(replay_snapshot())
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("full_stop")
        await pilot.pause()
        assert app.paused and "PAUSED" in text_of(app.query_one(HeaderBar))
        await pilot.press("p")  # the replay paused itself to step: p plays it again
        await pilot.pause()
    assert [c for c in session.calls if c[0] in ("step", "set_paused")] == [
        ("step", 1),
        ("set_paused", False),
    ]


async def _palette(pilot: Pilot, query: str) -> list[str]:
    await pilot.press("ctrl+p")
    await pilot.pause()
    palette = pilot.app.screen
    assert isinstance(palette, CommandPalette)
    await pilot.press(*query)
    await pilot.pause(0.3)
    commands = palette.query_one(CommandList)
    return [str(commands.get_option_at_index(i).prompt) for i in range(commands.option_count)]


@run_async
async def test_the_palette_offers_the_replay_commands() -> None:
    session = FakeSession()
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        hits = await _palette(pilot, "faster replay")
        assert hits[0].splitlines()[0] == "Faster replay"
        await pilot.press("enter")
        await pilot.pause()
    assert ("change_speed", 2.0) in session.calls


@run_async
async def test_w_without_experiments_asks_the_session_instead_of_an_empty_picker() -> None:
    session = FakeSession(replay_snapshot(), experiments=())
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("w")
        await pilot.pause()
        assert not isinstance(app.screen, PickerScreen)
    assert ("switch_experiment", "") in session.calls


def replay(name: str, ticks: int = 0, **kwargs) -> TraceReplay:
    """A real TraceReplay, clock off, ``ticks`` frames in."""
    session = TraceReplay(DATA / name, clock=False, **kwargs)
    for _ in range(ticks):
        session.tick()
    return session


@run_async
async def test_the_replay_screen_says_where_each_number_comes_from() -> None:
    session = replay("a100_sxm4_5_streams.json.gz", ticks=120)
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        head = text_of(app.query_one(HeaderBar))
        assert "replay a100_sxm4_5_streams.json.gz" in head and "ASYNC" in head and "launches/s" in head
        assert "none in a replay" in text_of(app.query_one(CoresPanel))
        assert "none in a replay" in text_of(app.query_one(ThreadsPanel))
        assert not app.query_one(ScoreboardPanel).display
        queues = text_of(app.query_one(QueuesPanel)).splitlines()
        assert queues[0].startswith("» t = 0.121 s of 1.232 s · 0.01× (1.00 ms per frame) · playing")
        assert sum("cuda:0 s" in line for line in queues) == 6
        assert app.query_one(LanesPanel).border_title.startswith("lanes, last 50.0 ms of trace")
        gpus = app.query_one(GpusPanel)
        assert gpus.border_title == "GPU  1 device (from the trace, not NVML)"
        assert "NVIDIA A100-SXM4-80GB" in text_of(gpus) and "kernel-active" in text_of(gpus)
        assert "depth max 946 mean 663.3 (HTA's)" in "\n".join(app.query_one(LogPanel).plain_lines())
        before, duration = session.position, session.analysis.end - session.analysis.start
        await pilot.press("p")
        await pilot.press("right")
        await pilot.pause()
        assert "paused" in text_of(app.query_one(QueuesPanel))
        assert session.position == pytest.approx(before + 0.05 * duration, abs=1)
    assert session._thread is None  # closed with the app


@run_async
async def test_a_trace_without_gpu_work_is_a_clear_message_on_screen() -> None:
    session = replay("cpu_only.json.gz")
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert NO_GPU_NOTE[:60] in text_of(app.query_one(QueuesPanel)).replace("\n  ", " ")
        assert "finished" in text_of(app.query_one(HeaderBar))
        assert "no GPU activity in this trace" in text_of(app.query_one(GpusPanel))


def _footer_keys(app: TorchparTopApp) -> list[str]:
    return [k.key_display for k in app.query(FooterKey) if k.action != "command_palette"]


@run_async
async def test_a_replays_footer_shows_the_replay_keys_and_every_key_still_works() -> None:
    session = FakeSession(replay_snapshot())
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        shown = _footer_keys(app)
        assert shown == keys.footer_keys(replay=True)
        assert {"./,", "←/→", "[/]", "p", "r", "q"} <= set(shown)
        assert not {"s", "+/-", "w"} & set(shown)  # nothing to do in a replay: not offered
        await pilot.press("s", "right")  # still bound: the session answers (a replay says why not)
        await pilot.pause()
    assert [c[0] for c in session.calls if c[0] in ("toggle_sync", "seek")] == ["toggle_sync", "seek"]


@run_async
async def test_a_live_footer_shows_the_live_keys() -> None:
    app = TorchparTopApp(FakeSession(make_snapshot()), render_interval=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        shown = _footer_keys(app)
        assert shown == keys.footer_keys(replay=False)
        assert {"s", "+/-", "w", "p", "q"} <= set(shown) and not {"./,", "←/→", "[/]"} & set(shown)


@run_async
async def test_a_narrow_footer_keeps_the_essential_keys_whole() -> None:
    """Too narrow for every key, the footer shows the essential ones instead of cutting the last in half;
    the others stay bound (help lists them); wide again, every key is back."""
    live = keys.footer_width(replay=False)
    session = FakeSession(make_snapshot())
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=(live, 24)) as pilot:
        await settle(pilot)
        assert _footer_keys(app) == keys.footer_keys(replay=False)  # just room for all
        await pilot.resize_terminal(min(live, keys.footer_width(replay=True)) - 1, 24)
        await settle(pilot)
        assert _footer_keys(app) == keys.footer_keys(replay=False, narrow=True) == ["s", "p", "?", "q"]
        await pilot.press("w")  # not shown, still bound
        await pilot.pause()
        assert app.screen.__class__.__name__ == "PickerScreen"
        await pilot.press("escape")
        session.snapshot_value = replay_snapshot()  # a replay's essential keys
        await settle(pilot)
        assert _footer_keys(app) == keys.footer_keys(replay=True, narrow=True) == ["p", "←/→", "?", "q"]
        await pilot.resize_terminal(120, 24)
        await settle(pilot)
        assert _footer_keys(app) == keys.footer_keys(replay=True)


@run_async
async def test_below_seventy_columns_the_lanes_give_their_row_to_the_table() -> None:
    app = TorchparTopApp(FakeSession(make_snapshot(executors=2)), render_interval=None)
    async with app.run_test(size=(69, 30)) as pilot:
        await settle(pilot)
        lanes, board = app.query_one(LanesPanel), app.query_one(ScoreboardPanel)
        assert not lanes.display and board.display and board.size.width >= 50
        await pilot.resize_terminal(70, 30)
        await settle(pilot)
        assert lanes.display and board.display and "cpu-stream:0 " in text_of(lanes)
