"""The child's threads grouped by role: how many, how many busy, and their CPU on a fixed scale."""

from __future__ import annotations

from torchpar_top.contract.snapshot import Snapshot, ThreadGroup
from torchpar_top.contract.vocab import ChildState, Role
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel

SYNC_NOTE = "frontend hot in a synchronize = waiting, not working"

SHOWN_WAIT_PERCENT = 5.0
"""A group's run-queue wait is written next to it from this share of a core."""
NO_THREADS_IN_REPLAY = "none in a replay: a trace has no thread samples"
WAIT_COLUMN_MIN_WIDTH = 52
"""Narrower panels leave the per-group wait out (the names and bars need the room); the note stays."""


def starved_note(snapshot: Snapshot) -> str | None:
    """``starved: waited 1.2 cores for a CPU``, when the session found the threads starved."""
    return None if snapshot.starved is None else f"starved: waited {snapshot.starved:.1f} cores for a CPU"


def narrow_columns(longest_name: int, width: int) -> tuple[int, int, int]:
    """``(name, bar, busy)`` widths for a narrow panel (0: left out). The CPU percent (6 cells) always
    fits whole; the name shrinks to 4, then the bar goes, then the busy count, then the name shrinks."""
    room = width - 6
    if room >= 4 + 1 + 7 + 1 + 4:  # a short name, the busy count, a short bar
        name_w = min(longest_name, room - 1 - 7 - 1 - 4)
        return name_w, room - name_w - 1 - 7 - 1, 7
    if room >= 4 + 1 + 7 + 1:
        return room - 1 - 7 - 1, 0, 7
    return max(0, room - 1), 0, 0


class ThreadsPanel(SnapshotPanel):
    """One row per role; the bar's scale is 100% per thread of the group. Its figures are means over
    the last second (``model/store.py``): it redraws twice a second."""

    redraw_every = 0.5

    DEFAULT_CSS = """
    ThreadsPanel { height: auto; }
    """

    def empty(self, snapshot: Snapshot) -> bool:
        """In a replay (no host readings) the panel shrinks to one borderless line."""
        return snapshot.replay is not None and not snapshot.thread_groups

    def title(self, snapshot: Snapshot) -> str:
        """``threads (pid 4242) · intra-op 2``; under torchrun ``threads (2 ranks)`` (the running ones)."""
        if snapshot.replay is not None and snapshot.replay.trace:
            return "threads"
        pid = snapshot.child.pid
        ranks = snapshot.ranks_running
        if len(snapshot.ranks) > 1:
            text = f"threads ({ranks} rank{'s' if ranks != 1 else ''})"
        else:
            text = f"threads (pid {pid})" if pid is not None else "threads (no child)"
        if snapshot.num_threads is not None:
            text += f" · intra-op {snapshot.num_threads}"
        if snapshot.interop_threads is not None:
            text += f" · inter-op {snapshot.interop_threads}"
        return text

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """A row per thread group, then the SYNC note when it applies."""
        groups = snapshot.thread_groups
        if not groups and snapshot.replay is not None:
            return [
                Row()
                .add("threads  ", self.style("accent"))
                .add(render.clip(NO_THREADS_IN_REPLAY, width - 9), self.style("dim"))
            ]
        if not groups:
            ended = snapshot.child.state == ChildState.EXITED
            return [
                Row().add(
                    "no threads: the workload ended" if ended else "no threads sampled yet", self.style("dim")
                )
            ]
        names = [self.label_of(g) for g in groups]
        busy_w = 7  # "12 busy"
        wait_w = (
            11 if width >= WAIT_COLUMN_MIN_WIDTH else 0
        )  # " waits 156%" (run-queue wait; blank when small)
        name_w = min(max(len(s) for s in names), max(8, width - busy_w - 1 - 6 - 6 - wait_w))
        bar_w = max(4, min(30, width - name_w - 1 - busy_w - 1 - 6 - wait_w))
        if (
            name_w + 1 + busy_w + 1 + bar_w + 6 > width
        ):  # narrow: the name, then the bar, then "busy" give way
            name_w, bar_w, busy_w = narrow_columns(max(len(s) for s in names), width)
        out = []
        for group, name in zip(groups, names, strict=True):
            frac = render.fraction(group.cpu_percent, 100.0 * max(1, group.count))
            row = Row()
            if name_w:
                row.add(render.clip(name, name_w).ljust(name_w) + " ", self.style("label"))
            busy = f"{group.busy} busy" if group.count > 1 else ("busy" if group.busy else "idle")
            if busy_w:
                row.add(busy.rjust(busy_w) + " ", self.style("dim"))
            row.add(render.bar(frac, bar_w), self.level_style(frac))
            row.add(render.squeeze(f"{round(group.cpu_percent):5d}%", width - row.width), self.style("value"))
            if wait_w and group.wait_percent >= SHOWN_WAIT_PERCENT:
                row.add(f" waits{round(group.wait_percent):4d}%", self.style("warn"))
            out.append(row)
        if snapshot.frontend_hot_in_sync:
            out.append(Row().add("⚠ " + SYNC_NOTE, self.style("note")))
        note = starved_note(snapshot)
        if note:
            out.append(Row().add(render.clip("⚠ " + note, width), self.style("note")))
        return out

    @staticmethod
    def label_of(group: ThreadGroup) -> str:
        """The role, with ``×N`` when the group has several threads; a stream executor is shown as
        ``executor NAME`` (its executor's name says it is a stream, and the row keeps room for waits), a
        DataLoader's pin-memory thread as ``NAME pin-memory``."""
        if group.role == Role.STREAM_EXECUTOR:
            role = f"executor {group.executor}"
        elif group.role == Role.PIN_MEMORY:
            role = f"{group.executor} pin-memory"
        else:
            role = group.role.value
        return f"{role} ×{group.count}" if group.count > 1 else role
