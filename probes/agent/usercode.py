"""The agent around unmodified user code: ops, steps, sync points, DataLoader prefetch, sync control.

:class:`UserCode` composes an :class:`Agent` with the parts user code needs: a throughput source that
counts training steps (else ops), sample parts for the DataLoader wait and for the steps, their phases
and the process's memory (:mod:`usercode_steps`), hooks after each sample and on a stop, and CUDA as a
device to synchronize. :class:`Instrumentation` (:mod:`usercode_install`) installs, around the user's
code, a function mode on the frontend thread (ops and sync points, :mod:`usercode_ops`), a global
optimizer step post hook, the phase hooks (:mod:`usercode_phases`) and the DataLoader wrappers
(:mod:`usercode_data`).

Throughput is steps/s once a step was seen (optimizer steps, else backward calls, else DataLoader
batches, else outermost module calls), else ops/s. SYNC with scope ``op`` synchronizes CUDA after every
op, with scope ``step`` after every step; on the CPU eager ops are already synchronous, so SYNC changes
nothing there (the agent says so once).
"""

from __future__ import annotations

import _thread
import contextlib
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torchpar_top.contract.messages import SyncPoints
from torchpar_top.contract.vocab import StepSource, SyncScope, ThroughputUnit
from torchpar_top.probes.agent.activity import busy_time
from torchpar_top.probes.agent.agent import Agent
from torchpar_top.probes.agent.collectives import watch as watch_collectives
from torchpar_top.probes.agent.cuda_cupti import DEFAULT_DUTY, CuptiMonitor, CuptiUnavailable, load_cupti
from torchpar_top.probes.agent.sync import SyncPolicy
from torchpar_top.probes.agent.usercode_data import DataLoaderWatch
from torchpar_top.probes.agent.usercode_ops import EagerOps, OpCounter, SyncCounter
from torchpar_top.probes.agent.usercode_phases import PhaseHooks
from torchpar_top.probes.agent.usercode_sampling import (
    STEPS_DUTY,
    STEPS_SLICE,
    SampledCounting,
    SwitchSignal,
)
from torchpar_top.probes.agent.usercode_steps import (
    HOLD_S,
    OPTIMIZER,
    SYNC,
    GpuSteps,
    StepClock,
    read_memory,
)

CPU_SYNC_NOTE = (
    "SYNC on the CPU: eager CPU ops are already synchronous, there is no queue to drain; "
    "sync points are counted where they would synchronize on CUDA"
)

#: Seconds a stop waits for a safe point before interrupting the user's code wherever it is.
STOP_SAFE_WAIT = 0.5

#: Seconds between two readings of the process's memory (the first sample has one): what it shows (a
#: rise over minutes, a device's peak) needs no more, and each reading is a ``/proc`` read and, with
#: CUDA, a ``memory_stats`` per device in the sampler's time beside the user's loop.
MEMORY_EVERY = 0.5

_get_ident = threading.get_ident
_OPTIMIZER_STEPS = StepSource.OPTIMIZER


def cuda_in_use() -> bool:
    """True once the user's code initialised CUDA in this process (never initialises it)."""
    return torch.cuda.is_initialized()


class StepsOrOps:
    """Throughput of user code: steps per second once a step was seen (every step is seen; from the
    optimizer, backward, DataLoader or outermost module, :mod:`.usercode_steps`), else ops per second,
    measured while the op counter was on and scaled to the whole window."""

    def __init__(
        self,
        agent: Agent,
        eager: EagerOps,
        covered: Callable[[], float],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._agent, self._eager, self._covered, self._clock = agent, eager, covered, clock
        self._last_ops = self._last_steps = 0
        self._last_cov, self._last_t = covered(), clock()
        self._rate = 0.0

    def take(self) -> tuple[float, ThroughputUnit]:
        """Steps (or estimated ops) done since the previous call, and the unit."""
        ops, steps, cov, now = self._eager.completed, self._agent.items, self._covered(), self._clock()
        if steps:
            done, unit = float(steps - self._last_steps), ThroughputUnit.STEPS
        else:
            if cov > self._last_cov:
                self._rate = (ops - self._last_ops) / (cov - self._last_cov)
            done, unit = self._rate * (now - self._last_t), ThroughputUnit.OPS
        self._last_ops, self._last_steps, self._last_cov, self._last_t = ops, steps, cov, now
        return max(0.0, done), unit


#: The log's line when ``--no-queues`` leaves CUDA's launch queues unwatched.
NO_QUEUES_NOTE = (
    "CUDA launch queues: not watched (--no-queues): neither CUPTI's records nor a Python hook per op slows "
    "a launch-bound loop; the GPU panel (NVML) and the step phases (CUDA events) remain"
)


class UserCode:
    """The agent for ``torchpar-top run``: experiment ``run``, one eager CPU executor to start with."""

    def __init__(
        self,
        sock: socket.socket | None,
        *,
        target: str,
        interval: float = 0.1,
        sync: bool = False,
        sync_scope: SyncScope = SyncScope.OP,
        rank: int | None = None,
        world_size: int | None = None,
        every_op: bool = False,
        cupti_duty: float | None = None,
        watch_queues: bool = True,
        step_records: bool = True,
    ) -> None:
        agent = self.agent = Agent(
            sock,
            experiment="run",
            description=f"your code: {target}",
            device="cuda" if torch.cuda.is_available() else "cpu",
            interval=interval,
            sync=sync,
            sync_scope=sync_scope,
        )
        if rank is not None:
            agent.rank, agent.world_size = rank, world_size if world_size is not None else 1
        self.mode: OpCounter | None = None
        self.counting: SampledCounting | None = None
        """Switches the op counter on for slices of the frontend's time (always on with ``every_op``)."""
        self.switch_signal: SwitchSignal | None = None
        self.every_op = every_op
        self.cupti_duty = cupti_duty
        """On CUDA, the share of sample intervals CUPTI records in (None: ``cuda_cupti.DEFAULT_DUTY``)."""
        self.watch_queues = watch_queues
        """On CUDA, watch the launch queues (False: ``--no-queues``, neither CUPTI nor the launch counter)."""
        self.syncpoints = SyncCounter(cuda_in_use)
        self.eager: EagerOps = agent.add(EagerOps("cpu (eager)"))
        self.data = DataLoaderWatch(agent.add, threading.get_ident())
        self.data.also_wait = agent.frontend_wait
        self.steps = StepClock(hold=HOLD_S, records=step_records)
        self._final = False
        """The user's code returned: the next sample is the last (its steps go out, held or not)."""
        """The training steps and their phases (:mod:`.usercode_steps`)."""
        self.steps.on_step = self._on_step
        self.phases = PhaseHooks(self.steps, threading.get_ident())
        """The phase boundaries Instrumentation installs (:mod:`.usercode_phases`)."""
        self.data.steps = self.steps
        self.memory = True
        """Send the process's memory in samples (one every :data:`MEMORY_EVERY`)."""
        self._memory_t = float("-inf")
        self.stop_requested = False
        self.interruptible = False
        """True while the user's code runs: a stop then interrupts it (KeyboardInterrupt)."""
        self._primary: weakref.ref | None = None
        self._cpu_sync_noted = False
        self._late_source_said = False
        self._cuda_watched = False
        self._cuda_asked = False
        self._last_covered = 0.0
        self._flush_lock = threading.Lock()
        self.cuda: Any = torch.cuda
        """``torch.cuda`` (tests pass a fake)."""
        self.load_cupti: Callable[[], Any] = load_cupti
        """Imports NVIDIA's binding (tests pass a fake); raises CuptiUnavailable when it cannot."""
        self.cupti: CuptiMonitor | None = None
        """The CUPTI monitor while it provides the CUDA queues."""
        self._uuids: list[str] | None = None
        agent.throughput = StepsOrOps(agent, self.eager, self._covered)
        agent.sample_parts.append(self._data_wait)
        agent.sample_parts.append(self._op_coverage)
        agent.sample_parts.append(self._steps_part)
        agent.on_sample.append(self._after_sample)
        if (collectives := watch_collectives(agent.log, rank)) is not None:  # TORCH_FR_BUFFER_SIZE > 0
            agent.on_sample.append(collectives.tick)
            self.phases.before_destroy.append(collectives.final)  # a short job's collectives too
        agent.on_stop.append(self._on_stop)
        agent.device_syncs.append(self._sync_cuda)
        agent.sync.on_change(self._update_mode)

    # -- the agent's lifecycle, for run.py ------------------------------------------------------------

    def start(self) -> None:
        """Say hello and start the agent's threads."""
        self.agent.start()

    def last_sample(self) -> None:
        """The user's code returned: one last sample, so that its last interval's steps are counted."""
        self._final = True
        self.agent.last_sample()

    def report_exit(self, status: int, reason: str = "") -> None:
        """Tell torchpar-top how the user's code ended."""
        self.agent.report_exit(status, reason)

    def use_counting(self, counting: SampledCounting, switch_signal: SwitchSignal | None = None) -> None:
        """The op counter and what switches it are in place: give it the current after-op."""
        self.counting, self.mode, self.switch_signal = counting, counting.mode, switch_signal
        counting.on_freeze = self._frozen
        self._update_mode(self.agent.sync)

    def _frozen(self, on: bool) -> None:
        """Compiled code was seen: the op counter keeps its state so compiled code is not compiled again."""
        state = "on (every op is counted)" if on else "off (ops and sync points are no longer sampled)"
        self.agent.log(
            f"torch.compile in use: the op counter stays {state}, so that compiled code is not "
            "compiled again for a second state of the function-mode stack"
        )

    def _covered(self) -> float:
        """Seconds the op counter was on so far."""
        return self.counting.covered_until() if self.counting is not None else 0.0

    def run_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the frontend thread soon: at its next step, batch or counted op."""
        if self.counting is not None:
            self.counting.run_soon(fn)

    # -- sync control ---------------------------------------------------------------------------------

    def _update_mode(self, policy: SyncPolicy) -> None:
        """Give the mode its after-op call for the current sync setting."""
        if self.mode is not None:
            self.mode.after_op = self.agent.synchronize if policy.per_op else None
        if self.counting is not None:  # the after-op needs the mode on for every op
            self.counting.pin(self.every_op or policy.per_op)

    def _sync_cuda(self) -> None:
        """Wait for the GPU (if this process uses one); the wait is frontend wait (and ``sync`` time)."""
        if cuda_in_use():
            wait = self.agent.frontend_wait
            frontend = threading.get_ident() == self.agent.frontend_ident
            if frontend:
                self.steps.enter(SYNC)
            wait.begin(time.perf_counter())
            try:
                torch.cuda.synchronize()
            finally:
                wait.end(time.perf_counter())
                if frontend:
                    self.steps.exit(SYNC)

    # -- hooks --------------------------------------------------------------------------------------

    def on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Optimizer step post hook: one step per step of the first optimizer seen (GANs step two).

        A fast loop's untimed steps take the short way (``StepClock.close_untimed``, then the agent's
        per-step work only where some is due): this runs in every step of the user's loop, where each
        Python call costs several times what it costs alone (``benchmarks/bench_step_steady.py``)."""
        if _get_ident() != self.agent.frontend_ident:
            return
        primary = self._primary() if self._primary is not None else None
        if primary is optimizer:
            t = self.steps.close_untimed(_OPTIMIZER_STEPS)
            if t:
                self._on_step(t)
                return
        elif primary is None:
            self._primary, primary = weakref.ref(optimizer), optimizer
        # the optimizer phase ends, and with the primary optimizer a step (its own work: _on_step)
        if self.steps.exit(OPTIMIZER, step=StepSource.OPTIMIZER if optimizer is primary else None):
            return
        if self.stop_requested:
            self._safe_stop()
        if self.counting is not None:
            self.counting.tick()

    def _on_step(self, t: float = 0.0) -> None:
        """A step closed (on the frontend), at ``t`` where the caller has just read the clock: a switch
        point, a safe point to stop, settings applied.

        It runs in every step of the user's loop: a few attribute reads when nothing is to be done (the
        op counter's tick is skipped when ``t`` is before its next switch and nothing waits for it)."""
        if self.stop_requested:
            self._safe_stop()
        counting = self.counting
        if counting is not None:
            if counting.duty > STEPS_DUTY:  # steps found: ops/s is no longer the headline
                counting.duty, counting.slice = STEPS_DUTY, STEPS_SLICE
            if not t or t >= counting.due or counting.pending:
                counting.tick()
                if counting.on and self.switch_signal is not None:
                    self.switch_signal.finish_off_soon()  # the step ended inside the counter's dispatch
        agent = self.agent
        agent.items = self.steps.count
        if agent.threads_pending:
            agent.apply_threads()
        if agent.sync.enabled and agent.sync.per_step:
            agent.synchronize()

    def watch_cuda_streams(self) -> None:
        """HOOK: CUDA became initialised in the user's code; watch its launch queues.

        Runs on the frontend thread (from :meth:`run_soon`). By default the queues come from CUPTI's
        activity records (:mod:`~torchpar_top.probes.agent.cuda_cupti`: no Python per op); with
        ``--every-op``, or when CUPTI cannot be used (cupti-python missing, another CUPTI client, no
        permission), the function-mode launch counter counts torch calls instead, and the log says why.
        With ``--no-queues`` neither: the step phases are still timed on the GPU, and the log says so.
        """
        if self._cuda_watched:
            return
        self._cuda_watched = True
        self.time_steps_on_cuda()
        if not self.watch_queues:
            self.agent.log(NO_QUEUES_NOTE)
            return
        if not self.every_op:
            reason = self._watch_with_cupti()
            if reason is None:
                return
            self.agent.log(
                f"CUDA launch queues: CUPTI not used ({reason}); counting torch calls with a "
                "function mode instead (a Python hook per op, as with --every-op)"
            )
        self._watch_with_counter()

    def time_steps_on_cuda(self) -> None:
        """CUDA is in use (on the frontend): transfers and waits become phases, and the phases GPU time
        from CUDA events (:class:`~.usercode_steps.GpuSteps`, checked on an H100 and an H200)."""
        try:
            self.phases.install_cuda()
        except Exception as exc:
            self.agent.log(f"step phases: CUDA transfers not timed ({type(exc).__name__}: {exc})")
        self.steps.use_gpu(GpuSteps(self.cuda, log=self.agent.log))

    def _watch_with_counter(self) -> None:
        """The launch counter on the current device's stream (a function mode on the frontend)."""
        try:
            device = self.cuda.current_device()
            self.agent.cuda_stream(f"cuda:{device}", device)
        except Exception as exc:
            self.agent.log(f"CUDA in use, but its stream is not watched: {type(exc).__name__}: {exc}")
            return
        self.agent.log(f"CUDA in use: watching the current stream of cuda:{device}")

    def _watch_with_cupti(self) -> str | None:
        """Start the CUPTI monitor; None when it runs, else why it could not (one line)."""
        from torchpar_top.probes.agent.cuda_capture import CaptureGuard, graph_classes

        capture = CaptureGuard()
        try:
            cupti = self.load_cupti()
            capture.install(graph_classes(self.cuda), self.cuda.current_stream)
            monitor = CuptiMonitor(
                cupti,
                add=self.agent.add,
                log=self.agent.log,
                syncpoints=self.syncpoints,
                capture=capture,
                rank=self.agent.rank or 0,
                uuids=self._cuda_uuids,
                on_lost=self._cupti_lost,
                duty=DEFAULT_DUTY if self.cupti_duty is None else self.cupti_duty,
            )
            monitor.start()
        except CuptiUnavailable as exc:
            capture.uninstall()
            return str(exc)
        except Exception as exc:
            capture.uninstall()
            return f"CUPTI: {type(exc).__name__}: {exc}"
        self.cupti = monitor
        self.agent.cuda = monitor  # closed with the agent; its uuids go in the samples
        self.agent.sample_parts.insert(0, monitor.sample_part)
        self.syncpoints.from_runtime = True
        refused = f" (not recorded: {', '.join(monitor.refused)})" if monitor.refused else ""
        self.agent.log(
            "CUDA in use: launch queues per stream from CUPTI activity records, in kernels, "
            f"no Python per op; sync points from CUDA's synchronising calls{refused}"
        )
        return None

    def _cupti_lost(self, reason: str) -> None:
        """CUPTI could not be had again after standing aside: the launch counter takes over."""
        monitor, self.cupti = self.cupti, None
        self.syncpoints.from_runtime = False
        if monitor is not None and self.agent.cuda is monitor:
            self.agent.cuda = None
            if monitor.sample_part in self.agent.sample_parts:
                self.agent.sample_parts.remove(monitor.sample_part)
        self.agent.log(
            f"CUDA launch queues: counting torch calls with a function mode from now on ({reason})"
        )
        if self.counting is not None:
            self.counting.run_soon(self._watch_with_counter)

    def _cuda_uuids(self) -> list[str]:
        if self._uuids is None:
            props = self.cuda.get_device_properties
            self._uuids = [f"GPU-{props(i).uuid}" for i in range(self.cuda.device_count())]
        return self._uuids

    # -- sampling ------------------------------------------------------------------------------------

    def _data_wait(self, t0: float, t1: float) -> dict[str, Any]:
        """Sample part: the DataLoaders' counters brought up to date, and the frontend's data wait."""
        self.data.refresh(t0, t1)
        window = max(t1 - t0, 1e-9)
        return {"data_wait": min(1.0, busy_time(self.data.wait.intervals(t0, t1)) / window)}

    def _steps_part(self, t0: float, t1: float) -> dict[str, Any]:
        """Sample part: the steps so far and, every :data:`MEMORY_EVERY`, the process's memory (a sample
        without it leaves torchpar-top's last reading standing)."""
        part: dict[str, Any] = {"steps": self.steps.take(final=self._final)}
        late = self.steps.late_source
        source = self.steps.source
        if late is not None and source is not None and not self._late_source_said:
            self._late_source_said = True
            self.agent.log(
                f"steps: counted from {source.words} from now on; the first {late[1]} steps were "
                f"{late[0].words}, counted before the first of the {source.words} came (the count goes on)"
            )
        if self.memory and t1 - self._memory_t >= MEMORY_EVERY:
            self._memory_t = t1
            part["memory"] = read_memory(self.cuda if cuda_in_use() else None)
        return part

    def _op_coverage(self, t0: float, t1: float) -> dict[str, Any]:
        """Sample part: the share of the window the op counter was on (ops are counted in slices)."""
        if self.counting is None or self.every_op:
            return {}
        covered = self.counting.covered_until(t1)
        share = (covered - self._last_covered) / max(t1 - t0, 1e-9)
        self._last_covered = covered
        return {"op_coverage": min(1.0, max(0.0, share))}

    def _after_sample(self) -> None:
        """After each sample: sync points out, the CPU SYNC note once, frontend work queued for later."""
        self.flush_syncpoints()
        if self.agent.sync.enabled and not self._cpu_sync_noted and not cuda_in_use():
            self._cpu_sync_noted = True
            self.agent.log(CPU_SYNC_NOTE)
        if self.counting is not None:  # things that must happen on the frontend thread, soon
            if not self._cuda_watched and not self._cuda_asked and cuda_in_use():
                self._cuda_asked = True  # once: watch_cuda_streams runs at the frontend's next switch point
                self.counting.run_soon(self.watch_cuda_streams)
            if self.agent.threads_pending:  # no optimizer step applies it
                self.counting.run_soon(self.agent.apply_threads)
        if self.switch_signal is not None:
            self.switch_signal.poke()

    def flush_syncpoints(self) -> None:
        """Send the ``syncpoints`` message if a count changed since the last one."""
        with self._flush_lock:
            sites = self.syncpoints.take_changed()
            if sites is not None:
                counting = self.counting
                exact = self.every_op or counting is None or self.syncpoints.from_runtime
                covered = None if exact or counting is None else counting.covered_until()
                self.agent.send(SyncPoints(sites=sites, covered=covered))

    # -- lifecycle -----------------------------------------------------------------------------------

    def finish(self) -> None:
        """The user's code returned or raised: last sync points out, executors closed."""
        with contextlib.suppress(OSError):
            self.flush_syncpoints()
        self.agent.close()

    def _on_stop(self) -> None:
        """A stop (or torchpar-top gone): raise KeyboardInterrupt in the user's code at a safe point.

        Safe points are the frontend's next op or optimizer step outside a DataLoader fetch (an
        interrupted fetch makes the workers print tracebacks). A frontend stuck elsewhere (one long op,
        a data wait) is interrupted anyway after :data:`STOP_SAFE_WAIT`; the agent ends the process
        group if even that does not return.
        """
        first, self.stop_requested = not self.stop_requested, True
        if first and self.interruptible:
            if self.counting is not None:
                self.counting.run_soon(self._safe_stop)
            timer = threading.Timer(STOP_SAFE_WAIT, self._interrupt_anyway)
            timer.daemon = True
            timer.start()

    def _safe_stop(self) -> None:
        """At a safe point on the frontend thread: raise the stop into the user's code (once)."""
        if not (self.interruptible and self.stop_requested):
            return
        if self.data.inside and self.counting is not None:
            self.counting.run_soon(self._safe_stop)  # at the next switch point after the fetch
            return
        self.interruptible = False
        raise KeyboardInterrupt("stopped by torchpar-top")

    def _interrupt_anyway(self) -> None:
        """No safe point came in time: interrupt the main thread wherever it is."""
        if self.interruptible:
            self.interruptible = False
            _thread.interrupt_main()
