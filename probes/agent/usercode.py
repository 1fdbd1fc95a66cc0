"""The agent around unmodified user code: ops, steps, sync points, DataLoader prefetch, sync control.

:class:`UserAgent` is an :class:`Agent` whose samples also carry ``steps``, ``data_wait`` and the
DataLoader rows' ``ready``; :class:`Instrumentation` installs, around the user's code, a function mode
on the frontend thread (ops and sync points, :mod:`usercode_ops`), a global optimizer step post hook
(steps) and the DataLoader wrappers (:mod:`usercode_data`); :mod:`usercode_install` puts them in place.

Throughput is optimizer steps/s once a step was seen, else ops/s. SYNC with scope ``op`` synchronizes
CUDA after every op, with scope ``step`` after every optimizer step; on the CPU eager ops are already
synchronous, so SYNC changes nothing there (the agent says so once).
"""

from __future__ import annotations

import _thread
import socket
import threading
import time
import weakref
from typing import Any

import torch

from torchpar_top.probes.agent.activity import busy_time
from torchpar_top.probes.agent.agent import Agent
from torchpar_top.probes.agent.usercode_data import DataLoaderWatch
from torchpar_top.probes.agent.usercode_ops import EagerOps, OpCounter, SyncPoints

CPU_SYNC_NOTE = ("SYNC on the CPU: eager CPU ops are already synchronous, there is no queue to drain; "
                 "sync points are counted where they would synchronize on CUDA")

#: Seconds a stop waits for a safe point before interrupting the user's code wherever it is.
STOP_SAFE_WAIT = 0.5

def cuda_in_use() -> bool:
    """True once the user's code initialised CUDA in this process (never initialises it)."""
    return torch.cuda.is_initialized()


class UserAgent(Agent):
    """The agent for ``torchpar-top run``: experiment ``run``, one eager CPU executor to start with."""

    def __init__(self, sock: socket.socket | None, *, target: str, interval: float = 0.1, sync: bool = False,
                 sync_scope: str = "op", rank: int | None = None, world_size: int | None = None) -> None:
        self.mode: OpCounter | None = None
        self._sync, self._sync_scope = False, "op"
        super().__init__(sock, experiment="run", description=f"your code: {target}",
                         device="cuda" if torch.cuda.is_available() else "cpu",
                         interval=interval, sync=sync, sync_scope=sync_scope)
        self.hello_extra: dict[str, Any] = {"target": target}
        if rank is not None:
            self.hello_extra.update(rank=rank, world_size=world_size if world_size is not None else 1)
        self.syncpoints = SyncPoints(cuda_in_use)
        self.eager: EagerOps = self._add(EagerOps("cpu (eager)"))
        self.data = DataLoaderWatch(self._add, threading.get_ident())
        self.data.also_wait = self.frontend_wait
        self.stop_requested = False
        self.interruptible = False
        """True while the user's code runs: a stop then interrupts it (KeyboardInterrupt)."""
        self._primary: weakref.ref | None = None
        self._last_ops = self._last_steps = 0
        self._cpu_sync_noted = False
        self._cuda_watched = False
        self._flush_lock = threading.Lock()

    # -- sync control: a property so the mode learns of every change at once ----------------------

    @property
    def sync(self) -> bool:  # type: ignore[override]
        """True in SYNC mode."""
        return self._sync

    @sync.setter
    def sync(self, value: bool) -> None:
        self._sync = bool(value)
        self._update_mode()

    @property
    def sync_scope(self) -> str:  # type: ignore[override]
        """``op`` or ``step``."""
        return self._sync_scope

    @sync_scope.setter
    def sync_scope(self, value: str) -> None:
        self._sync_scope = value
        self._update_mode()

    def _update_mode(self) -> None:
        """Give the mode its after-op call for the current sync setting."""
        if self.mode is not None:
            self.mode.after_op = self.synchronize if self._sync and self._sync_scope == "op" else None

    def _sync_cuda(self) -> None:
        """Wait for the GPU (if this process uses one); the wait is frontend wait."""
        if cuda_in_use():
            self.frontend_wait.begin(time.perf_counter())
            try:
                torch.cuda.synchronize()
            finally:
                self.frontend_wait.end(time.perf_counter())

    def synchronize(self) -> None:
        """Every executor, then CUDA when in use (scope ``step`` calls this from :meth:`step`)."""
        super().synchronize()
        self._sync_cuda()

    # -- hooks --------------------------------------------------------------------------------------

    def on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Optimizer step post hook: one step per step of the first optimizer seen (GANs step two)."""
        if self.stop_requested:
            self._safe_stop()
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary, primary = weakref.ref(optimizer), optimizer
        if optimizer is primary:
            self.step()

    def watch_cuda_streams(self) -> None:
        """HOOK: CUDA became initialised in the user's code; watch the current device's stream.

        Runs on the frontend thread (from :attr:`OpCounter.call_soon`): ``Agent.cuda_stream`` enters
        the CUDA launch counter there. Only the current device is watched (asking another device for
        its stream would create a context on it).
        """
        if self._cuda_watched:
            return
        self._cuda_watched = True
        make = getattr(self, "cuda_stream", None)
        if make is None:
            self.log("CUDA in use: ops and sync points are counted; stream queue depth is not available")
            return
        try:
            device = torch.cuda.current_device()
            make(f"cuda:{device}", device)
        except Exception as exc:  # noqa: BLE001 - a failure here must not break the user's code
            self.log(f"CUDA in use, but its stream is not watched: {type(exc).__name__}: {exc}")
            return
        self.log(f"CUDA in use: watching the current stream of cuda:{device}")

    # -- sampling ------------------------------------------------------------------------------------

    def sample(self, t0: float, t1: float, done: int) -> dict[str, Any]:
        """The base sample plus ``steps``, ``data_wait`` and ``ready``; throughput in steps/s or ops/s."""
        self.data.refresh(t0, t1)
        ops, steps = self.eager.completed, self.items
        if steps:
            self.unit, done = "steps/s", steps - self._last_steps
        else:
            self.unit, done = "ops/s", ops - self._last_ops
        self._last_ops, self._last_steps = ops, steps
        msg = super().sample(t0, t1, done)
        msg["items"], msg["steps"] = (steps if steps else ops), steps
        msg["data_wait"] = min(1.0, busy_time(self.data.wait.intervals(t0, t1)) / msg["window"])
        ready = {ex.name: ex.ready for ex in self.data.executors if ex.ready is not None}
        for row in msg["executors"]:
            if row["name"] in ready:
                row["ready"] = ready[row["name"]]
        self.flush_syncpoints()
        if self._sync and not self._cpu_sync_noted and not cuda_in_use():
            self._cpu_sync_noted = True
            self.log(CPU_SYNC_NOTE)
        if self.mode is not None:  # things that must happen on the frontend thread, at its next op
            if not self._cuda_watched and cuda_in_use():
                self.mode.run_soon(self.watch_cuda_streams)
            if self._threads_applied != self._threads_wanted:  # no optimizer step applies it
                self.mode.run_soon(lambda: Agent.step(self, 0))
        return msg

    def flush_syncpoints(self) -> None:
        """Send the ``syncpoints`` message if a count changed since the last one."""
        with self._flush_lock:
            sites = self.syncpoints.take_changed()
            if sites is not None:
                self._send("syncpoints", sites=sites)

    def roles(self) -> dict[str, str]:
        """As the base agent, with DataLoader pin-memory threads named as such."""
        roles = super().roles()
        for ex in self.data.executors:
            for tid in ex.tids:
                roles[str(tid)] = f"{ex.name} pin-memory"
        return roles

    # -- lifecycle -----------------------------------------------------------------------------------

    def finish(self) -> None:
        """The user's code returned or raised: last sync points out, executors closed."""
        try:
            self.flush_syncpoints()
        except OSError:
            pass
        self.close()

    def _stop_process(self) -> None:
        """A stop (or torchpar-top gone): raise KeyboardInterrupt in the user's code at a safe point.

        Safe points are the frontend's next op or optimizer step outside a DataLoader fetch (an
        interrupted fetch makes the workers print tracebacks). A frontend stuck elsewhere (one long op,
        a data wait) is interrupted anyway after :data:`STOP_SAFE_WAIT`; the base agent ends the
        process group if even that does not return.
        """
        first, self.stop_requested = not self.stop_requested, True
        super()._stop_process()
        if first and self.interruptible:
            if self.mode is not None:
                self.mode.run_soon(self._safe_stop)
            timer = threading.Timer(STOP_SAFE_WAIT, self._interrupt_anyway)
            timer.daemon = True
            timer.start()

    def _safe_stop(self) -> None:
        """At a safe point on the frontend thread: raise the stop into the user's code (once)."""
        if not (self.interruptible and self.stop_requested):
            return
        if self.data.inside and self.mode is not None:
            self.mode.run_soon(self._safe_stop)  # at the next op after the fetch
            return
        self.interruptible = False
        raise KeyboardInterrupt("stopped by torchpar-top")

    def _interrupt_anyway(self) -> None:
        """No safe point came in time: interrupt the main thread wherever it is."""
        if self.interruptible:
            self.interruptible = False
            _thread.interrupt_main()

    def draining(self) -> bool:
        """As the base agent, but SYNC does not drain a DataLoader (its workers keep prefetching)."""
        for ex in self.data.executors:
            self._drain_target.pop(id(ex), None)
        return super().draining()
