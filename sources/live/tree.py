"""The workload's process tree, followed so that nothing it started is left running when it is stopped.

The workload's process group is not enough: a script may start a grandchild in a process group of its
own, or a double-forked daemon in a session of its own (reparented away from the workload at once). So
the tree is walked while the workload lives (the agent makes the workload a child subreaper: orphans of
its tree stay in it), and every process carrying the run's mark (:data:`ENV_RUN`, inherited through the
environment) is found when the workload is stopped, even after it ended.
"""

from __future__ import annotations

import contextlib
import signal
import time

import psutil
from torchpar_top.contract.vocab import ENV_RUN
from torchpar_top.probes.host.threads import descendants

#: Seconds between two walks of the tree while the workload runs (what a walk adds is the processes that
#: cleared the run's mark from their environment).
WALK_EVERY = 2.0


class ProcessTree:
    """The processes below one workload process (not the workload itself)."""

    def __init__(self, root: int, mark: str) -> None:
        """Follow the descendants of pid ``root``, whose environment holds ``ENV_RUN=mark``."""
        self.root, self.mark = root, mark
        self._known: dict[tuple[int, float], psutil.Process] = {}
        self._walked = float("-inf")

    def walk_if_due(self) -> None:
        """Walk the tree when the last walk is :data:`WALK_EVERY` seconds old."""
        if time.monotonic() - self._walked >= WALK_EVERY:
            self.walk()

    def walk(self) -> None:
        """Remember every process below the root now (nothing when the root has ended)."""
        self._walked = time.monotonic()
        try:
            # the kernel's list of each thread's children: a read per thread of the tree, where psutil's
            # children() reads every process on the machine (1.3-1.6 ms a walk on a quiet VM)
            pids = descendants(self.root)
        except psutil.Error:
            return
        for pid in pids:
            try:
                self._remember(psutil.Process(pid))
            except psutil.Error:
                continue  # ended since

    def leftovers(self) -> list[psutil.Process]:
        """The processes of the tree still running: those walked, and those carrying the run's mark."""
        for proc in psutil.process_iter():
            try:
                if proc.pid != self.root and proc.environ().get(ENV_RUN) == self.mark:
                    self._remember(proc)
            except psutil.Error:
                continue  # ended, or not ours to read
        return [p for p in self._known.values() if _is_running(p)]

    def terminate(self) -> None:
        """SIGTERM every process walked so far (with the workload's own SIGTERM: they share its grace)."""
        for proc in list(self._known.values()):
            _signal(proc, signal.SIGTERM)

    def end(self, deadline: float) -> None:
        """SIGTERM every leftover, then SIGKILL those still running at ``deadline`` (monotonic)."""
        procs = self.leftovers()
        for proc in procs:
            _signal(proc, signal.SIGTERM)
        while procs and time.monotonic() < deadline:
            time.sleep(0.05)
            procs = [p for p in procs if _is_running(p)]
        for proc in procs:
            _signal(proc, signal.SIGKILL)

    def _remember(self, proc: psutil.Process) -> None:
        """Keep ``proc`` by pid and start time (a pid reused later is another process)."""
        with contextlib.suppress(psutil.Error):
            self._known.setdefault((proc.pid, proc.create_time()), proc)


def _is_running(proc: psutil.Process) -> bool:
    """Whether ``proc`` (the very process remembered, not a reuse of its pid) still runs."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(proc: psutil.Process, sig: int) -> None:
    """Send ``sig``; a process already gone (or reused pid, which psutil refuses) is fine."""
    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)
