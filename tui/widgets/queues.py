"""The launch queue of every executor: which quantity, its history on 0..capacity, and how often it was full.

The DataLoader's row carries the input-bound / compute-bound verdict; the session's standing notice (e.g.
attached: no queue depth) is shown here, where the queues would be.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from torchpar_top.contract.snapshot import DataVerdict, ExecutorView, Snapshot
from torchpar_top.contract.vocab import Counted, DataBound, ExecutorKind
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel
from torchpar_top.tui.widgets.ranks import executor_rows, exited_ranks

KIND_TAGS = {
    ExecutorKind.CUDA_STREAM: "cuda",
    ExecutorKind.EMULATED_STREAM: "emulated",
    ExecutorKind.INTEROP_POOL: "inter-op",
    ExecutorKind.EAGER: "eager",
    ExecutorKind.DATALOADER: "loader",
}
"""Short tags for ``ExecutorView.kind``."""


def kind_tag(executor: ExecutorView) -> str:
    """``emulated``, ``cuda``, ``inter-op``...; an emulated executor always says so, and a row that counts
    torch calls (a function mode) rather than kernels says ``calls``."""
    tag = KIND_TAGS.get(executor.kind, executor.kind.value)
    if executor.emulated and "emulated" not in tag:
        tag += " (emulated)"
    if executor.counts == Counted.TORCH_CALLS:
        tag += " calls"
    return tag


def history_scale(executor: ExecutorView) -> float:
    """The strip's fixed top: the capacity, or the largest value seen for an unbounded executor."""
    if executor.capacity:
        return float(executor.capacity)
    return max([executor.value, *executor.history, 1])


def blocked_text(executor: ExecutorView, short: bool) -> str:
    """``full: launch blocks 61% of the time`` (or a short form), from ``ExecutorView.blocked``."""
    if executor.capacity is None:
        return "unbounded" if short else "unbounded: launch never blocks"
    if executor.blocked is None:
        return "" if short else "blocking not observable here"
    share = render.pct(executor.blocked, 0)
    if executor.blocked >= 0.005:
        return f"blocks {share}" if short else f"full: launch blocks {share} of the time"
    return "never full" if short else "launch never blocked"


def verdict_text(verdict: DataVerdict | None, short: bool) -> str:
    """``input-bound: waits for data 62% of the time`` (short: ``input-bound``)."""
    if verdict is None:
        return ""
    return (
        verdict.bound.value
        if short
        else f"{verdict.bound.value}: waits for data {verdict.wait:.0%} of the time"
    )


def data_text(snapshot: Snapshot, executor: ExecutorView, short: bool) -> str:
    """A DataLoader row's ending: the verdict on the primary rank's (or the only agent's) loader; on another
    rank's loader that rank's own data wait (``waits for data 10%``); '' when there is nothing to say."""
    if executor.kind != ExecutorKind.DATALOADER:
        return ""
    rank = executor.rank
    if rank is None or rank == snapshot.primary_rank:
        return verdict_text(snapshot.data_verdict, short)
    view = next((r for r in snapshot.ranks if r.rank == rank), None)
    if view is None or view.data_wait is None:
        return ""
    share = render.pct(view.data_wait, 0)
    return f"data {share}" if short else f"waits for data {share} of the time"


def status_text(snapshot: Snapshot, executor: ExecutorView, short: bool) -> str:
    """What the row ends with: the DataLoader's verdict or data wait, the row's note (a CUDA stream
    standing aside while torch.profiler holds CUPTI), or how often launch blocked."""
    return data_text(snapshot, executor, short) or note_text(executor, short) or blocked_text(executor, short)


def note_text(executor: ExecutorView, short: bool) -> str:
    """The row's note (``standing aside: torch.profiler active``; short: ``aside``, or ``sampled`` for
    CUPTI recording windows), '' without one."""
    if not executor.note:
        return ""
    if short:
        return "sampled" if executor.note.startswith("sampled") else "aside"
    return executor.note


@dataclass(frozen=True)
class Layout:
    """The columns of the queue rows at one width (a width of 0 leaves a column out)."""

    name_w: int
    tag_w: int
    qty_w: int
    hist_w: int
    status: str | None
    """``long``, ``short`` or None (no status column)."""


def layout(snapshot: Snapshot, rows: list[tuple[str, ExecutorView]], width: int, value_w: int) -> Layout:
    """The most telling columns that fit: words go first (the status, then the kind tag, the quantity's
    name, then the executor's name shrinks), the strip narrows, and the value (``1024 / 1024``) is never
    cut: a number cut short would read as another number."""
    executors = [e for _, e in rows]
    name_w = min(max(len(label) for label, _ in rows), 18)
    tag_w = max(len(kind_tag(e)) for e in executors)
    qty_w = max(len(e.quantity) for e in executors)
    status_w = {
        s: max(len(status_text(snapshot, e, s == "short")) for e in executors) for s in ("long", "short")
    }
    for tag, qty, status, min_hist in (
        (True, True, "long", 16),
        (True, True, "short", 16),
        (True, True, None, 8),
        (False, True, None, 8),
        (False, False, None, 4),
    ):
        fixed = (
            name_w
            + 2
            + (tag_w + 2 if tag else 0)
            + (qty_w + 1 if qty else 0)
            + 1
            + value_w
            + (2 + status_w[status] if status else 0)
        )
        if width - fixed >= min_hist:
            return Layout(name_w, tag_w if tag else 0, qty_w if qty else 0, width - fixed, status)
    hist_w = max(0, min(4, width - 1 - value_w))
    name_w = max(0, min(name_w, width - 1 - value_w - hist_w - 2))
    return Layout(name_w, 0, 0, hist_w, None)


class QueuesPanel(SnapshotPanel):
    """One row per executor, e.g.
    ``cpu-stream:0  emulated  depth ▁▂▄▆██ 1024 / 1024  full: launch blocks 61%...``."""

    DEFAULT_CSS = """
    QueuesPanel { height: auto; }
    """

    def title(self, snapshot: Snapshot) -> str:
        """The panel's title."""
        return "launch queue (frontend → backend)"

    def drawn_key(self, snapshot: Snapshot, width: int) -> object:
        """The notice, and per row what it shows: the counters an executor also carries (launched,
        completed, busy...) move every sample while its row stays the same (a DataLoader kept full)."""
        rows = executor_rows(snapshot.executors)
        return (
            width,
            snapshot.notice,
            snapshot.replay is None,
            tuple(
                (
                    label,
                    e.rank,
                    e.kind,
                    e.emulated,
                    e.counts,
                    e.quantity,
                    e.value,
                    e.capacity,
                    e.note,
                    e.blocked is None or (e.blocked >= 0.005, render.pct(e.blocked, 0)),
                    e.history[-width:],
                    history_scale(e),
                    data_text(snapshot, e, False),
                    data_text(snapshot, e, True),
                    self._data_style(snapshot, e),
                )
                for label, e in rows
            ),
            exited_ranks(snapshot),
        )

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """A row per executor, then the session's notice (wrapped); in a replay the notice, where it
        stands, comes first (a short panel cuts its last rows)."""
        notice = [
            Row().add("  " if i else "» ", self.style("note")).add(line, self.style("note"))
            for i, line in enumerate(render.wrap(snapshot.notice, width - 2))
        ]
        executors = self._executors(snapshot, width)
        out = notice + executors if snapshot.replay is not None else executors + notice
        if not out:
            out.append(Row().add("no executors reported yet", self.style("dim")))
        return out

    def _executors(self, snapshot: Snapshot, width: int) -> list[Row]:
        """``cpu-stream:0  emulated  depth ▁▂▄▆██ 1024 / 1024  full: launch blocks 61% of the time``."""
        rows = executor_rows(snapshot.executors)
        executors = [e for _, e in rows]
        if not executors:
            return []
        value_w = max(len(self._value(e)) for e in executors)
        lay = layout(snapshot, rows, width, value_w)
        exited = exited_ranks(snapshot)
        out = []
        for label, e in rows:
            name_style = self.style("dim" if e.rank in exited else "value")
            row = Row()
            if lay.name_w:
                row.add(render.clip(label, lay.name_w).ljust(lay.name_w) + "  ", name_style)
            if lay.tag_w:
                row.add(kind_tag(e).ljust(lay.tag_w) + "  ", self.style("accent" if e.emulated else "dim"))
            if e.kind == ExecutorKind.EAGER:
                sync = "synchronous: depth 0"
                row.add(sync if row.width + len(sync) <= width else "depth 0", self.style("label"))
                for note in ("  (L = S = C: every op finishes before the launch returns)", "  (L = S = C)"):
                    if row.width + len(note) <= width:
                        row.add(note, self.style("dim"))
                        break
                out.append(row)
                continue
            if lay.qty_w:
                row.add(e.quantity.ljust(lay.qty_w) + " ", self.style("label"))
            scale = history_scale(e)
            frac = render.fraction(e.value, scale)
            row.add(render.spark(e.history, lay.hist_w, scale), self._fill_style(e, frac))
            row.add(" " + self._value(e).rjust(value_w), self.style("value"))
            if lay.status is None:
                out.append(row)
                continue
            data = data_text(snapshot, e, lay.status == "short")
            row.add("  ", self.style("value"))
            if data:
                row.add(data, self.style(self._data_style(snapshot, e)))
            elif e.note:
                row.add(note_text(e, lay.status == "short"), self.style("accent"))
            else:
                row.add(blocked_text(e, lay.status == "short"), self._blocked_style(e))
            out.append(row)
        return out

    @staticmethod
    def _value(executor: ExecutorView) -> str:
        """``1024 / 1024`` or ``7 / ∞``."""
        cap = "∞" if executor.capacity is None else str(executor.capacity)
        return f"{executor.value} / {cap}"

    def _fill_style(self, executor: ExecutorView, frac: float) -> Style:
        """The strip's colour: red near capacity, the track colour otherwise."""
        if executor.capacity is None:
            return self.style("track")
        return self.level_style(frac, warm=0.5, hot=0.95) if frac >= 0.5 else self.style("track")

    def _blocked_style(self, executor: ExecutorView) -> Style:
        """Warning colour when the frontend actually blocked on this executor."""
        return self.style("note") if (executor.blocked or 0.0) >= 0.005 else self.style("dim")

    @staticmethod
    def _data_style(snapshot: Snapshot, executor: ExecutorView) -> str:
        """Warning colour for an input-bound verdict, value colour for compute-bound, else a label."""
        if executor.rank is not None and executor.rank != snapshot.primary_rank:
            return "label"
        verdict = snapshot.data_verdict
        if verdict is None:
            return "label"
        return "note" if verdict.bound == DataBound.INPUT else "value"
