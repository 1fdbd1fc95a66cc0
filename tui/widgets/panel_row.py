"""A row of panels side by side, all as tall as the tallest one needs."""

from __future__ import annotations

from textual import events
from textual.containers import Horizontal

from torchpar_top.tui.widgets.panel import SnapshotPanel


class PanelRow(Horizontal):
    """Sets its own height to the tallest child's rows plus borders (``max-height`` still applies)."""

    DEFAULT_CSS = """
    PanelRow {
        height: auto;
        & > SnapshotPanel { height: 1fr; }
    }
    """

    def fit(self) -> None:
        """Resize to the tallest child, once the children have widths."""
        panels = [p for p in self.children if isinstance(p, SnapshotPanel)]
        if not panels or any(p.size.width <= 0 for p in panels):
            return
        height = max(p.rows_at(p.size.width) + p.styles.gutter.height for p in panels)
        if self.styles.height is None or self.styles.height.cells != height:
            self.styles.height = height

    def on_resize(self, event: events.Resize) -> None:
        """New widths may need a different number of rows (e.g. more columns of cores)."""
        self.fit()
