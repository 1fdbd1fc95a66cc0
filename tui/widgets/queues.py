"""The launch queue of every executor: which quantity, its history on 0..capacity, and how often it was full."""

from __future__ import annotations

from rich.style import Style

from torchpar_top.session.model import KIND_EAGER, ExecutorView, Snapshot
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel

KIND_TAGS = {
    "cuda-stream": "cuda",
    "emulated-stream": "emulated",
    "interop-pool": "inter-op",
    "eager": "eager",
    "dataloader": "loader",
}
"""Short tags for ``ExecutorView.kind``."""


def kind_tag(executor: ExecutorView) -> str:
    """``emulated``, ``cuda``, ``inter-op``...; an emulated executor always says so."""
    tag = KIND_TAGS.get(executor.kind, executor.kind)
    if executor.emulated and "emulated" not in tag:
        tag += " (emulated)"
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
    share = render.pct(executor.blocked, 0)
    if executor.blocked >= 0.005:
        return f"blocks {share}" if short else f"full: launch blocks {share} of the time"
    return "never full" if short else "launch never blocked"


class QueuesPanel(SnapshotPanel):
    """One row per executor: ``cpu-stream:0  emulated  depth ▁▂▄▆██ 1024 / 1024  full: launch blocks 61%...``."""

    DEFAULT_CSS = """
    QueuesPanel { height: auto; }
    """

    def title(self, snapshot: Snapshot) -> str:
        """The panel's title."""
        return "launch queue (frontend → backend)"

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """A row per executor."""
        executors = snapshot.executors
        if not executors:
            return [Row().add("no executors reported yet", self.style("dim"))]
        name_w = min(max(len(e.name) for e in executors), 18)
        tag_w = max(len(kind_tag(e)) for e in executors)
        qty_w = max(len(e.quantity) for e in executors)
        value_w = max(len(self._value(e)) for e in executors)
        short = False
        for short in (False, True):
            blocked_w = max(len(blocked_text(e, short)) for e in executors)
            fixed = name_w + 2 + tag_w + 2 + qty_w + 1 + 1 + value_w + 2 + blocked_w
            if width - fixed >= 16:
                break
        hist_w = max(4, width - fixed)
        out = []
        for e in executors:
            row = Row().add(render.clip(e.name, name_w).ljust(name_w) + "  ", self.style("value"))
            row.add(kind_tag(e).ljust(tag_w) + "  ", self.style("accent" if e.emulated else "dim"))
            if e.kind == KIND_EAGER:
                row.add("synchronous: depth 0", self.style("label"))
                row.add("  (L = S = C: every op finishes before the launch returns)", self.style("dim"))
                out.append(row)
                continue
            row.add(e.quantity.ljust(qty_w) + " ", self.style("label"))
            scale = history_scale(e)
            frac = render.fraction(e.value, scale)
            row.add(render.spark(e.history, hist_w, scale), self._fill_style(e, frac))
            row.add(" " + self._value(e).rjust(value_w) + "  ", self.style("value"))
            row.add(blocked_text(e, short), self._blocked_style(e))
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
        return self.style("note") if executor.blocked >= 0.005 else self.style("dim")
