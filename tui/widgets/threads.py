"""The child's threads grouped by role: how many, how many busy, and their CPU on a fixed scale."""

from __future__ import annotations

from torchpar_top.session.model import Snapshot, ThreadGroup
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel

STREAM_EXECUTOR = "stream executor "
"""The agent's role for an emulated stream's executor thread is this plus the stream's name."""

HOT_FRONTEND_PERCENT = 80.0
"""A frontend above this share of a core (per thread of the group) while in SYNC gets the "waiting, not
working" note."""

SYNC_NOTE = "frontend hot in a synchronize = waiting, not working"

SHOWN_WAIT_PERCENT = 5.0
"""A group's run-queue wait is written next to it from this share of a core."""
WAIT_COLUMN_MIN_WIDTH = 52
"""Narrower panels leave the per-group wait out (the names and bars need the room); the note stays."""
STARVED_WAIT_PERCENT = 50.0
"""Run-queue wait summed over every thread above this (half a core) gets the "starved" note..."""
STARVED_SHARE = 0.2
"""...if it is also above this share of the time the threads wanted a core (ran + waited)."""


def starved_note(snapshot: Snapshot) -> str | None:
    """The note for threads that were runnable but waited for a core, when that is above half a core in
    all and above :data:`STARVED_SHARE` of the time the threads wanted a core (run + wait): on a large
    machine a little wait spread over many busy threads is not starvation.

    The wait is the kernel's run-queue delay (``schedstat``): the cores were all taken, by this
    workload's own threads (oversubscription) or by other processes (the cores panel tells which)."""
    wait = sum(g.wait_percent for g in snapshot.thread_groups)
    ran = sum(g.cpu_percent for g in snapshot.thread_groups)
    if wait <= STARVED_WAIT_PERCENT or wait <= STARVED_SHARE * (wait + ran):
        return None
    return f"starved: waited {wait / 100:.1f} cores for a CPU"


def is_frontend(group: ThreadGroup) -> bool:
    """Whether ``group`` is the Python frontend (the thread that launches the work)."""
    return group.role.startswith(("frontend", "main"))


def hot_frontend_in_sync(snapshot: Snapshot) -> bool:
    """True when the mode is SYNC and the frontend group runs above 80% of a core per thread."""
    return snapshot.mode == "sync" and any(
        is_frontend(g) and g.cpu_percent > HOT_FRONTEND_PERCENT * max(1, g.count) for g in snapshot.thread_groups
    )


class ThreadsPanel(SnapshotPanel):
    """One row per role; the bar's scale is 100% per thread of the group."""

    DEFAULT_CSS = """
    ThreadsPanel { height: auto; }
    """

    def title(self, snapshot: Snapshot) -> str:
        """``threads (pid 4242) · intra-op 2``; under torchrun ``threads (2 ranks)`` (the running ones)."""
        pid = snapshot.child.pid
        ranks = sum(r.state == "running" for r in snapshot.ranks)
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
        if not groups:
            return [Row().add("no threads sampled yet", self.style("dim"))]
        names = [self.label_of(g) for g in groups]
        busy_w = 7  # "12 busy"
        wait_w = 11 if width >= WAIT_COLUMN_MIN_WIDTH else 0  # " waits 156%" (run-queue wait; blank when small)
        name_w = min(max(len(s) for s in names), max(8, width - busy_w - 1 - 6 - 6 - wait_w))
        bar_w = max(4, min(30, width - name_w - 1 - busy_w - 1 - 6 - wait_w))
        out = []
        for group, name in zip(groups, names):
            frac = render.fraction(group.cpu_percent, 100.0 * max(1, group.count))
            row = Row().add(render.clip(name, name_w).ljust(name_w) + " ", self.style("label"))
            busy = f"{group.busy} busy" if group.count > 1 else ("busy" if group.busy else "idle")
            row.add(busy.rjust(busy_w) + " ", self.style("dim"))
            row.add(render.bar(frac, bar_w), self.level_style(frac))
            row.add(f"{round(group.cpu_percent):5d}%", self.style("value"))
            if wait_w and group.wait_percent >= SHOWN_WAIT_PERCENT:
                row.add(f" waits{round(group.wait_percent):4d}%", self.style("warn"))
            out.append(row)
        if hot_frontend_in_sync(snapshot):
            out.append(Row().add("⚠ " + SYNC_NOTE, self.style("note")))
        note = starved_note(snapshot)
        if note:
            out.append(Row().add(render.clip("⚠ " + note, width), self.style("note")))
        return out

    @staticmethod
    def label_of(group: ThreadGroup) -> str:
        """The role, with ``×N`` when the group has several threads; a stream executor is shown as
        ``executor NAME`` (its executor's name says it is a stream, and the row keeps room for waits)."""
        role = group.role
        if role.startswith(STREAM_EXECUTOR):
            role = "executor " + role[len(STREAM_EXECUTOR):]
        return f"{role} ×{group.count}" if group.count > 1 else role
