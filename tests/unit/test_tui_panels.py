"""The panels' pure pieces: texts derived from snapshots (no app running)."""

from __future__ import annotations

import dataclasses

from fakes.fake_session import make_attach_snapshot, make_run_snapshot, make_snapshot, make_torchrun_snapshot

from torchpar_top.session.model import ChildStatus, RankView, StackFrame, SyncSite, ThreadGroup
from torchpar_top.tui.widgets.cores import CoresPanel
from torchpar_top.tui.widgets.header import child_failed, child_text, depth_text, description_text, target_text
from torchpar_top.tui.widgets.lanes import frontend_lane, overlap_text
from torchpar_top.tui.widgets.log import status_lines
from torchpar_top.tui.widgets.panel import is_attached
from torchpar_top.tui.widgets.queues import blocked_text, data_text, history_scale, kind_tag, status_text
from torchpar_top.tui.widgets.ranks import (
    executor_rows,
    exited_ranks,
    primary_rank,
    rank_of,
    rank_state,
    shows_ranks,
    strip_rank,
)
from torchpar_top.tui.widgets.scoreboard import ratio_text
from torchpar_top.tui.widgets.stack import short_path, verdict, where
from torchpar_top.tui.widgets.syncpoints import count_text, on_device, rate_text, top_sites
from torchpar_top.tui.widgets.threads import hot_frontend_in_sync, starved_note


def test_depth_sums_values_over_capacities() -> None:
    assert depth_text(make_snapshot(executors=2)) == "depth 2032/2048"
    assert depth_text(make_snapshot(executors=1, unbounded=True)) == "depth 1027/∞"
    assert depth_text(make_snapshot(executors=0)) == "depth —"


def test_child_text() -> None:
    assert child_text(make_snapshot()) == ""
    assert child_text(make_snapshot(child_state="exited", exit_code=1)) == "exited 1"
    assert child_failed(make_snapshot(child_state="exited", exit_code=1))
    assert child_text(make_snapshot(child_state="exited", exit_code=0)) == "exited 0"
    assert not child_failed(make_snapshot(child_state="exited", exit_code=0))
    assert child_text(make_snapshot(child_state="failed")) == "failed to start"
    assert child_text(make_attach_snapshot()) == "attached"
    assert not child_failed(make_attach_snapshot())


def test_target_and_description() -> None:
    assert target_text(make_snapshot()) == "async"  # no target: the experiment's name
    run = make_run_snapshot()
    assert target_text(run) == "run train.py"
    assert description_text(run) == "--epochs 3"  # the script's name is in the target already
    assert description_text(make_torchrun_snapshot()) == ""
    assert description_text(make_snapshot()) == "emulated CPU streams"
    assert is_attached(make_attach_snapshot()) and not is_attached(run)
    gone = dataclasses.replace(make_attach_snapshot(), child=ChildStatus(31337, "exited", None, "no such process"))
    assert is_attached(gone)


def test_data_verdict_goes_with_the_primary_ranks_loader() -> None:
    run = make_run_snapshot()
    eager, loader = run.executors
    assert data_text(run, loader, short=False) == "input-bound: waits for data 62% of the time"
    assert data_text(run, loader, short=True) == "input-bound"
    assert data_text(run, eager, short=False) == ""
    assert status_text(run, eager, short=False) == "unbounded: launch never blocks"
    ddp = make_torchrun_snapshot()
    loaders = [e for e in ddp.executors if e.kind == "dataloader"]
    assert data_text(ddp, loaders[0], short=False).startswith("compute-bound")
    assert data_text(ddp, loaders[1], short=False) == "waits for data 10% of the time"
    assert data_text(ddp, loaders[1], short=True) == "data 10%"


def test_ranks() -> None:
    assert not shows_ranks(make_run_snapshot())  # one agent without a rank number
    assert not shows_ranks(make_attach_snapshot())
    ddp = make_torchrun_snapshot()
    assert shows_ranks(ddp)
    assert shows_ranks(dataclasses.replace(ddp, ranks=ddp.ranks[:1]))  # one rank, but a rank
    assert [rank_state(r) for r in ddp.ranks] == ["running", "✗ exited 1"]
    assert rank_state(RankView(0, 1, "exited", None, "it/s", 0, exit_code=0)) == "exited 0"
    assert primary_rank(ddp) == 0 and exited_ranks(ddp) == {1}
    assert rank_of("r12:dataloader:0") == 12 and rank_of("dataloader:0") is None and rank_of("run:x") is None
    assert strip_rank("r1:cpu (eager)") == "cpu (eager)" and strip_rank("cpu-stream:0") == "cpu-stream:0"


def test_eager_executors_of_several_ranks_share_a_row() -> None:
    ddp = make_torchrun_snapshot(ranks=4, dead=None)
    labels = [label for label, _ in executor_rows(ddp.executors)]
    assert labels == ["cpu (eager) ×4", "r0:dataloader:0", "r1:dataloader:0", "r2:dataloader:0", "r3:dataloader:0"]
    run = make_run_snapshot()
    assert [label for label, _ in executor_rows(run.executors)] == ["cpu (eager)", "dataloader:0"]


def test_sync_points() -> None:
    run = make_run_snapshot()
    top = top_sites(run)
    assert len(top) == 5 and top[0].per_second >= top[-1].per_second
    assert [s.where for s in top[:2]] == ["train.py:49", "train.py:57"]  # equal rates: by line
    assert top_sites(dataclasses.replace(run, syncpoints=(SyncSite("a.py:1", "item()", 5, 0.0),)))[0].count == 5
    assert not on_device(run)
    assert rate_text(6.2) == "6.2/s" and rate_text(0.0) == "0.0/s" and rate_text(1234.0) == "1.23k/s"
    assert count_text(1860) == "1860" and count_text(123_456) == "123k"


def test_stack_texts() -> None:
    stack = make_run_snapshot().stack
    assert stack is not None
    assert verdict(stack) == "waiting in: DataLoader"
    assert verdict(dataclasses.replace(stack, waiting_in="", idle=True)).startswith("idle")
    assert verdict(dataclasses.replace(stack, waiting_in="", idle=False)) == "running Python"
    assert short_path("/v/lib/python3.11/site-packages/torch/utils/data/dataloader.py") == "torch/utils/data/dataloader.py"
    assert short_path("/home/u/proj/train.py") == "train.py"
    assert where(StackFrame("f", "/usr/lib/python3.11/selectors.py", 415)) == "selectors.py:415"


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


def test_hot_frontend_means_above_80_percent_per_thread() -> None:
    def with_frontend(percent: float, count: int = 1) -> bool:
        group = ThreadGroup("frontend (main)", count, count, percent)
        return hot_frontend_in_sync(dataclasses.replace(make_snapshot(mode="sync"), thread_groups=(group,)))

    assert with_frontend(81.0)
    assert not with_frontend(80.0)
    assert with_frontend(170.0, count=2) and not with_frontend(150.0, count=2)


def test_status_lines() -> None:
    assert status_lines(ChildStatus(pid=1, state="running")) == []
    lines = status_lines(ChildStatus(pid=1, state="exited", exit_code=1, last_stderr=("boom",)))
    assert lines == ["child exited with code 1", "  boom"]
    assert status_lines(ChildStatus(pid=None, state="failed", message="no such file"))[0] == (
        "child failed to start: no such file"
    )


def test_starved_note_above_half_a_core_of_run_queue_wait() -> None:
    run = make_run_snapshot()
    assert sum(g.wait_percent for g in run.thread_groups) == 64.0
    assert starved_note(run) == "starved: waited 0.6 cores for a CPU"
    calm = dataclasses.replace(run, thread_groups=tuple(dataclasses.replace(g, wait_percent=g.wait_percent / 2)
                                                       for g in run.thread_groups))
    assert starved_note(calm) is None
    assert starved_note(make_snapshot()) is None
    # 60 busy threads each waiting 2 % of the time: 1.2 cores of wait, but 2 % of their runnable time.
    many = tuple(ThreadGroup(f"worker {i}", 1, 1, 98.0, (i,), 2.0) for i in range(60))
    assert starved_note(dataclasses.replace(run, thread_groups=many)) is None


def test_cores_title_before_and_after_the_first_reading() -> None:
    panel = CoresPanel()
    assert panel.title(dataclasses.replace(make_snapshot(), cores=())) == "CPU"
    assert panel.title(make_snapshot(cores=2)) == "CPU  2 cores"
