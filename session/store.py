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
    RankView,
    ResultRow,
    ScalingPoint,
    Snapshot,
    SyncSite,
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
class _Source:
    """One agent connection: the workload, or one torchrun rank."""

    number: int
    pid: int | None = None
    rank: int | None = None
    state: str = "running"
    exit_code: int | None = None
    throughput: float | None = None
    unit: str = "it/s"
    depth: int = 0
    data_wait: float | None = None
    sites: dict = field(default_factory=dict)  # (where, call) -> (count, per_second)
    sites_t: float | None = None

    @property
    def prefix(self) -> str:
        """Put before executor names and sync sites of a rank (``r1:``); '' for a single agent."""
        return "" if self.rank is None else f"r{self.rank}:"


#: A DataLoader-fed frontend waiting for its next batch more than this share of the time is input-bound.
INPUT_BOUND_WAIT = 0.3


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
            self._sources: dict[int, _Source] = {}
            self.target = experiment
            self.notice = ""

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

    def child_state(self) -> str:
        """The child's state now (``running``, ``exited``...)."""
        with self._lock:
            return self._child.state

    def on_message(self, msg: dict[str, Any], source: int = 0) -> None:
        """A validated protocol message from agent connection ``source``."""
        kind = msg["type"]
        if kind == "sample":
            self._on_sample(msg, source)
        elif kind == "hello":
            with self._lock:
                src = self._source(source)
                src.pid, src.rank = msg["pid"], msg.get("rank")
                self.num_threads = msg["num_threads"]
                self.interop_threads = msg["interop_threads"]
                self.roles.update({int(k): v for k, v in msg["roles"].items()})
            rank = "" if msg.get("rank") is None else f"rank {msg['rank']} "
            self.add_log("child", f"{rank}pid {msg['pid']}: {msg['experiment']} on {msg['device']}, torch "
                                  f"{msg['torch']}, {msg['num_threads']} intra-op / "
                                  f"{msg['interop_threads']} inter-op threads")
        elif kind == "syncpoints":
            self._on_syncpoints(msg, source)
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
        elif kind == "exit":
            with self._lock:
                src = self._source(source)
                src.exit_code = msg["status"]
                who = "the workload" if src.rank is None else f"rank {src.rank}"
            reason = f": {msg['reason']}" if msg["reason"] else ""
            self.add_log("child", f"{who}'s code ended with status {msg['status']}{reason}")

    def on_source_closed(self, source: int, exit_code: int | None = None) -> None:
        """Agent connection ``source`` ended (a rank died or finished).

        ``exit_code`` is the process's status where we know it (our own child, from ``wait``); a
        torchrun rank is not our child, so its status is the one its agent sent in an ``exit`` message,
        if it got to send one (a rank killed by a signal cannot)."""
        with self._lock:
            src = self._sources.get(source)
            if src is not None:
                src.state = "exited"
                if exit_code is not None:
                    src.exit_code = exit_code

    def _source(self, number: int) -> _Source:
        src = self._sources.get(number)
        if src is None:
            src = self._sources[number] = _Source(number)
        return src

    def _primary(self) -> int:
        """The source whose frontend, lanes and scoreboard are shown: the single child, or rank 0."""
        ranked = sorted(self._sources.values(), key=lambda s: (s.rank is None, s.rank or 0, s.number))
        return ranked[0].number if ranked else 0

    def _on_syncpoints(self, msg: dict[str, Any], source: int) -> None:
        now = time.monotonic()
        with self._lock:
            src = self._source(source)
            dt = now - src.sites_t if src.sites_t is not None else None
            sites = {}
            for site in msg["sites"]:
                key = (site["where"], site["call"])
                before = src.sites.get(key, (0, 0.0))[0]
                rate = (site["count"] - before) / dt if dt else 0.0
                sites[key] = (site["count"], max(0.0, rate))
            src.sites, src.sites_t = sites, now

    def _on_sample(self, msg: dict[str, Any], source: int = 0) -> None:
        with self._lock:
            self.roles.update({int(k): v for k, v in msg["roles"].items()})
            src = self._source(source)
            src.throughput, src.unit = msg["throughput"], msg["unit"]
            src.data_wait = msg.get("data_wait")
            src.depth = sum(row["value"] for row in msg["executors"])
            primary = source == self._primary()
            if primary:
                self.mode = msg["mode"]
                self.num_threads = msg["num_threads"]
                self._unit = msg["unit"]
                self._sample_t = msg["t"]
            if self.paused:
                return
            for row in msg["executors"]:
                name = src.prefix + row["name"]
                ex = self._executors.get(name)
                if ex is None:
                    ex = self._executors[name] = _Executor(name, row["kind"], row["quantity"], row["emulated"])
                ex.capacity, ex.value = row["capacity"], row["value"]
                ex.launched, ex.completed, ex.blocked = row["launched"], row["completed"], row["blocked"]
                ex.history.append(row["value"])
                ex.busy.append(row["busy"])
            if not primary:
                return
            depth = src.depth
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
                for e in sorted(self._executors.values(), key=lambda e: e.name)
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
                target=self.target,
                notice=self.notice,
                ranks=tuple(
                    RankView(s.rank, s.pid, s.state, s.throughput, s.unit, s.depth, s.data_wait, s.exit_code)
                    for s in sorted(self._sources.values(), key=lambda s: (s.rank or 0, s.number))
                    if s.pid is not None
                ),
                syncpoints=self._syncpoints(),
                data_verdict=self._data_verdict(),
            )

    def _syncpoints(self) -> tuple[SyncSite, ...]:
        sites = [
            SyncSite(src.prefix + where, call, count, rate)
            for src in self._sources.values()
            for (where, call), (count, rate) in src.sites.items()
        ]
        return tuple(sorted(sites, key=lambda s: (-s.per_second, -s.count, s.where)))

    def _data_verdict(self) -> str:
        src = self._sources.get(self._primary())
        if src is None or src.data_wait is None:
            return ""
        if not any(e.kind == "dataloader" for e in self._executors.values()):
            return ""
        share = f"waits for data {src.data_wait:.0%} of the time"
        return f"input-bound: {share}" if src.data_wait > INPUT_BOUND_WAIT else f"compute-bound: {share}"
