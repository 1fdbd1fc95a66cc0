"""SVG snapshots of the main screen on a FakeSession, at 120x36 and 80x24.

Regenerate after a deliberate change with ``pytest tests/functional/test_tui_snapshots.py --snapshot-update``
and look at the SVGs in ``__snapshots__/`` before committing them. Textual is pinned exactly because its
rendering changes across minor versions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes.fake_session import (
    FakeSession,
    make_attach_snapshot,
    make_run_snapshot,
    make_snapshot,
    make_steps_snapshot,
    make_torchrun_snapshot,
)
from textual.pilot import Pilot
from torchpar_top.contract.snapshot import Snapshot
from torchpar_top.sources.trace import TraceReplay
from torchpar_top.tui.app import TorchparTopApp

ROOT = Path(__file__).resolve().parents[2]

SnapCompare = Callable[..., bool]


def app_for(**snapshot_args: Any) -> TorchparTopApp:
    """The app on a fake session serving one deterministic snapshot, render timer off."""
    return TorchparTopApp(FakeSession(make_snapshot(**snapshot_args)), render_interval=None)


def app_serving(snapshot: Snapshot) -> TorchparTopApp:
    """The app on a fake session serving ``snapshot``, render timer off."""
    return TorchparTopApp(FakeSession(snapshot), render_interval=None)


async def redraw(pilot: Pilot) -> None:
    """Draw the snapshot again once the layout is known (what the render timer would do), twice: panels
    shown for the first time (stack, sync points, ranks) get their widths in the first layout."""
    assert isinstance(pilot.app, TorchparTopApp)
    for _ in range(2):
        await pilot.pause()
        pilot.app.refresh_from_session(force=True)
    await pilot.pause()


def test_main_120x36(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(executors=2), terminal_size=(120, 36), run_before=redraw)


def test_main_80x24(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(executors=2), terminal_size=(80, 24), run_before=redraw)


def test_sync_gpus_child_exited_120x36(snap_compare: SnapCompare) -> None:
    app = app_for(executors=2, mode="sync", gpus=2, child_state="exited", exit_code=1)
    assert snap_compare(app, terminal_size=(120, 36), run_before=redraw)


def test_64_cores_mixed_executors_120x36(snap_compare: SnapCompare) -> None:
    app = app_for(cores=64, executors=1, unbounded=True, eager=True)
    assert snap_compare(app, terminal_size=(120, 36), run_before=redraw)


def test_256_cores_80x24(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(cores=256), terminal_size=(80, 24), run_before=redraw)


def test_help_120x36(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(), terminal_size=(120, 36), press=["question_mark"], run_before=redraw)


def test_picker_80x24(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(), terminal_size=(80, 24), press=["w"], run_before=redraw)


def test_run_script_120x36(snap_compare: SnapCompare) -> None:
    """``run train.py``: DataLoader verdict, sync points, the stack waiting in the DataLoader."""
    assert snap_compare(app_serving(make_run_snapshot()), terminal_size=(120, 36), run_before=redraw)


def test_run_script_80x24(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_serving(make_run_snapshot()), terminal_size=(80, 24), run_before=redraw)


def test_torchrun_rank_exited_120x36(snap_compare: SnapCompare) -> None:
    """Two ranks, rank 1 exited with code 1; executors ``r0:``/``r1:``."""
    assert snap_compare(app_serving(make_torchrun_snapshot()), terminal_size=(120, 36), run_before=redraw)


def test_steps_straggler_120x36(snap_compare: SnapCompare) -> None:
    """Two DDP ranks stepping, rank 1's forward 4x: the steps panel's bars, the straggler marked, the ranks
    table's step time and slowest phase."""
    assert snap_compare(app_serving(make_steps_snapshot()), terminal_size=(120, 36), run_before=redraw)


def test_steps_straggler_80x24(snap_compare: SnapCompare) -> None:
    """Short and narrow: the steps panel steps aside, the ranks table keeps each rank's slowest phase."""
    assert snap_compare(app_serving(make_steps_snapshot()), terminal_size=(80, 24), run_before=redraw)


def test_attach_no_ptrace_120x36(snap_compare: SnapCompare) -> None:
    """``attach PID``: the notice instead of queues, and why there is no stack."""
    assert snap_compare(app_serving(make_attach_snapshot()), terminal_size=(120, 36), run_before=redraw)


def test_replay_a100_5_streams_120x36(snap_compare: SnapCompare, monkeypatch: pytest.MonkeyPatch) -> None:
    """``torchpar-top replay a100_sxm4_5_streams.json.gz``, 240 ms in (six streams busy in the lanes' last
    50 ms of trace), driven by hand: the clock is off, each frame a ``tick()``."""
    monkeypatch.chdir(ROOT)  # the log names the trace as given: a path relative to the checkout
    session = TraceReplay("tests/data/hta/a100_sxm4_5_streams.json.gz", clock=False)
    for _ in range(239):
        session.tick()
    app = TorchparTopApp(session, render_interval=None)
    assert snap_compare(app, terminal_size=(120, 36), run_before=redraw)
