"""The agent inside the workload process: executors, sync control, sampling, the wire.

A workload (built-in experiment or, later, user code) asks the agent for executors, calls
:meth:`Agent.step` once per unit of work, and checks :attr:`Agent.running`. The agent's two threads
sample the executors every ``interval`` and apply commands from torchpar-top (sync on/off, thread
count, stop).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from typing import Any, Callable

import torch

from torchpar_top.probes.agent.activity import ActivityRecorder, busy_time, overlap_time, union
from torchpar_top.probes.agent.executor import EagerDevice, Executor
from torchpar_top.probes.agent.interop import InterOpPool
from torchpar_top.probes.agent.stream import DEFAULT_CAPACITY, EmulatedStream
from torchpar_top.session import protocol

#: Seconds the workload gets to return after a stop before the agent ends the process group.
STOP_GRACE = 3.0

ROLE_FRONTEND = "frontend (main)"
ROLE_AGENT = "torchpar agent"


class Agent:
    """One per workload process."""

    def __init__(
        self,
        sock: socket.socket | None,
        *,
        experiment: str,
        description: str,
        device: str = "cpu",
        interval: float = 0.1,
        sync: bool = False,
        sync_scope: str = "op",
    ) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()
        self.experiment = experiment
        self.description = description
        self.device = device
        self.interval = interval
        self.sync = sync
        """True in SYNC mode: synchronize after every op (or every step, see ``sync_scope``)."""
        self.sync_scope = sync_scope
        self.running = True
        """False once torchpar-top asked the workload to stop; loops should check it."""
        self.executors: list[Executor] = []
        self.cuda: Any = None
        """The :class:`~torchpar_top.probes.agent.cuda.CudaMonitor`, created by the first ``cuda_stream``."""
        self.frontend_wait = ActivityRecorder()
        """When the frontend was blocked: on a full queue or in a synchronize."""
        self.items = 0
        self._throughput_source: Callable[[], int] = lambda: self.items
        self.unit = "it/s"
        self._threads_wanted = torch.get_num_threads()
        self._threads_applied = self._threads_wanted
        self.frontend_tid = threading.get_native_id()
        self._agent_tids: list[int] = []
        self._threads: list[threading.Thread] = []
        self._drain_target: dict[int, int] = {}
        """After a switch to SYNC: per executor, the launches made before it (the ASYNC backlog)."""
        self.hello_extra: dict[str, Any] = {}
        """More ``hello`` fields (``target``; ``rank``/``world_size`` under torchrun)."""
        self.hard_exit: Callable[[], None] = _kill_own_group
        """Called when the workload ignores a stop for :data:`STOP_GRACE` seconds (tests replace it)."""

    # -- executors -------------------------------------------------------------------------------

    def emulated_stream(self, name: str, capacity: int = DEFAULT_CAPACITY) -> EmulatedStream:
        """A new emulated CPU stream, watched and synchronized by the agent."""
        return self._add(
            EmulatedStream(name, capacity, wait=self.frontend_wait, threads=lambda: self._threads_wanted)
        )

    def eager_device(self, name: str = "cpu (eager)") -> EagerDevice:
        """The CPU running eager ops on the frontend thread (depth 0)."""
        return self._add(EagerDevice(name))

    def interop_pool(self, name: str = "inter-op pool") -> InterOpPool:
        """Futures forked on the inter-op pool."""
        return self._add(InterOpPool(name, wait=self.frontend_wait))

    def cuda_stream(self, name: str, device: int = 0, stream: Any = None) -> Any:
        """A CUDA stream (default: the device's current one) watched by completion markers.

        Call it on the frontend thread: it starts counting that thread's launches.
        """
        if self.cuda is None:
            from torchpar_top.probes.agent.cuda import CudaMonitor

            self.cuda = CudaMonitor(on_thread=self._agent_tids.append, on_stream=self._add)
        return self._add(self.cuda.stream(name, device, stream, wait=self.frontend_wait))

    def _add(self, ex: Any) -> Any:
        self.executors.append(ex)
        return ex

    def launch(self, stream: EmulatedStream, fn: Callable[..., Any], *args: Any) -> None:
        """Launch onto ``stream``; in SYNC mode with scope ``op``, wait for it to complete."""
        stream.launch(fn, *args)
        if self.sync and self.sync_scope == "op":
            stream.synchronize()

    def synchronize(self) -> None:
        """Wait for every executor to finish what was launched."""
        for ex in self.executors:
            ex.synchronize()

    # -- the workload's calls -------------------------------------------------------------------

    def step(self, n: int = 1) -> None:
        """Count ``n`` units of work done by the frontend; apply pending settings; sync per step."""
        self.items += n
        if self._threads_applied != self._threads_wanted:
            self._threads_applied = self._threads_wanted
            torch.set_num_threads(self._threads_applied)
        if self.sync and self.sync_scope == "step":
            self.synchronize()

    def throughput_from(self, source: Callable[[], int], unit: str = "it/s") -> None:
        """Measure throughput as the rate of ``source()`` (a monotone count) instead of steps."""
        self._throughput_source = source
        self.unit = unit

    @property
    def num_threads(self) -> int:
        """The intra-op thread count the workload is asked to use."""
        return self._threads_wanted

    def set_threads(self, n: int) -> None:
        """Ask every thread running ops to use ``n`` intra-op threads (applied at its next item)."""
        self._threads_wanted = max(1, int(n))

    def result(self, label: str, value: float, unit: str) -> None:
        """Report a measured result (shown in the scoreboard and printed headless)."""
        self._send("result", label=label, value=float(value), unit=unit)

    def scaling(self, threads: int, gflops: float, samples: int) -> None:
        """Report one row of the intra-op scaling table."""
        self._send("scaling", threads=threads, gflops=float(gflops), samples=samples)

    def log(self, text: str) -> None:
        """A line for the log pane."""
        self._send("log", text=text)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Say hello and start the sampler and command threads."""
        self._send(
            "hello",
            pid=os.getpid(),
            experiment=self.experiment,
            description=self.description,
            torch=torch.__version__,
            device=self.device,
            num_threads=torch.get_num_threads(),
            interop_threads=torch.get_num_interop_threads(),
            executors=[ex.declare() for ex in self.executors],
            roles=self.roles(),
            **self.hello_extra,
        )
        for target, name in ((self._sample_loop, "tpt-sampler"), (self._command_loop, "tpt-control")):
            th = threading.Thread(target=target, name=name, daemon=True)
            th.start()
            self._threads.append(th)

    def close(self) -> None:
        """Stop the executors (the process is about to exit)."""
        self.running = False
        for ex in self.executors:
            ex.close()
        if self.cuda is not None:
            self.cuda.close()

    def roles(self) -> dict[str, str]:
        """Threads the agent knows, as ``{tid: role}`` for the thread panel."""
        roles = {str(self.frontend_tid): ROLE_FRONTEND}
        for tid in self._agent_tids:
            roles[str(tid)] = ROLE_AGENT
        for ex in self.executors:
            for tid in ex.tids:
                roles[str(tid)] = f"stream executor {ex.name}"
        return roles

    # -- threads ----------------------------------------------------------------------------------

    def _sample_loop(self) -> None:
        self._agent_tids.append(threading.get_native_id())
        last_t = time.perf_counter()
        last_count = self._throughput_source()
        while self.running:
            time.sleep(self.interval)
            now = time.perf_counter()
            for ex in self.executors:
                ex.refresh()
            count = self._throughput_source()
            try:
                self._send(**self.sample(last_t, now, count - last_count))
            except OSError:
                return
            last_t, last_count = now, count

    def sample(self, t0: float, t1: float, done: int) -> dict[str, Any]:
        """The ``sample`` message for the window ``[t0, t1]`` in which ``done`` items completed."""
        window = max(t1 - t0, 1e-9)
        rows, per_executor = [], []
        for ex in self.executors:
            ex.refresh()
            completed, started = ex.completed, ex.started  # read C and S before L: value never < 0
            launched = ex.launched
            value = max(0, launched - (started if ex.quantity == "depth" else completed))
            busy = union(ex.activity.intervals(t0, t1))
            per_executor.append(busy)
            rows.append(
                {
                    "name": ex.name,
                    "kind": ex.kind,
                    "emulated": ex.emulated,
                    "quantity": ex.quantity,
                    "value": value,
                    "capacity": ex.capacity,
                    "launched": launched,
                    "started": started,
                    "completed": completed,
                    "busy": min(1.0, busy_time(busy) / window),
                    "blocked": min(1.0, busy_time(ex.blocked.intervals(t0, t1)) / window),
                    "blocked_measured": ex.blocked_measured,
                    "counts": ex.counts,
                }
            )
        wait = min(1.0, busy_time(self.frontend_wait.intervals(t0, t1)) / window)
        extra = {"cuda_uuids": self.cuda.uuids()} if self.cuda is not None else {}
        return {
            "msg_type": "sample",
            "t": time.time(),
            "window": window,
            "mode": "sync" if self.sync else "async",
            "sync_scope": self.sync_scope,
            "throughput": done / window,
            "unit": self.unit,
            "items": self.items,
            "num_threads": self._threads_wanted,
            "frontend": {"busy": 1.0 - wait, "wait": wait},
            "draining": self.draining(),
            "overlap": min(1.0, overlap_time(per_executor) / window) if len(per_executor) > 1 else 0.0,
            "executors": rows,
            "roles": self.roles(),
            **extra,
        }

    def draining(self) -> bool:
        """True while work launched before the switch to SYNC is still completing."""
        if self._drain_target:
            if all(ex.completed >= self._drain_target.get(id(ex), 0) for ex in self.executors):
                self._drain_target = {}
        return bool(self._drain_target)

    def _command_loop(self) -> None:
        self._agent_tids.append(threading.get_native_id())
        reader = protocol.LineReader()
        while True:
            try:
                data = self._sock.recv(65536) if self._sock else b""
            except OSError:
                data = b""
            if not data:  # torchpar-top went away: do not outlive it
                self._stop_process()
                return
            try:
                lines = reader.feed(data)
            except protocol.ProtocolError:
                continue
            for line in lines:
                try:
                    self._apply(protocol.decode(line))
                except protocol.ProtocolError as exc:
                    self._ack("?", False, f"bad command: {exc}")

    def _apply(self, msg: dict[str, Any]) -> None:
        cmd = msg["cmd"]
        if cmd == "set_sync":
            scope = msg.get("scope", self.sync_scope)
            if scope not in ("op", "step"):
                self._ack(cmd, False, f"unknown sync scope {scope!r}")
                return
            self.sync_scope = scope
            if msg["value"] and not self.sync:
                self._drain_target = {id(ex): ex.launched for ex in self.executors}
            self.sync = msg["value"]
            self._ack(cmd, True, f"{'SYNC' if self.sync else 'ASYNC'} (synchronize after every {scope})")
        elif cmd == "set_threads":
            self.set_threads(msg["value"])
            detail = f"torch.set_num_threads({msg['value']})"
            if any(isinstance(ex, InterOpPool) for ex in self.executors):
                detail += (" on the frontend; the inter-op pool's threads keep the OpenMP team they started"
                           f" with: r restarts with {msg['value']}")
            self._ack(cmd, True, detail)
        elif cmd == "profile":
            self._ack(cmd, True, f"profiler window of {msg['seconds']} s started")
            th = threading.Thread(target=self._profile, args=(float(msg["seconds"]),), name="tpt-profile",
                                  daemon=True)
            th.start()
        elif cmd == "stop":
            self._ack(cmd, True, "stopping")
            self._stop_process()

    def _profile(self, seconds: float) -> None:
        """A short torch.profiler window, analysed HTA's way; the per-stream result goes to the log.

        CUPTI records launches and kernels process-wide, so this thread may run it while the frontend
        works. Without CUDA there are no launches to analyse, and the log says so. (CUDA: untested on
        hardware.)
        """
        from torchpar_top.probes.agent import hta
        from torchpar_top.probes.agent.cuda import profile_queue

        cuda = self.cuda is not None
        try:
            series = profile_queue(seconds, cuda=cuda)
        except Exception as exc:  # the profiler is optional: report, never crash the workload
            self._log_quietly(f"profiler window failed: {type(exc).__name__}: {exc}")
            return
        if not series:
            where = "no CUDA stream is watched" if not cuda else "the window saw no kernel launches"
            self._log_quietly(f"profiler window ({seconds:g} s): no launch queue to analyse ({where})")
        for line in hta.summary(series):
            self._log_quietly(f"profiler window ({seconds:g} s): {line}")

    def _log_quietly(self, text: str) -> None:
        try:
            self.log(text)
        except OSError:
            pass

    def report_exit(self, status: int, reason: str = "") -> None:
        """Tell torchpar-top how the workload's code ended (a torchrun rank is not its child: this is
        the only way it learns the status). Best effort: the connection may be gone."""
        try:
            self._send("exit", status=status, reason=reason)
        except OSError:
            pass

    def _ack(self, cmd: str, ok: bool, detail: str) -> None:
        try:
            self._send("ack", cmd=cmd, ok=ok, detail=detail)
        except OSError:
            pass

    def _stop_process(self) -> None:
        """Ask the workload to return; end the whole process group if it does not in time."""
        self.running = False
        timer = threading.Timer(STOP_GRACE, self.hard_exit)
        timer.daemon = True
        timer.start()

    def _send(self, msg_type: str, **fields: Any) -> None:
        if self._sock is None:
            return
        data = protocol.encode(msg_type, **fields)
        with self._send_lock:
            self._sock.sendall(data)


def _kill_own_group() -> None:
    """End the child: its whole process group when it leads one (started with a new session)."""
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    except OSError:
        pass
    os._exit(1)
