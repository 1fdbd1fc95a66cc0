"""Per-core CPU load: a bar, the percent and a short history per core, from 2 to 256 cores.

The layout shrinks with the core count: full cells (``cpu0 [bar] 97% [history]``), then bars only,
then compact cells (``12 ██▌``), then one glyph per core, then a heat map of two cores per cell
(256 cores in four rows).
"""

from __future__ import annotations

import math

from rich.color import Color as RichColor
from rich.style import Style
from textual.color import Color
from torchpar_top.contract.snapshot import Snapshot
from torchpar_top.model.store import CORE_HISTORY
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel

GAP = 2
"""Cells between columns of cores."""

NO_HOST_IN_REPLAY = "none in a replay: a trace has no per-core load"


class CoresPanel(SnapshotPanel):
    """Per-core load, 0..100% on a fixed scale."""

    DEFAULT_CSS = """
    CoresPanel { height: auto; }
    """

    max_rows: int = 8
    """Rows before the panel switches to more columns or a more compact cell (the app lowers it on
    short terminals)."""

    def empty(self, snapshot: Snapshot) -> bool:
        """In a replay (no host readings) the panel shrinks to one borderless line."""
        return snapshot.replay is not None and not snapshot.cores

    def title(self, snapshot: Snapshot) -> str:
        """``CPU  N cores``; just ``CPU`` until the first reading."""
        n = len(snapshot.cores)
        return f"CPU  {n} core{'s' if n != 1 else ''}" if n else "CPU"

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """Rows of cores, in the widest cell that fits."""
        cores = snapshot.cores
        n = len(cores)
        if n == 0 and snapshot.replay is not None:
            return [
                Row()
                .add("CPU  ", self.style("accent"))
                .add(render.clip(NO_HOST_IN_REPLAY, width - 5), self.style("dim"))
            ]
        if n == 0:
            return [Row().add("no per-core readings yet", self.style("dim"))]
        label_w = len(f"cpu{n - 1}")
        rows = min(n, self.max_rows)
        cols = math.ceil(n / rows)
        # full cell: label, bar >= 8, percent, history >= 6
        if cols * (label_w + 1 + 8 + 5 + 1 + 6) + (cols - 1) * GAP <= width:
            return self._cells(snapshot, width, cols, label_w, history=True)
        # bar and percent only
        if cols * (label_w + 1 + 6 + 5) + (cols - 1) * GAP <= width:
            return self._cells(snapshot, width, cols, label_w, history=False)
        # compact: index and a short bar
        digits = len(str(n - 1))
        if cols * (digits + 1 + 3 + 1) <= width + 1:
            return self._compact(snapshot, width, cols, digits)
        return self._glyphs(snapshot, width)

    def _cells(self, snapshot: Snapshot, width: int, cols: int, label_w: int, history: bool) -> list[Row]:
        """``cpu0 ████▌   52%  ▃▅▇█▆`` in ``cols`` columns, core order running down each column."""
        cores, n = snapshot.cores, len(snapshot.cores)
        rows = math.ceil(n / cols)
        cell_w = (width - (cols - 1) * GAP) // cols
        flex = cell_w - label_w - 1 - 5
        hist_w = 0
        if history:
            longest = max((len(h) for h in snapshot.core_history), default=0)
            hist_w = max(6, min(flex // 2, CORE_HISTORY, longest))
            flex -= hist_w + 1
        bar_w = max(1, flex)
        out = []
        for r in range(rows):
            row = Row()
            for c in range(cols):
                i = c * rows + r
                if i >= n:
                    break
                if c:
                    row.to(c * (cell_w + GAP))
                frac = render.fraction(cores[i], 100.0)
                row.add(f"cpu{i}".ljust(label_w) + " ", self.style("dim"))
                row.add(render.bar(frac, bar_w), self.level_style(frac))
                row.add(render.pct(frac, 5), self.style("value"))
                if history:
                    hist = snapshot.core_history[i] if i < len(snapshot.core_history) else ()
                    row.add(" ").add(render.spark(hist, hist_w, 100.0), self.style("track"))
            out.append(row)
        return out

    def _compact(self, snapshot: Snapshot, width: int, cols: int, digits: int) -> list[Row]:
        """``12 ██▌ `` cells: the core index and a short bar, row by row."""
        cores, n = snapshot.cores, len(snapshot.cores)
        cell_w = (width + 1) // cols
        bar_w = max(3, cell_w - digits - 2)
        out = []
        for start in range(0, n, cols):
            row = Row()
            for i in range(start, min(n, start + cols)):
                frac = render.fraction(cores[i], 100.0)
                row.to((i - start) * cell_w)
                row.add(str(i).rjust(digits) + " ", self.style("dim"))
                row.add(render.bar(frac, bar_w), self.level_style(frac))
            out.append(row)
        return out

    def _glyphs(self, snapshot: Snapshot, width: int) -> list[Row]:
        """One glyph per core, its height the load; each row labelled with its first core."""
        cores, n = snapshot.cores, len(snapshot.cores)
        label_w = len(str(n - 1)) + 1
        per_row = max(1, width - label_w)
        # equal rows of a round size read better than one ragged tail
        per_row = min(
            per_row, 64 if per_row >= 64 else 32 if per_row >= 32 else 16 if per_row >= 16 else per_row
        )
        if math.ceil(n / per_row) > self.max_rows:
            return self._heat(snapshot, per_row, label_w)
        out = []
        for start in range(0, n, per_row):
            row = Row().add(str(start).rjust(label_w - 1) + " ", self.style("dim"))
            for i in range(start, min(n, start + per_row)):
                frac = render.fraction(cores[i], 100.0)
                row.add(render.level(frac) if frac > 0 else "·", self.level_style(frac))
            out.append(row)
        return out

    def _heat(self, snapshot: Snapshot, per_row: int, label_w: int) -> list[Row]:
        """Two cores per cell (``▀``: the upper core's colour over the lower core's), for very many cores."""
        cores, n = snapshot.cores, len(snapshot.cores)
        track = Color.from_rich_color(self.style("track").bgcolor)
        ok, warm, hot = (Color.from_rich_color(self.style(name).color) for name in ("ok", "warm", "hot"))
        # idle, light, busy, warm, hot: a light load is a dim green, not a full one
        steps = [c.rich_color for c in (track, track.blend(ok, 0.45), ok, warm, hot)]

        def colour(i: int) -> RichColor:
            load = cores[i] if i < n else 0.0
            return steps[0 if load < 5 else 1 if load < 25 else 2 if load < 50 else 3 if load < 85 else 4]

        out = []
        for start in range(0, n, 2 * per_row):
            row = Row().add(str(start).rjust(label_w - 1) + " ", self.style("dim"))
            for i in range(start, min(n, start + per_row)):
                row.add("▀", Style(color=colour(i), bgcolor=colour(i + per_row)))
            out.append(row)
        return out
