"""A row of panels side by side, as tall as the tallest one needs (or, flexible, at most that tall)."""

from __future__ import annotations

from textual import events
from textual.containers import Horizontal
from textual.widget import Widget
from torchpar_top.tui.widgets.panel import SnapshotPanel


class PanelRow(Horizontal):
    """Sets its own height to the tallest shown child's rows plus borders (``max-height`` still applies).

    A row whose children are all hidden hides itself. A *flexible* row leaves its height to the CSS (e.g.
    ``2fr``, sharing what is left with the log) and only caps it at what the tallest child needs.
    """

    DEFAULT_CSS = """
    PanelRow {
        height: auto;
        & > SnapshotPanel { height: 1fr; }
    }
    """

    def __init__(self, *children: Widget, flexible: bool = False, id: str | None = None) -> None:
        super().__init__(*children, id=id)
        self.flexible = flexible
        """Cap ``max-height`` instead of setting ``height``."""

    def fit(self, retry: bool = True) -> None:
        """Resize to the tallest shown child, once the children have widths.

        Args:
            retry: When a shown child has no width yet (it was just shown), try once more after the
                next refresh.
        """
        shown = [c for c in self.children if c.display and isinstance(c, SnapshotPanel)]
        if bool(shown) != self.display:
            self.display = bool(shown)
        if not shown:
            return
        heights = [c.outer_height() for c in shown]
        if any(h is None for h in heights):
            if retry:
                self.call_after_refresh(self.fit, False)
            return
        height = max(h for h in heights if h is not None)
        scalar = self.styles.max_height if self.flexible else self.styles.height
        if scalar is None or scalar.cells != height:
            if self.flexible:
                self.styles.max_height = height
            else:
                self.styles.height = height

    def on_resize(self, event: events.Resize) -> None:
        """New widths may need a different number of rows (e.g. more columns of cores)."""
        self.fit()
