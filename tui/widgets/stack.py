"""The frontend thread's Python stack (from the agent, or py-spy when attached), innermost frame last,
and what it waits in.

When there is no stack, the reason (py-spy missing, ptrace not permitted...) is shown in full, wrapped:
it says how to fix it.
"""

from __future__ import annotations

from typing import ClassVar

from torchpar_top.contract.messages import StackFrame
from torchpar_top.contract.snapshot import Snapshot, StackView
from torchpar_top.contract.vocab import CHILD_ENDED
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Pad, Row, SnapshotPanel

_LIB_MARKERS = ("site-packages/", "dist-packages/")

STALE_S = 2.0
"""A stack older than this says how old it is (stacks arrive about twice a second)."""


def short_path(filename: str) -> str:
    """``torch/utils/data/dataloader.py`` for a library file, ``train.py`` for the user's own."""
    path = filename.replace("\\", "/")
    for marker in _LIB_MARKERS:
        if marker in path:
            return path.split(marker, 1)[1]
    return path.rsplit("/", 1)[-1]  # the user's file, or the standard library's (queue.py)


def where(frame: StackFrame) -> str:
    """``dataloader.py:631`` style location of a frame."""
    return f"{short_path(frame.filename)}:{frame.line}"


def verdict(stack: StackView) -> str:
    """``waiting in: DataLoader``, ``idle`` or ``running Python``: the first thing to read."""
    if stack.waiting_in:
        return f"waiting in: {stack.waiting_in}"
    return "idle (the thread waits)" if stack.idle else "running Python"


class StackPanel(SnapshotPanel):
    """``waiting in: DataLoader``, then the frames, outermost first; tight on space, the innermost stay."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"stack--waiting", "stack--running", "stack--inner"}

    DEFAULT_CSS = """
    StackPanel {
        height: auto;
        & > .stack--waiting { color: $background; background: $warning; text-style: bold; }
        & > .stack--running { color: $background; background: $success; text-style: bold; }
        & > .stack--inner { color: $foreground; text-style: bold; }
    }
    """

    enabled: bool = True
    """Off when the user hid the panel (key ``k``)."""

    redraw_every = 0.5
    """A stack arrives about twice a second."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._head = 0
        """Rows before the frames in the last build (the verdict, a status line)."""

    def shown(self, snapshot: Snapshot) -> bool:
        """When enabled and there is a stack or a reason there is none (``run`` and ``attach``)."""
        return self.enabled and (snapshot.stack is not None or bool(snapshot.stack_status))

    def title(self, snapshot: Snapshot) -> str:
        """``frontend stack (agent) · pid 4242``: who read it (the agent in the workload, or py-spy)."""
        stack = snapshot.stack
        return "frontend stack" if stack is None else f"frontend stack ({stack.source}) · pid {stack.pid}"

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """The verdict, py-spy's status when there is one, then one row per frame."""
        stack = snapshot.stack
        if stack is None:
            lines = render.wrap(snapshot.stack_status, width)
            self._head = len(lines)
            return [Row().add(line, self.style("note")) for line in lines]
        head = verdict(stack)
        waiting = bool(stack.waiting_in) or stack.idle
        if (
            snapshot.child.state in CHILD_ENDED
        ):  # the last stack read, not what the process does now: it does nothing
            row = Row().add(render.clip(f"exited · last seen {head}", width), self.style("note"))
        else:
            row = Row().add(
                f" {render.clip(head, width - 2)} ",
                self.style("stack--waiting" if waiting else "stack--running"),
            )
        if stack.idle and stack.waiting_in:
            row.add("  idle", self.style("dim"))
        # the age only once it is stale: a fresh stack is at most STALE_S old, and a text that changes
        # every frame would repaint the line every frame
        seconds = max(0.0, snapshot.t - stack.t)
        age = f"{seconds:.0f} s ago" if seconds >= STALE_S else ""
        for right in (" · ".join(x for x in (stack.thread, age) if x), age):
            if right and row.width + len(right) + 2 <= width:
                row.to(width - len(right)).add(right, self.style("dim"))
                break
        out = [row]
        if snapshot.stack_status:
            out.append(Row().add(render.clip(snapshot.stack_status, width), self.style("dim")))
        self._head = len(out)
        frames = stack.frames
        if not frames:
            out.append(Row().add("(no Python frames)", self.style("dim")))
            return out
        func_w = min(max(len(f.function) for f in frames), max(8, width // 2))
        for i, frame in enumerate(frames):
            inner = i == len(frames) - 1
            mark = "▶ " if inner else "  "
            row = Row().add(mark, self.style("accent"))
            row.add(
                render.clip(frame.function, func_w).ljust(func_w) + "  ",
                self.style("stack--inner" if inner else "label"),
            )
            row.add(render.clip(where(frame), max(0, width - row.width)), self.style("dim"))
            out.append(row)
        return out

    def fit_rows(self, rows: list[Row], height: int) -> list[Row]:
        """Short of room, keep the verdict and the innermost frames; say how many outer ones are hidden
        (the padding that keeps the panel's height goes first)."""
        rows = [r for r in rows if not isinstance(r, Pad)]
        if height <= 0 or len(rows) <= height or self.snapshot is None or self.snapshot.stack is None:
            return rows
        if height == 1:
            return rows[:1]
        frames = rows[self._head :]
        keep = max(1, height - 2)
        hidden = len(frames) - keep
        if hidden <= 0 or height == 2:
            return [rows[0], *frames[-(height - 1) :]]
        note = Row().add(f"  … {hidden} outer frame{'s' if hidden != 1 else ''}", self.style("dim"))
        return [rows[0], note, *frames[-keep:]]
