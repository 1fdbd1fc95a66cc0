"""Ring buffers of everything measured, folded into a :class:`Snapshot` on demand.

Writers are the host-probe thread and the child reader thread; readers are the TUI's render timer
and headless output. One lock; every buffer is bounded, so an hour at 10 Hz stays flat.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from torchpar_top.probes.host.threads import group
from torchpar_top.session.model import (
    ChildStatus,
    ExecutorView,
    GpuView,
    HostSample,
    LogLine,
    ModeStats,
    ResultRow,
    ScalingPoint,
    Snapshot,
)

#: Samples kept per series (60 s at the default 10 Hz).
HISTORY = 600
#: Samples kept per core (the core panel shows a short history; 256 cores must stay cheap to copy).
CORE_HISTORY = 120
#: Log lines kept.
LOG_LINES = 500
#: stderr lines kept to show when the child dies.
STDERR_TAIL = 12


@dataclass
class _Executor:
    name: str
    kind: str
    quantity: str
    emulated: bool
    capacity: int | None = None
    value: int = 0
    launched: int = 0
    completed: int = 0
    blocked: float = 0.0
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    busy: deque = field(default_factory=lambda: deque(maxlen=HISTORY))


@dataclass
class _ModeAccumulator:
    seconds: float = 0.0
    items: float = 0.0
    depth: float = 0.0
    wait: float = 0.0

    def stats(self, mode: str) -> ModeStats:
        s = self.seconds
        return ModeStats(
            mode=mode,
            seconds=s,
            throughput=self.items / s if s else None,
            mean_depth=self.depth / s if s else None,
            frontend_wait=self.wait / s if s else None,
        )


class SessionStore:
    """The measured state of one session."""

    def __init__(self, experiment: str, description: str = "", interval: float = 0.1) -> None:
        self._lock = threading.Lock()
        self.interval = interval
        self._log: deque[LogLine] = deque(maxlen=LOG_LINES)
        self._seq = 0
        self.paused = False
        self._cores: tuple[float, ...] = ()
        self._core_history: list[deque] = []
        self._threads: tuple = ()
        self._gpus: tuple[GpuView, ...] = ()
        self._gpu_status = ""
        self.reset(experiment, description)

    def reset(self, experiment: str, description: str = "") -> None:
        """Forget the previous child's measurements (a new experiment starts)."""
        with self._lock:
            self.experiment, self.description = experiment, description
            self.roles: dict[int, str] = {}
            self._executors: dict[str, _Executor] = {}
            self._frontend_busy: deque = deque(maxlen=HISTORY)
            self._frontend_wait: deque = deque(maxlen=HISTORY)
            self._overlap: deque = deque(maxlen=HISTORY)
            self._throughput: deque = deque(maxlen=HISTORY)
            self._unit = "it/s"
            self._last_throughput: float | None = None
            self.mode = "async"
            self._modes = {"async": _ModeAccumulator(), "sync": _ModeAccumulator()}
            self._prev_mode: str | None = None
            self.num_threads: int | None = None
            self.interop_threads: int | None = None
            self._results: dict[str, ResultRow] = {}
            self._scaling: dict[int, ScalingPoint] = {}
            self._child = ChildStatus(pid=None, state="starting")
            self._stderr: deque[str] = deque(maxlen=STDERR_TAIL)
            self._sample_t: float | None = None
            self._threads = ()

    # -- writers ---------------------------------------------------------------------------------

    def add_log(self, source: str, text: str) -> None:
        """Append a line to the log pane (kept while paused: nothing is lost)."""
        with self._lock:
            self._seq += 1
            self._log.append(LogLine(self._seq, source, text))
            if source == "stderr":
                self._stderr.append(text)

    def on_host(self, sample: HostSample) -> None:
        """A reading of the host probes."""
        with self._lock:
            if self.paused:
                return
            if len(self._core_history) != len(sample.cores):
                self._core_history = [deque(maxlen=CORE_HISTORY) for _ in sample.cores]
            for hist, load in zip(self._core_history, sample.cores):
                hist.append(load)
            self._cores = sample.cores
            self._threads = sample.threads

    def on_gpus(self, gpus: tuple[GpuView, ...], status: str) -> None:
        """A reading of the GPU probe (views carry their own history)."""
        with self._lock:
            if not self.paused:
                self._gpus, self._gpu_status = gpus, status

    def on_child(self, child: ChildStatus) -> None:
        """The child's state changed."""
        with self._lock:
            if child.state in ("exited", "failed") and not child.last_stderr:
                child = ChildStatus(child.pid, child.state, child.exit_code, child.message, tuple(self._stderr))
            self._child = child

    def on_message(self, msg: dict[str, Any]) -> None:
        """A validated protocol message from the child."""
        kind = msg["type"]
        if kind == "sample":
            self._on_sample(msg)
        elif kind == "hello":
            with self._lock:
                self.num_threads = msg["num_threads"]
                self.interop_threads = msg["interop_threads"]
                self.roles.update({int(k): v for k, v in msg["roles"].items()})
            self.add_log("child", f"pid {msg['pid']}: {msg['experiment']} on {msg['device']}, torch "
                                  f"{msg['torch']}, {msg['num_threads']} intra-op / "
                                  f"{msg['interop_threads']} inter-op threads")
        elif kind == "result":
            with self._lock:
                self._results[msg["label"]] = ResultRow(msg["label"], float(msg["value"]), msg["unit"])
        elif kind == "scaling":
            with self._lock:
                self._scaling[msg["threads"]] = ScalingPoint(msg["threads"], float(msg["gflops"]),
                                                             msg["samples"])
        elif kind == "log":
            self.add_log("child", msg["text"])
        elif kind == "ack":
            self.add_log("child", f"{'ok' if msg['ok'] else 'refused'}: {msg['detail']}")

    def _on_sample(self, msg: dict[str, Any]) -> None:
        with self._lock:
            self.roles.update({int(k): v for k, v in msg["roles"].items()})
            self.mode = msg["mode"]
            self.num_threads = msg["num_threads"]
            self._unit = msg["unit"]
            self._sample_t = msg["t"]
            if self.paused:
                return
            depth = 0
            for row in msg["executors"]:
                ex = self._executors.get(row["name"])
                if ex is None:
                    ex = self._executors[row["name"]] = _Executor(
                        row["name"], row["kind"], row["quantity"], row["emulated"])
                ex.capacity, ex.value = row["capacity"], row["value"]
                ex.launched, ex.completed, ex.blocked = row["launched"], row["completed"], row["blocked"]
                ex.history.append(row["value"])
                ex.busy.append(row["busy"])
                depth += row["value"]
            self._frontend_busy.append(msg["frontend"]["busy"])
            self._frontend_wait.append(msg["frontend"]["wait"])
            self._overlap.append(msg["overlap"])
            self._throughput.append(msg["throughput"])
            self._last_throughput = msg["throughput"]
            # The first window after a mode change straddles both modes: count it in neither. After a
            # switch to SYNC, the backlog launched in ASYNC drains first (the agent says so): that is
            # neither mode's steady state either.
            if self._prev_mode == msg["mode"] and not msg.get("draining", False):
                acc, w = self._modes[msg["mode"]], msg["window"]
                acc.seconds += w
                acc.items += msg["throughput"] * w
                acc.depth += depth * w
                acc.wait += msg["frontend"]["wait"] * w
            self._prev_mode = msg["mode"]

    # -- reader ----------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Everything the screen shows, now."""
        with self._lock:
            executors = tuple(
                ExecutorView(
                    name=e.name, kind=e.kind, quantity=e.quantity, value=e.value, capacity=e.capacity,
                    launched=e.launched, completed=e.completed, emulated=e.emulated,
                    history=tuple(e.history), busy=tuple(e.busy), blocked=e.blocked,
                )
                for e in self._executors.values()
            )
            return Snapshot(
                t=time.time(),
                experiment=self.experiment,
                description=self.description,
                mode=self.mode,
                paused=self.paused,
                interval=self.interval,
                child=self._child,
                cores=self._cores,
                core_history=tuple(tuple(h) for h in self._core_history),
                threads=self._threads,
                thread_groups=group(self._threads),
                executors=executors,
                frontend_busy=tuple(self._frontend_busy),
                frontend_wait=tuple(self._frontend_wait),
                overlap=tuple(self._overlap),
                throughput=self._last_throughput,
                throughput_unit=self._unit,
                throughput_history=tuple(self._throughput),
                num_threads=self.num_threads,
                interop_threads=self.interop_threads,
                scoreboard=tuple(acc.stats(mode) for mode, acc in self._modes.items()),
                results=tuple(self._results.values()),
                scaling=tuple(sorted(self._scaling.values(), key=lambda p: p.threads)),
                gpus=self._gpus,
                gpu_status=self._gpu_status,
                log=tuple(self._log)[-200:],
                sample_t=self._sample_t,
            )
