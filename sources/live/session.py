"""A session: the target (experiment, script, torchrun job or PID), the host probes, the store, commands.

The TUI and headless mode both drive a :class:`Session`; neither measures nor spawns anything itself.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import psutil
from torchpar_top import workloads
from torchpar_top.contract.messages import (
    Hello,
    Message,
    Profile,
    Sample,
    SetSync,
    SetThreads,
    Stop,
    ThreadRole,
)
from torchpar_top.contract.snapshot import (
    ChildStatus,
    Experiment,
    GpuView,
    HostSample,
    Snapshot,
    StackView,
    ThreadInfo,
)
from torchpar_top.contract.vocab import ENV_SOCKET, PARENT_STOP_GRACE, ChildState, LogSource, Role
from torchpar_top.model.store import KILLED_BY, SessionStore, thread_every
from torchpar_top.probes.host.cores import CoreSampler
from torchpar_top.probes.host.threads import ThreadSampler
from torchpar_top.sources.live.child import ChildProcess
from torchpar_top.sources.live.listener import AgentListener
from torchpar_top.sources.live.pacing import PullPace
from torchpar_top.sources.live.targets import AttachTarget, ExperimentTarget, ScriptTarget, Target

StackSource = Callable[[int], Any]
"""Given a pid, starts a poller with ``latest -> (StackView | None, status)`` and ``stop()``."""

MONITOR_EVERY = 1.0
"""Seconds between two readings of torchpar-top's own CPU (shown in the header as ``monitor N%``)."""

ATTACH_NOTICE = "attached: cores, threads, GPU use and stacks only — queue depth needs `torchpar-top run`"


class GpuProbe(Protocol):
    """What a session asks of its GPU probe (``probes/host/nvml.py``'s ``NvmlProbe``; fakes in tests)."""

    pid: Any
    """The watched process (per-process GPU use), or a callable returning it; set by the session."""
    cuda_uuids: Any
    """The workload's CUDA devices' UUIDs in CUDA order (labels GPUs as the workload numbers them)."""

    @property
    def readable(self) -> bool:
        """Whether :meth:`sample` can read anything; false stays false (then it is asked once)."""
        ...

    def sample(self) -> tuple[tuple[GpuView, ...], str]:
        """Every GPU once, and a status that says why there are none; never raises."""
        ...

    def close(self) -> None:
        """Let go of the GPU library (idempotent)."""
        ...


class Session:
    """Runs one target at a time and samples the host around it."""

    def __init__(
        self,
        target: Target | str = workloads.DEFAULT,
        *,
        interval: float = 0.1,
        sync: bool = False,
        gpu_probe: GpuProbe | None = None,
        stack_source: StackSource | None = None,
        stacks: bool = True,
    ) -> None:
        """Prepare a session (nothing runs until :meth:`start`).

        Args:
            target: what to run or watch; a plain string names a built-in experiment.
            interval: seconds between samples, in the child and on the host.
            sync: start the child in SYNC mode.
            gpu_probe: reads the GPUs (:class:`GpuProbe`); None means no GPU panel data.
            stack_source: starts a Python-stack poller for a pid (py-spy), for a process without the
                agent (``attach``); None means no stacks there. A workload with the agent sends its
                frontend's stack itself.
            stacks: show the frontend's stack at all (``--no-stacks``: no py-spy, agents' stacks dropped).
        """
        self.target: Target = ExperimentTarget(target) if isinstance(target, str) else target
        if isinstance(self.target, ExperimentTarget):
            workloads.info(self.target.name)  # KeyError for an unknown name, before anything starts
        self.interval = interval
        self.store = SessionStore(self._experiment_name(), self.target.description, interval)
        self.store.set_target(self.target.label)
        self.store.stacks = stacks
        self._sync_wanted = sync
        self._gpu_probe = gpu_probe
        self._stack_source = stack_source if stacks else None
        self._stacks: Any = None
        self._child: ChildProcess | None = None
        self._listener: AgentListener | None = None
        self._child_lock = threading.RLock()
        self._samplers: dict[int, ThreadSampler] = {}
        self._stop = threading.Event()
        self._host_thread: threading.Thread | None = None
        self._closed = False
        self._close_lock = threading.Lock()
        self._target_lock = threading.Lock()
        """Held while the target changes (restart, switch) and while closing: one at a time, in order."""
        self._closing: dict[int, _Closing] = {}
        """Agent connections that closed, by number, until their process is seen to end (or runs on)."""
        self._threads_chosen: int | None = None
        """The intra-op thread count last asked for with ``+``/``-`` (kept by a restart)."""
        self._snapshot: tuple[tuple[int, Any], Snapshot] | None = None
        self.built: list[Callable[[Snapshot], None]] = []
        """Told of each snapshot :meth:`snapshot` builds, in the thread that built it (the screen's frame,
        the headless loop): the verdict's tally is fed there rather than on a wake-up of its own."""
        self._host_lock = threading.Lock()
        """Held during a host reading (the probes' thread, or a pull)."""
        self._host_pace = PullPace()
        self._cores: CoreSampler | None = None
        """The per-core sampler once the probes' thread runs."""
        self._host_next = 0.0
        """When the next host reading is due (monotonic)."""
        self._host_ticks = 0
        self._threads_read: list[ThreadSampler] = []
        self._monitor_mark = (0.0, 0.0)
        """(when, CPU seconds) of the last reading of the monitor's own CPU."""
        self.host_samples = 0
        """How many host readings were stored (headless mode prints one line per reading)."""
        self.hung_up = False
        """The terminal hung up (SIGHUP): :meth:`close` then stops the user's code at once with SIGTERM,
        as the hang-up would have without torchpar-top, rather than giving it time to unwind. Set from a
        signal handler (an assignment: nothing to lock)."""

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the host probes and the target."""
        self._host_thread = threading.Thread(target=self._host_loop, name="tpt-host-probes", daemon=True)
        self._host_thread.start()
        self._start_target()

    def hang_up(self) -> None:
        """The terminal hung up: :meth:`close` will stop the user's code at once (:attr:`hung_up`). Safe
        in a signal handler (one assignment)."""
        self.hung_up = True

    def close(self) -> None:
        """Stop the child (and its process group), the listener and the probes. Idempotent."""
        with self._close_lock:  # a second caller waits until the first has stopped everything
            if self._closed:
                return
            self._closed = True
            with self._target_lock:  # a restart in progress ends first (it starts nothing once closed)
                self._close()

    def _close(self) -> None:
        self._stop.set()
        # Quitting. Our experiments have nothing to unwind: SIGTERM at once. The user's code is
        # interrupted as Ctrl-C would (its finally blocks and atexit handlers run) before SIGTERM, unless
        # the terminal hung up: a hang-up ends a script at once (SIGHUP's default), and so does this.
        quick = isinstance(self.target, ExperimentTarget) or self.hung_up
        self._stop_target(grace=0 if quick else PARENT_STOP_GRACE)
        if self._host_thread is not None:
            self._host_thread.join(timeout=5)
        if self._gpu_probe is not None:
            self._gpu_probe.close()

    # -- commands ---------------------------------------------------------------------------------

    def experiments(self) -> Sequence[Experiment]:
        """The built-in experiments."""
        return [workloads.info(n) for n in workloads.names()]

    def toggle_sync(self) -> None:
        """Switch between ASYNC and SYNC in the running child: the opposite of what was asked for last (a
        sample may not have caught up yet); a press that reaches no child asks for nothing."""
        wanted = not self._sync_wanted
        if self._send(SetSync(value=wanted)):
            self._sync_wanted = wanted
            self.store.add_log(LogSource.APP, f"asked for {'SYNC' if wanted else 'ASYNC'}")

    def change_threads(self, delta: int) -> None:
        """``torch.set_num_threads(current + delta)`` in the child, kept within 1..cpu_count."""
        current = self.store.num_threads or 1
        wanted = min(max(1, current + delta), os.cpu_count() or 1)
        if wanted == current:
            self.store.add_log(LogSource.APP, f"threads stay at {current} (1..{os.cpu_count()} cores)")
            return
        if self._send(SetThreads(value=wanted)):
            self.store.threads_requested(wanted)
            self._threads_chosen = wanted
            self.store.add_log(LogSource.APP, f"asked for {wanted} intra-op threads")

    def profile(self, seconds: float = 1.0) -> None:
        """Ask the child for a short torch.profiler window, analysed the way HTA computes queue length."""
        if self._send(Profile(seconds=seconds)):
            self.store.add_log(
                LogSource.APP, f"asked for a {seconds:g} s profiler window (queue length, HTA's way)"
            )

    def switch_experiment(self, name: str) -> None:
        """Stop whatever runs and start the built-in experiment ``name``."""
        workloads.info(name)
        self._threads_chosen = None
        self._switch(ExperimentTarget(name))

    def restart(self) -> None:
        """Run the same target again (e.g. the user's script after it ended). An experiment restarts with
        the intra-op thread count chosen with ``+``/``-``, set before any of its threads start."""
        target = self.target
        if isinstance(target, ExperimentTarget) and self._threads_chosen is not None:
            target = replace(target, threads=self._threads_chosen)
        self._switch(target)

    def set_paused(self, paused: bool) -> None:
        """Pause or resume sampling; the child keeps running."""
        self.store.set_paused(paused)
        self.store.add_log(LogSource.APP, "paused" if paused else "resumed")

    def snapshot(self) -> Snapshot:
        """The current state: the same object as last time when nothing changed since (the screen then
        skips the frame). What the workload sent since the last call is read here first, in the caller's
        thread (the frame's wake-up, not one per sample: :mod:`.pacing`)."""
        self.pull()
        stacks = self._stacks
        latest = stacks.latest if stacks is not None else None
        key = (self.store.version, latest)
        cached = self._snapshot
        if cached is not None and cached[0][0] == key[0] and cached[0][1] is latest:
            return cached[1]
        snap = self.store.snapshot()
        if latest is not None:
            snap = _with_stack(snap, *latest)
        self._snapshot = (key, snap)
        for told in self.built:
            told(snap)
        return snap

    def recent_snapshot(self, max_age: float) -> Snapshot:
        """The snapshot built last when it is at most ``max_age`` seconds old, else a new one: a reader
        that samples on its own clock (the verdict's tally) then shares the screen's builds instead of
        making its own."""
        cached = self._snapshot
        if cached is not None and time.time() - cached[1].t <= max_age:
            return cached[1]
        return self.snapshot()

    # -- the target -------------------------------------------------------------------------------

    def _experiment_name(self) -> str:
        if isinstance(self.target, ExperimentTarget):
            return self.target.name
        return "attach" if isinstance(self.target, AttachTarget) else "run"

    def _switch(self, target: Target) -> None:
        """Stop what runs and start ``target`` (nothing once the session is closed: quitting wins)."""
        with self._target_lock:
            if self._closed:
                return
            self._stop_target()
            if self._closed:  # q came while the old target stopped
                return
            self._start_new(target)

    def _start_new(self, target: Target) -> None:
        """Make ``target`` the session's, with a fresh store, and start it."""
        self.target = target
        self.store.reset(self._experiment_name(), target.description)
        self.store.set_target(target.label)
        self.store.add_log(LogSource.APP, f"starting {target.label}")
        self._start_target()

    def _start_target(self) -> None:
        target = self.target
        if isinstance(target, AttachTarget):
            self.store.set_target(target.label, ATTACH_NOTICE)
            self.store.on_child(ChildStatus(target.pid, ChildState.ATTACHED, message=target.description))
            self._watch_pid(target.pid)
            return
        nproc = target.nproc if isinstance(target, ScriptTarget) else 0
        torchrun = bool(nproc)
        env = {}
        with self._child_lock:
            if torchrun:
                self._listener = AgentListener(
                    self._on_rank_message,
                    self._on_rank_closed,
                    lambda text: self.store.add_log(LogSource.PROTOCOL, text),
                    expected=nproc,
                )
                env[ENV_SOCKET] = self._listener.path
                if isinstance(target, ScriptTarget) and target.nodes.waiting:  # cleared by the first hello
                    self.store.set_target(target.label, target.nodes.waiting)
            logs = self._listener.log_dir if self._listener is not None else None
            child = ChildProcess(
                lambda fd: target.command(fd, self.interval, self._sync_wanted, log_dir=logs),
                on_message=self._on_child_message,
                on_output=self.store.add_log,
                on_exit=lambda code: self._on_exit(child, code),
                env=env,
                socketpair=not torchrun,
                on_channel_closed=lambda: self._on_channel_closed(child),
            )
            try:
                child.start()
            except OSError as exc:
                self.store.on_child(
                    ChildStatus(None, ChildState.FAILED, None, f"could not start the workload: {exc}")
                )
                return
            self._child = child
        self.store.on_child(ChildStatus(child.pid, ChildState.RUNNING))
        if not torchrun and child.pid is not None:  # started: it has one
            self._watch_pid(child.pid)

    def _watch_pid(self, pid: int) -> None:
        """Sample this process's threads; the first one watched also gets per-process GPU use (the
        workload, or the first torchrun rank to connect), and py-spy stacks when attached (an agent
        sends its frontend's stack itself: no process per dump)."""
        with self._child_lock:
            first = not self._samplers
            self._samplers[pid] = ThreadSampler(pid)
            attached = isinstance(self.target, AttachTarget)
            if attached and self._stacks is None and self._stack_source is not None:
                self._stacks = self._stack_source(pid)
            if first and self._gpu_probe is not None:
                self._gpu_probe.pid = pid

    def _stop_target(self, grace: float = PARENT_STOP_GRACE) -> None:
        with self._child_lock:
            child, self._child = self._child, None
            listener, self._listener = self._listener, None
            stacks, self._stacks = self._stacks, None
            self._samplers = {}
            self._closing = {}
            if self._gpu_probe is not None:
                self._gpu_probe.cuda_uuids = None
        if listener is not None and grace > 0:
            # torchrun ranks: each agent gets the stop (interrupted as Ctrl-C would: their finally blocks
            # run), then the launcher's group is stopped as for one child, and waits for them
            listener.broadcast(Stop())
        if child is not None:
            child.stop(grace)
        if listener is not None:
            listener.close()
        if stacks is not None:
            stacks.stop()

    def _on_exit(self, child: ChildProcess, code: int) -> None:
        with self._child_lock:
            current = child is self._child
            listener = self._listener
        if not current:
            return  # a child we stopped on purpose (switch or close): nothing to report
        if listener is not None:
            # torchrun ended, and with it its ranks: read their last messages and closed connections, and
            # settle those closed, before the workload is said to have ended. A rank whose connection
            # closed as it died (not yet a zombie) was otherwise settled at the next host reading, after
            # the headless loop's last record: a CI run's read rank 1 with no status and no note. The same
            # record failed once more in session 34's CI (not reproduced in 12 runs here); the one window
            # found: a pull finds nothing ready while the listener's thread reads that very end, and went
            # on before the thread had said the connection closed. Drained, not pulled, it waits for it.
            listener.drain()
            self._resolve_closing()
        message = f"{KILLED_BY} {-code}" if code < 0 else f"exited with status {code}"
        self.store.on_source_closed(0, code)
        message = "workload " + "; ".join([message, *self.store.exit_notes()])  # torchrun's status, and why
        key = (
            "r to run it again, w for an experiment"
            if isinstance(self.target, ScriptTarget)
            else "w to start an experiment"
        )
        # the line first: a snapshot that has the exit has the line that says it (the log panel shows
        # that line as the exit's status line rather than say it twice)
        self.store.add_log(LogSource.APP, f"pid {child.pid}: {message}; press {key}")
        self.store.on_child(ChildStatus(child.pid, ChildState.EXITED, code, message))

    def _on_child_message(self, msg: Message, number: int = 0) -> None:
        if isinstance(msg, Sample) and msg.cuda_uuids and self._gpu_probe is not None:
            self._gpu_probe.cuda_uuids = list(msg.cuda_uuids)  # the child's CUDA order: label GPUs as it does
        self.store.on_message(msg, number)

    def _on_rank_message(self, msg: Message, number: int) -> None:
        if isinstance(msg, Hello):
            self._watch_pid(msg.pid)
        self._on_child_message(msg, number)

    def _on_channel_closed(self, child: ChildProcess) -> None:
        """Our child's protocol socket closed while it runs: watched until it ends (see _resolve_closing)."""
        with self._child_lock:
            if child is self._child and child.pid is not None:
                self._closing[0] = _Closing(child.pid, time.monotonic())

    def _on_rank_closed(self, number: int) -> None:
        """A rank's connection closed: it is ending, or runs on unmonitored (see _resolve_closing)."""
        pid = self.store.source_pid(number)
        with self._child_lock:
            self._closing[number] = _Closing(pid, time.monotonic())
        self._resolve_closing()

    def _resolve_closing(self) -> None:
        """For each closed connection: once its process has ended, it is marked so (a rank, with the status
        its agent reported; our own child is marked by its exit status instead); a process still running
        :data:`LOST_GRACE` seconds after its connection closed is reported as monitoring lost."""
        with self._child_lock:
            closing = list(self._closing.items())
        now = time.monotonic()
        for number, entry in closing:
            if entry.pid is None or not _running(entry.pid):
                with self._child_lock:
                    if self._closing.get(number) is not entry:
                        continue  # resolved by another thread, or a new run began
                    del self._closing[number]
                if number != 0:
                    self.store.on_source_closed(number)
                    self.store.add_log(LogSource.APP, f"agent connection {number} closed (a rank ended)")
            elif not entry.lost and now - entry.t > LOST_GRACE:
                entry.lost = True
                self.store.on_source_lost(number)

    def pull(self) -> None:
        """Read what the child and the ranks' agents sent so far, in the caller's thread; their reader
        threads then stand behind these pulls (:class:`~torchpar_top.sources.live.pacing.PullPace`)."""
        with self._child_lock:
            child, listener = self._child, self._listener
        if child is not None:
            child.pull()
        if listener is not None:
            listener.pull()
        cores = self._cores
        if cores is not None and cores.any_thread:
            self._host_pace.pulled()
            self._host_tick(gpus=False, early=self.interval / 4)

    def _send(self, cmd: Message) -> bool:
        with self._child_lock:
            child, listener = self._child, self._listener
        if listener is not None:
            if listener.broadcast(cmd):
                return True
        elif child is not None and child.send(cmd):
            return True
        if isinstance(self.target, AttachTarget):
            self.store.add_log(LogSource.APP, "attached to a process we did not start: it takes no commands")
        elif child is not None and child.running:
            self.store.add_log(
                LogSource.APP,
                "the workload runs on, but its agent's connection is closed: it takes no commands",
            )
        else:
            self.store.add_log(LogSource.APP, "no workload is running: press w to start one")
        return False

    # -- host probes ------------------------------------------------------------------------------

    def _monitor_cpu(self) -> float:
        """CPU seconds of this process (every thread), plus reaped children's when attached: then the
        only children are py-spy's dumps (running a workload, the child's CPU would land here when it is
        reaped)."""
        cpu = time.process_time()  # nanosecond clock (os.times counts 10 ms ticks)
        if isinstance(self.target, AttachTarget):
            t = os.times()
            cpu += t.children_user + t.children_system
        return cpu

    def _host_loop(self) -> None:
        """Read the host probes every interval, or stand behind the pulls that read them (:meth:`pull`:
        the frame's wake-up); GPUs are always read here (a driver call never holds up the screen)."""
        with self._host_lock:
            cores = self._cores = CoreSampler()  # under psutil: sampled from this thread only
            self._host_next = time.monotonic()
            self._monitor_mark = (self._host_next, self._monitor_cpu())
        gpu = self._gpu_probe
        # a probe with no GPU to read (no NVML, none found) gives its status once, not every interval:
        # the thread then sleeps behind the pulls (a wake-up costs ~0.2 ms of CPU on a small VM)
        readable = gpu is not None and gpu.readable
        if gpu is not None and not readable:
            self.store.on_gpus(*gpu.sample())
        while not self._stop.is_set():
            pulled = cores.any_thread and self._host_pace.idle_for() > 0
            if not pulled:
                self._host_tick(gpus=readable)
                wait = self._host_next - time.monotonic()
            elif readable and gpu is not None:
                self.store.on_gpus(*gpu.sample())
                wait = self.interval
            else:
                wait = self._host_pace.idle_for()
            self._stop.wait(max(0.0, wait))
        cores.close()

    def _host_tick(self, gpus: bool, early: float = 0.0) -> None:
        """One host reading if its time has come (``early`` seconds before it does: a frame that comes a
        little before the interval's end reads it rather than leave it to the next frame): cores, the
        watched processes' threads every few readings, agent connections that closed, the monitor's own
        CPU every :data:`MONITOR_EVERY`; the GPUs too when ``gpus``."""
        with self._host_lock:
            cores = self._cores
            now = time.monotonic()
            if cores is None or now < self._host_next - early:
                return
            self._host_next = max(self._host_next + self.interval, now + self.interval / 2)
            with self._child_lock:
                samplers = list(self._samplers.values())
            threads: tuple[ThreadInfo, ...] | None = None
            started: dict[int, int] = {}
            # the threads every few samples, and at once for a process not read yet (a new child)
            if self._host_ticks % thread_every(self.interval) == 0 or any(
                s not in self._threads_read for s in samplers
            ):
                roles = self._python_roles(self.store.roles())
                threads = ()
                for sampler in samplers:
                    threads += sampler.sample(roles)
                    started.update(sampler.started)
                self._threads_read = samplers
            self._host_ticks += 1
            self.store.on_host(HostSample(time.time(), cores.sample(), threads, started))
            self._report_attach_errors(samplers)
            self._resolve_closing()
            if gpus and self._gpu_probe is not None:  # ``gpus``: only when the probe has a GPU to read
                self.store.on_gpus(*self._gpu_probe.sample())
            self.host_samples += 1
            mark = self._monitor_mark
            if now - mark[0] >= MONITOR_EVERY:
                cpu = self._monitor_cpu()
                self.store.on_monitor(max(0.0, cpu - mark[1]) / (now - mark[0]))
                self._monitor_mark = (now, cpu)

    def _python_roles(self, roles: dict[int, ThreadRole]) -> dict[int, ThreadRole]:
        """``roles``, plus (attached: no agent names the threads) the Python threads of py-spy's last dump
        other than the main one: unnamed, they would otherwise be taken for OpenMP workers."""
        stacks = self._stacks
        latest = stacks.latest[0] if stacks is not None else None
        if latest is None or not latest.python_tids:
            return roles
        for tid in latest.python_tids:
            if tid != latest.pid and tid not in roles:
                roles[tid] = ThreadRole(tid=tid, role=Role.PYTHON)
        return roles

    def _report_attach_errors(self, samplers: list[ThreadSampler]) -> None:
        """An attached process that exits is shown as exited; we keep running."""
        if not isinstance(self.target, AttachTarget) or not samplers or not samplers[0].error:
            return
        if self.store.child_state() == ChildState.ATTACHED:
            self.store.on_child(ChildStatus(self.target.pid, ChildState.EXITED, None, samplers[0].error))
            self.store.add_log(LogSource.APP, samplers[0].error)


#: Seconds an agent's process may run on after its connection closed before monitoring is said to be lost
#: (a process ending after its code returned closes the socket a moment before it exits).
LOST_GRACE = 2.0


@dataclass
class _Closing:
    """An agent connection that closed: its process, when, and whether it was said to be lost."""

    pid: int | None
    t: float
    lost: bool = False


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _with_stack(snap: Snapshot, stack: StackView | None, status: str) -> Snapshot:
    return replace(snap, stack=stack, stack_status=status)
