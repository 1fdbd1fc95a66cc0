"""A session: the child workload, the host probes, the store, and the commands between them.

The TUI and headless mode both drive a :class:`Session`; neither measures nor spawns anything itself.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Sequence

from torchpar_top import workloads
from torchpar_top.probes.host.cores import CoreSampler
from torchpar_top.probes.host.threads import ThreadSampler
from torchpar_top.session.child import ChildProcess, agent_command
from torchpar_top.session.model import ChildStatus, Experiment, HostSample, Snapshot
from torchpar_top.session.store import SessionStore

GpuSource = Callable[[], tuple[tuple, str]]


class Session:
    """Runs one experiment at a time in a child process and samples the host around it."""

    def __init__(
        self,
        experiment: str = workloads.DEFAULT,
        *,
        interval: float = 0.1,
        sync: bool = False,
        gpu_source: GpuSource | None = None,
    ) -> None:
        """Prepare a session (nothing runs until :meth:`start`).

        Args:
            experiment: a name from :func:`torchpar_top.workloads.names`.
            interval: seconds between samples, in the child and on the host.
            sync: start the child in SYNC mode.
            gpu_source: returns ``(gpu views, status)``; None means no GPU panel data.
        """
        meta = workloads.info(experiment)
        self.interval = interval
        self.store = SessionStore(meta.name, meta.title, interval)
        self._sync_wanted = sync
        self._gpu_source = gpu_source
        self._child: ChildProcess | None = None
        self._child_lock = threading.RLock()
        self._stop = threading.Event()
        self._host_thread: threading.Thread | None = None
        self._closed = False
        self.host_samples = 0
        """How many host readings were stored (headless mode prints one line per reading)."""

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the host probes and the child."""
        self._host_thread = threading.Thread(target=self._host_loop, name="tpt-host-probes", daemon=True)
        self._host_thread.start()
        self._start_child()

    def close(self) -> None:
        """Stop the child (and its process group) and the probes. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._stop_child()
        if self._host_thread is not None:
            self._host_thread.join(timeout=5)

    # -- commands ---------------------------------------------------------------------------------

    def experiments(self) -> Sequence[Experiment]:
        """The built-in experiments."""
        return [workloads.info(n) for n in workloads.names()]

    def toggle_sync(self) -> None:
        """Switch between ASYNC and SYNC in the running child."""
        self._sync_wanted = self.store.mode != "sync"
        if self._send("set_sync", value=self._sync_wanted):
            self.store.add_log("app", f"asked for {'SYNC' if self._sync_wanted else 'ASYNC'}")

    def change_threads(self, delta: int) -> None:
        """``torch.set_num_threads(current + delta)`` in the child, kept within 1..cpu_count."""
        current = self.store.num_threads or 1
        wanted = min(max(1, current + delta), os.cpu_count() or 1)
        if wanted == current:
            self.store.add_log("app", f"threads stay at {current} (1..{os.cpu_count()} cores)")
            return
        if self._send("set_threads", value=wanted):
            self.store.num_threads = wanted
            self.store.add_log("app", f"asked for {wanted} intra-op threads")

    def switch_experiment(self, name: str) -> None:
        """Stop the running child and start ``name``."""
        meta = workloads.info(name)
        self._stop_child()
        self.store.reset(meta.name, meta.title)
        self.store.add_log("app", f"starting experiment {meta.name}")
        self._start_child()

    def set_paused(self, paused: bool) -> None:
        """Pause or resume sampling; the child keeps running."""
        self.store.paused = paused
        self.store.add_log("app", "paused" if paused else "resumed")

    def snapshot(self) -> Snapshot:
        """The current state."""
        return self.store.snapshot()

    # -- the child --------------------------------------------------------------------------------

    def _start_child(self) -> None:
        experiment = self.store.experiment
        child = ChildProcess(
            lambda fd: agent_command(experiment, fd, self.interval, self._sync_wanted),
            on_message=self.store.on_message,
            on_output=self.store.add_log,
            on_exit=lambda code: self._on_exit(child, code),
        )
        with self._child_lock:
            try:
                child.start()
            except OSError as exc:
                self.store.on_child(ChildStatus(None, "failed", None, f"could not start the workload: {exc}"))
                return
            self._child = child
            self._thread_sampler = ThreadSampler(child.pid)
        self.store.on_child(ChildStatus(child.pid, "running"))

    def _stop_child(self) -> None:
        with self._child_lock:
            child, self._child = self._child, None
        if child is not None:
            child.stop()

    def _on_exit(self, child: ChildProcess, code: int) -> None:
        with self._child_lock:
            current = child is self._child
        if not current:
            return  # a child we stopped on purpose (switch or close): nothing to report
        if code < 0:
            message = f"killed by signal {-code}"
        else:
            message = f"exited with status {code}"
        self.store.on_child(ChildStatus(child.pid, "exited", code, f"workload {message}"))
        self.store.add_log("app", f"workload pid {child.pid} {message}; press w to start an experiment")

    def _send(self, cmd: str, **fields: object) -> bool:
        with self._child_lock:
            child = self._child
        if child is None or not child.send(cmd, **fields):
            self.store.add_log("app", "no workload is running: press w to start one")
            return False
        return True

    # -- host probes ------------------------------------------------------------------------------

    def _host_loop(self) -> None:
        cores = CoreSampler()  # psutil compares with the previous call from the same thread
        next_t = time.monotonic()
        while not self._stop.is_set():
            next_t += self.interval
            with self._child_lock:
                sampler = getattr(self, "_thread_sampler", None) if self._child else None
            threads = sampler.sample(self.store.roles) if sampler else ()
            self.store.on_host(HostSample(time.time(), cores.sample(), threads))
            if self._gpu_source is not None:
                self.store.on_gpus(*self._gpu_source())
            self.host_samples += 1
            self._stop.wait(max(0.0, next_t - time.monotonic()))
