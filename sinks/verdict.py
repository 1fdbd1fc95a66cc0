"""The end-of-run verdict: what bounded the run, the numbers behind it, and the next thing to try.

A :class:`RunTally` is fed every snapshot while a run (or a replay) goes (:class:`TallyWatch` does so
in the thread that builds them, or from a thread of its own, whatever draws the screen) and keeps
time-weighted sums of the figures the store already derives per window: the frontend's busy and wait
shares, the DataLoader wait of the :class:`~torchpar_top.contract.snapshot.DataVerdict`, each
executor's fill and blocked share, the run-queue wait behind
:attr:`~torchpar_top.contract.snapshot.Snapshot.starved`, the stack's wait classification, GPU use.
Throughput comes from the store's scoreboard (every child window, weighted by
its length), not from the samples taken here. :meth:`RunTally.report` turns the sums into a plain
dict (``--report FILE.json``) with a :func:`classify`-ied verdict; :func:`render` makes the few lines
printed when the run ends; :func:`compare` sets two reports side by side for CI.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchpar_top.contract.snapshot import Snapshot
from torchpar_top.contract.units import inert, seconds
from torchpar_top.contract.vocab import (
    CHILD_ENDED,
    PHASES,
    ChildState,
    DataBound,
    ExecutorKind,
    ThroughputUnit,
    WaitKind,
    Word,
)
from torchpar_top.model import derive
from torchpar_top.model.store import ENDED_BY, KILLED_BY

#: The version of the report's JSON layout (``compare`` refuses another).
REPORT_VERSION = 1

# -- thresholds (shares of the observed run time unless said otherwise) --------------------------------

#: Input-bound: the DataLoader wait above the store's own per-window threshold, over the whole run
#: (the same meaning as the live verdict, :data:`derive.INPUT_BOUND_WAIT`, not a second one).
INPUT_BOUND_WAIT = derive.INPUT_BOUND_WAIT
#: Sync-bound: the frontend waited in a synchronize (or a stack caught it in ``.item()``/``synchronize``)
#: more than this share of the run. Same bar as input-bound: a third of the time lost to one kind of wait
#: is what a user would want to remove first; less is noise on a loaded machine.
SYNC_BOUND_WAIT = 0.3
#: GPU/backend-bound: launches blocked on a full queue more than this share of the run (the frontend
#: could launch more, the device cannot take it), ...
BLOCKED_BOUND = 0.3
#: ... or the fullest bounded queue at this share of its capacity on average (a full queue blocks the
#: next launch; 0.9 leaves room for the sample landing just after a drain).
QUEUE_FULL = 0.9
#: Launch-bound: the frontend on a core more than this share of the run ...
FRONTEND_BUSY = 0.7
#: ... while the device's queue held less than this share of its capacity on average (near 0: the
#: device waits for launches). Also the bar for an eager-CPU loop, whose "device" is the frontend itself.
QUEUE_NEAR_EMPTY = 0.05
#: CPU-starved: the threads were starved (:func:`derive.starved`: run-queue wait above half a core and a
#: fifth of their demand) more than this share of the run.
STARVED_TIME = 0.3

#: The longest gap (seconds) between two fed snapshots still counted as run time: a longer one is the
#: monitor being stalled or paused, not the workload running.
MAX_GAP = 5.0
#: Sync-point sites kept in the report.
TOP_SITES = 5

#: The stack's wait kinds that mean "waiting for the device" (:attr:`WaitKind.for_device`).
SYNC_WAITS = frozenset(k for k in WaitKind if k.for_device)
#: Executors whose depth is a device's launch queue (an eager CPU runs on the frontend; a DataLoader
#: is the input side).
ASYNC_KINDS = frozenset({ExecutorKind.CUDA_STREAM, ExecutorKind.EMULATED_STREAM, ExecutorKind.INTEROP_POOL})


class Bound(Word):
    """What bounded a run."""

    INPUT = "input-bound"
    LAUNCH = "launch-bound"
    BACKEND = "GPU/backend-bound"
    SYNC = "sync-bound"
    STARVED = "CPU-starved"
    COMPUTE_CPU = "compute-bound (CPU)"
    STRAGGLER = "straggler"
    STALLED = "stalled"
    FAILED = "failed"
    NO_WORK = "no work seen"
    NONE = "no clear bottleneck"


#: One line of advice per verdict: the next thing to try.
ADVICE: Mapping[Bound, str] = {
    Bound.INPUT: "feed it faster: more DataLoader workers (num_workers), pin_memory=True, a larger "
    "prefetch_factor, or cheaper __getitem__ (decode/augment once, cache)",
    Bound.LAUNCH: "launch less per step: larger batches, fuse small ops (torch.compile), CUDA graphs, "
    "fewer Python-side ops between launches",
    Bound.BACKEND: "the device is the limit: cut its work (mixed precision, a smaller model or batch) or "
    "add devices; on an eager CPU, more intra-op threads (torch.set_num_threads)",
    Bound.SYNC: "remove the waits: drop .item()/.cpu()/print(tensor) from the step (log every N steps), "
    "no torch.cuda.synchronize() in the loop; the sync-point lines are below",
    Bound.STARVED: "give it cores: fewer threads than cores (torch.set_num_threads, num_workers), or stop "
    "what else runs on the machine (the cores panel shows who)",
    Bound.COMPUTE_CPU: "the CPU's compute is the limit: more intra-op threads (torch.set_num_threads, up "
    "to the cores), less work per step (a smaller model or batch, torch.compile)",
    Bound.STRAGGLER: "even the ranks out: find why that rank's phase is longer (its data, its share of the "
    "batch, a slower core or device, another process on its cores); the others wait for it every step",
    Bound.STALLED: "look at what the rank that does not wait for its peers is doing (its line above, or "
    "py-spy dump --pid); a collective that never matched shows in torch's flight recorder "
    "(TORCH_FR_BUFFER_SIZE); a long checkpoint or evaluation at the end reads so too",
    Bound.FAILED: "fix what ended it first: its traceback is in the log (stderr; a torchrun rank's error "
    "in its note), then run it again",
    Bound.NO_WORK: "nothing to judge yet: its output (in the log) says whether it reached its loop; run it "
    "longer (--duration), or with the work it is meant to do",
    Bound.NONE: "nothing dominates: profile a step (key h, torch.profiler) to see where its time goes",
}
#: The advice for a workload a signal ended (no traceback to read).
KILLED_ADVICE = (
    "find what sent the signal: a SIGKILL (signal 9) is often the kernel's out-of-memory killer (dmesg; "
    "the resident set below), a SIGTERM a scheduler's time limit"
)


@dataclass
class _Mean:
    """A time-weighted mean of a figure that may be missing in some snapshots."""

    total: float = 0.0
    weight: float = 0.0

    def add(self, value: float | None, dt: float) -> None:
        if value is not None and math.isfinite(value):
            self.total += value * dt
            self.weight += dt

    @property
    def value(self) -> float | None:
        return self.total / self.weight if self.weight else None


@dataclass
class _GpuTally:
    label: str
    name: str
    util: _Mean = field(default_factory=_Mean)
    mem_peak: int | None = None
    power: _Mean = field(default_factory=_Mean)


def _last(series: tuple[float, ...]) -> float | None:
    return series[-1] if series else None


class RunTally:
    """Sums over a whole run, fed one snapshot at a time (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self._reset()

    def _reset(self) -> None:
        self.seconds = 0.0
        self.snapshots = 0
        self._run_key: tuple[Any, ...] | None = None
        self._prev_t: float | None = None
        self._last: Snapshot | None = None
        self.frontend_busy = _Mean()
        self.frontend_wait = _Mean()
        self.frontend_core_wait = _Mean()
        self.data_wait = _Mean()
        self.blocked = _Mean()
        self.fill = _Mean()
        self.depth = _Mean()
        self.sync_wait = _Mean()
        self.stack_sync = _Mean()
        self.throughput = _Mean()
        self.run_queue_wait = _Mean()
        self.cpu_load = _Mean()
        self.starved_time = 0.0
        self.has_async = False
        self.has_eager = False
        self.has_dataloader = False
        self.has_cuda = False
        self._gpus: dict[int, _GpuTally] = {}

    def feed(self, snap: Snapshot) -> None:
        """Add one snapshot, weighted by the time since the previous one (trace time in a replay)."""
        with self._lock:
            key = (snap.target, snap.child.pid, None if snap.replay is None else snap.replay.path)
            if self._run_key is not None and key != self._run_key and snap.child.pid is not None:
                started = self.started
                self._reset()  # a restart or another experiment: a new run
                self.started = started
            self._run_key = key
            self._last = snap
            running = snap.child.state in (ChildState.RUNNING, ChildState.ATTACHED, ChildState.FINISHED)
            if snap.replay is not None:
                # Trace time, each stretch of the trace once: played again (r) or seeked back, the frames
                # already counted are not counted again; a seek forward skips the trace it jumped over.
                now, prev = snap.replay.position, self._prev_t
                self._prev_t = max(now, prev if prev is not None else now)
                longest = 10 * snap.replay.frame  # as for a live run: ten frames, not a seek
            else:
                # The agent's clock where there is one: time counts only as its samples come, so a
                # workload that stops sampling (being stopped at the end, hung) adds no stale time.
                now, prev = (snap.sample_t if snap.sample_t is not None else snap.t), self._prev_t
                self._prev_t = now
                longest = max(MAX_GAP, 10 * snap.interval)
            if prev is None or snap.paused or not running:
                return
            dt = now - prev
            if not 0 < dt <= longest:
                return
            self._add(snap, dt)

    def _add(self, snap: Snapshot, dt: float) -> None:
        self.seconds += dt
        self.snapshots += 1
        busy, wait = _last(snap.frontend_busy), _last(snap.frontend_wait)
        self.frontend_busy.add(busy, dt)
        self.frontend_wait.add(wait, dt)
        self.frontend_core_wait.add(_last(snap.frontend_core_wait), dt)
        data = snap.data_verdict.wait if snap.data_verdict is not None else None
        self.data_wait.add(data, dt)  # over the time a DataLoader fed the frontend (the DataVerdict's)
        bounded = [e for e in snap.executors if e.kind in ASYNC_KINDS]
        self.has_async = self.has_async or bool(bounded)
        self.has_eager = self.has_eager or any(e.kind == ExecutorKind.EAGER for e in snap.executors)
        self.has_cuda = (
            self.has_cuda
            or bool(snap.gpus)
            or any(e.kind == ExecutorKind.CUDA_STREAM for e in snap.executors)
        )
        self.has_dataloader = self.has_dataloader or any(
            e.kind == ExecutorKind.DATALOADER for e in snap.executors
        )
        blocked = [e.blocked for e in bounded if e.blocked is not None]
        block = max(blocked) if blocked else None
        self.blocked.add(block, dt)
        fills = [e.value / e.capacity for e in bounded if e.capacity]
        self.fill.add(max(fills) if fills else None, dt)
        if snap.depth is not None:  # a replay's (no scoreboard): the queues summed, as in the header
            self.depth.add(snap.depth.value, dt)
        if wait is not None:  # frontend wait = full queue + synchronize + data (the agent's one recorder)
            self.sync_wait.add(max(0.0, wait - (data or 0.0) - (block or 0.0)), dt)
        if snap.stack is not None:
            self.stack_sync.add(1.0 if snap.stack.waiting_in in SYNC_WAITS else 0.0, dt)
        self.throughput.add(snap.throughput, dt)
        if snap.thread_groups:
            self.run_queue_wait.add(sum(g.wait_percent for g in snap.thread_groups) / 100.0, dt)
        if snap.starved is not None:
            self.starved_time += dt
        if snap.core_load is not None:
            self.cpu_load.add(snap.core_load / 100.0, dt)
        for g in snap.gpus:
            tally = self._gpus.setdefault(g.index, _GpuTally(g.label, g.name))
            tally.label = g.label
            tally.util.add(None if g.util_percent is None else g.util_percent / 100.0, dt)
            tally.power.add(g.power_w, dt)
            if g.mem_used is not None:
                tally.mem_peak = max(tally.mem_peak or 0, g.mem_used)

    # -- the report ------------------------------------------------------------------------------

    def report(self, final: Snapshot | None = None, ended_by: str = "", tool: str = "") -> dict[str, Any]:
        """The whole run as a plain dict (the ``--report`` file), verdict included."""
        with self._lock:
            snap = final or self._last
            figures = self._figures(snap)
            stalled = _stalled(snap, self.seconds)
            verdict = classify(
                {**figures, "straggler": _straggler(snap), "stalled": stalled, "failed": _failed(snap)}
            )
            modes = {}
            if snap is not None:
                modes = {
                    m.mode.value: {
                        "seconds": round(m.seconds, 3),
                        "throughput": _round(m.throughput, 4),
                        "mean_depth": _round(m.mean_depth, 2),
                        "frontend_wait": _round(m.frontend_wait, 4),
                    }
                    for m in snap.scoreboard
                    if m.seconds > 0
                }
            sites = sorted(snap.syncpoints, key=lambda s: (-s.count, s.rank or 0, s.where)) if snap else []
            return {
                "report_version": REPORT_VERSION,
                "tool": tool,
                "target": snap.target if snap else "",
                "experiment": snap.experiment if snap else "",
                "description": snap.description if snap else "",
                "started": self.started.isoformat(timespec="seconds"),
                "ended": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "ended_by": ended_by,
                "exit_code": snap.child.exit_code if snap else None,
                "seconds": round(self.seconds, 3),
                "seconds_are": "wall time"
                if snap is None or snap.replay is None
                else "recorded wall time"
                if snap.replay.recorded
                else "trace time",
                "snapshots": self.snapshots,
                "figures": figures,
                "by_mode": modes,
                "gpus": [
                    {
                        "gpu": i,
                        "label": g.label,
                        "name": g.name,
                        "util": _round(g.util.value, 4),
                        "memory_peak_bytes": g.mem_peak,
                        "power_w": _round(g.power.value, 1),
                    }
                    for i, g in sorted(self._gpus.items())
                ],
                "sync_points": [
                    {"where": s.where, "call": s.call, "count": s.count, "rank": s.rank, "sampled": s.sampled}
                    for s in sites[:TOP_SITES]
                ],
                "ranks": _ranks(snap),
                "straggler": _straggler(snap),
                "memory": _memory(snap),
                "verdict": verdict,
            }

    def _figures(self, snap: Snapshot | None) -> dict[str, Any]:
        unit = snap.throughput_unit if snap is not None else ""
        # Throughput and mean depth: the store's scoreboard (each steady child window, by its length;
        # ``Snapshot.steady``) where it ran; else (a replay, which has no scoreboard) the means of the
        # snapshots' figures over the time fed here.
        steady = snap.steady if snap is not None else None
        throughput = steady.throughput if steady is not None else None
        if throughput is not None and steady is not None:
            done: float | None = steady.done
        else:
            throughput = self.throughput.value
            done = None if throughput is None else throughput * self.throughput.weight
        depth = steady.mean_depth if steady is not None else None
        if depth is None:
            depth = self.depth.value
        steps = snap.steps if snap is not None else None
        return {
            "throughput": _round(throughput, 4),
            "throughput_unit": unit,
            "done": _round(done, 1),
            "steady_seconds": _round(steady.seconds, 3) if steady is not None and steady.seconds else None,
            "steps": steps.count if steps is not None else None,
            "steps_per_s": _round(throughput, 4) if unit == ThroughputUnit.STEPS else None,
            "data_wait": _round(self.data_wait.value, 4),
            "frontend_busy": _round(self.frontend_busy.value, 4),
            "frontend_wait": _round(self.frontend_wait.value, 4),
            "frontend_core_wait": _round(self.frontend_core_wait.value, 4),
            "sync_wait": _round(self.sync_wait.value, 4),
            "stack_in_sync": _round(self.stack_sync.value, 4),
            "blocked": _round(self.blocked.value, 4),
            "queue_fill": _round(self.fill.value, 4),
            "queue_depth": _round(depth, 2),
            "starved_share": _round(self.starved_time / self.seconds, 4) if self.seconds else None,
            "run_queue_wait_cores": _round(self.run_queue_wait.value, 3),
            "cpu_load": _round(self.cpu_load.value, 4),
            "device_queue": self.has_async,
            "eager_cpu": self.has_eager and not self.has_async,
            "dataloader": self.has_dataloader,
            "cuda": self.has_cuda,
            **_step_figures(snap),
        }


def _phases(phases: Any) -> dict[str, float] | None:
    return None if phases is None else {p: round(getattr(phases, p), 6) for p in PHASES}


def _step_figures(snap: Snapshot | None) -> dict[str, Any]:
    """``step_seconds`` and ``phases`` (seconds per step over the run, the primary rank's), and the
    straggler's share of the step (what the others wait for it), for :func:`classify`."""
    steps = snap.steps if snap is not None else None
    out: dict[str, Any] = {
        "step_seconds": None if steps is None else _round(steps.run_seconds, 6),
        "phases": None if steps is None else _phases(steps.run_phases),
        "straggler_share": None,
    }
    if snap is not None and snap.straggler is not None and steps is not None and steps.run_seconds:
        out["straggler_share"] = round(min(1.0, snap.straggler.costs / steps.run_seconds), 4)
    return out


def _ranks(snap: Snapshot | None) -> list[dict[str, Any]]:
    """Each agent at the end: its global rank, where it ran, its state and last throughput, and its
    steps over the run (steps/s as the inverse of its mean step, the mean step, its phases)."""
    return [
        {
            "rank": r.rank,
            "local_rank": r.local_rank,
            "node": r.node_rank,
            "hostname": r.hostname,
            "state": r.state.value,
            "exit_code": r.exit_code,
            "throughput": _round(r.throughput, 4),
            "steps": r.steps.count if r.steps else None,
            "steps_per_s": _round(1 / r.steps.run_seconds, 4) if r.steps and r.steps.run_seconds else None,
            "step_seconds": _round(r.steps.run_seconds, 6) if r.steps else None,
            "phases": _phases(r.steps.run_phases) if r.steps else None,
            "stalled": _round(r.steps.stalled, 3) if r.steps else None,
            "at": r.at,
        }
        for r in (snap.ranks if snap is not None else ())
    ]


def _done(f: Mapping[str, Any]) -> str:
    """`` (22 steps in 133 s of steady running; 24 in all)``: what the rate is over (the scoreboard's
    steady windows: the start, mode switches, a SYNC switch's drain and timing rounds left out), and the
    steps counted over the whole run; `` (N ops in all)`` in a replay (its whole time)."""
    if f["done"] is None:
        return ""
    what = f["throughput_unit"].split("/")[0]
    steady = f.get("steady_seconds")
    text = f"{f['done']:g} {what}" + (f" in {seconds(steady)} of steady running" if steady else " in all")
    total = f.get("steps")
    if steady and total is not None and f["throughput_unit"] == ThroughputUnit.STEPS:
        text += f"; {total:g} in all"
    return f" ({text})"


def _contended(straggler: Mapping[str, Any]) -> str:
    """``; it waited for a core 0.45 ms a step more than they did: CPU contention, not its code`` where
    the straggler's extra wait for a core accounts for its extra time; '' otherwise."""
    wait = straggler.get("core_wait")
    if not wait:
        return ""
    return (
        f"; it waited for a core {1000 * wait:.2f} ms a step more than they did: CPU contention "
        "(another process or too many threads on its cores), not its code"
    )


def _straggler(snap: Snapshot | None) -> dict[str, Any] | None:
    st = snap.straggler if snap is not None else None
    if st is None:
        return None
    return {
        "rank": st.rank,
        "cause": st.cause,
        "ratio": _round(st.ratio, 3),
        "costs": round(st.costs, 6),
        "core_wait": _round(st.core_wait, 6),
    }


def _memory(snap: Snapshot | None) -> dict[str, Any]:
    """The fastest resident-set growth of any rank (bytes per minute, a least-squares slope over the
    run), and each device's peak allocated bytes."""
    mems = snap.memory if snap is not None else ()
    growth = [m.rss_growth_bytes_per_min for m in mems if m.rss_growth_bytes_per_min is not None]
    fastest: float | None = max(growth, key=math.fabs) if growth else None
    return {
        "rss_growth_bytes_per_min": None if fastest is None else round(fastest),
        "ranks": [
            {
                "rank": m.rank,
                "rss_bytes": m.rss_bytes,
                "rss_growth_bytes_per_min": _round(m.rss_growth_bytes_per_min, 0),
            }
            for m in mems
        ],
        "devices": [
            {"rank": m.rank, "device": d.device, "peak_bytes": d.peak_bytes} for m in mems for d in m.devices
        ],
    }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def classify(f: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict from a report's figures: each class whose figure passes its threshold is a candidate,
    scored by the share of the run it accounts for; the highest wins, the others are listed as ``also``."""
    found: list[tuple[float | None, Bound, str]] = []  # share None: failed (a share of nothing)
    data = f.get("data_wait")
    step, phases = f.get("step_seconds"), f.get("phases")
    measured = bool(step and isinstance(phases, Mapping))
    phases = phases if isinstance(phases, Mapping) else {}
    if measured:  # the step's own phases: time in a main-process DataLoader is data, not device
        data = phases.get("data", 0.0) / step
    verdict = derive.data_verdict(data, True)
    if data is not None and verdict is not None and verdict.bound == DataBound.INPUT:
        found.append(
            (
                data,
                Bound.INPUT,
                f"the steps waited for their next batch {_pct(data)} of their time "
                f"(input-bound above {_pct(INPUT_BOUND_WAIT)})"
                if measured
                else f"the frontend waited for its next batch {_pct(data)} of the time a "
                f"DataLoader fed it "
                f"(input-bound above {_pct(INPUT_BOUND_WAIT)})",
            )
        )
    sync = max(f.get("sync_wait") or 0.0, f.get("stack_in_sync") or 0.0)
    if measured:
        sync = phases.get("sync", 0.0) / step
    if sync > SYNC_BOUND_WAIT:
        found.append(
            (
                sync,
                Bound.SYNC,
                f"the frontend waited for the device (synchronize, .item()) "
                f"{_pct(sync)} of the run (above {_pct(SYNC_BOUND_WAIT)})",
            )
        )
    blocked, fill, busy = f.get("blocked"), f.get("queue_fill"), f.get("frontend_busy")
    # no GPU on the machine: the device is the CPU (its threads, emulated streams): never say "GPU"
    backend = Bound.BACKEND if f.get("cuda", True) else Bound.COMPUTE_CPU
    if blocked is not None and blocked > BLOCKED_BOUND:
        found.append(
            (
                blocked,
                backend,
                f"launches blocked on a full queue {_pct(blocked)} of the run (above {_pct(BLOCKED_BOUND)})",
            )
        )
    elif fill is not None and fill > QUEUE_FULL:
        found.append(
            (
                fill,
                backend,
                f"the device's queue stayed {_pct(fill)} full on average (above {_pct(QUEUE_FULL)})",
            )
        )
    elif f.get("eager_cpu") and busy is not None and busy > FRONTEND_BUSY:
        found.append(
            (
                busy,
                Bound.COMPUTE_CPU,
                f"eager CPU ops run on the frontend thread, busy {_pct(busy)} of "
                f"the run (above {_pct(FRONTEND_BUSY)}): the CPU is the device",
            )
        )
    if (
        f.get("device_queue")
        and busy is not None
        and busy > FRONTEND_BUSY
        and fill is not None
        and fill < QUEUE_NEAR_EMPTY
    ):
        found.append(
            (
                busy,
                Bound.LAUNCH,
                f"the frontend was busy {_pct(busy)} of the run (above "
                f"{_pct(FRONTEND_BUSY)}) while the device's queue stayed "
                f"{_pct(fill)} full (below {_pct(QUEUE_NEAR_EMPTY)})",
            )
        )
    starved = f.get("starved_share")
    if starved is not None and starved > STARVED_TIME:
        cores = f.get("run_queue_wait_cores")
        found.append(
            (
                starved,
                Bound.STARVED,
                f"threads waited for a core (starved) {_pct(starved)} of the "
                f"run, {cores or 0:.2f} cores' worth of run-queue wait on "
                f"average (above {_pct(STARVED_TIME)})",
            )
        )
    straggler, share = f.get("straggler"), f.get("straggler_share")
    if isinstance(straggler, Mapping) and share is not None:
        ratio = straggler.get("ratio")
        times = f"{ratio:.1f}× the others'" if ratio is not None else "longer than the others' (none there)"
        found.append(
            (
                share,
                Bound.STRAGGLER,
                f"rank {straggler['rank']}'s {straggler['cause']} is {times}: the other ranks wait "
                f"{1000 * straggler['costs']:.1f} ms per step for it ({_pct(share)} of the step)"
                + _contended(straggler),
            )
        )
    found.sort(key=lambda x: -(x[0] or 0.0))
    stalled = f.get("stalled")
    if isinstance(stalled, Mapping):  # the run ended hung: whatever else was true before, that first
        where = "; ".join(_stalled_at(r) for r in stalled["ranks"])
        found.insert(
            0,
            (
                stalled["share"],
                Bound.STALLED,
                f"no step for {seconds(stalled['seconds'])} when the run ended ({_pct(stalled['share'])} "
                f"of it): {where}",
            ),
        )
    failed = f.get("failed")
    if isinstance(failed, str) and failed:  # it ended on its own, in error: that before any bottleneck
        found.insert(1 if isinstance(stalled, Mapping) else 0, (None, Bound.FAILED, failed))
    if f.get("steps") is None and not f.get("done"):  # nothing ran that a class could judge: set-up
        busy = f.get("frontend_busy")
        why = "no training step and no torch op were seen in the run"
        if busy:
            why += f" (its frontend was busy {_pct(busy)} of it: importing, setting up)"
        # what the frontend's busy time or the CPU would say is about the set-up, not a loop
        found = [x for x in found if x[1] == Bound.FAILED] + [(None, Bound.NO_WORK, why)]
    if not found:
        return {
            "class": Bound.NONE.value,
            "why": "no figure passed its threshold",
            "share": None,
            "next": ADVICE[Bound.NONE],
            "also": [],
        }
    share, bound, why = found[0]
    return {
        "class": bound.value,
        "why": why,
        "share": None if share is None else round(share, 4),
        "next": KILLED_ADVICE if bound == Bound.FAILED and _KILLED.search(why) else ADVICE[bound],
        "also": [{"class": b.value, "why": w} for _, b, w in found[1:]],
    }


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


# -- the lines printed at the end ------------------------------------------------------------------


def render(report: Mapping[str, Any], path: str | None = None) -> str:
    """The short report printed when a run ends."""
    f, v = report["figures"], report["verdict"]
    lines = [
        f"torchpar-top: {report['target'] or report['experiment']}: {report['seconds']:.1f} s observed"
        f" ({report['seconds_are']}){', ' + report['ended_by'] if report['ended_by'] else ''}"
    ]
    lines.append(f"  verdict: {v['class']}: {v['why']}")
    lines.append(f"  next:    {v['next']}")
    for other in v["also"]:
        lines.append(f"  also:    {other['class']}: {other['why']}")
    if f["throughput"] is not None:
        lines.append(f"  throughput: {f['throughput']:.4g} {f['throughput_unit']}{_done(f)}")
    parts = [
        f"{name} {_pct(f[key])}"
        for name, key in (
            ("busy", "frontend_busy"),
            ("waiting", "frontend_wait"),
            ("in sync", "sync_wait"),
            ("blocked on a full queue", "blocked"),
        )
        if f[key] is not None
    ]
    if parts:
        lines.append("  frontend: " + ", ".join(parts))
    if f.get("step_seconds") and f.get("phases"):
        step, ph = f["step_seconds"], f["phases"]
        parts = [f"{p} {seconds(ph[p])}" for p in PHASES if ph.get(p)]
        lines.append(f"  step: {seconds(step)} ({', '.join(parts)})")
    straggler = report.get("straggler")
    if straggler:
        lines.append(
            f"  straggler: rank {straggler['rank']} ({straggler['cause']}), the others wait "
            f"{seconds(straggler['costs'])} per step" + _contended(straggler)
        )
    growth = (report.get("memory") or {}).get("rss_growth_bytes_per_min")
    if growth is not None:
        lines.append(
            f"  memory: resident set {'+' if growth >= 0 else ''}{growth / 2**20:.1f} MiB/min over the "
            "run's later half"
        )
    if f["data_wait"] is not None:
        lines.append(
            f"  data: the frontend waited for its next batch {_pct(f['data_wait'])} of the time a "
            "DataLoader fed it"
        )
    if f["run_queue_wait_cores"] is not None:
        lines.append(
            f"  cpu: load {_pct(f['cpu_load'] or 0)} of all cores, run-queue wait "
            f"{f['run_queue_wait_cores']:.2f} cores, starved {_pct(f['starved_share'] or 0)} of the run"
        )
    for g in report["gpus"]:
        if g["util"] is not None:
            lines.append(f"  {g['label']} ({g['name']}): kernel-active {_pct(g['util'])}")
    if report["sync_points"]:
        sites = ", ".join(f"{s['where']} {s['call']} ×{s['count']}" for s in report["sync_points"][:3])
        lines.append(f"  sync points: {sites}")
    if path:
        lines.append(f"  report: {path}")
    # the workload's own text (its target, an exception's line, a file's name) reaches the terminal inert
    return "\n".join(map(inert, lines)) + "\n"


def write(report: Mapping[str, Any], path: str) -> None:
    """Write the report as JSON (indented: a file people read and diff)."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
        fh.write("\n")


# -- compare ----------------------------------------------------------------------------------------


class ReportError(ValueError):
    """A file that is not a report ``compare`` can read (the message is one line)."""


class _NotFinite(ValueError):
    """A number in a report that is NaN or infinite (its text is the message)."""


def _not_finite(text: str) -> float:
    raise _NotFinite(text)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def load(path: str) -> dict[str, Any]:
    """A report written by ``--report``; :class:`ReportError` with a one-line reason otherwise."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh, parse_constant=_not_finite, parse_float=_finite)
    except _NotFinite as exc:  # json reads NaN, Infinity and 1e999 by default: a gate never passes on them
        raise ReportError(
            f"{path}: a figure that is not a finite number ({exc}): not a report to compare"
        ) from None
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not a report (not JSON: {exc.msg} at line {exc.lineno})") from None
    if (
        not isinstance(data, dict)
        or "report_version" not in data
        or not isinstance(data.get("figures"), dict)
    ):
        raise ReportError(f"{path}: not a torchpar-top report (no report_version/figures)")
    if data["report_version"] != REPORT_VERSION:
        raise ReportError(
            f"{path}: report version {data['report_version']!r}, this torchpar-top reads {REPORT_VERSION}"
        )
    if not isinstance(data.get("verdict"), dict):
        raise ReportError(f"{path}: not a torchpar-top report (no verdict)")
    return data


#: Figures ``compare --metric`` accepts, with their unit (throughput's is the report's own).
METRICS = (
    "steps_per_s",
    "throughput",
    "data_wait",
    "frontend_busy",
    "frontend_wait",
    "sync_wait",
    "blocked",
    "queue_fill",
    "queue_depth",
    "starved_share",
    "run_queue_wait_cores",
    "cpu_load",
    "step_seconds",
    *(f"phases.{p}" for p in PHASES),
)
#: Figures where a rise is the regression (times per step), not a fall.
LOWER_IS_BETTER = frozenset(m for m in METRICS if m == "step_seconds" or m.startswith("phases."))


def _figure(figures: Mapping[str, Any], metric: str) -> Any:
    """A figure by name; ``phases.forward`` is the forward phase's seconds per step."""
    if metric.startswith("phases."):
        phases = figures.get("phases")
        return phases.get(metric.partition(".")[2]) if isinstance(phases, Mapping) else None
    return figures.get(metric)


def _unit(report: Mapping[str, Any], metric: str) -> str:
    if metric == "throughput":
        return str(report["figures"].get("throughput_unit", ""))
    if metric in LOWER_IS_BETTER:
        return "s/step"
    return (
        "steps/s"
        if metric == "steps_per_s"
        else "cores"
        if metric.endswith("_cores")
        else "launches"
        if metric == "queue_depth"
        else "share"
    )


@dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare`."""

    text: str
    metric: str
    change: float | None
    """(B - A) / A of the chosen figure."""
    regressed: bool


def compare(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    tolerance: float,
    metric: str | None = None,
    names: tuple[str, str] = ("A", "B"),
) -> Comparison:
    """Two reports side by side; ``regressed`` when the chosen figure fell by more than ``tolerance``
    (a share of A's value), or for a time per step (``step_seconds``, ``phases.forward``...) rose by more
    than it. The default figure is steps/s where both runs counted steps, else throughput.
    :class:`ReportError` when the figure is missing or its units differ."""
    fa, fb = a["figures"], b["figures"]
    if metric is None:
        metric = (
            "steps_per_s"
            if fa.get("steps_per_s") is not None and fb.get("steps_per_s") is not None
            else "throughput"
        )
    if metric not in METRICS:
        raise ReportError(f"unknown figure {metric!r}; one of: {', '.join(METRICS)}")
    ua, ub = _unit(a, metric), _unit(b, metric)
    if ua != ub:
        raise ReportError(f"{metric} is in different units: {ua!r} in {names[0]}, {ub!r} in {names[1]}")
    va, vb = _figure(fa, metric), _figure(fb, metric)
    for value, name in ((va, names[0]), (vb, names[1])):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ReportError(f"{name} has no {metric} figure")
    change = (vb - va) / va if va else None
    lower = metric in LOWER_IS_BETTER
    regressed = change is not None and (change > tolerance if lower else change < -tolerance)
    rows = [
        ("target", a.get("target", ""), b.get("target", "")),
        ("seconds", a.get("seconds"), b.get("seconds")),
        ("verdict", a["verdict"].get("class"), b["verdict"].get("class")),
    ]
    rows += [
        (k, _figure(fa, k), _figure(fb, k))
        for k in METRICS
        if _figure(fa, k) is not None or _figure(fb, k) is not None
    ]
    width = max(len(r[0]) for r in rows)
    cols = [
        max(len(names[0]), *(len(_cell(r[1])) for r in rows)),
        max(len(names[1]), *(len(_cell(r[2])) for r in rows)),
    ]
    out = [f"{'':{width}}  {names[0]:>{cols[0]}}  {names[1]:>{cols[1]}}  change"]
    for key, x, y in rows:
        delta = ""
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool) and x:
            delta = f"{100 * (y - x) / x:+.1f} %"
        mark = "  <" if key == metric else ""
        out.append(f"{key:{width}}  {_cell(x):>{cols[0]}}  {_cell(y):>{cols[1]}}  {delta}{mark}")
    verdict = ("ROSE" if lower else "FELL") if regressed else "ok"
    amount = "n/a (A is 0)" if change is None else f"{100 * change:+.1f} %"
    out.append(f"{metric} ({ua}): {amount}, tolerance {100 * tolerance:.1f} %: {verdict}")
    return Comparison("\n".join(out) + "\n", metric, change, regressed)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# -- feeding it while the run goes ----------------------------------------------------------------------


class TallyWatch:
    """Feeds ``tally`` a snapshot every ``interval`` seconds until :meth:`stop`.

    Where the source tells of the snapshots it builds (``built``: the live session's list of listeners),
    the tally is fed each of them in the builder's thread (the screen's frame or the headless loop, which
    are awake anyway: a thread of its own woke ten times a second for it, and on the machines measured a
    wake-up costs several times the work it does). The thread then only stands behind: it feeds by
    itself when no snapshot came for :attr:`grace` seconds (a stalled screen), and always where the
    source does not tell (a replay)."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        tally: RunTally,
        interval: float,
        recent: Callable[[float], Snapshot] | None = None,
        built: list[Callable[[Snapshot], None]] | None = None,
    ) -> None:
        """``recent(max_age)``, where the source has one, gives a snapshot already built within
        ``max_age`` seconds (by the screen or the headless loop) rather than building another."""
        self._snapshot, self.tally, self.interval = snapshot, tally, interval
        self._recent = recent
        self._built = built
        self.grace = max(1.0, 3 * interval)
        """Seconds without a built snapshot after which the thread feeds the tally itself."""
        self._fed_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tpt-verdict", daemon=True)

    def start(self) -> None:
        if self._built is not None:
            self._built.append(self._feed_built)
        self._thread.start()

    def _feed_built(self, snap: Snapshot) -> None:
        if not self._stop.is_set():
            self._fed_at = time.monotonic()
            self.tally.feed(snap)

    def _loop(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            fed = self._fed_at
            if fed is not None and (behind := fed + self.grace - time.monotonic()) > 0:
                # the builders feed it: look again once they may have stopped
                wait = max(self.interval, behind)
                continue
            wait = self.interval
            self.tally.feed(self._snapshot() if self._recent is None else self._recent(self.interval))

    def stop(self) -> None:
        """Stop feeding (one last snapshot is fed first); returns once the thread has ended."""
        self._stop.set()
        if self._built is not None and self._feed_built in self._built:
            self._built.remove(self._feed_built)
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.tally.feed(self._snapshot())


def _stalled(snap: Snapshot | None, run_seconds: float) -> dict[str, Any] | None:
    """The ranks that had stopped stepping when the run ended (``StepsView.stalled``), where each was,
    the shortest of their stalls and its share of the run; None where every rank stepped to the end."""
    ranks = [r for r in (snap.ranks if snap is not None else ()) if r.steps and r.steps.stalled is not None]
    if not ranks:
        return None
    least = min(r.steps.stalled for r in ranks if r.steps and r.steps.stalled is not None)
    return {
        "seconds": round(least, 3),
        "share": round(min(1.0, least / run_seconds), 4) if run_seconds > 0 else 1.0,
        "ranks": [{"rank": r.rank, "at": r.at} for r in ranks],
    }


#: How a workload's end reads where a signal ended it: the words its writers use (the session's ``killed
#: by signal 9``, a rank's ``was ended by SIGKILL``), defined beside ``model.store.exit_note``.
_KILLED = re.compile(f"{re.escape(KILLED_BY)}|{re.escape(ENDED_BY)} SIG")


def _failed(snap: Snapshot | None) -> str | None:
    """How the workload ended where it ended on its own in error (a non-zero status, a signal, or it
    could not start): ``the workload exited with status 1; rank 0 failed first: ...``; None otherwise (a
    stop of ours is no failure: the session reports no status for it)."""
    if snap is None or snap.child.state not in CHILD_ENDED:
        return None
    code = snap.child.exit_code
    if snap.child.state == ChildState.EXITED and not code:
        return None
    text = snap.child.message or (f"exited with status {code}" if code is not None else "could not start")
    return "the " + text if text.startswith("workload ") else f"the workload: {text}"


def _stalled_at(rank: Mapping[str, Any]) -> str:
    """``rank 1 sleep at hang.py:15 (forward)``: a rank that stopped stepping, and where it was."""
    who = "the workload" if rank["rank"] is None else f"rank {rank['rank']}"
    return f"{who} {rank['at']}" if rank["at"] else who
