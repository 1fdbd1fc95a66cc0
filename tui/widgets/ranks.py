"""One row per agent process (torchrun rank): its state or exit code, throughput, queue depth, data wait."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from typing import ClassVar

from torchpar_top.contract.snapshot import ExecutorView, RankView, Snapshot
from torchpar_top.contract.vocab import ChildState, ExecutorKind
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel
from torchpar_top.tui.widgets.steps import SHORT, slowest
from torchpar_top.tui.widgets.threads import SHOWN_WAIT_PERCENT

#: A rank's frontend wait for a core is a column from this share of its time: the threads panel's
#: ``waits N%`` threshold.
SHOWN_CORE_WAIT = SHOWN_WAIT_PERCENT / 100
#: A rank's note takes at most this many lines (the last cut with ``…``): an exception's line can be
#: long (Gloo's ``Connection closed by peer`` carries a path and an address), and the log has it whole.
NOTE_LINES = 3


def core_wait_shown(waits: Iterable[float | None]) -> bool:
    """Whether a ranks table has a ``waits`` column: some rank waited for a core enough to say."""
    return any((w or 0.0) >= SHOWN_CORE_WAIT for w in waits)


def shows_ranks(snapshot: Snapshot) -> bool:
    """Whether there is a rank table to draw: several agent processes, or one with a rank number."""
    return len(snapshot.ranks) > 1 or any(r.rank is not None for r in snapshot.ranks)


def with_rank(name: str, rank: int | None) -> str:
    """``r1:dataloader:0`` for rank 1's ``dataloader:0``; the name alone without a rank."""
    return name if rank is None else f"r{rank}:{name}"


def executor_rows(executors: tuple[ExecutorView, ...]) -> list[tuple[str, ExecutorView]]:
    """``(label, executor)`` per row: the eager executors of several ranks share one row
    (``cpu (eager) ×4``): each is depth 0 by definition, and four such rows would crowd out the rest."""
    eager = [e for e in executors if e.kind == ExecutorKind.EAGER]
    if len(eager) < 2:
        return [(with_rank(e.name, e.rank), e) for e in executors]
    names = {e.name for e in eager}
    label = f"{names.pop() if len(names) == 1 else 'eager'} ×{len(eager)}"
    out: list[tuple[str, ExecutorView]] = []
    for e in executors:
        if e.kind != ExecutorKind.EAGER:
            out.append((with_rank(e.name, e.rank), e))
        elif e is eager[0]:
            out.append((label, e))
    return out


def exited_ranks(snapshot: Snapshot) -> frozenset[int]:
    """Rank numbers whose process has exited (their executors stay listed, dimmed)."""
    return frozenset(r.rank for r in snapshot.ranks if r.rank is not None and r.state == ChildState.EXITED)


def rank_label(rank: RankView) -> str:
    """``r0``, ``r1``...; ``main`` for an agent without a rank number."""
    return "main" if rank.rank is None else f"r{rank.rank}"


def rank_node(rank: RankView) -> str:
    """Where a global rank runs: ``1 host/0`` (node rank, host name, local rank); '' where unknown."""
    if rank.node_rank is None and rank.local_rank is None:
        return ""
    node = "?" if rank.node_rank is None else str(rank.node_rank)
    local = "?" if rank.local_rank is None else str(rank.local_rank)
    return f"{node} {rank.hostname[:12]}/{local}" if rank.hostname else f"{node}/{local}"


def rank_state(rank: RankView) -> str:
    """``running``, ``exited 1`` (marked ``✗`` when the code is not 0), or another state as it is."""
    if rank.state != ChildState.EXITED:
        return str(rank.state)
    if rank.exit_code is None:
        return "exited"
    return f"exited {rank.exit_code}" if rank.exit_code == 0 else f"✗ exited {rank.exit_code}"


class RanksPanel(SnapshotPanel):
    """``rank  pid   state     steps/s  depth  data  waits`` and a row per rank; a rank that exited stays
    listed."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"ranks--dead", "ranks--done"}

    DEFAULT_CSS = """
    RanksPanel {
        height: auto;
        & > .ranks--dead { color: $error; text-style: bold; }
        & > .ranks--done { color: $foreground-muted; }
    }
    """

    redraw_every = 0.5
    """Its steps/s and step times are means over the last 2 s (as the steps panel's, redrawn with it)."""

    def shown(self, snapshot: Snapshot) -> bool:
        """Only under torchrun (or whenever there are ranks)."""
        return shows_ranks(snapshot)

    def title(self, snapshot: Snapshot) -> str:
        """``ranks · 1 of 2 running``."""
        return f"ranks · {snapshot.ranks_running} of {len(snapshot.ranks)} running"

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """A header row and a row per rank; the data-wait, pid and depth columns go first when narrow (a
        column goes whole: never part of a number)."""
        ranks = snapshot.ranks
        unit = ranks[0].unit if ranks else snapshot.throughput_unit
        state_w = max([7, *(len(rank_state(r)) for r in ranks)])
        pid_w = max([3, *(len(str(r.pid)) for r in ranks)])
        thr_w = max(len(unit), 6)
        # rank, pid, state, throughput, depth, data wait: drop data wait, then pid, when narrow
        node_w = max([0, *(len(rank_node(r)) + 1 for r in ranks if rank_node(r))])  # node host/lr, if known
        cols = {"rank": 5, "node": max(node_w, 13) if node_w else 0}
        cols |= {"pid": pid_w + 1, "state": state_w + 1, "thr": thr_w, "depth": 6, "data": 6}
        if not node_w:
            del cols["node"]
        # each rank's frontend wait for a core, where one waited enough to say (CPU contention)
        if core_wait_shown(r.core_wait for r in ranks):
            cols["core"] = 7
        drops: tuple[tuple[str, ...], ...] = (
            (),
            ("data",),
            ("data", "pid"),
            ("data", "pid", "node"),
            ("data", "pid", "node", "depth"),
            ("data", "pid", "node", "depth", "core"),
            ("data", "pid", "node", "depth", "core", "thr"),
        )
        if any(r.steps is not None for r in ranks):  # steps: each rank's step time and slowest phase
            cols |= {"step": 9, "slow": 10}
            drops = (
                *drops[:6],
                ("data", "pid", "node", "depth", "core", "step"),
                ("data", "pid", "node", "depth", "core", "step", "thr"),
                ("data", "pid", "node", "depth", "core", "step", "thr", "slow"),
            )
        for drop in drops:
            if sum(w for k, w in cols.items() if k not in drop) <= width:
                break
        for key in drop:
            cols.pop(key, None)
        head = Row().add("rank".ljust(cols["rank"]), self.style("dim"))
        if "node" in cols:
            head.add("node host/lr".ljust(cols["node"]), self.style("dim"))
        if "pid" in cols:
            head.add("pid".ljust(cols["pid"]), self.style("dim"))
        head.add("state".ljust(cols["state"]), self.style("dim"))
        if "thr" in cols:
            head.add(unit.rjust(cols["thr"]), self.style("dim"))
        if "depth" in cols:
            head.add("depth".rjust(cols["depth"]), self.style("dim"))
        if "data" in cols:
            head.add("data".rjust(cols["data"]), self.style("dim"))
        if "core" in cols:
            head.add("waits".rjust(cols["core"]), self.style("dim"))
        if "step" in cols:
            head.add("step".rjust(cols["step"]), self.style("dim"))
        if "slow" in cols:
            head.add("  slowest".ljust(cols["slow"]), self.style("dim"))
        out = [head]
        for r in ranks:
            exited = r.state == ChildState.EXITED
            number = self.style("dim") if exited else self.style("value")
            row = Row().add(rank_label(r).ljust(cols["rank"]), self.style("label"))
            if "node" in cols:
                row.add(rank_node(r).ljust(cols["node"]), self.style("dim"))
            if "pid" in cols:
                row.add(str(r.pid).ljust(cols["pid"]), self.style("dim"))
            state = rank_state(r)
            style = "ranks--dead" if state.startswith("✗") else "ranks--done" if exited else "accent"
            row.add(state.ljust(cols["state"]), self.style(style))
            if "thr" in cols:
                row.add(render.num(r.throughput).rjust(cols["thr"]), number)
            if "depth" in cols:
                row.add(str(r.depth).rjust(cols["depth"]), number)
            if "data" in cols:
                row.add(render.pct(r.data_wait, cols["data"]), number)
            if "core" in cols:
                waits = r.core_wait is not None and r.core_wait >= SHOWN_CORE_WAIT and not exited
                row.add(render.pct(r.core_wait, cols["core"]), self.style("warn") if waits else number)
            stalled = r.steps is not None and r.steps.stalled is not None  # its figures: before the stall
            if "step" in cols:
                step = r.steps.seconds if r.steps is not None else None
                text = render.seconds(step) if step else "—"
                row.add(text.rjust(cols["step"]), self.style("dim") if stalled else number)
            if "slow" in cols:
                worst = slowest(r.steps) if r.steps is not None else None
                text = (
                    "stalled" if stalled else f"{SHORT[worst[0]]} {render.pct(worst[1], 0)}" if worst else "—"
                )
                look = "warn" if stalled else "dim" if exited else "label"
                row.add(("  " + text).ljust(cols["slow"]), self.style(look))
            out.append(row)
        for r in ranks:  # how a rank ended, when that needs a sentence: a signal after its work had
            # finished, or the error of the rank that failed first (its whole line is in the log)
            parts = textwrap.wrap(r.note, max(10, width))
            if len(parts) > NOTE_LINES:
                parts = [*parts[: NOTE_LINES - 1], render.clip(" ".join(parts[NOTE_LINES - 1 :]), width)]
            for part in parts:
                out.append(Row().add(render.clip(part, width), self.style("ranks--dead")))
        return out
