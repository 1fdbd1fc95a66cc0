"""The panels' pure pieces: texts derived from snapshots (no app running)."""

from __future__ import annotations

import dataclasses
import random

from fakes.fake_session import make_attach_snapshot, make_run_snapshot, make_snapshot, make_torchrun_snapshot
from torchpar_top.contract.snapshot import ChildStatus, RankView, StackFrame, SyncSite
from torchpar_top.contract.vocab import ChildState, Counted, ExecutorKind
from torchpar_top.model.snapshot import rebuild
from torchpar_top.tui.render import fit
from torchpar_top.tui.widgets.cores import CoresPanel
from torchpar_top.tui.widgets.header import child_failed, child_text, depth_text, target_text
from torchpar_top.tui.widgets.lanes import _frontend_cells, executor_lane, frontend_lane, overlap_text
from torchpar_top.tui.widgets.log import inert, status_lines
from torchpar_top.tui.widgets.queues import blocked_text, data_text, history_scale, kind_tag, status_text
from torchpar_top.tui.widgets.ranks import (
    executor_rows,
    exited_ranks,
    rank_state,
    shows_ranks,
    with_rank,
)
from torchpar_top.tui.widgets.scoreboard import ratio_text
from torchpar_top.tui.widgets.stack import short_path, verdict, where
from torchpar_top.tui.widgets.syncpoints import count_text, on_device, rate_text, top_sites
from torchpar_top.tui.widgets.threads import starved_note


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


def test_target() -> None:
    assert target_text(make_snapshot()) == "async"  # no target: the experiment's name
    assert target_text(make_run_snapshot()) == "run train.py"


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
    assert rank_state(RankView(0, 1, ChildState.EXITED, None, "it/s", 0, exit_code=0)) == "exited 0"
    assert ddp.primary_rank == 0 and exited_ranks(ddp) == {1}
    assert with_rank("dataloader:0", 12) == "r12:dataloader:0" and with_rank("run:x", None) == "run:x"


def test_eager_executors_of_several_ranks_share_a_row() -> None:
    ddp = make_torchrun_snapshot(ranks=4, dead=None)
    labels = [label for label, _ in executor_rows(ddp.executors)]
    assert labels == [
        "cpu (eager) ×4",
        "r0:dataloader:0",
        "r1:dataloader:0",
        "r2:dataloader:0",
        "r3:dataloader:0",
    ]
    run = make_run_snapshot()
    assert [label for label, _ in executor_rows(run.executors)] == ["cpu (eager)", "dataloader:0"]


def test_sync_points() -> None:
    run = make_run_snapshot()
    top = top_sites(run)
    assert len(top) == 5 and top[0].per_second >= top[-1].per_second
    assert [s.where for s in top[:2]] == ["train.py:49", "train.py:57"]  # equal rates: by line
    assert (
        top_sites(dataclasses.replace(run, syncpoints=(SyncSite("a.py:1", "item()", 5, 0.0),)))[0].count == 5
    )
    assert not on_device(run)
    assert rate_text(6.2) == "6.2/s" and rate_text(0.0) == "0.0/s" and rate_text(1234.0) == "1.23k/s"
    assert count_text(1860) == "1860" and count_text(123_456) == "123k"


def test_stack_texts() -> None:
    stack = make_run_snapshot().stack
    assert stack is not None
    assert verdict(stack) == "waiting in: DataLoader"
    assert verdict(dataclasses.replace(stack, waiting_in="", idle=True)).startswith("idle")
    assert verdict(dataclasses.replace(stack, waiting_in="", idle=False)) == "running Python"
    assert (
        short_path("/v/lib/python3.11/site-packages/torch/utils/data/dataloader.py")
        == "torch/utils/data/dataloader.py"
    )
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
    calls = dataclasses.replace(
        full, kind=ExecutorKind.CUDA_STREAM, emulated=False, counts=Counted.TORCH_CALLS, blocked=None
    )
    assert kind_tag(calls) == "cuda calls"  # a function-mode counter: torch calls, not kernels
    assert blocked_text(calls, short=False) == "blocking not observable here"  # not "never blocked"
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
    assert ratio_text(rebuild(snap, scoreboard=snap.scoreboard[:1])) == "—"  # derived again by model/


def test_status_lines() -> None:
    assert status_lines(ChildStatus(pid=1, state=ChildState.RUNNING)) == []
    lines = status_lines(
        ChildStatus(pid=1, state=ChildState.EXITED, exit_code=1, last_stderr=("boom\x1b[2J",))
    )
    assert lines == ["child exited with code 1", "  boom␛[2J"]
    assert status_lines(ChildStatus(pid=None, state=ChildState.FAILED, message="no such file"))[0] == (
        "child failed to start: no such file"
    )


def test_workload_text_is_inert_in_a_terminal() -> None:
    """Escape sequences a script prints (retitle, clear, leave the alternate screen) become symbols."""
    assert inert("\x1b]0;TITLE\x07") == "␛]0;TITLE␇"
    assert inert("\x1b[2J\x1b[H\x1b[?1049l") == "␛[2J␛[H␛[?1049l"
    assert inert("a\rb\bc\td") == "a␍b␈c d"
    assert inert("\x9b31m") == "\\x9b31m"  # C1 CSI, shown as its escape
    assert inert("ünïcödé ✓") == "ünïcödé ✓"


def test_starved_note_formats_the_snapshot() -> None:
    assert starved_note(make_run_snapshot()) == "starved: waited 0.6 cores for a CPU"
    assert starved_note(make_snapshot()) is None


def test_cores_title_before_and_after_the_first_reading() -> None:
    panel = CoresPanel()
    assert panel.title(dataclasses.replace(make_snapshot(), cores=())) == "CPU"
    assert panel.title(make_snapshot(cores=2)) == "CPU  2 cores"


def test_a_log_line_of_a_megabyte_is_kept_cut() -> None:
    """Whatever a session serves, the log pane keeps each line bounded (the widget's memory is by bytes)."""
    from torchpar_top.contract.snapshot import LogLine
    from torchpar_top.contract.vocab import LOG_LINE_MAX, LogSource
    from torchpar_top.tui.widgets.log import pieces_of

    pieces = pieces_of(LogLine(1, LogSource.STDOUT, "x" * 1_000_000))
    assert sum(len(text) for text, _ in pieces) <= LOG_LINE_MAX + 6  # the tag, then the text


def test_a_wrapped_log_line_breaks_between_words_keeps_every_character_and_fits() -> None:
    """Rows break after a space where one is in the row's second half, mid-word only where there is
    none (a path); wide characters count two cells; together the rows are the line, each within width."""
    from rich.cells import cell_len
    from torchpar_top.tui.widgets.log import WRAP_INDENT, wrapped

    said = "pid 9: workload exited with status 1; ValueError: bad value 42; press r to run it again"
    rows = wrapped((("  app ", "log--tag"), (said, "log--status")), 40)
    assert [row[0][0] for row in rows] == ["  app "] + [" " * 6] * (len(rows) - 1)
    assert "".join(row[1][0] for row in rows) == said
    assert all(cell_len("".join(text for text, _ in row)) <= 40 for row in rows)
    assert all(row[1][0].endswith(" ") for row in rows[:-1])  # words whole
    assert all(row[1][1] == "log--status" for row in rows)  # the continuation keeps the line's colour
    path = "/x" * 60 + " 語" * 30
    rows = wrapped(((path, "log--status"),), 30)
    assert "".join(row[-1][0] for row in rows) == path and all(
        row[0][0] == " " * WRAP_INDENT for row in rows[1:]
    )
    assert all(cell_len("".join(text for text, _ in row)) <= 30 for row in rows)
    assert rows[0] == ((path[:30], "log--status"),)  # no space in the row: cut at the width
    assert wrapped((("  out ", "log--tag"), ("short", "log--stdout")), 40) == [
        (("  out ", "log--tag"), ("short", "log--stdout"))
    ]


def test_a_frontend_lane_of_fewer_values_than_cells_is_drawn_as_the_values_stretched_cell_by_cell() -> None:
    """Fewer values than cells: a glyph per value, repeated, must draw what a glyph per stretched cell
    draws (render.fit repeats each value over whole cells)."""
    rng = random.Random(7)
    for _ in range(2000):
        n, width = rng.randint(1, 60), rng.randint(1, 120)
        pick = [0.0, 0.0, 1.0, 0.5, 0.25]
        busy = [rng.choice([*pick, rng.random()]) for _ in range(n)]
        wait = [rng.choice([*pick, rng.random() / 2]) for _ in range(n)]
        core = [rng.choice([*pick, rng.random() / 4]) for _ in range(n)] if rng.random() < 0.5 else []
        cells = _frontend_cells(fit(busy, width), fit(wait, width), fit(core, width) if core else [])
        assert frontend_lane(busy, wait, width, core) == "".join(cells) + " " * (width - len(cells))


def test_frontend_lane_says_idle_blocked_and_waiting_for_a_core() -> None:
    # ran, blocked, waited for a core, slept (idle: none of the three), nothing measured
    busy, wait, core = [0.6, 0.1, 0.1, 0.01, 0.0], [0.1, 0.8, 0.1, 0.0, 0.0], [0.0, 0.0, 0.7, 0.0, 0.0]
    assert frontend_lane(busy, wait, 5, core) == "▌·░  "
    assert frontend_lane([1.0], [0.0], 1) == "▌"  # no schedstat: busy is 1 - wait, never idle


def test_executor_lane_marks_cells_that_waited_more_than_they_ran() -> None:
    assert executor_lane([1.0, 0.3, 0.0], [0.0, 0.7, 0.0], 3) == "█░ "
    assert executor_lane([0.5], [0.5], 1) == "▄"  # a tie shows what ran


def test_overlap_line_says_on_cores_and_in_progress() -> None:
    snap = make_snapshot(executors=2)
    assert overlap_text(snap) == "overlap on cores 18–29% · in progress 37%"  # at least, at most
    plain = dataclasses.replace(
        snap, executors=tuple(dataclasses.replace(e, running=(), core_wait=()) for e in snap.executors)
    )
    assert overlap_text(plain) == "overlap 18%"  # nothing read: the sweep of intervals, one figure


def test_a_table_of_results_has_one_unit_of_time() -> None:
    """torch launches were in ms beside numpy and torch + synchronize in s."""
    from torchpar_top.contract.snapshot import ResultRow
    from torchpar_top.tui.widgets.scoreboard import result_scale

    def units(*values: float) -> list[str]:
        rows = [ResultRow(f"r{i}", v, "s") for i, v in enumerate(values)] + [ResultRow("share", 14.0, "%")]
        return [result_scale(r, rows)[1] for r in rows]

    assert units(0.4612, 0.000267, 0.1903) == ["ms", "ms", "ms", "%"]
    assert units(2.5, 0.000267, 0.19) == ["s", "s", "s", "%"]
    assert result_scale(ResultRow("alone", 0.05, "s")) == (1000.0, "ms")
