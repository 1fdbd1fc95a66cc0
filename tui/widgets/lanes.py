"""Busy/idle lanes over the last seconds: the frontend (launching or waiting) and each executor, with
overlap."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from torchpar_top.contract.snapshot import LaneShare, Snapshot
from torchpar_top.contract.vocab import ExecutorKind
from torchpar_top.model.figures import LANES_SECONDS, window
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel
from torchpar_top.tui.widgets.ranks import executor_rows, exited_ranks

NO_LANE = LaneShare("")
"""A lane without figures (a snapshot not built by ``model.snapshot.build``): its percentages show ``—``."""

LAUNCH, WAIT, CORE = "▌", "·", "░"
"""Lane glyphs: the frontend running (launching), the frontend blocked (full queue, synchronize, data),
and a thread runnable but waiting for a core (frontend or executor)."""


def frontend_lane(
    busy: Sequence[float], wait: Sequence[float], width: int, core_wait: Sequence[float] = ()
) -> str:
    """One glyph per cell for what the frontend mostly did there: ``▌`` ran, ``·`` was blocked, ``░``
    waited for a core, blank was idle (the rest of the window: sleeping, reading a file) or unknown."""
    n = len(busy)
    if 0 < n < width and len(wait) == n and len(core_wait) in (0, n):
        # fewer values than cells: each value spans whole cells (render.fit repeats it), so one glyph
        # per value, repeated, draws the same lane
        glyphs = _frontend_cells(busy, wait, core_wait)
        return "".join([glyphs[(i * n) // width] for i in range(width)])
    cells = _frontend_cells(
        render.fit(busy, width), render.fit(wait, width), render.fit(core_wait, width) if core_wait else []
    )
    return "".join(cells) + " " * (width - len(cells))


def _frontend_cells(b: Sequence[float], w: Sequence[float], c: Sequence[float]) -> list[str]:
    """:func:`frontend_lane`'s glyph for each position of ``b`` (``w`` and ``c`` may be shorter: 0)."""
    cells = []
    for i in range(len(b)):
        wi = w[i] if i < len(w) else 0.0
        ci = c[i] if i < len(c) else 0.0
        idle = 1.0 - b[i] - wi - ci
        top = max(b[i], wi, ci)
        if top <= 0.0 or idle > top:
            cells.append(" ")
        else:
            cells.append(LAUNCH if b[i] == top else WAIT if wi == top else CORE)
    return cells


def executor_lane(running: Sequence[float], core_wait: Sequence[float], width: int) -> str:
    """Running shares as block heights; ``░`` where the thread waited for a core more than it ran."""
    r, c = render.fit(running, width), render.fit(core_wait, width)
    cells = [CORE if c[i] > r[i] else render.level(r[i]) for i in range(len(r))]
    return "".join(cells) + " " * (width - len(cells))


def overlap_text(snapshot: Snapshot) -> str:
    """``overlap 43%``: the mean of ``snapshot.overlap`` over the window (``Snapshot.lanes``); with
    emulated streams whose threads were read, ``overlap on cores 3–12% · in progress 98%`` (running at
    once, at least and at most, vs work in progress at once); ``—`` with fewer than 2 executors."""
    if len(snapshot.executors) < 2:
        return "overlap —"
    lanes = snapshot.lanes
    low = render.pct(lanes.overlap if lanes else None, 0)
    if not any(e.running for e in snapshot.executors) or not snapshot.overlap_in_progress:
        return f"overlap {low}"
    high = render.pct(lanes.overlap_high if lanes else None, 0)
    cores = low if high in (low, "—") else f"{low[:-1]}–{high}"
    progress = render.pct(lanes.overlap_in_progress if lanes else None, 0)
    return f"overlap on cores {cores} · in progress {progress}"


def split_text(running: float | None, core_wait: float | None, short: bool) -> str:
    """`` run  31% waits  37%`` (``short``: `` run  31%``): on a core, and waiting for one."""
    text = " run " + render.pct(running, 4)
    return text if short else text + " waits " + render.pct(core_wait, 4)


class LanesPanel(SnapshotPanel):
    """``frontend ▌▌ ▌·· run 18% waits 0%`` and ``stream:0 ███░░█ run 61% waits 37%`` lanes, then the
    overlap line."""

    DEFAULT_CSS = """
    LanesPanel { height: auto; }
    """

    redraw_every = 0.2
    """Five times a second: a lane cell covers about 0.15 s of the last 5 s, so a frame in between moves
    it by less than a cell (measured: the panel cost the most of any, 0.6 % of a core at 10 Hz)."""

    def shown(self, snapshot: Snapshot) -> bool:
        """Not when attached to a process without the agent: nothing here can be measured then."""
        return not snapshot.attached

    def title(self, snapshot: Snapshot) -> str:
        """``lanes, last 5 s`` and the glyphs' legend; in a replay, that much trace time (``lanes, last
        50.0 ms of trace``)."""
        replay = snapshot.replay
        if replay is not None and replay.trace and snapshot.interval > 0:
            span = render.seconds(LANES_SECONDS / snapshot.interval * replay.frame)
            return f"lanes, last {span} of trace  ({LAUNCH} launching  {WAIT} in a sync)"
        return (
            f"lanes, last {LANES_SECONDS:g} s  ({LAUNCH} launching  {WAIT} blocked  {CORE} waiting for "
            f"a core)"
        )

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """The frontend lane, one lane per executor, and the overlap line.

        Where the agent read a thread's ``schedstat`` the lane is drawn from its running share (and
        ``░`` where it waited for a core), the right column says ``run N% waits M%``; elsewhere the lane
        is the share of time with work in progress and the column says ``busy N%``.
        """
        rows = executor_rows(snapshot.executors)
        names = ["frontend", *(label for label, _ in rows)]
        name_w = min(max(len(n) for n in names), 16)
        split = bool(snapshot.frontend_core_wait) or any(e.running for _, e in rows)
        # The right column's form, fullest first: "run N% waits M%", "run N%" (or "busy N%"), then the
        # percent alone where even the word leaves no lane: words give way, never the digits.
        form, right_w = ("full", len(" run 100% waits 100%")) if split else ("word", len(" busy 100%"))
        if form == "full" and width - name_w - 1 - right_w < 16:  # no room for the waits column
            form, right_w = "word", len(" busy 100%")
        if width - 1 - 1 - right_w < 4:
            form, right_w = "bare", len(" 100%")
        name_w = max(0, min(name_w, width - 1 - 1 - right_w))
        lane_w = max(0, width - (name_w + 1 if name_w else 0) - right_w)

        def column(running: float | None, core_wait: float | None, split: bool, row: Row, word: str) -> str:
            """The right column for a lane (not ``split``: ``word`` and one percent)."""
            if form == "bare":
                text = " " + render.pct(running, 4)
            elif not split:
                text = f" {word} " + render.pct(running, 4)
            else:
                text = split_text(running, core_wait, form != "full")
            return render.squeeze(text.ljust(right_w), width - row.width)

        def win(values: Sequence[float]) -> Sequence[float]:
            return window(values, snapshot.interval)

        lanes = snapshot.lanes
        front = lanes.frontend if lanes else NO_LANE
        busy, wait = win(snapshot.frontend_busy), win(snapshot.frontend_wait)
        core = win(snapshot.frontend_core_wait)
        name = render.clip("frontend", name_w).ljust(name_w) + " " if name_w else ""
        row = Row().add(name, self.style("label"))
        text = frontend_lane(busy, wait, lane_w, core)
        accent, dim, warn = self.style("accent"), self.style("dim"), self.style("warn")
        for glyph, run in groupby(text):  # one piece per run of one colour
            row.add("".join(run), accent if glyph == LAUNCH else warn if glyph == CORE else dim)
        row.add(
            column(
                front.busy,
                front.core_wait,
                bool(snapshot.frontend_core_wait),
                row,
                "run" if split else "busy",
            ),
            self.style("value"),
        )
        out = [row]
        exited = exited_ranks(snapshot)
        track = self.style("track")
        for label, e in rows:
            lane = (lanes.of(e) if lanes else None) or NO_LANE
            name_style = self.style("dim" if e.rank in exited else "label")
            row = Row().add(render.clip(label, name_w).ljust(name_w) + " " if name_w else "", name_style)
            if e.kind == ExecutorKind.EAGER:
                text = "(synchronous: inside the frontend lane)" if lane_w >= 39 else "(synchronous)"
                row.add(text.ljust(lane_w)[:lane_w], self.style("dim"))
                row.add(" " * right_w)
            elif e.running:
                running, core = win(e.running), win(e.core_wait)
                for waits, run in groupby(executor_lane(running, core, lane_w), key=CORE.__eq__):
                    row.add("".join(run), warn if waits else track)
                row.add(column(lane.running, lane.core_wait, True, row, "busy"), self.style("value"))
            else:
                row.add(render.lane(win(e.busy), lane_w), track)
                row.add(column(lane.busy, None, False, row, "busy"), self.style("value"))
            out.append(row)
        if snapshot.throughput_history:
            values = win(snapshot.throughput_history)
            top = max(values) or 1.0
            row = Row().add(
                render.clip(snapshot.throughput_unit, name_w).ljust(name_w) + " " if name_w else "",
                self.style("dim"),
            )
            row.add(render.spark(render.fit(values, lane_w), lane_w, top), self.style("track"))
            scale = f" 0..{render.num(top)}"
            if len(scale) <= right_w:  # the strip's scale, whole or not at all
                row.add(scale, self.style("dim"))
            out.append(row)
        overlap = overlap_text(snapshot)
        if len(overlap) > width:  # "overlap on cores 3% · in progress 98%" loses its second figure whole
            overlap = render.fields(overlap, width, " · ")
        indent = max(0, min(name_w + 1, width - len(overlap)))
        out.append(Row().add(" " * indent).add(overlap, self.style("value")))
        return out
