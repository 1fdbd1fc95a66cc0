"""The agent inside the workload process: executors, sync control, sampling, the wire.

A workload (built-in experiment or user code) asks the agent for executors, calls :meth:`Agent.step`
once per unit of work, and checks :attr:`Agent.running`. The agent's two threads sample the executors
every ``interval`` and apply commands from torchpar-top (sync on/off, thread count, stop).

It is composed, not subclassed: :attr:`Agent.sync` is a :class:`SyncPolicy` others can watch,
:attr:`Agent.throughput` any object with ``take() -> (done, unit)``, :attr:`Agent.sample_parts` add
fields to each sample, :attr:`Agent.on_sample` and :attr:`Agent.on_stop` run code at those moments, and
:attr:`Agent.device_syncs` wait for devices beyond the executors (CUDA in user code).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any

import torch
from torchpar_top.contract.codec import MAX_ITEMS, LineReader, ProtocolError
from torchpar_top.contract.messages import (
    MAX_FRAMES,
    Ack,
    Exit,
    Frontend,
    FrontendStack,
    Hello,
    Log,
    Message,
    Profile,
    Result,
    Sample,
    Scaling,
    SetSync,
    SetThreads,
    StackFrame,
    Stop,
    ThreadRole,
    decode_command,
)
from torchpar_top.contract.vocab import AGENT_STOP_GRACE, Role, SyncScope, ThroughputUnit
from torchpar_top.probes.agent.activity import (
    ActivityRecorder,
    busy_time,
    overlap_time,
    running_overlap,
    split_busy,
    waiting,
)
from torchpar_top.probes.agent.cputime import ThreadClock, high_floor
from torchpar_top.probes.agent.executor import EagerDevice, Executor
from torchpar_top.probes.agent.interop import InterOpPool
from torchpar_top.probes.agent.stream import DEFAULT_CAPACITY, EmulatedStream
from torchpar_top.probes.agent.sync import SyncPolicy
from torchpar_top.probes.agent.usercode_exec import user_frames

#: Seconds between two readings of the frontend's stack (sent in that sample).
STACK_EVERY = 0.5
#: Seconds a sample's thread roles are sent again unchanged (rebuilt sooner when a count changes: Python
#: threads, an executor's threads, the executors).
ROLES_EVERY = 1.0
#: A frontend that ran less than this share of the window is idle (the stack panel says so).
IDLE_RUN_SHARE = 0.1
#: Modules a profiler window's start must import for the log to say so. torch.profiler's first start in
#: a process imports torch._inductor (~820 modules with torch 2.13: 1.9 s on this project's 2-core VM, a
#: frontend thread at 0.03 of its speed meanwhile, ``benchmarks/bench_profile_window.py``); the agent's
#: window avoids it where inductor is not loaded (``cuda._Window``), and the log says if a start still did.
IMPORTS_WORTH_SAYING = 50
#: The interpreter's GIL switch interval (seconds) while the sampler builds and encodes a sample. A thread
#: that wants the GIL waits up to the switch interval (5 ms by default) before it asks the holder to let
#: go; the user's loop, back from a torch op that ran without the GIL, so waited out the sampler's whole
#: ~0.7 ms of Python. At this interval it waits at most this long (and the wake-up), takes the GIL for its
#: next op and lets go of it again, and the sampler's Python runs on another core while the op computes:
#: a transformer step's time blocked on the GIL fell by a quarter (``benchmarks/bench_toggled.py --switch``).
SAMPLE_SWITCH_INTERVAL = 50e-6
#: Seconds :meth:`Agent.last_sample` waits for the sampler thread to end (it is woken at once; only a
#: sample in flight, or a socket write torchpar-top does not read, keeps it).
LAST_SAMPLE_WAIT = 1.0


class CountRate:
    """Throughput as the rate of a monotone count: how much it grew since the previous window."""

    def __init__(self, count: Callable[[], int], unit: str = ThroughputUnit.ITEMS) -> None:
        self.count, self.unit = count, ThroughputUnit(unit)  # ValueError now, not a refused sample
        self._last = count()

    def take(self) -> tuple[int, ThroughputUnit]:
        """Items done since the previous call, and their unit."""
        now = self.count()
        done, self._last = max(0, now - self._last), now
        return done, self.unit


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
        sync_scope: SyncScope = SyncScope.OP,
    ) -> None:
        self._sock = _out_of_reach(sock) if sock is not None else None
        self._sock_id = _identity(self._sock.fileno()) if self._sock is not None else None
        """The socket's (device, inode): a descriptor with this number is ours only while they match."""
        self._check_each_send = self._sock is not None and self._sock.fileno() < _socket_floor()
        """Left at a low number (no higher one allowed), the socket's number is one the workload's next
        file or socket may get: each send checks what it holds first (an ``fstat``). Moved high, a
        number is only ever reused by a deliberate ``dup2`` onto it, and what the workload does with
        our descriptor shows in the send itself: closed, ``EBADF``; a file put there, ``ENOTSOCK``
        (``send`` writes to sockets only). So a sample goes out without the ``fstat`` (a syscall that
        lets go of the GIL, which the sampler then waits for beside the user's loop); the command
        thread still checks the descriptor every :data:`COMMAND_POLL_MS`."""
        self.channel_lost = False
        """True once the workload closed or replaced the protocol's descriptor: it runs on, unmonitored."""
        self.peer_gone = False
        """True once torchpar-top went away (its end of the socket closed): nobody else will end what the
        workload started, so the workload's process ends its descendants on its way out
        (:func:`kill_descendants`)."""
        self._send_lock = threading.Lock()
        self.experiment = experiment
        self.description = description
        self.device = device
        self.interval = interval
        self.switch_interval: float | None = SAMPLE_SWITCH_INTERVAL
        """The GIL switch interval while a sample is made (:data:`SAMPLE_SWITCH_INTERVAL`); None: the
        interpreter's own, untouched."""
        self._switch = _SwitchInterval()
        self.sync = SyncPolicy(sync, sync_scope)
        """SYNC on or off: synchronize after every op (or every step, see its ``scope``)."""
        self.running = True
        """False once torchpar-top asked the workload to stop; loops should check it."""
        self.executors: list[Executor] = []
        self._side: list[EmulatedStream] = []
        self.cuda: Any = None
        """The :class:`~torchpar_top.probes.agent.cuda.CudaMonitor`, created by the first ``cuda_stream``."""
        self.frontend_wait = ActivityRecorder()
        """When the frontend was blocked: on a full queue or in a synchronize."""
        self.items = 0
        """Units of work the frontend reported with :meth:`step`."""
        self.throughput: Any = CountRate(lambda: self.items)
        """Has ``take() -> (done since the last window, unit)``; the sample's throughput."""
        self.sample_parts: list[Callable[[float, float], dict[str, Any]]] = []
        """Each adds fields to the sample of the window ``[t0, t1]`` (``data_wait``, ``cuda_uuids``)."""
        self.on_sample: list[Callable[[], None]] = []
        """Run after each sample is built (flush sync points, notes), on the sampler thread."""
        self.on_stop: list[Callable[[], None]] = []
        """Run when a stop arrives (or torchpar-top goes away), after :attr:`running` turned False."""
        self.device_syncs: list[Callable[[], None]] = []
        """Waits for devices beyond the executors, run by :meth:`synchronize` (CUDA in user code)."""
        self.rank: int | None = None
        """torchrun: this process's rank and the world size, said in hello."""
        self.world_size: int | None = None
        self._threads_wanted = torch.get_num_threads()
        self._threads_applied = self._threads_wanted
        self.frontend_tid = threading.get_native_id()
        self.frontend_ident = threading.get_ident()
        self._stack_t = float("-inf")
        self._roles: tuple[ThreadRole, ...] = ()
        self._roles_key: tuple[int, ...] | None = None
        self._roles_t = float("-inf")
        self._agent_tids: list[int] = []
        self._threads: list[threading.Thread] = []
        self._stop_sampling = threading.Event()
        """Set by :meth:`last_sample`: the sampler thread ends (at once, not after its sleep)."""
        self._sampled_until = time.perf_counter()
        """The end of the last sample's window: where the next one starts."""
        self._drain_target: dict[int, int] = {}
        """After a switch to SYNC: per executor, the launches made before it (the ASYNC backlog)."""
        self.clock = ThreadClock()
        """Run and wait time of the frontend and executor threads (``schedstat``), read by the sampler."""
        self.timing = ActivityRecorder()
        """When an experiment paused its live loop for a timing round (:meth:`timing_round`)."""
        self.hard_exit: Callable[[], None] = _kill_own_group
        """Called when the workload ignores a stop for :data:`AGENT_STOP_GRACE` seconds (tests replace it)."""

    # -- executors -------------------------------------------------------------------------------

    def emulated_stream(self, name: str, capacity: int = DEFAULT_CAPACITY) -> EmulatedStream:
        """A new emulated CPU stream, watched and synchronized by the agent."""
        return self.add(
            EmulatedStream(name, capacity, wait=self.frontend_wait, threads=lambda: self._threads_wanted)
        )

    def side_stream(self, name: str, capacity: int = DEFAULT_CAPACITY) -> EmulatedStream:
        """An emulated stream the experiment uses for itself (a timing round), not shown as an executor:
        its thread is named in the threads panel, its queue and lanes are not drawn."""
        stream = EmulatedStream(name, capacity, threads=lambda: self._threads_wanted)
        self._side.append(stream)
        return stream

    def eager_device(self, name: str = "cpu (eager)") -> EagerDevice:
        """The CPU running eager ops on the frontend thread (depth 0)."""
        return self.add(EagerDevice(name))

    def interop_pool(self, name: str = "inter-op pool") -> InterOpPool:
        """Futures forked on the inter-op pool."""
        return self.add(InterOpPool(name, wait=self.frontend_wait))

    def cuda_stream(self, name: str, device: int = 0, stream: Any = None) -> Any:
        """A CUDA stream (default: the device's current one) watched by completion markers.

        Call it on the frontend thread: it starts counting that thread's launches.
        """
        if self.cuda is None:
            from torchpar_top.probes.agent.cuda import CudaMonitor

            self.cuda = CudaMonitor(on_thread=self._agent_tids.append, on_stream=self.add)
        return self.add(self.cuda.stream(name, device, stream, wait=self.frontend_wait))

    def add(self, ex: Any) -> Any:
        """Watch ``ex`` (any :class:`Executor`); returns it."""
        self.executors.append(ex)
        return ex

    def launch(self, stream: EmulatedStream, fn: Callable[..., Any], *args: Any) -> None:
        """Launch onto ``stream``; in SYNC mode with scope ``op``, wait for it to complete."""
        stream.launch(fn, *args)
        if self.sync.per_op:
            stream.synchronize()

    def synchronize(self) -> None:
        """Wait for every executor to finish what was launched, then for the devices beyond them."""
        for ex in self.executors:
            ex.synchronize()
        for wait in self.device_syncs:
            wait()

    # -- the workload's calls -------------------------------------------------------------------

    def step(self, n: int = 1) -> None:
        """Count ``n`` units of work done by the frontend; apply pending settings; sync per step."""
        self.items += n
        self.apply_threads()
        if self.sync.per_step:
            self.synchronize()

    def apply_threads(self) -> None:
        """Apply a pending thread count to the calling thread (the frontend, between items)."""
        if self._threads_applied != self._threads_wanted:
            self._threads_applied = self._threads_wanted
            torch.set_num_threads(self._threads_applied)

    @property
    def threads_pending(self) -> bool:
        """Whether a thread count was asked for and not yet applied on the frontend."""
        return self._threads_applied != self._threads_wanted

    def throughput_from(self, source: Callable[[], int], unit: str = ThroughputUnit.ITEMS) -> None:
        """Measure throughput as the rate of ``source()`` (a monotone count) instead of steps."""
        self.throughput = CountRate(source, unit)

    @property
    def num_threads(self) -> int:
        """The intra-op thread count the workload is asked to use."""
        return self._threads_wanted

    def set_threads(self, n: int) -> None:
        """Ask every thread running ops to use ``n`` intra-op threads (applied at its next item)."""
        self._threads_wanted = max(1, int(n))

    def result(self, label: str, value: float, unit: str) -> None:
        """Report a measured result (shown in the scoreboard and printed headless)."""
        self.send(Result(label=label, value=float(value), unit=unit))

    def round_results(self, number: int, rows: list[tuple[str, float, str]]) -> None:
        """Report one complete round of results together: ``(label, value, unit)`` each, the last one
        closing the round (the screen shows complete rounds only, never a mix of two)."""
        for i, (label, value, unit) in enumerate(rows):
            self.send(
                Result(
                    label=label, value=float(value), unit=unit, round=number, closes_round=i == len(rows) - 1
                )
            )

    @contextmanager
    def timing_round(self) -> Iterator[None]:
        """Mark the enclosed code as a timing round that paused the live loop: samples whose window
        touches it say ``timing`` and count in neither mode's scoreboard."""
        with waiting(self.timing):
            yield

    def scaling(self, threads: int, gflops: float, samples: int) -> None:
        """Report one row of the intra-op scaling table."""
        self.send(Scaling(threads=threads, gflops=float(gflops), samples=samples))

    def log(self, text: str) -> None:
        """A line for the log pane."""
        self.send(Log(text=text))

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Say hello and start the sampler and command threads."""
        self.send(
            Hello(
                pid=os.getpid(),
                experiment=self.experiment,
                device=self.device,
                torch=torch.__version__,
                num_threads=torch.get_num_threads(),
                interop_threads=torch.get_num_interop_threads(),
                roles=self._said_roles(),
                rank=self.rank,
                world_size=self.world_size,
                **_node_identity(self.rank),
            )
        )
        for target, name in ((self._sample_loop, "tpt-sampler"), (self._command_loop, "tpt-control")):
            th = threading.Thread(target=target, name=name, daemon=True)
            th.start()
            self._threads.append(th)

    def close(self) -> None:
        """Stop the executors (the process is about to exit)."""
        self.running = False
        for ex in (*self.executors, *self._side):
            ex.close()
        if self.cuda is not None:
            self.cuda.close()

    def roles(self) -> tuple[ThreadRole, ...]:
        """Threads the agent knows, for the thread panel: the frontend, its own, the executors', then every
        other Python thread (the workload's own: not OpenMP workers, which look the same by name); at
        most what one message may carry."""
        roles = [ThreadRole(self.frontend_tid, Role.FRONTEND)]
        roles += [ThreadRole(tid, Role.AGENT) for tid in self._agent_tids]
        roles += [
            ThreadRole(tid, ex.thread_role, ex.name)
            for ex in (*self.executors, *self._side)
            for tid in ex.tids
        ]
        known = {r.tid for r in roles}
        for thread in threading.enumerate():
            tid = thread.native_id
            if tid is not None and tid not in known:
                known.add(tid)
                roles.append(ThreadRole(tid, Role.AGENT if thread.name.startswith("tpt-") else Role.PYTHON))
        return tuple(roles[:MAX_ITEMS])

    def _said_roles(self) -> tuple[ThreadRole, ...]:
        """:meth:`roles` for hello, remembered as said (a sample repeats them only once they change)."""
        self._roles = self.roles()
        return self._roles

    def _sample_roles(self, now: float) -> tuple[ThreadRole, ...]:
        """The roles a sample carries: :meth:`roles` where they differ from what the agent said last (in
        hello or a sample), else none (torchpar-top keeps what was said). They are built again only when
        the threads' counts change or after :data:`ROLES_EVERY` (they rarely change, and building them is
        a twentieth of a sample's Python beside the user's loop): a thread that took another's place
        between two samples is named within that second. Said once rather than in every sample, they are
        a fifth of a rank's sample less to encode, send and decode (a third of its decoding)."""
        executors = (*self.executors, *self._side)
        key = (
            threading.active_count(),
            len(self._agent_tids),
            len(executors),
            sum(len(ex.tids) for ex in executors),
        )
        if key == self._roles_key and now - self._roles_t < ROLES_EVERY:
            return ()
        roles, self._roles_key, self._roles_t = self.roles(), key, now
        if roles == self._roles:
            return ()
        self._roles = roles
        return roles

    # -- threads ----------------------------------------------------------------------------------

    def _sample_loop(self) -> None:
        self._agent_tids.append(threading.get_native_id())
        self._sampled_until = time.perf_counter()
        failed = False
        while self.running:
            stopping = self._stop_sampling.wait(self.interval)
            if stopping:  # last_sample makes the last one, from where this one would have started
                return
            now = time.perf_counter()
            try:
                self._switch.lower(self.switch_interval)  # back as it was before the socket write (send)
                self.send(self.sample(self._sampled_until, now))
            except OSError:
                return
            except Exception as exc:  # a part's bug or a value JSON cannot carry: that sample, not sampling
                if not failed:
                    failed = True
                    self._log_failed_sample(exc, "the next ones are tried (this is said once)")
            finally:
                self._switch.restore()
            self._sampled_until = now

    def last_sample(self) -> None:
        """The workload's code returned: stop the sampler thread and send one last sample, from the end of
        its last window to now (the steps of the last interval would otherwise never be counted: a run
        shorter than a second would miss a tenth of them). Nothing when the sampler is stuck in a
        socket write (torchpar-top does not read) for :data:`LAST_SAMPLE_WAIT`, or already ended."""
        sampler = next((th for th in self._threads if th.name == "tpt-sampler"), None)
        if sampler is None or sampler is threading.current_thread() or self._stop_sampling.is_set():
            return
        self._stop_sampling.set()
        sampler.join(LAST_SAMPLE_WAIT)
        if sampler.is_alive() or self._sock is None:
            return
        try:
            self.send(self.sample(self._sampled_until, time.perf_counter()))
        except OSError:
            pass
        except Exception as exc:  # as in the sampler: a part's bug costs that sample, not the exit
            self._log_failed_sample(exc, "the run's last interval is not counted")

    def _log_failed_sample(self, exc: Exception, then: str) -> None:
        self._log_quietly(f"agent: a sample could not be made ({type(exc).__name__}: {exc}); {then}")

    def sample(self, t0: float, t1: float) -> Sample:
        """The :class:`Sample` for the window ``[t0, t1]``; then the :attr:`on_sample` hooks run."""
        window = max(t1 - t0, 1e-9)
        extra: dict[str, Any] = {}
        for part in self.sample_parts:  # first: a part may bring counters up to date (DataLoaders)
            extra.update(part(t0, t1))
        rows, per_executor, running = [], [], []
        for ex in self.executors:
            ex.refresh()
            row, busy = ex.row(t0, t1)
            run_s = None
            if ex.runs_items_on_own_thread and ex.tids:
                cpu = self.clock.take(ex.tids[0])
                if cpu is not None:
                    on_core, core_wait = split_busy(row.busy, cpu[0] / window, cpu[1] / window)
                    row = replace(row, running=on_core, core_wait=core_wait)
                    run_s = on_core * window
            rows.append(row)
            per_executor.append(busy)
            running.append(run_s)
        wait = min(1.0, busy_time(self.frontend_wait.intervals(t0, t1)) / window)
        frontend = self._frontend(wait, window)
        stack = None
        # made on the frontend thread itself (the last sample, after the user's code returned), its stack
        # would be this agent's own calls: the last one sampled while the user's code ran stays the one shown
        if t1 - self._stack_t >= STACK_EVERY and threading.get_ident() != self.frontend_ident:
            self._stack_t = t1
            stack = self.frontend_stack(
                idle=frontend.core_wait is not None and frontend.busy < IDLE_RUN_SHARE
            )
        done, unit = self.throughput.take()
        several = len(per_executor) > 1
        on_cores = running_overlap(per_executor, running)
        sample = Sample(
            t=time.time(),
            window=window,
            mode=self.sync.mode,
            throughput=done / window,
            unit=unit,
            num_threads=self._threads_wanted,
            frontend=frontend,
            overlap=min(1.0, on_cores[0] / window),
            overlap_high=min(1.0, on_cores[1] / window),
            overlap_in_progress=min(1.0, overlap_time(per_executor) / window) if several else 0.0,
            executors=tuple(rows),
            roles=self._sample_roles(t1),
            draining=self.draining(),
            cuda_uuids=tuple(self.cuda.uuids()) if self.cuda is not None else (),
            timing=bool(self.timing.intervals(t0, t1)),
            stack=stack,
            **extra,
        )
        for hook in self.on_sample:
            hook()
        return sample

    def frontend_stack(self, idle: bool = False) -> FrontendStack | None:
        """The frontend thread's Python stack now, outermost first (its innermost :data:`MAX_FRAMES`).

        Read in this process with ``sys._current_frames()`` (a few microseconds per frame, on the
        sampler thread): the same frames ``py-spy dump`` reads from outside, without a process per dump.
        None once the frontend thread has ended.
        """
        frame = sys._current_frames().get(self.frontend_ident)
        frames: list[StackFrame] = []
        while frame is not None and len(frames) < MAX_FRAMES:
            code = frame.f_code
            frames.append(
                StackFrame(
                    function=getattr(code, "co_qualname", code.co_name),
                    filename=code.co_filename,
                    line=max(0, frame.f_lineno or 0),
                )
            )
            frame = frame.f_back
        del frame
        if not frames:
            return None
        frames.reverse()
        return FrontendStack(frames=tuple(user_frames(frames)), idle=idle)

    def _frontend(self, wait: float, window: float) -> Frontend:
        """The frontend over the window: blocked ``wait`` (its recorded waits), and from its thread's
        ``schedstat`` the share it ran outside them and the share it waited for a core; the rest it was
        idle. Without schedstat, busy is ``1 - wait`` (all it can say) and ``core_wait`` null.

        Running is capped by ``1 - wait``: a wait that blocks does not run, and a wait that spins (a
        CUDA synchronize may) is waiting, not working.
        """
        cpu = self.clock.take(self.frontend_tid)
        if cpu is None:
            return Frontend(busy=1.0 - wait, wait=wait)
        busy = min(1.0 - wait, cpu[0] / window)
        return Frontend(busy=busy, wait=wait, core_wait=max(0.0, min(1.0 - wait - busy, cpu[1] / window)))

    def draining(self) -> bool:
        """True while work launched before the switch to SYNC is still completing."""
        if self._drain_target and all(
            ex.completed >= self._drain_target.get(id(ex), 0) for ex in self.executors
        ):
            self._drain_target = {}
        return bool(self._drain_target)

    def _command_loop(self) -> None:
        self._agent_tids.append(threading.get_native_id())
        reader = LineReader()
        if self._sock is None:
            self.request_stop()
            return
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        while True:
            # Wait in poll, not in recv: a recv blocked on a descriptor the workload closes keeps the socket
            # open (torchpar-top would never see it close), and a recv on a number the workload reused would
            # read the workload's own file.
            if not self._channel_ok():
                return
            try:
                events = poller.poll(COMMAND_POLL_MS)
                if not events:
                    continue
                if events[0][1] & select.POLLNVAL or not self._channel_ok():
                    self._lose_channel()
                    return
                data = self._sock.recv(65536)
            except OSError as exc:
                if exc.errno in _DESCRIPTOR_GONE:  # closed or replaced by the workload: it runs on
                    self._lose_channel()
                    return
                data = b""  # reset by the peer: torchpar-top went away
            if not data:  # torchpar-top went away: do not outlive it, nor leave what the workload started
                self.peer_gone = True
                self.request_stop()
                return
            try:
                lines = reader.feed(data)
            except ProtocolError:
                continue
            for line in lines:
                try:
                    self.apply(decode_command(line))
                except ProtocolError as exc:
                    self._ack("?", False, f"bad command: {exc}")

    def apply(self, cmd: Message) -> None:
        """Carry out one command from torchpar-top and acknowledge it."""
        if isinstance(cmd, SetSync):
            if cmd.value and not self.sync.enabled:
                self._drain_target = {id(ex): ex.launched for ex in self.executors if ex.drains_on_sync}
            self.sync.set(cmd.value, cmd.scope)
            word = "SYNC" if self.sync.enabled else "ASYNC"
            self._ack(cmd.TYPE, True, f"{word} (synchronize after every {self.sync.scope})")
        elif isinstance(cmd, SetThreads):
            self.set_threads(cmd.value)
            detail = f"torch.set_num_threads({cmd.value})"
            if any(isinstance(ex, InterOpPool) for ex in self.executors):
                detail += (
                    " on the frontend; the inter-op pool's threads keep the OpenMP team they started"
                    f" with: r restarts with {cmd.value}"
                )
            self._ack(cmd.TYPE, True, detail)
        elif isinstance(cmd, Profile):
            if cmd.export_path is not None and not os.path.isabs(cmd.export_path):
                self._ack(cmd.TYPE, False, f"profiler window refused: path not absolute: {cmd.export_path}")
                return
            self._ack(cmd.TYPE, True, f"profiler window of {cmd.seconds:g} s started")
            th = threading.Thread(
                target=self._profile, args=(cmd.seconds, cmd.export_path), name="tpt-profile", daemon=True
            )
            th.start()
        elif isinstance(cmd, Stop):
            self._ack(cmd.TYPE, True, "stopping")
            self.request_stop()

    def _profile(self, seconds: float, export_path: str | None = None) -> None:
        """A short torch.profiler window, analysed HTA's way; the per-stream result goes to the log.

        CUPTI records launches and kernels process-wide, so this thread may run it while the frontend
        works. Without CUDA there are no launches to analyse, and the log says so. With ``export_path``
        the window's Chrome trace is also written there (and the log says where). (CUDA: untested on
        hardware.)
        """
        from torchpar_top.analysis.summary import LOST_GPU_RECORDS
        from torchpar_top.probes.agent.cuda import profile_queue

        cuda = self.cuda is not None
        try:
            window = profile_queue(seconds, cuda=cuda, export_path=export_path)
        except Exception as exc:  # the profiler is optional: report, never crash the workload
            self._log_quietly(f"profiler window failed: {type(exc).__name__}: {exc}")
            return
        lines, launches = window.lines, window.launches
        if window.imported >= IMPORTS_WORTH_SAYING:
            self._log_quietly(
                f"profiler window ({seconds:g} s): torch.profiler took {window.start_s:.1f} s to start, "
                f"importing {window.imported} modules (torch._inductor and what it needs, once a process; "
                f"the workload's Python was slowed meanwhile)"
            )
        if export_path is not None:
            self._log_quietly(f"profiler window ({seconds:g} s): trace written to {export_path}")
        if window.in_process is not None:
            self._log_quietly(
                f"profiler window ({seconds:g} s): its trace was read in the workload's process "
                f"(no process of its own: {window.in_process})"
            )
        if not lines:
            if not cuda:
                where = "no CUDA stream is watched"
            elif launches:
                where = f"its trace holds {launches} launch calls but no GPU op: {LOST_GPU_RECORDS}"
            else:
                where = "the window saw no kernel launches"
            self._log_quietly(f"profiler window ({seconds:g} s): no launch queue to analyse ({where})")
        for line in lines:
            self._log_quietly(f"profiler window ({seconds:g} s): {line}")

    def _log_quietly(self, text: str) -> None:
        with suppress(OSError):
            self.log(text)

    def report_exit(self, status: int, reason: str = "") -> None:
        """Tell torchpar-top how the workload's code ended (a torchrun rank is not its child: this is
        the only way it learns the status). Best effort: the connection may be gone."""
        with suppress(OSError):
            self.send(Exit(status=status, reason=reason))

    def _ack(self, cmd: str, ok: bool, detail: str) -> None:
        with suppress(OSError):
            self.send(Ack(cmd=cmd, ok=ok, detail=detail))

    def request_stop(self) -> None:
        """Ask the workload to return (and run :attr:`on_stop`); end the whole process group if it does
        not return in time."""
        self.running = False
        timer = threading.Timer(AGENT_STOP_GRACE, self.hard_exit)
        timer.daemon = True
        timer.start()
        for hook in self.on_stop:
            hook()

    def send(self, msg: Message) -> None:
        """Send one message to torchpar-top (nothing without a connection).

        Raises:
            OSError: the connection is gone, or the workload closed or replaced our descriptor (then
                nothing is written: the number may now be one of the workload's own files).
        """
        if self._sock is None:
            return
        data = msg.to_json()
        resume = self._switch.restore()  # a write may block while torchpar-top does not read
        try:
            with self._send_lock:
                if self.channel_lost or (self._check_each_send and not self._channel_ok()):
                    raise OSError(errno.EBADF, "the protocol's descriptor was closed by the workload")
                try:
                    self._sock.sendall(data)
                except OSError as exc:
                    if exc.errno in _DESCRIPTOR_GONE:
                        self._lose_channel()
                    raise
        finally:
            self._switch.lower(resume)  # sent in the middle of a sample: the rest of it as it was

    def _channel_ok(self) -> bool:
        """Whether our descriptor still holds the protocol's socket (not closed, not reused)."""
        if self.channel_lost or self._sock is None:
            return False
        fd = self._sock.fileno()
        if fd < 0 or _identity(fd) != self._sock_id:
            self._lose_channel()
            return False
        return True

    def _lose_channel(self) -> None:
        """The workload closed or replaced our descriptor: stop talking, and never close that number
        (it may be the workload's own file by now). The workload runs on; torchpar-top sees the socket
        close and says monitoring is lost."""
        if not self.channel_lost and self._sock is not None:
            self.channel_lost = True
            self._sock.detach()


#: How long the command loop waits in poll before it checks its descriptor again (ms).
COMMAND_POLL_MS = 250

#: Errors that mean our descriptor no longer holds the socket (the workload closed or reused it), as
#: opposed to torchpar-top having gone away (end of file, a reset connection).
_DESCRIPTOR_GONE = (errno.EBADF, errno.ENOTSOCK)


class _SwitchInterval:
    """The GIL's switch interval lowered while a sample is made and encoded. Each socket write (which can
    block for as long as torchpar-top does not read) happens at the usual interval: a message sent in the
    middle of a sample (its sync points) has the interval lowered again after it, the sample's own write
    ends the lowering. Where the workload set an interval of its own meanwhile, theirs stays: ours is put
    back only if it is still there. A process forked meanwhile (a DataLoader worker) has it put back at
    once: it has no sampler to do it."""

    def __init__(self) -> None:
        self._lowered: tuple[float, float, float] | None = None
        """(the interval before, ours as the interpreter keeps it, ours as asked) while lowered."""
        self._owner = 0
        """The thread that lowered it (the sampler)."""
        os.register_at_fork(after_in_child=self.restore)

    def lower(self, seconds: float | None) -> None:
        """Set the interval to ``seconds`` (None: leave it as it is)."""
        if seconds is None or self._lowered is not None:
            return
        usual = sys.getswitchinterval()
        sys.setswitchinterval(seconds)
        self._lowered = (usual, sys.getswitchinterval(), seconds)  # it keeps whole µs, rounded down
        self._owner = threading.get_ident()

    def restore(self) -> float | None:
        """The interval as it was before :meth:`lower` (any thread; twice is once). Returns ours where it
        was in place and this is the thread that lowered it (for :meth:`lower` again after a write)."""
        lowered, self._lowered = self._lowered, None
        if lowered is None or sys.getswitchinterval() != lowered[1]:
            return None
        sys.setswitchinterval(lowered[0])
        return lowered[2] if threading.get_ident() == self._owner else None


def _identity(fd: int) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of what descriptor ``fd`` refers to, None when it is closed."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _socket_floor() -> int:
    """The lowest number the protocol socket moves to: 16 below the descriptor limit (the kept
    ``/proc`` files go below it, :class:`~torchpar_top.probes.agent.cputime.ProcFile`)."""
    return high_floor(16)


def _out_of_reach(sock: socket.socket) -> socket.socket:
    """The protocol socket moved to a high descriptor number (close-on-exec), its old number freed: a
    script that closes descriptors (``os.closerange(3, 1024)``) or counts on the low numbers being free
    finds what it would under plain python. Left where it is if no higher number is allowed."""
    floor = _socket_floor()
    if floor <= sock.fileno():
        return sock
    try:
        fd = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, floor)
    except OSError:
        return sock
    moved = socket.socket(fileno=fd)
    sock.close()
    return moved


#: ``prctl`` option: orphans below this process are reparented to it, not to init (Linux 3.4).
PR_SET_CHILD_SUBREAPER = 36


def adopt_orphans() -> bool:
    """Make this process a child subreaper: what its code starts stays in its process tree even when the
    parent in between exits (a double-forked daemon), so torchpar-top can find it and end it with the
    workload. Returns whether it worked (Linux only; elsewhere the run's mark in the environment is
    what finds such processes)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def kill_descendants() -> None:
    """SIGKILL every process below this one (what left the process group included: the agent makes the
    workload a child subreaper, :func:`adopt_orphans`)."""
    try:
        import psutil

        procs = psutil.Process().children(recursive=True)
    except Exception:
        return
    for proc in procs:
        with suppress(psutil.Error):
            proc.kill()


def _kill_own_group() -> None:
    """End the child: every process below it, and its whole process group when it leads one (started
    with a new session)."""
    kill_descendants()
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    except OSError:
        pass
    os._exit(1)


def _node_identity(rank: int | None) -> dict[str, Any]:
    """Where a rank runs, for hello: its ``LOCAL_RANK`` and node (``GROUP_RANK``) as torchrun set them (only
    for a ranked agent), and the host name."""

    def env(name: str) -> int | None:
        try:
            value = int(os.environ[name])
        except (KeyError, ValueError):
            return None
        return value if value >= 0 else None

    ranked = rank is not None
    return {
        "local_rank": env("LOCAL_RANK") if ranked else None,
        "node_rank": env("GROUP_RANK") if ranked else None,
        "hostname": socket.gethostname()[:255],
    }
