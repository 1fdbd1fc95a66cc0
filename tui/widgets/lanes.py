"""Busy/idle lanes over the last seconds: the frontend (launching or waiting) and each executor, with overlap."""

from __future__ import annotations

from itertools import groupby
from typing import Sequence

from torchpar_top.contract.snapshot import Snapshot
from torchpar_top.contract.vocab import ExecutorKind
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel
from torchpar_top.tui.widgets.ranks import executor_rows, exited_ranks

WINDOW_SECONDS = 5.0
"""How far back the lanes reach."""

LAUNCH, WAIT = "▌", "·"
"""Frontend lane glyphs: a cell mostly launching, a cell mostly waiting."""


def frontend_lane(busy: Sequence[float], wait: Sequence[float], width: int) -> str:
    """One glyph per cell: ``▌`` when the frontend mostly ran, ``·`` when it mostly waited, else blank."""
    b, w = render.fit(busy, width), render.fit(wait, width)
    cells = []
    for i in range(len(b)):
        wi = w[i] if i < len(w) else 0.0
        if b[i] <= 0.0 and wi <= 0.0:
            cells.append(" ")
        else:
            cells.append(LAUNCH if b[i] >= wi else WAIT)
    return "".join(cells) + " " * (width - len(cells))


def overlap_text(snapshot: Snapshot) -> str:
    """``overlap 43%``: mean of ``snapshot.overlap`` over the window; ``—`` with fewer than 2 executors."""
    if len(snapshot.executors) < 2:
        return "overlap —"
    values = render.window(snapshot.overlap, WINDOW_SECONDS, snapshot.interval)
    return f"overlap {render.pct(render.mean(values), 0)}"


class LanesPanel(SnapshotPanel):
    """``frontend ▌▌ ▌·· busy 18%`` and ``stream:0 ██████ busy 99%`` lanes, then ``overlap NN%``."""

    DEFAULT_CSS = """
    LanesPanel { height: auto; }
    """

    def shown(self, snapshot: Snapshot) -> bool:
        """Not when attached to a process without the agent: nothing here can be measured then."""
        return not snapshot.attached

    def title(self, snapshot: Snapshot) -> str:
        """``lanes, last 5 s``; in a replay, that much trace time (``lanes, last 50.0 ms of trace``)."""
        replay = snapshot.replay
        if replay is not None and snapshot.interval > 0:
            span = render.seconds(WINDOW_SECONDS / snapshot.interval * replay.frame)
            return f"lanes, last {span} of trace  ({LAUNCH} launching  {WAIT} in a sync)"
        return f"lanes, last {WINDOW_SECONDS:g} s  ({LAUNCH} launching  {WAIT} waiting)"

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """The frontend lane, one lane per executor, and the overlap line."""
        rows = executor_rows(snapshot.executors)
        names = ["frontend", *(label for label, _ in rows)]
        name_w = min(max(len(n) for n in names), 16)
        right_w = len(" busy 100%")
        lane_w = max(1, width - name_w - 1 - right_w)

        def win(values: Sequence[float]) -> Sequence[float]:
            return render.window(values, WINDOW_SECONDS, snapshot.interval)

        busy, wait = win(snapshot.frontend_busy), win(snapshot.frontend_wait)
        row = Row().add("frontend".ljust(name_w) + " ", self.style("label"))
        text = frontend_lane(busy, wait, lane_w)
        accent, dim = self.style("accent"), self.style("dim")
        for launching, run in groupby(text, key=LAUNCH.__eq__):  # one piece per run of one colour
            row.add("".join(run), accent if launching else dim)
        row.add(" busy " + render.pct(render.mean(busy), 4), self.style("value"))
        out = [row]
        exited = exited_ranks(snapshot)
        for label, e in rows:
            name_style = self.style("dim" if e.rank in exited else "label")
            row = Row().add(render.clip(label, name_w).ljust(name_w) + " ", name_style)
            if e.kind == ExecutorKind.EAGER:
                text = "(synchronous: inside the frontend lane)" if lane_w >= 39 else "(synchronous)"
                row.add(text.ljust(lane_w)[:lane_w], self.style("dim"))
                row.add(" " * right_w)
            else:
                values = win(e.busy)
                row.add(render.lane(values, lane_w), self.style("track"))
                row.add(" busy " + render.pct(render.mean(values), 4), self.style("value"))
            out.append(row)
        if snapshot.throughput_history:
            values = win(snapshot.throughput_history)
            top = max(values) or 1.0
            row = Row().add(render.clip(snapshot.throughput_unit, name_w).ljust(name_w) + " ", self.style("dim"))
            row.add(render.spark(render.fit(values, lane_w), lane_w, top), self.style("track"))
            row.add(f" 0..{render.num(top)}", self.style("dim"))
            out.append(row)
        out.append(Row().add(" " * (name_w + 1)).add(overlap_text(snapshot), self.style("value")))
        return out
