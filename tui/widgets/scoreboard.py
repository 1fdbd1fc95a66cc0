"""Async vs sync, measured: throughput, mean depth and frontend wait per mode, their ratio, then results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.style import Style
from torchpar_top.contract.snapshot import ModeStats, ResultRow, Snapshot
from torchpar_top.contract.vocab import Mode
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel


def result_scale(row: ResultRow, rows: Sequence[ResultRow] = ()) -> tuple[float, str]:
    """The factor and unit a result row is shown in: seconds as milliseconds when every row in seconds of
    the table (``rows``; the row alone without them) is below 1 s, so that one table has one unit of time
    (torch launches in ms beside torch + synchronize in s read as the same size)."""
    if row.unit != "s":
        return 1.0, row.unit
    seconds = [abs(r.value) for r in rows if r.unit == "s"] or [abs(row.value)]
    return (1000.0, "ms") if max(seconds) < 1.0 else (1.0, "s")


def result_number(x: float | None) -> str:
    """A result value: 4 significant digits, 2 for tiny ones (``0.00059``)."""
    if x is not None and 0 < abs(x) < 0.01:
        return f"{x:.2g}" if abs(x) >= 1e-4 else f"{x:.1e}"
    return render.num(x, 4)


def ratio_text(snapshot: Snapshot) -> str:
    """``1.36×`` from ``snapshot.ratio``; ``—`` until both modes were measured."""
    ratio = snapshot.ratio
    return "—" if ratio is None else f"{ratio:.2f}×"


class ScoreboardPanel(SnapshotPanel):
    """The async-vs-sync table, the experiment's own results (complete rounds only, with their median
    and range) and the intra-op scaling table."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"score--async", "score--sync"}

    redraw_every = 0.5
    """Means since each mode began and results of whole rounds: twice a second is news enough."""

    DEFAULT_CSS = """
    ScoreboardPanel {
        height: auto;
        & > .score--async { color: $success; text-style: bold; }
        & > .score--sync { color: $warning; text-style: bold; }
    }
    """

    def shown(self, snapshot: Snapshot) -> bool:
        """Not when attached to a process without the agent, nor in a replay (one recorded run, one
        mode): nothing here can be measured then."""
        return not snapshot.attached and (snapshot.replay is None or snapshot.replay.recorded)

    def title(self, snapshot: Snapshot) -> str:
        """The panel's title."""
        return "async vs sync (measured)"

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """The mode rows, the ratio, the results and the scaling table."""
        unit = snapshot.throughput_unit
        cols: tuple[int, ...] = (6, 8, 7, 6, 7)  # mode, throughput, depth, wait, seen
        if width < sum(cols) + 6:
            cols = cols[:4]  # no room for "seen"
        out = [self._line(("", unit, "depth", "wait", "seen")[: len(cols)], cols, self.style("dim"))]
        by_mode = {m.mode: m for m in snapshot.scoreboard}
        for mode in (Mode.ASYNC, Mode.SYNC):
            stats = by_mode.get(mode)
            current = snapshot.mode == mode
            row = self._mode_row(mode.value.upper(), stats, cols)
            if current:
                row.add(" ◀ now", self.style("accent"))
            out.append(row)
        out.append(
            Row()
            .add("ratio".ljust(cols[0]), self.style("label"))
            .add(ratio_text(snapshot).rjust(cols[1]), self.style("value"))
            .add("  async / sync", self.style("dim"))
        )
        if snapshot.results:
            out.extend(self._results(snapshot.results, width))
        if snapshot.scaling:
            out.append(Row())
            out.append(Row().add("threads → GFLOP/s", self.style("dim")))
            top = max(p.gflops for p in snapshot.scaling) or 1.0
            bar_w = max(4, min(20, width - 18))
            for p in sorted(snapshot.scaling, key=lambda p: p.threads):
                frac = render.fraction(p.gflops, top)
                out.append(
                    Row()
                    .add(f"{p.threads:>7d} ", self.style("label"))
                    .add(render.bar(frac, bar_w), self.style("track"))
                    .add(render.num(p.gflops).rjust(7), self.style("value"))
                )
        return out

    def _results(self, results: Sequence[ResultRow], width: int) -> list[Row]:
        """One row per result. Results in rounds are the latest complete round's, under a line naming
        it, with the median and range over the complete rounds when there is room."""
        label_w = min(max(len(r.label) for r in results), max(8, width - 16))
        scaled = [result_scale(r, results) for r in results]
        unit_w = max(len(unit) for _, unit in scaled) + 1
        value_w = max(
            6, *(len(result_number(r.value * k)) for r, (k, _) in zip(results, scaled, strict=True))
        )  # one column
        spread = any(r.round is not None for r in results) and label_w + 1 + value_w + unit_w + 19 <= width
        out = []
        shown_header = False
        for r, (k, unit) in zip(results, scaled, strict=True):
            if r.round is not None and not shown_header:
                shown_header = True
                head = f"round {r.round}" if r.rounds < 2 else f"round {r.round} · {r.rounds} kept"
                if spread and r.rounds > 1:
                    head = head.ljust(label_w + 1 + value_w + unit_w + 1) + "median (range)"
                out.append(Row().add(render.clip(head, width), self.style("dim")))
            row = (
                Row()
                .add(render.clip(r.label, label_w).ljust(label_w) + " ", self.style("label"))
                .add(result_number(r.value * k).rjust(value_w), self.style("value"))
                .add(f" {unit}".ljust(unit_w), self.style("dim"))
            )
            if spread and r.median is not None and r.low is not None and r.high is not None and r.rounds > 1:
                row.add(f" {render.num(r.median * k, 3):>6}", self.style("label"))
                row.add(f" ({render.num(r.low * k, 2)}–{render.num(r.high * k, 2)})", self.style("dim"))
            out.append(row)
        return out

    def _mode_row(self, label: str, stats: ModeStats | None, cols: tuple[int, ...]) -> Row:
        """``ASYNC   12.4   1013    3%   42 s``; dashes where nothing was measured."""
        row = Row().add(
            label.ljust(cols[0]), self.style("score--async" if label == "ASYNC" else "score--sync")
        )
        if stats is None:
            return row.add("".join("—".rjust(w) for w in cols[1:]), self.style("dim"))
        row.add(render.num(stats.throughput).rjust(cols[1]), self.style("value"))
        depth = (
            None
            if stats.mean_depth is None
            else f"{stats.mean_depth:.0f}"
            if stats.mean_depth >= 10
            else f"{stats.mean_depth:.1f}"
        )
        row.add((depth or "—").rjust(cols[2]), self.style("label"))
        row.add(render.pct(stats.frontend_wait, cols[3]), self.style("label"))
        if len(cols) > 4:
            row.add(render.duration(stats.seconds).rjust(cols[4]), self.style("dim"))
        return row

    def _line(self, cells: tuple[str, ...], cols: tuple[int, ...], style: Style) -> Row:
        """A header row: the first cell left-aligned, the others right-aligned."""
        row = Row().add(cells[0].ljust(cols[0]), style)
        for text, w in zip(cells[1:], cols[1:], strict=True):
            row.add(text.rjust(w), style)
        return row
