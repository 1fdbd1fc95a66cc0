"""Replay a recorded profiler trace through the same screen: ``torchpar-top replay TRACE``.

A small thread ticks every ``interval`` seconds; each tick moves the position ``interval × speed`` seconds
of trace time on and turns :meth:`~torchpar_top.analysis.Analysis.window` of that frame into the same
:class:`~torchpar_top.contract.snapshot.Snapshot` a live run produces, so the same panels draw it. What is
on screen depends only on the position and the frame's length: the histories are the frames that end at
the position, built again after a seek or a change of speed. Nothing here measures the host: a trace
has no per-core load or thread samples.

Where each figure comes from (trace µs; shares of a frame):

- a queue row per (rank, device, stream): depth at the position (HTA's ``Q = L - S``), history = the
  highest depth within each frame, busy = share of each frame with work on the stream, blocked = share
  of the newest frame at or above the cap, launched / completed = launches and GPU starts up to the
  position (the ``L`` and ``S`` of ``Q``);
- lanes: the primary rank's launching thread (busy = in CPU ops and not in a sync call; wait = in a
  sync call), overlap = share with two or more of its streams busy;
- GPU: kernel-active = share of the frame with an op on the device (from the trace, not NVML);
- sync points: count from the trace's start to the position, rate per second of trace time over the
  last :data:`RATE_FRAMES` frames;
- throughput: launches per second of trace time in the newest frame.
"""

from __future__ import annotations

import math
import os
import time
from bisect import bisect_left
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from torchpar_top.analysis import (
    NO_GPU_NOTE,
    QUEUE_CAP,
    Analysis,
    FrontendLane,
    Intervals,
    Window,
    analyse,
    at_least,
    load_trace,
    summary,
)
from torchpar_top.contract.snapshot import (
    ChildStatus,
    ExecutorView,
    GpuView,
    RankView,
    ReplayView,
    Snapshot,
    SyncSite,
)
from torchpar_top.contract.vocab import ChildState, Counted, ExecutorKind, Mode, Quantity, ThroughputUnit
from torchpar_top.model.figures import total_depth
from torchpar_top.model.snapshot import build
from torchpar_top.model.store import HISTORY
from torchpar_top.sources.playback import MAX_SPEED, MIN_SPEED, Playback

__all__ = ["DEFAULT_SPEED", "KEYS_HINT", "MAX_SPEED", "MIN_SPEED", "TraceReplay", "trace_time"]

#: Trace seconds per second on screen by default: 100 times slower than real time.
DEFAULT_SPEED = 0.01
#: How far the seek keys move, as a share of the trace.
SEEK_SHARE = 0.05
#: Frames over which a sync point's rate is taken (one second on screen at the default interval).
RATE_FRAMES = 10
#: The throughput's unit: runtime launches (kernels, copies, memsets) per second of trace time.
UNIT = ThroughputUnit.LAUNCHES
#: The replay keys, as the notice lists them.
KEYS_HINT = "p pause · . , step · ← → seek · home · [ ] speed"


@dataclass(frozen=True)
class TraceFrame:
    """One frame of the replay: the analysis' window, and what the session adds to it."""

    window: Window
    blocked: tuple[float, ...]
    """Per stream (in :meth:`Analysis.streams` order): share of the frame at or above the cap."""
    launches: tuple[int, ...]
    """Per rank: launches made within ``[t0, t1)`` (as sync points: consecutive frames count each once)."""
    frontend_busy: float
    """The primary rank's launching thread: share of the frame in CPU ops and not in a sync call."""
    frontend_wait: float
    """The same thread: share of the frame blocked in sync calls."""

    def rate(self, count: float) -> float:
        """``count`` per second of trace time over the frame."""
        return count * 1e6 / (self.window.t1 - self.window.t0)


def trace_time(us: float, decimals: int | None = None) -> str:
    """Trace µs for a person: ``950 µs``, ``12.3 ms``, ``1.23 s`` (three digits unless ``decimals``)."""
    for scale, unit in ((1e6, "s"), (1e3, "ms"), (1.0, "µs")):
        if abs(us) >= scale or unit == "µs":
            value = us / scale
            if decimals is None:
                decimals = max(0, 2 - math.floor(math.log10(abs(value)))) if value else 0
            return f"{value:.{decimals}f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def _device_names(metadata: dict[str, Any]) -> dict[int, str]:
    """``{device id: name}`` from a trace's ``deviceProperties`` (what Kineto recorded), where present."""
    props = metadata.get("deviceProperties")
    names = {}
    for p in props if isinstance(props, list) else ():
        if isinstance(p, dict) and isinstance(p.get("id"), int) and isinstance(p.get("name"), str):
            names[p["id"]] = p["name"]
    return names


def _at_cap(seconds: float) -> str:
    """``at the cap 1.20 ms``, or ``never at the cap``."""
    return f"at the cap {trace_time(seconds * 1e6)}" if seconds > 0 else "never at the cap"


class TraceReplay(Playback):
    """A :class:`~torchpar_top.contract.snapshot.SnapshotSource` with replay controls that plays a trace."""

    THING, SOURCE, SHORT, THREAD = "a recorded trace", "the program", "trace", "tpt-replay"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        interval: float = 0.1,
        speed: float = DEFAULT_SPEED,
        clock: bool = True,
        cap: int = QUEUE_CAP,
    ) -> None:
        """Load and analyse the trace (nothing plays until :meth:`start`).

        Args:
            path: a trace file (``.json``, ``.json.gz``) or a folder of one per rank.
            interval: seconds on screen between frames.
            speed: seconds of trace time per second on screen.
            clock: tick on a thread after :meth:`start`; ``False`` leaves :meth:`tick` to the caller.
            cap: the launch queue's capacity (CUDA's 1024; tests use small ones).

        Raises:
            TraceError: the trace cannot be read (one line saying why).
        """
        trace = load_trace(path)
        self.analysis: Analysis = analyse(trace, cap)
        self.names = {(r.rank, d): n for r in trace.ranks for d, n in _device_names(r.metadata).items()}
        """``{(rank, device): name}`` from the trace's ``deviceProperties``."""
        del trace  # the events: the analysis keeps what it needs
        self.path = os.fspath(path)
        self._init_player(interval, speed, clock)
        self.host_samples = 0
        """Ticks of the clock, played or not (headless mode prints one line per tick)."""
        a = self.analysis
        self._streams = a.streams()
        self._ranks = a.ranks
        self._multi = len(a.ranks) > 1
        self._start, self._end = a.start, a.end
        self._first = self._first_activity()
        primary = a.ranks[0]
        self._launcher: FrontendLane | None = primary.frontend[0] if primary.frontend else None
        self._sync_in_ops = (
            at_least(2, [self._launcher.ops, self._launcher.syncs])
            if self._launcher is not None
            else Intervals()
        )
        self._pos = self._first
        self._frames: deque[TraceFrame] = deque(maxlen=HISTORY)
        self._syncs: dict[tuple[int, str, str], int] = defaultdict(int)
        self._rebuild()
        self._log_trace()

    # -- playing ----------------------------------------------------------------------------------

    @property
    def frame_us(self) -> float:
        """Trace µs per frame: the interval times the speed (rounded to a picosecond)."""
        return round(self.interval * self._speed * 1e6, 6)

    @property
    def position(self) -> float:
        """The end of the newest frame, trace µs."""
        return self._pos

    @property
    def finished(self) -> bool:
        """At the trace's end, or nothing to play (no GPU activity)."""
        return self._pos >= self._end or not self.analysis.has_gpu

    def tick(self) -> bool:
        """One frame on, unless paused or finished; returns whether the position moved. Every tick counts
        in :attr:`host_samples`, played or not."""
        with self._lock:
            try:
                if self._paused or self.finished:
                    return False
                self._advance(1)
                return True
            finally:
                self.host_samples += 1

    def _advance(self, frames: int) -> None:
        for _ in range(frames):
            t0, t1 = self._pos, min(self._pos + self.frame_us, self._end)
            if not t1 > t0:
                break
            frame = self._frame(t0, t1)
            self._frames.append(frame)
            for p in frame.window.sync_points:
                self._syncs[(p.rank, p.site, p.call)] += 1
            self._pos = t1
        self._changed()
        if self.analysis.has_gpu:
            self._announce_end()

    def _frame(self, t0: float, t1: float) -> TraceFrame:
        """The frame ``[t0, t1]``: the analysis' window, time at the cap, launches, the launching thread."""
        length = t1 - t0
        blocked = tuple(
            s.queue.time_at_cap_between(t0, t1) / length if s.queue else 0.0 for s in self._streams
        )
        launches = tuple(
            sum(
                bisect_left(s.queue.launch_times, t1) - bisect_left(s.queue.launch_times, t0)
                for s in r.streams
                if s.queue
            )
            for r in self._ranks
        )
        busy = wait = 0.0
        f = self._launcher
        if f is not None:
            busy = (f.ops.covered(t0, t1) - self._sync_in_ops.covered(t0, t1)) / length
            wait = f.syncs.covered(t0, t1) / length
        return TraceFrame(self.analysis.window(t0, t1), blocked, launches, max(0.0, busy), wait)

    def _rebuild(self) -> None:
        """The frames that end at the position, and the sync points up to it (after a jump)."""
        frames: list[TraceFrame] = []
        t1, length = self._pos, self.frame_us
        while len(frames) < HISTORY and t1 > self._start:
            t0 = max(self._start, t1 - length)
            frames.append(self._frame(t0, t1))
            t1 = t0
        self._frames = deque(reversed(frames), maxlen=HISTORY)
        self._syncs = defaultdict(int)
        for r in self._ranks:
            for lane in r.frontend:
                for p in lane.sync_points_between(self._start, self._pos):
                    self._syncs[(p.rank, p.site, p.call)] += 1
        if not self.finished:
            self._announced_end = False
        self._changed()

    def _jump(self, pos: float) -> None:
        self._pos = min(max(pos, self._start), self._end)
        self._rebuild()

    def _first_activity(self) -> float:
        """Where playing begins: the first launch or GPU op (a trace may begin long before its GPU work)."""
        starts = [s.queue.times[0] for s in self._streams if s.queue and s.queue.times]
        starts += [s.busy.starts[0] for s in self._streams if len(s.busy)]
        return min(starts, default=self._start)

    def frames(self, count: int, keep: int = 2) -> Iterator[tuple[float, Snapshot]]:
        """The whole trace cut into ``count`` frames of equal length from its start: ``(seconds from the
        trace's start, the snapshot at the frame's end)`` each, the figures the screen shows there, with
        histories of the newest ``keep`` frames only (a source for an export, which reads the newest
        values: a snapshot is not rebuilt from 600 frames each time). Moves this replay's position: use a
        replay of its own, not one on the screen."""
        with self._lock:
            self._speed = max(self._end - self._start, 1.0) / max(1, count) / (self.interval * 1e6)
            self._jump(self._start)
            self._frames = deque(self._frames, maxlen=keep)
        while True:
            with self._lock:
                item = ((self._pos - self._start) / 1e6, self.snapshot())
                done = self.finished
                if not done:
                    self._advance(1)
            yield item
            if done:
                return

    # -- commands ---------------------------------------------------------------------------------

    def _span(self) -> float:
        return self._end - self._start

    def _origin(self) -> float:
        return self._start

    def _replayable(self) -> bool:
        return self.analysis.has_gpu

    def step(self, frames: int) -> None:
        """Pause, then move ``frames`` frames forward (negative: back)."""
        with self._lock:
            self._pause_to_step()
            if frames > 0:
                self._advance(frames)
            elif frames < 0:
                self._jump(self._pos + frames * self.frame_us)
            self._changed()

    def _speed_changed(self) -> str:
        self._rebuild()
        return f": a frame is {trace_time(self.frame_us)} of trace"

    def restart(self) -> None:
        """Play again from the first launch."""
        with self._lock:
            self._jump(self._first)
            self._say(f"replaying from t = {self._at()}")

    # -- the snapshot -----------------------------------------------------------------------------

    def _build(self) -> Snapshot:
        frames, pos = self._frames, self._pos
        last = frames[-1] if frames else None
        finished = self.finished
        executors = []
        for i, s in enumerate(self._streams):
            q = s.queue
            executors.append(
                ExecutorView(
                    name=f"cuda:{s.device} s{s.stream}",
                    kind=ExecutorKind.CUDA_STREAM,
                    quantity=Quantity.DEPTH,
                    value=q.depth_at(pos) if q else 0,
                    capacity=self.analysis.cap,
                    launched=q.launched_by(pos) if q else 0,
                    completed=q.started_by(pos) if q else 0,
                    emulated=False,
                    history=tuple(float(f.window.streams[i].max_depth) for f in frames),
                    busy=tuple(f.window.streams[i].busy for f in frames),
                    blocked=last.blocked[i] if last else 0.0,
                    rank=s.rank if self._multi else None,
                    counts=Counted.KERNELS,
                )
            )
        state = ChildState.FINISHED if finished else ChildState.RUNNING
        throughput = [f.rate(f.launches[0]) for f in frames]
        return build(
            t=time.time(),
            experiment="replay",
            description=self._description(),
            mode=Mode.ASYNC,
            paused=self._paused,
            interval=self.interval,
            child=ChildStatus(None, state, message="replay finished" if finished else ""),
            executors=tuple(executors),
            frontend_busy=tuple(f.frontend_busy for f in frames) if self._launcher else (),
            frontend_wait=tuple(f.frontend_wait for f in frames) if self._launcher else (),
            overlap=tuple(f.window.ranks[0].streams_overlap for f in frames),
            throughput=throughput[-1] if throughput else None,
            throughput_unit=UNIT,
            throughput_history=tuple(throughput),
            gpus=self._gpus(frames),
            gpu_status="" if self.analysis.has_gpu else "no GPU activity in this trace",
            log=tuple(self._log),
            target=self._target(),
            notice=self._notice(),
            ranks=self._rank_views(frames, state, executors),
            syncpoints=self._sync_sites(),
            replay=ReplayView(
                self.path,
                (pos - self._start) / 1e6,
                (self._end - self._start) / 1e6,
                self._speed,
                self.frame_us / 1e6,
                finished,
            ),
        )

    def _gpus(self, frames: deque[TraceFrame]) -> tuple[GpuView, ...]:
        devices = [d for r in self._ranks for d in r.devices]
        views = []
        for j, d in enumerate(devices):
            history = tuple(100.0 * f.window.devices[j].active for f in frames)
            views.append(
                GpuView(
                    index=d.device,
                    label=f"r{d.rank}:cuda:{d.device}" if self._multi else f"cuda:{d.device}",
                    name=self.names.get((d.rank, d.device), ""),
                    util_percent=history[-1] if history else None,
                    util_history=history,
                    mem_used=None,
                    mem_total=None,
                    power_w=None,
                    power_limit_w=None,
                    temperature_c=None,
                )
            )
        return tuple(views)

    def _rank_views(
        self, frames: deque[TraceFrame], state: ChildState, executors: list[ExecutorView]
    ) -> tuple[RankView, ...]:
        views = []
        lanes = list(zip(executors, self._streams, strict=True))
        for k, r in enumerate(self._ranks):
            pid = r.frontend[0].pid if r.frontend else None
            last = frames[-1] if frames else None
            views.append(
                RankView(
                    rank=r.rank if self._multi else None,
                    pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else 0,
                    state=state,
                    throughput=last.rate(last.launches[k]) if last else None,
                    unit=UNIT,
                    depth=total_depth(e for e, s in lanes if s.rank == r.rank),
                )
            )
        return tuple(views)

    def _sync_sites(self) -> tuple[SyncSite, ...]:
        lo = max(self._start, self._pos - RATE_FRAMES * self.frame_us)
        recent: dict[tuple[int, str, str], int] = defaultdict(int)
        for r in self._ranks:
            for lane in r.frontend:
                for p in lane.sync_points_between(lo, self._pos):
                    recent[(p.rank, p.site, p.call)] += 1
        seconds = (self._pos - lo) / 1e6
        sites = [
            SyncSite(
                site,
                call,
                count,
                recent[(rank, site, call)] / seconds if seconds > 0 else 0.0,
                rank if self._multi else None,
            )
            for (rank, site, call), count in self._syncs.items()
            if count
        ]
        return tuple(sites)  # in order: build sorts them (figures.sync_order)

    def _target(self) -> str:
        n = len(self._ranks)
        return f"replay {os.path.basename(os.path.normpath(self.path))}" + (f" ×{n} ranks" if n > 1 else "")

    def _description(self) -> str:
        streams, devices = len(self._streams), sum(len(r.devices) for r in self._ranks)
        if not streams:
            return "no GPU activity"
        return f"{streams} stream{'s' if streams != 1 else ''} on {devices} GPU{'s' if devices != 1 else ''}"

    def _notice(self) -> str:
        if not self.analysis.has_gpu:
            return NO_GPU_NOTE
        state = "finished: r plays it again" if self.finished else "paused" if self._paused else "playing"
        return (
            f"t = {self._at()} of {self._at(self._end)} · {self._speed:g}× "
            f"({trace_time(self.frame_us)} per frame) · {state} · {KEYS_HINT}"
        )

    def _at(self, us: float | None = None) -> str:
        """A time from the trace's start (the position by default) in the unit of the trace's duration,
        to a frame's precision and at least the duration's: ``t = 0.028 s of 1.232 s``."""
        duration = self._end - self._start
        scale, unit = (1e6, "s") if duration >= 1e6 else (1e3, "ms") if duration >= 1e3 else (1.0, "µs")
        decimals = max(0, math.ceil(-math.log10(self.frame_us / scale))) if self.frame_us > 0 else 0
        if duration > 0:
            decimals = max(decimals, 2 - math.floor(math.log10(duration / scale)))
        value = (self._pos if us is None else us) - self._start
        return f"{value / scale:.{decimals}f} {unit}"

    # -- the log ----------------------------------------------------------------------------------

    def _log_trace(self) -> None:
        """What was found, and the whole-trace summary per stream (:func:`~torchpar_top.analysis.summary`)."""
        a = self.analysis
        n = len(a.ranks)
        self._say(
            f"replay of {self.path}: {n} rank{'s' if n != 1 else ''}, "
            f"{trace_time(a.end - a.start)} of trace, {self._description()}"
        )
        if not a.has_gpu:
            self._say(NO_GPU_NOTE)
            return
        whole = summary(a)
        for rank in whole["ranks"]:
            overlap = rank["overlap"]
            devices = "" if overlap["devices"] is None else f", 2+ devices busy {overlap['devices']:.1%}"
            self._say(
                f"rank {rank['rank']}: {trace_time(rank['duration'] * 1e6)}, 2+ streams busy "
                f"{overlap['streams']:.1%} of it{devices}"
            )
            for d in rank["devices"]:
                name = self.names.get((rank["rank"], d["device"]), "name not recorded")
                self._say(
                    f"rank {rank['rank']} cuda:{d['device']} ({name}): kernel-active "
                    f"{d['kernel_active']:.1%} of the trace"
                )
        for s in whole["streams"]:
            self._say(
                f"rank {s['rank']} cuda:{s['device']} s{s['stream']}: {s['launches']} launches, "
                f"depth max {s['max_depth']} mean {s['mean_depth']:.1f} (HTA's), "
                f"{_at_cap(s['seconds_at_cap'])}, busy {trace_time(s['busy_seconds'] * 1e6)}"
            )
        head = "" if self._first <= self._start else " (its first launch; home goes to the start)"
        self._say(
            f"playing from t = {self._at()}{head} at {self._speed:g}×: a frame of "
            f"{trace_time(self.frame_us)} every {self.interval:g} s"
        )
