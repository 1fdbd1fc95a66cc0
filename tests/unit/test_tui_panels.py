"""The panels' pure pieces: texts derived from snapshots (no app running)."""

from __future__ import annotations

import dataclasses

from fakes.fake_session import make_snapshot

from torchpar_top.session.model import ChildStatus
from torchpar_top.tui.widgets.header import child_text, depth_text
from torchpar_top.tui.widgets.lanes import frontend_lane, overlap_text
from torchpar_top.tui.widgets.log import status_lines
from torchpar_top.tui.widgets.queues import blocked_text, history_scale, kind_tag
from torchpar_top.tui.widgets.scoreboard import ratio_text
from torchpar_top.tui.widgets.threads import hot_frontend_in_sync


def test_depth_sums_values_over_capacities() -> None:
    assert depth_text(make_snapshot(executors=2)) == "depth 2032/2048"
    assert depth_text(make_snapshot(executors=1, unbounded=True)) == "depth 1027/∞"
    assert depth_text(make_snapshot(executors=0)) == "depth —"


def test_child_text() -> None:
    assert child_text(make_snapshot()) == ""
    assert child_text(make_snapshot(child_state="exited", exit_code=1)) == "child exited 1"
    assert child_text(make_snapshot(child_state="failed")) == "child failed"


def test_queue_texts() -> None:
    snap = make_snapshot(executors=2, unbounded=True, eager=True)
    full, free, pool, eager = snap.executors
    assert blocked_text(full, short=False) == "full: launch blocks 61% of the time"
    assert blocked_text(free, short=False) == "launch never blocked"
    assert blocked_text(pool, short=False) == "unbounded: launch never blocks"
    assert kind_tag(full) == "emulated"
    assert kind_tag(eager) == "eager"
    assert history_scale(full) == 1024
    assert history_scale(pool) == max(pool.history)


def test_overlap_needs_two_executors() -> None:
    assert overlap_text(make_snapshot(executors=1)) == "overlap —"
    assert overlap_text(make_snapshot(executors=2)).startswith("overlap ")
    assert overlap_text(make_snapshot(executors=2)).endswith("%")


def test_frontend_lane_glyphs() -> None:
    assert frontend_lane([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], 3) == "▌· "


def test_ratio_until_both_modes_measured() -> None:
    snap = make_snapshot()
    assert ratio_text(snap) == "1.36×"
    assert ratio_text(dataclasses.replace(snap, scoreboard=snap.scoreboard[:1])) == "—"


def test_hot_frontend_note_only_in_sync() -> None:
    assert hot_frontend_in_sync(make_snapshot(mode="sync"))
    assert not hot_frontend_in_sync(make_snapshot(mode="async"))


def test_status_lines() -> None:
    assert status_lines(ChildStatus(pid=1, state="running")) == []
    lines = status_lines(ChildStatus(pid=1, state="exited", exit_code=1, last_stderr=("boom",)))
    assert lines == ["child exited with code 1", "  boom"]
    assert status_lines(ChildStatus(pid=None, state="failed", message="no such file"))[0] == (
        "child failed to start: no such file"
    )
