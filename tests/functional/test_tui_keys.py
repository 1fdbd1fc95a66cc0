"""Keys, the command palette and odd terminals, driven through Pilot against a FakeSession.

The render timer is off (``render_interval=None``): each test calls ``refresh_from_session()`` when it
wants a redraw, so nothing here depends on timing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from enum import Enum

import pytest
from fakes.fake_session import (
    ATTACH_NOTICE,
    PTRACE_MESSAGE,
    FakeSession,
    make_attach_snapshot,
    make_run_snapshot,
    make_snapshot,
    make_steps_snapshot,
    make_torchrun_snapshot,
    typed,
)
from pilot import run_async, settle, text_of
from textual import events
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets._footer import FooterKey
from torchpar_top.contract.snapshot import LogLine, ReplayView, ResultRow, Snapshot
from torchpar_top.contract.vocab import Role
from torchpar_top.tui.app import TorchparTopApp
from torchpar_top.tui.screens.help import HELP, HelpScreen
from torchpar_top.tui.screens.picker import PickerScreen
from torchpar_top.tui.widgets.cores import CoresPanel
from torchpar_top.tui.widgets.gpus import GpusPanel
from torchpar_top.tui.widgets.header import HeaderBar
from torchpar_top.tui.widgets.lanes import LanesPanel
from torchpar_top.tui.widgets.log import WRAP_MIN, LogPanel
from torchpar_top.tui.widgets.panel import SnapshotPanel
from torchpar_top.tui.widgets.queues import QueuesPanel
from torchpar_top.tui.widgets.ranks import RanksPanel
from torchpar_top.tui.widgets.scoreboard import ScoreboardPanel
from torchpar_top.tui.widgets.stack import StackPanel
from torchpar_top.tui.widgets.syncpoints import SyncPointsPanel
from torchpar_top.tui.widgets.threads import SYNC_NOTE, ThreadsPanel

SIZE = (120, 36)


def log_text(log: LogPanel) -> str:
    """The log's lines as plain text."""
    return "\n".join(log.plain_lines())


def header(app: TorchparTopApp) -> str:
    """The header line."""
    return text_of(app.query_one(HeaderBar))


def make_app(**snapshot_args: object) -> tuple[TorchparTopApp, FakeSession]:
    """An app on a fake session, timer off."""
    session = FakeSession(make_snapshot(**snapshot_args))  # type: ignore[arg-type]
    return TorchparTopApp(session, render_interval=None), session


def app_on(snapshot: Snapshot) -> tuple[TorchparTopApp, FakeSession]:
    """An app on a fake session serving ``snapshot``, timer off."""
    session = FakeSession(snapshot)
    return TorchparTopApp(session, render_interval=None), session


async def draw(pilot: Pilot, session: FakeSession, snapshot: Snapshot) -> None:
    """The app's next frame draws ``snapshot`` (the fake session's snapshot from now on)."""
    session.snapshot_value = snapshot
    pilot.app.refresh_from_session()  # type: ignore[attr-defined]
    await pilot.pause()


def on_screen(widget: Widget) -> bool:
    """Whether the widget is shown and lies wholly inside the screen."""
    screen = widget.screen.region
    region = widget.region
    return widget.display and region.height > 0 and screen.contains_region(region)


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
        # a frontend at ~100% of a core while in SYNC on a CUDA stream gets the note; on the CPU's
        # emulated streams it does not (a synchronize there blocks: a hot frontend is working)
        cpu = make_snapshot(mode="sync")
        session.snapshot_value = cpu
        app.refresh_from_session()
        await pilot.pause()
        assert SYNC_NOTE not in text_of(app.query_one(ThreadsPanel))
        cuda = tuple(dataclasses.replace(e, kind="cuda-stream") for e in cpu.executors)
        session.snapshot_value = typed(dataclasses.replace(cpu, executors=cuda))
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
        await app.workers.wait_for_complete()  # r and w stop and start off the event loop
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
        assert [c for c in session.calls if c[0] == "set_paused"] == [
            ("set_paused", True),
            ("set_paused", False),
        ]
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


@run_async
async def test_a_slow_close_keeps_the_screen_alive_and_says_so() -> None:
    """A stubborn workload takes seconds to stop: the app keeps handling messages meanwhile (the
    notification is drawn, a second q is ignored) and exits once the session is closed."""
    app, session = make_app()
    release = threading.Event()
    closing = threading.Event()

    def slow_close() -> None:
        closing.set()
        release.wait(10)
        session.calls.append(("close",))

    session.close = slow_close
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await asyncio.to_thread(closing.wait, 10)
        await pilot.pause()
        assert app.is_running
        assert [n.message for n in app._notifications] == ["stopping the workload…"]
        await pilot.press("q")  # a second q while closing changes nothing
        release.set()
        for _ in range(100):
            if not app.is_running:
                break
            await asyncio.sleep(0.05)
    assert session.names().count("close") == 1
    assert app.return_code == 0


@run_async
async def test_ctrl_c_quits_at_once_and_closes_once() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0  # exited by the key, not by leaving run_test
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
    app, _session = make_app()
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
        await app.workers.wait_for_complete()  # r and w stop and start off the event loop
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
async def test_a_queue_row_with_a_note_shows_it_wide_and_short() -> None:
    """The CUDA path notes its rows (CUPTI recording in windows, standing aside for torch.profiler): the
    note takes the status column, in full when there is room, as one word when narrow."""
    base = make_snapshot(executors=1)
    noted = dataclasses.replace(base.executors[0], note="standing aside: torch.profiler active")
    app, _ = app_on(dataclasses.replace(base, executors=(noted,)))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "standing aside: torch.profiler active" in text_of(app.query_one(QueuesPanel))
        await pilot.resize_terminal(70, 30)
        await settle(pilot)
        text = text_of(app.query_one(QueuesPanel))
        assert "aside" in text and "torch.profiler" not in text


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
        await draw(pilot, session, dataclasses.replace(snap, log=(*snap.log, LogLine(6, "stdout", "bye"))))
        text = log_text(log)
        assert "bye" in text and "child exited with code 1" in text and "RuntimeError: out of memory" in text
        assert "exited 1" in header(app)
        app.refresh_from_session()
        await pilot.pause()
        assert log_text(log).count("child exited with code 1") == 1


@run_async
async def test_an_exit_does_not_repeat_the_traceback_the_log_just_showed() -> None:
    """The exit's status line carries the child's last stderr lines for when they were not seen; a
    traceback the log just showed is not printed a second time under it."""
    traceback = ("Traceback (most recent call last):", '  File "t.py", line 9', "ValueError: bad value 42")
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = app.query_one(LogPanel)
        snap = make_snapshot(child_state="exited", exit_code=1)
        child = dataclasses.replace(snap.child, last_stderr=traceback)
        lines = tuple(LogLine(10 + i, "stderr", text) for i, text in enumerate(traceback))
        await draw(pilot, session, dataclasses.replace(snap, child=child, log=(*snap.log, *lines)))
        text = log_text(log)
        assert "child exited with code 1" in text
        assert text.count("ValueError: bad value 42") == 1 and text.count("Traceback") == 1
    # a log that never showed them (the fake's crash: its traceback's first line is not in the log)
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = app.query_one(LogPanel)
        await draw(pilot, session, make_snapshot(child_state="exited", exit_code=1))
        text = log_text(log)
        assert text.endswith("  Traceback (most recent call last):\n  RuntimeError: out of memory")


def _styled_bold(log: LogPanel, needle: str) -> list[bool]:
    """For each shown line that contains ``needle``: whether its text is drawn bold (the status style)."""
    found = []
    for y in range(log.size.height):
        segments = list(log.render_line(y))
        if needle in "".join(seg.text for seg in segments):
            found.append(any(needle in seg.text and bool(seg.style and seg.style.bold) for seg in segments))
    return found


@run_async
async def test_an_exit_is_said_once_by_the_sessions_line_in_the_status_style() -> None:
    """The session logs the exit with its hint (``pid N: workload exited ...; press r``) and the child's
    status carries the same message: the pane shows that line once, in the status style, rather than
    follow it with ``child exited with code 1: workload exited ...`` -- whether the line came in the
    frame of the exit or a frame before it."""
    message = "workload exited with status 1; ValueError: bad value 42"
    said = f"pid 4242: {message}; press r to run it again, w for an experiment"
    for early in (False, True):
        app, session = make_app()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            log = app.query_one(LogPanel)
            running = make_snapshot()
            line = LogLine(50, "app", said)
            if early:  # the line, then the exit in the next frame
                await draw(pilot, session, dataclasses.replace(running, log=(*running.log, line)))
                assert _styled_bold(log, "ValueError: bad value 42") == [False]
            snap = make_snapshot(child_state="exited", exit_code=1)
            child = dataclasses.replace(snap.child, message=message)
            await draw(pilot, session, dataclasses.replace(snap, child=child, log=(*running.log, line)))
            text = log_text(log)
            assert "child exited with code" not in text, early
            assert text.count("ValueError: bad value 42") == 1
            assert _styled_bold(log, "ValueError: bad value 42") == [True], early
    # a status nobody logged (the line is another's): the status line says it, as before
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = app.query_one(LogPanel)
        snap = make_snapshot(child_state="exited", exit_code=1)
        child = dataclasses.replace(snap.child, message=message)
        other = LogLine(50, "app", "pid 7: workload exited with status 3; press r to run it again")
        await draw(pilot, session, dataclasses.replace(snap, child=child, log=(*snap.log, other)))
        assert f"child exited with code 1: {message}" in log_text(log)
        assert _styled_bold(log, "child exited with code 1") == [True]
        assert _styled_bold(log, "pid 7:") == [False]


@run_async
async def test_an_exited_workloads_stack_says_it_is_the_last_one_seen() -> None:
    app, session = app_on(make_run_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        stack = app.query_one(StackPanel)
        assert "exited" not in text_of(stack)
        session.snapshot_value = make_run_snapshot(child_state="exited", exit_code=1)
        app.refresh_from_session()
        await settle(pilot)
        text = text_of(stack)
        assert "exited · last seen waiting in: DataLoader" in text
        assert text.rstrip().splitlines()[-1].lstrip().startswith("▶ select")  # its frames kept


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


@run_async
async def test_r_restarts_the_target() -> None:
    app, session = app_on(make_run_snapshot(child_state="exited", exit_code=1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "exited 1" in header(app)
        await pilot.press("r")
        await pilot.pause()
        await app.workers.wait_for_complete()  # r and w stop and start off the event loop
        assert ("restart",) in session.calls
        assert "exited" not in header(app)


@run_async
async def test_the_threads_panel_says_the_workload_ended_not_that_none_were_sampled() -> None:
    snap = dataclasses.replace(make_run_snapshot(child_state="exited", exit_code=0), thread_groups=())
    app, _ = app_on(snap)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        text = text_of(app.query_one(ThreadsPanel))
        assert "the workload ended" in text and "sampled yet" not in text


@run_async
async def test_h_asks_for_a_profiler_window() -> None:
    app, session = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("h")
        await pilot.pause()
        assert ("profile", 1.0) in session.calls


@run_async
async def test_k_hides_and_shows_the_stack() -> None:
    app, session = app_on(make_run_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        stack = app.query_one(StackPanel)
        assert on_screen(stack)
        text = text_of(stack)
        assert "waiting in: DataLoader" in text and "idle" in text
        assert text.rstrip().splitlines()[-1].lstrip().startswith("▶ select")  # innermost frame last
        await pilot.press("k")
        await settle(pilot)
        assert not stack.display
        await pilot.press("k")
        await settle(pilot)
        assert on_screen(stack)
        assert "toggle_stack" not in session.names()  # a display setting, not a session command


@run_async
async def test_k_without_a_stack_says_why() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        stack = app.query_one(StackPanel)
        assert not stack.display  # experiments have no stack
        await pilot.press("k", "k")  # off, then on again: nothing to show, so a notification
        await pilot.pause()
        assert not stack.display
        assert any("no Python stack" in str(n.message) for n in app._notifications)


@run_async
async def test_footer_names_the_new_keys() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        keys = {k.key: k.description for k in app.query(FooterKey)}
        assert keys.get("r") == "restart" and keys.get("k") == "stack"
        assert "`r`" in HELP and "`k`" in HELP and "sync points" in HELP and ".item()" in HELP


@run_async
async def test_run_mode_draws_verdict_sync_points_and_stack() -> None:
    app, _ = app_on(make_run_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        text = header(app)
        assert "run train.py" in text and "--epochs 3" in text and "steps/s" in text
        queues = text_of(app.query_one(QueuesPanel))
        loader_row = next(line for line in queues.splitlines() if "dataloader:0" in line)
        assert "input-bound: waits for data 62% of the time" in loader_row
        sync = app.query_one(SyncPointsPanel)
        assert on_screen(sync)
        sync_text = text_of(sync)
        assert "item()" in sync_text and "train.py:57" in sync_text and "6.2/s" in sync_text
        assert "+1 more" in sync_text and "nonzero()" not in sync_text  # top 5 of 6
        assert "would-be" in str(sync.border_title)
        assert not app.query_one(RanksPanel).display  # one agent, no rank number
        assert on_screen(app.query_one(LogPanel))


@run_async
async def test_no_sync_note_for_a_hot_frontend_on_the_cpu_in_run_mode() -> None:
    # pytorch/examples' word_language_model on the CPU in SYNC: the frontend at 94 % computes eager ops,
    # it does not spin in a synchronize (there is none on the CPU)
    snap = make_run_snapshot(mode="sync")
    groups = tuple(
        dataclasses.replace(g, cpu_percent=96.0) if g.role == Role.FRONTEND else g for g in snap.thread_groups
    )
    app, _ = app_on(typed(dataclasses.replace(snap, thread_groups=groups)))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert SYNC_NOTE not in text_of(app.query_one(ThreadsPanel))


@run_async
async def test_torchrun_shows_every_rank_and_the_dead_one() -> None:
    app, _ = app_on(make_torchrun_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "run ddp_train.py ×2 ranks" in header(app)
        ranks = app.query_one(RanksPanel)
        assert on_screen(ranks)
        text = text_of(ranks)
        assert "r0" in text and "running" in text and "5101" in text
        r1 = next(line for line in text.splitlines() if line.startswith("r1"))
        assert "✗ exited 1" in r1 and "5102" in r1
        assert "1 of 2 running" in str(ranks.border_title)
        queues = text_of(app.query_one(QueuesPanel))
        assert "r0:dataloader:0" in queues and "r1:dataloader:0" in queues and "cpu (eager) ×2" in queues
        lanes = text_of(app.query_one(LanesPanel))
        assert "r0:dataloader:0" in lanes and "r1:dataloader:0" in lanes


@run_async
async def test_the_rank_that_failed_first_is_named_under_the_table_in_three_lines_at_most() -> None:
    snap = make_torchrun_snapshot()
    error = "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] " + "peer " * 60
    ranks = tuple(
        dataclasses.replace(r, note=f"rank 1 failed first: {error}") if r.rank == 1 else r for r in snap.ranks
    )
    app, _ = app_on(dataclasses.replace(snap, ranks=ranks))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        lines = text_of(app.query_one(RanksPanel)).splitlines()
        first = next(
            i for i, line in enumerate(lines) if line.startswith("rank 1 failed first: RuntimeError")
        )
        note = [line for line in lines[first:] if line.strip()]
        assert len(note) == 3 and note[-1].endswith("…"), note


@run_async
async def test_four_ranks_of_two_executors_fit_at_120x36() -> None:
    app, _ = app_on(make_torchrun_snapshot(ranks=4))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        queues, lanes = app.query_one(QueuesPanel), app.query_one(LanesPanel)
        for panel in (queues, lanes, app.query_one(RanksPanel), app.query_one(ScoreboardPanel)):
            assert on_screen(panel), panel
            assert panel.rows_at(panel.size.width) <= panel.size.height, panel  # nothing cut off
        for r in range(4):
            assert f"r{r}:dataloader:0" in text_of(queues) and f"r{r}:dataloader:0" in text_of(lanes)
            assert f"r{r} " in text_of(app.query_one(RanksPanel))
        assert on_screen(app.query_one(LogPanel))


@run_async
async def test_attach_shows_the_notice_and_why_there_is_no_stack() -> None:
    app, _session = app_on(make_attach_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        text = header(app)
        assert "attach 31337" in text and "attached" in text and "ASYNC" not in text and "it/s" not in text
        queues = " ".join(text_of(app.query_one(QueuesPanel)).split())
        assert ATTACH_NOTICE in queues
        stack = app.query_one(StackPanel)
        assert on_screen(stack)
        assert " ".join(text_of(stack).split()) == PTRACE_MESSAGE  # the whole message, wrapped
        assert not app.query_one(LanesPanel).display and not app.query_one(ScoreboardPanel).display
        assert not app.query_one(SyncPointsPanel).display and not app.query_one(RanksPanel).display


@run_async
async def test_attach_at_80x24_wraps_the_notice() -> None:
    app, _ = app_on(make_attach_snapshot())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        queues = text_of(app.query_one(QueuesPanel))
        assert len(queues.strip().splitlines()) >= 2  # wrapped, not cut
        assert ATTACH_NOTICE in " ".join(queues.split())
        assert on_screen(app.query_one(StackPanel)) and on_screen(app.query_one(LogPanel))


@run_async
async def test_command_palette_restart_and_stack() -> None:
    app, session = app_on(make_run_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        hits = await _palette_hits(pilot, "Restart")
        assert hits[0].splitlines()[0] == "Restart"
        await pilot.press("enter")
        await pilot.pause()
        await app.workers.wait_for_complete()  # r and w stop and start off the event loop
        assert ("restart",) in session.calls
        hits = await _palette_hits(pilot, "Toggle stack panel")
        assert hits[0].splitlines()[0] == "Toggle stack panel"
        await pilot.press("enter")
        await settle(pilot)
        assert not app.query_one(StackPanel).display


@run_async
async def test_on_frame_hook_sees_each_drawn_snapshot() -> None:
    seen: list[Snapshot] = []
    session = FakeSession(make_run_snapshot())
    app = TorchparTopApp(session, render_interval=None, on_frame=seen.append)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert seen and seen[-1] is session.snapshot_value
        count = len(seen)
        app.refresh_from_session()  # the same snapshot: nothing drawn, no call
        await pilot.pause()
        assert len(seen) == count
        session.snapshot_value = dataclasses.replace(session.snapshot_value, sample_t=1000.0)
        app.refresh_from_session()
        await pilot.pause()
        assert len(seen) == count + 1 and seen[-1].sample_t == 1000.0


@run_async
async def test_new_states_survive_tiny_terminals_and_switches() -> None:
    app, session = app_on(make_torchrun_snapshot(ranks=4))
    async with app.run_test(size=(40, 12)) as pilot:
        await settle(pilot)
        await pilot.press("k", "r", "k")
        for snap in (make_attach_snapshot(), make_run_snapshot(), make_snapshot(), make_torchrun_snapshot()):
            session.snapshot_value = snap
            await settle(pilot)
        await pilot.resize_terminal(20, 5)
        await settle(pilot)
    assert session.names().count("close") == 1


@run_async
async def test_log_follows_the_tail_and_scrolls_back_with_the_wheel() -> None:
    snap = make_snapshot()
    many = tuple(LogLine(i, "stdout", f"line {i}") for i in range(1, 61))
    app, session = app_on(dataclasses.replace(snap, log=many))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        log = app.query_one(LogPanel)
        shown = text_of(log)
        assert "line 60" in shown and "line 1\n" not in shown + "\n"  # the newest lines, at the bottom
        wheel = (log, 1, 1, 0, 0, 0, False, False, False)
        for _ in range(2):
            log.post_message(events.MouseScrollUp(*wheel))
        await pilot.pause()
        assert log.scroll_back == 6 and "line 60" not in text_of(log)
        assert "scroll down to follow" in str(log.border_subtitle)
        more = (*many, LogLine(61, "stdout", "line 61"))
        session.snapshot_value = dataclasses.replace(snap, log=more)
        await settle(pilot)
        assert "line 61" not in text_of(log)  # scrolled back: the view stays where it was
        for _ in range(5):
            log.post_message(events.MouseScrollDown(*wheel))
        await pilot.pause()
        assert log.scroll_back == 0 and "line 61" in text_of(log) and not log.border_subtitle


@run_async
async def test_a_line_wider_than_the_log_wraps_under_its_text_and_scrolling_back_reaches_the_oldest() -> None:
    """A traceback's long path is not cut off: its text goes on in rows of its own, under the text (not
    the tag); the line after it is still the newest row; the wheel scrolls back to the very first line."""
    snap = make_snapshot()
    path = "/home/someone/.venv/lib/python3.11/site-packages/" + "deeply/nested/" * 8 + "module.py"
    long = f'File "{path}", line 4242, in forward'
    lines = (
        *(LogLine(i, "stdout", f"line {i}") for i in range(1, 41)),
        LogLine(41, "stderr", long),
        LogLine(42, "stdout", "after it"),
    )
    app, _ = app_on(dataclasses.replace(snap, log=lines))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        log = app.query_one(LogPanel)
        rows = text_of(log).split("\n")
        width = log.size.width
        at = next(i for i, row in enumerate(rows) if 'File "/home' in row)
        tag = rows[at].index("File")
        after = next(i for i, row in enumerate(rows) if row.strip() == "out after it")
        continued = rows[at + 1 : after]
        assert len(continued) >= 1 and all(len(row.rstrip()) <= width for row in rows)
        assert all(row[:tag].strip() == "" for row in continued)  # under the text, not the tag
        assert "".join(row[tag:].rstrip() for row in [rows[at], *continued]) == long
        wheel = (log, 1, 1, 0, 0, 0, False, False, False)
        for _ in range(30):
            log.post_message(events.MouseScrollUp(*wheel))
        await pilot.pause()
        assert text_of(log).split("\n")[0].strip() == "out line 1"  # the oldest line at the top


@run_async
async def test_a_long_line_in_a_narrow_log_is_clipped_not_wrapped_into_slivers() -> None:
    snap = make_snapshot()
    app, _ = app_on(dataclasses.replace(snap, log=(LogLine(1, "stdout", "x" * 300),)))
    async with app.run_test(size=(14, 30)) as pilot:
        await settle(pilot)
        log = app.query_one(LogPanel)
        assert 0 < log.size.width - len("  out ") < WRAP_MIN  # too narrow to wrap into
        rows = [row for row in text_of(log).split("\n") if row.strip()]
        assert len(rows) == 1


@run_async
async def test_a_panel_with_the_same_picture_is_not_repainted() -> None:
    app, session = app_on(make_run_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        panels = [app.query_one(ThreadsPanel), app.query_one(StackPanel), app.query_one(QueuesPanel)]
        calls: list[str] = []
        for panel in panels:
            original = panel.refresh

            def counting(
                *args: object, _name: str = type(panel).__name__, _original=original, **kwargs: object
            ):
                calls.append(_name)
                return _original(*args, **kwargs)

            panel.refresh = counting  # type: ignore[method-assign]
        session.snapshot_value = dataclasses.replace(
            session.snapshot_value, t=session.snapshot_value.t
        )  # a copy
        app.refresh_from_session()
        await pilot.pause()
        assert calls == []
        threads = session.snapshot_value.thread_groups
        session.snapshot_value = dataclasses.replace(
            session.snapshot_value,
            thread_groups=(dataclasses.replace(threads[0], cpu_percent=55.0), *threads[1:]),
        )
        app.refresh_from_session()
        await pilot.pause()
        assert calls == ["ThreadsPanel"]


EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[?1049l\r\b\x9b31m"
"""Escape sequences a workload could put in any text it controls (a script's arguments, a thread's name,
a function's or file's name, an executor's or result's label sent over the protocol)."""


def poisoned(value: object) -> object:
    """``value`` with :data:`EVIL` appended to every plain string inside it (enums left alone)."""
    if isinstance(value, str):
        return value if isinstance(value, Enum) else value + EVIL
    if isinstance(value, tuple):
        return tuple(poisoned(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value, **{f.name: poisoned(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        )
    return value


@pytest.mark.parametrize(
    "make",
    [
        make_run_snapshot,
        make_torchrun_snapshot,
        make_attach_snapshot,
        lambda: make_snapshot(gpus=2, child_state="exited", exit_code=1),
    ],
)
def test_workload_text_reaches_no_panel_as_control_characters(make) -> None:
    """Every line of every panel, the header and the log, and every border title: no control character
    (ESC, BEL, CR, backspace, C1) survives, whatever field the workload's text came in."""

    async def body() -> None:
        app, _ = app_on(typed(poisoned(make())))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            widgets = [*app.query(SnapshotPanel), app.query_one(LogPanel)]
            drawn = [w.render_line(y).text for w in widgets if w.display for y in range(w.size.height)]
            drawn += [str(w.border_title or "") for w in widgets]
            assert any("pwned" in line for line in drawn)  # the text is shown, made inert
            bad = [line for line in drawn if CONTROL.search(line)]
            assert not bad, bad[:3]

    asyncio.run(body())


CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


@run_async
async def test_a_slow_restart_keeps_the_screen_alive_and_q_still_quits() -> None:
    """A script that ignores signals takes seconds to stop: ``r`` runs off the event loop (the app keeps
    handling keys), more ``r`` while it restarts are not queued up, and ``q`` quits once it is done (a
    session's close waits for a restart in progress, as the real one does)."""
    app, session = app_on(make_run_snapshot(child_state="exited", exit_code=1))
    release, restarting, restarted = threading.Event(), threading.Event(), threading.Event()
    real_restart, real_close = session.restart, session.close

    def slow_restart() -> None:
        restarting.set()
        release.wait(10)
        real_restart()
        restarted.set()

    def close_after_restart() -> None:
        restarted.wait(10)
        real_close()

    session.restart, session.close = slow_restart, close_after_restart
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await asyncio.to_thread(restarting.wait, 10)
        await pilot.press("p", "r", "r")  # handled while the restart runs
        await pilot.pause()
        assert ("set_paused", True) in session.calls
        assert "restarting" in next(n.message for n in app._notifications)
        await pilot.press("q")
        await pilot.pause()
        assert app.is_running and "close" not in session.names()  # q waits for the restart
        release.set()
        for _ in range(200):
            if not app.is_running:
                break
            await asyncio.sleep(0.05)
    assert session.names().count("restart") == 1
    assert session.names().count("close") == 1
    assert session.names().index("restart") < session.names().index("close")


@run_async
async def test_results_in_rounds_show_one_round_with_median_and_range() -> None:
    app, _ = app_on(make_snapshot())  # the async text's table, round 3 of 3
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        lines = text_of(app.query_one(ScoreboardPanel)).splitlines()
        head = next(line for line in lines if "round 3" in line)
        assert "3 kept" in head and "median (range)" in head
        launch = " ".join(next(line for line in lines if "torch launch" in line).split())
        assert launch == "torch launch 0.2670 ms 0.281 (0.24–0.40)"  # under 0.1 s: milliseconds
        sync = " ".join(next(line for line in lines if "torch + sync" in line).split())
        assert sync == "torch + sync 190.3 ms 191 (187–204)"  # one unit per table: every timing under 1 s


@run_async
async def test_a_first_round_has_no_median_yet() -> None:
    snap = make_snapshot(executors=2, experiment="multi-device")
    rows = (
        ResultRow("device 0 alone", 0.5847, "s", 1, 0.5847, 0.5847, 0.5847, 1),
        ResultRow("speed-up of both", 1.037, "×", 1, 1.037, 1.037, 1.037, 1),
    )
    app, _ = app_on(dataclasses.replace(snap, results=rows))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        text = text_of(app.query_one(ScoreboardPanel))
        assert "round 1" in text and "median" not in text and "kept" not in text
        assert "584.7 ms" in text and "1.037 ×" in text  # one unit per table: ms, every timing under 1 s


@run_async
async def test_lanes_split_running_from_waiting_for_a_core() -> None:
    app, _ = app_on(make_snapshot(executors=2))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        lanes = app.query_one(LanesPanel)
        lines = text_of(lanes).splitlines()
        stream1 = next(line for line in lines if line.startswith("cpu-stream:1"))
        assert " run  53% waits  38%" in stream1 and "░" not in stream1  # it ran more than it waited
        assert "overlap on cores 18–29% · in progress 37%" in text_of(lanes)
        assert "waiting for a core" in str(lanes.border_title)


NUMBER = re.compile(r"\d[\d.,]*(?:\s?/\s?[\d∞][\d.,]*)?[%kMG]?")
"""A number as the panels draw it: ``1024``, ``29.6``, ``97%``, ``1.23k``, ``1024 / 1024``, ``3/4``."""


def cut_numbers(panel: Widget) -> list[str]:
    """The rows of ``panel`` whose right edge would cut a number in two (the screen crops what is too
    wide)."""
    width = panel.size.width
    bad = []
    for row in panel._rows(width):
        text = "".join(seg.text for seg in row.segments)
        for match in NUMBER.finditer(text):
            if match.start() < width < match.end():
                bad.append(f"{text[:width]}|{text[width:]}")
    return bad


@pytest.mark.parametrize("size", [(40, 12), (46, 30), (52, 16), (58, 30), (66, 30), (80, 24)])
@pytest.mark.parametrize(
    "make",
    [
        lambda: make_snapshot(executors=2, gpus=2, child_state="exited", exit_code=1),
        make_run_snapshot,
        make_torchrun_snapshot,
        make_steps_snapshot,
        lambda: make_snapshot(executors=2, paused=True, cores=16),
        lambda: dataclasses.replace(  # a replay: its position line, no host panels
            make_snapshot(executors=2),
            cores=(),
            thread_groups=(),
            replay=ReplayView("trace.json.gz", 0.0123, 0.0456, 0.01, 0.001),
        ),
    ],
)
def test_narrow_panels_cut_labels_never_numbers(size, make) -> None:
    """At 40×12 a queue at 1024 / 1024 must not read ``1``: a row too wide loses words, not digits."""

    async def body() -> None:
        app, _ = app_on(make())
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            bad = [
                line
                for panel in app.query(SnapshotPanel)
                if panel.display and panel.size.width > 0
                for line in cut_numbers(panel)
            ]
            assert not bad, bad

    asyncio.run(body())


class _SourceOnly:
    """A source with snapshots and nothing else: no live controls, no replay controls."""

    def __init__(self) -> None:
        self.fake = FakeSession()

    def start(self) -> None:
        self.fake.start()

    def close(self) -> None:
        self.fake.close()

    def snapshot(self) -> Snapshot:
        return self.fake.snapshot()

    def set_paused(self, paused: bool) -> None:
        self.fake.set_paused(paused)

    def restart(self) -> None:
        self.fake.restart()


@run_async
async def test_keys_a_source_cannot_answer_are_said_by_the_app() -> None:
    """The app checks a source's capabilities: a key for one it lacks is a note, not a call."""
    source = _SourceOnly()
    app = TorchparTopApp(source, render_interval=None)
    notes: list[str] = []
    app.notify = lambda message, **_: notes.append(message)  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        for key in ("s", "+", "h", "w", ".", "right", "]"):
            await pilot.press(key)
        await pilot.pause()
        assert not isinstance(app.screen, PickerScreen)  # no experiments to pick from
    assert notes == [
        "switching ASYNC / SYNC: only in a live run (a replay shows what was recorded)",
        "changing the thread count: only in a live run (a replay shows what was recorded)",
        "a torch.profiler window: only in a live run (a replay shows what was recorded)",
        "running an experiment: only in a live run (a replay shows what was recorded)",
        "stepping frame by frame: only in a replay (torchpar-top replay FILE)",
        "seeking: only in a replay (torchpar-top replay FILE)",
        "changing the speed: only in a replay (torchpar-top replay FILE)",
    ]
    assert source.fake.names() == ["start", "close"]


@run_async
async def test_a_line_being_written_shows_its_latest_state_after_the_newest_line() -> None:
    """A progress bar (\\r) in the log: its latest state live, replaced by the ended line."""
    snap = make_snapshot()
    lines = (LogLine(1, "stdout", "epoch 1"),)
    app, session = app_on(dataclasses.replace(snap, log=lines, log_partial=(LogLine(0, "stderr", " 10%|#"),)))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        log = app.query_one(LogPanel)
        assert log.plain_lines()[-2:] == ["  out epoch 1", "  err  10%|#"]
        session.snapshot_value = dataclasses.replace(
            snap, log=lines, log_partial=(LogLine(0, "stderr", " 60%|######"),)
        )
        await settle(pilot)
        assert " 60%|######" in text_of(log) and " 10%|#" not in text_of(log)
        ended = (*lines, LogLine(2, "stderr", "100%|##########"))
        session.snapshot_value = dataclasses.replace(snap, log=ended)
        await settle(pilot)
        assert log.plain_lines()[-2:] == ["  out epoch 1", "  err 100%|##########"]
        assert "60%" not in text_of(log)
