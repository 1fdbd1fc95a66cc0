"""A recording played on the screen: a real RecordingReplay driven by hand (``clock=False``), through Pilot:
the recorded host readings and scoreboard are shown (not a trace's "none in a replay"), and the replay keys
pause, step, seek and change the speed."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from fakes.recordings import store_snapshots, write_recording
from pilot import settle, text_of
from torchpar_top.contract.snapshot import GpuView, ModeStats
from torchpar_top.contract.vocab import Mode
from torchpar_top.sources.recording import RecordingReplay
from torchpar_top.tui.app import TorchparTopApp
from torchpar_top.tui.widgets.cores import CoresPanel
from torchpar_top.tui.widgets.gpus import GpusPanel
from torchpar_top.tui.widgets.header import HeaderBar
from torchpar_top.tui.widgets.lanes import LanesPanel
from torchpar_top.tui.widgets.log import LogPanel
from torchpar_top.tui.widgets.queues import QueuesPanel
from torchpar_top.tui.widgets.scoreboard import ScoreboardPanel

SIZE = (120, 36)


@pytest.fixture
def session(tmp_path):
    board = (ModeStats(Mode.ASYNC, 4.0, 123.4, 900.0, 0.1), ModeStats(Mode.SYNC, 2.0, 61.7, 1.0, 0.9))
    gpu = GpuView(0, "cuda:0", "Fake GPU", 42.0, (42.0,), 1 << 30, 8 << 30, 100.0, 300.0, 50.0)
    snaps = [
        dataclasses.replace(s, t=10.0 + 0.1 * i, interval=0.1, scoreboard=board, gpus=(gpu,))
        for i, s in enumerate(store_snapshots(120))
    ]
    path = write_recording(tmp_path / "run.jsonl", snaps)
    return RecordingReplay(str(path), clock=False)


def test_a_recording_on_the_screen_shows_what_was_recorded_and_the_keys_move_it(session):
    async def body():
        app = TorchparTopApp(session, render_interval=None)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert "replay run.jsonl" in text_of(app.query_one(HeaderBar))
            assert "cpu0" in text_of(app.query_one(CoresPanel))  # recorded host readings, not "none"
            board = app.query_one(ScoreboardPanel)
            assert board.display and "123" in text_of(board)
            assert app.query_one(GpusPanel).border_title == "GPU  1 device (NVML)"
            assert app.query_one(LanesPanel).border_title.startswith("lanes, last 5 s")
            assert "recording t = 0.0 s of 11.9 s" in text_of(app.query_one(QueuesPanel))
            assert "replay of" in "\n".join(app.query_one(LogPanel).plain_lines())
            await pilot.press("p")
            await pilot.pause()
            assert session.snapshot().paused
            for _ in range(3):
                await pilot.press(".")
            await pilot.pause()
            assert session.index == 3
            await pilot.press(",")
            await pilot.pause()
            assert session.index == 2
            await pilot.press("right")
            await pilot.pause()
            assert session.index == 7  # 0.2 s + 5 % of 11.9 s = 0.795 s: the snapshot at 0.7 s
            await pilot.press("]")
            await pilot.pause()
            assert session.snapshot().replay.speed == 2
            await pilot.press("home")
            await pilot.pause()
            assert session.index == 0
        assert session._thread is None

    asyncio.run(body())
