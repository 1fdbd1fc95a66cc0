"""The top line: experiment, device, the mode as the word ASYNC or SYNC, throughput, total queue depth."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from torchpar_top.contract.snapshot import Snapshot
from torchpar_top.contract.vocab import ChildState, Mode, ThroughputUnit
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel


def depth_text(snapshot: Snapshot) -> str:
    """``depth 1024/1024``: summed queue values over summed capacities (``∞`` if any is unbounded;
    ``Snapshot.depth``)."""
    depth = snapshot.depth
    if depth is None:
        return "depth —"
    return f"depth {depth.value}/{'∞' if depth.capacity is None else depth.capacity}"


def target_text(snapshot: Snapshot) -> str:
    """What runs: ``run train.py``, ``run train.py ×2 ranks``, ``attach 1234``, or the experiment's name."""
    return snapshot.target or snapshot.experiment


def unit_text(snapshot: Snapshot) -> str:
    """The throughput's unit; ``ops/s (sampled)`` when ops are counted in slices of the time."""
    sampled = snapshot.op_coverage is not None and snapshot.throughput_unit == ThroughputUnit.OPS
    return f"{snapshot.throughput_unit} (sampled)" if sampled else snapshot.throughput_unit


def child_text(snapshot: Snapshot) -> str:
    """The child's state when it is not simply running: ``exited 1``, ``attached``, ``starting``..."""
    child = snapshot.child
    if child.state == ChildState.RUNNING:
        return ""
    if child.state == ChildState.EXITED:
        return f"exited {child.exit_code}" if child.exit_code is not None else "exited"
    if child.state == ChildState.FAILED:
        return "failed to start"
    return str(child.state)


def child_failed(snapshot: Snapshot) -> bool:
    """Whether the child's state is bad news: it could not start, or ended with a non-zero code."""
    child = snapshot.child
    return child.state == ChildState.FAILED or (child.state == ChildState.EXITED and child.exit_code != 0)


MONITOR_MIN_WIDTH = 100
"""The header shows ``monitor N%`` (torchpar-top's own CPU) at this many columns and more."""


class HeaderBar(SnapshotPanel):
    """One line: ``torchpar-top  run train.py · ASYNC   [exited 1]  12.4 it/s   depth 3/1024``."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "header--name",
        "header--async",
        "header--sync",
        "header--paused",
        "header--child",
        "header--state",
    }

    DEFAULT_CSS = """
    HeaderBar {
        height: 1;
        background: $panel;
        & > .header--name { color: $accent; text-style: bold; }
        & > .header--async { color: $background; background: $success; text-style: bold; }
        & > .header--sync { color: $background; background: $warning; text-style: bold; }
        & > .header--paused { color: $background; background: $secondary; text-style: bold; }
        & > .header--child { color: $background; background: $error; text-style: bold; }
        & > .header--state { color: $background; background: $primary; text-style: bold; }
    }
    """

    def __init__(self, *, title_extra: str = "", id: str | None = None) -> None:
        super().__init__(id=id)
        self.title_extra = title_extra
        """Shown after the name (e.g. the script a user runs)."""
        self.steps_drawn: Callable[[], Snapshot | None] = lambda: None
        """The snapshot the steps panel shows (the app sets it; :meth:`throughput`)."""

    follows_timed = True

    def throughput(self, snapshot: Snapshot) -> float | None:
        """The figure shown. A step rate is a mean over the last 2 s, as the steps panel's and the ranks
        table's, which the render timer redraws twice a second: the header shows the one they show
        (redrawn every frame from the newest snapshot, it read 121 steps/s on a screen whose steps panel
        said 110). Other figures (items/s, ops/s) are every frame's."""
        drawn = self.steps_drawn() if snapshot.steps is not None else None
        if (
            drawn is not None
            and drawn.steps is not None
            and drawn.throughput_unit == snapshot.throughput_unit
        ):
            return drawn.throughput
        return snapshot.throughput

    def drawn_key(self, snapshot: Snapshot, width: int) -> object:
        """Everything :meth:`build` reads, the figures as they are written (a rate whose digits did not
        change draws the same row)."""
        child = snapshot.child
        return (
            width,
            self.title_extra,
            target_text(snapshot),
            snapshot.description,
            snapshot.mode,
            snapshot.attached,
            child.state,
            child.exit_code,
            snapshot.paused,
            bool(snapshot.timing and snapshot.timing[-1]),
            render.num(self.throughput(snapshot)),
            unit_text(snapshot),
            snapshot.throughput_unit,
            depth_text(snapshot),
            None if snapshot.monitor_cpu is None else render.pct(snapshot.monitor_cpu, 0),
        )

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """The one header row: the fullest form that fits. Words give way first (the app's name, the
        target shrinks, ``depth``'s label), then whole numbers, never part of one; ``monitor N%`` (the app's
        own CPU) is shown only at :data:`MONITOR_MIN_WIDTH` columns and more, and goes first."""
        forms = (
            (True, 8, 3),
            (True, 8, 3),
            (False, 8, 3),
            (False, 8, 2),
            (False, 4, 2),
            (False, 0, 2),
            (False, 0, 1),
            (False, 0, 0),
        )
        for i, (name, target_min, numbers) in enumerate(forms):
            right = self._right(snapshot, numbers, monitor=i == 0 and width >= MONITOR_MIN_WIDTH)
            row = self._left(snapshot, width, right.width, name, target_min)
            if row.width + 2 + right.width <= width:
                break
        row.to(max(row.width + 2, width - right.width))
        row.segments.extend(right.segments)
        row.width += right.width
        return [row]

    def _right(self, snapshot: Snapshot, numbers: int, monitor: bool = False) -> Row:
        """Child state, PAUSED, then the throughput and ``depth 4/4`` (3), the throughput and ``4/4`` (2),
        the throughput alone (1), or neither (0); then ``monitor N%`` (``monitor``)."""
        right = Row()
        child = child_text(snapshot)
        if child:
            badge = "header--child" if child_failed(snapshot) else "header--state"
            right.add(f" {child} ", self.style(badge)).add("  ")
        if snapshot.paused:
            right.add(" PAUSED ", self.style("header--paused")).add("  ")
        if snapshot.timing and snapshot.timing[-1] and not snapshot.paused:
            right.add(" timing round ", self.style("header--state")).add("  ")
        if not snapshot.attached and numbers:
            right.add(render.num(self.throughput(snapshot)), self.style("value"))
            unit = unit_text(snapshot) if numbers == 3 else snapshot.throughput_unit
            right.add(f" {unit}" + ("   " if numbers > 1 else ""), self.style("dim"))
            if numbers > 1:
                text = depth_text(snapshot)
                right.add(text if numbers == 3 else text.removeprefix("depth "), self.style("label"))
        if monitor and snapshot.monitor_cpu is not None:
            right.add(f"   monitor {render.pct(snapshot.monitor_cpu, 0)}", self.style("dim"))
        return right.add(" ")

    def _left(self, snapshot: Snapshot, width: int, right_w: int, name: bool, target_min: int) -> Row:
        """The app's name (``name``), what runs (at least ``target_min`` cells, 0: left out), the
        description where there is room, and the mode."""
        mode = "SYNC" if snapshot.mode == Mode.SYNC else "ASYNC"
        row = Row()
        if name:
            row.add(" torchpar-top", self.style("header--name"))
            if self.title_extra:
                row.add(f" {self.title_extra}", self.style("dim"))
        row.add("  " if name else " ")
        if target_min:
            target = render.clip(target_text(snapshot), max(target_min, width - right_w - 24))
            row.add(target, self.style("value"))
        mode_badge = "" if snapshot.attached else f" {mode} "
        room = width - row.width - right_w - len(mode_badge) - 3 - 3 - 2
        description = snapshot.description
        if description and room > 3 and target_min:
            row.add(" · ", self.style("dim")).add(render.clip(description, room), self.style("label"))
        if mode_badge:
            if target_min:
                row.add(" · ", self.style("dim"))
            row.add(mode_badge, self.style("header--sync" if mode == "SYNC" else "header--async"))
        return row
