"""``torchpar-top export FILE --perfetto OUT.json --csv OUT.csv``: a recording or a trace, for other tools.

The Perfetto file is Chrome's Trace Event Format (JSON object form), which Perfetto UI and
``chrome://tracing`` open:

- process ``host``: counter tracks (``ph: "C"``) per core (``core N load %``) and per GPU (``GPU util %``,
  ``GPU memory``);
- process ``run``: counter tracks per executor (its queue value, ``depth`` or ``outstanding``) and for the
  throughput; a thread per executor lane with a slice (``ph: "X"``) per window it was busy (recordings:
  the share busy in ``args``; traces: the exact busy intervals of each stream); a ``mode`` thread with a
  slice per ASYNC or SYNC period; a ``frontend`` thread with its windows and an instant (``ph: "i"``,
  thread scope) per sync point; process and thread names (``ph: "M"``).

Timestamps are microseconds from the first sample (recordings) or from the trace's start, whole numbers,
so slices of a thread tile without overlapping. ``otherData`` says what the file is (``format``:
``torchpar-top-export``) and describes every counter track, which is how ``replay`` reads an export back
(:func:`read_export`).

The CSV has one row per sample: time, mode, throughput, then per core, executor and GPU columns.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import io
import itertools
import json
import math
import os
import tempfile
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import IO, Any, TypeVar

import orjson
from torchpar_top.contract.codec import to_plain
from torchpar_top.contract.recording import (
    FORMAT_VERSION,
    Header,
    Machine,
    Recording,
    RecordingError,
    RecordingReader,
    counted_between,
    delta,
    headless_output,
    history_path,
    loads,
    read_bytes,
    sniff,
)
from torchpar_top.contract.snapshot import ChildStatus, ExecutorView, GpuView, Snapshot
from torchpar_top.contract.vocab import (
    PHASES,
    ChildState,
    Counted,
    ExecutorKind,
    Mode,
    Quantity,
    ThroughputUnit,
)
from torchpar_top.model import figures
from torchpar_top.model.snapshot import build
from torchpar_top.model.store import CORE_HISTORY, HISTORY

#: ``otherData.format`` of an export.
EXPORT_FORMAT = "torchpar-top-export"
HOST_PID, RUN_PID = 1, 2
MODE_TID, FRONTEND_TID = 1, 2
#: The first thread id of the executor lanes.
LANE_TID = 10
#: Frames a trace is cut into for its counters (each frame one sample).
TRACE_FRAMES = 2000
#: The largest export read back whole (``replay`` of an export).
MAX_EXPORT_BYTES = 2 << 30


@dataclass(frozen=True)
class TimedSnapshot:
    """One snapshot at a time (seconds from the first), and how many values each history gained."""

    t: float
    snap: Snapshot
    new: dict[str, int]
    """History path (``executors.0.busy``...) → values added since the previous sample."""
    keys: tuple[str, ...] = ()
    """Each executor's key (``_exec_key``), in order (made once per sample: the exports read it often)."""

    def exec_key(self, i: int, e: ExecutorView) -> str:
        """The key of ``e``, the ``i``-th executor of :attr:`snap`."""
        return self.keys[i] if i < len(self.keys) else _exec_key(e)


def samples_of(
    times_snaps: Iterable[tuple[float, Snapshot]], added: Callable[[], Mapping[str, int]] | None = None
) -> Iterator[TimedSnapshot]:
    """Samples with the values each history gained (:func:`~torchpar_top.contract.recording.delta`).

    ``added``: for a recording, what the decoder read the last snapshot's line to add to each history
    (``Decoder.added``, by path): what ``delta`` finds, since the line was written from it, so it is
    taken as it is where the executor sits at the same place in both snapshots."""
    prev: Snapshot | None = None
    prev_at: dict[str, int] = {}
    for t, snap in times_snaps:
        new = {}
        keys = tuple(map(_exec_key, snap.executors))
        if prev is not None:
            known = added() if added is not None else {}
            for i, (key, e) in enumerate(zip(keys, snap.executors, strict=True)):
                j = prev_at.get(key, -1)
                n = known.get(history_path("executors", i, "busy")) if j == i else None
                if n is None:
                    was = prev.executors[j] if j >= 0 else None
                    counted = counted_between(was.samples, e.samples) if was is not None else None
                    n = len(delta(was.busy if was is not None else (), e.busy, counted)[1])
                new[_busy_key(key)] = n
            n = known.get("frontend_busy")
            if n is None:
                counted = counted_between(prev.samples, snap.samples)
                n = len(delta(prev.frontend_busy, snap.frontend_busy, counted)[1])
            new["frontend_busy"] = n
        yield TimedSnapshot(t, snap, new, keys)
        prev, prev_at = snap, {key: i for i, key in enumerate(keys)}


@cache
def _busy_key(key: str) -> str:
    return f"{key}.busy"


@cache
def _lane_name(key: str) -> str:
    return f"{key} busy"


def _exec_key(e: ExecutorView) -> str:
    return e.name if e.rank is None else _ranked_key(e.rank, e.name)


@cache
def _ranked_key(rank: int, name: str) -> str:
    return f"r{rank} {name}"


T = TypeVar("T")

# -- sources --------------------------------------------------------------------------------------


@dataclass
class Source:
    """What an export is made of: samples in time order, streamed (each pass reads the file again, holding
    one sample at a time), and for a trace its exact intervals."""

    path: str
    kind: str
    """``recording`` or ``trace``."""
    frames: Callable[[Collection[str] | None, bool | Collection[str]], Iterator[tuple[float, Snapshot]]]
    """A fresh pass over ``(seconds from the first, snapshot)``, in time order; given the snapshot fields
    and the histories the pass reads (``None``, ``True``: all), a recording decodes only those
    (``Decoder``'s ``reads`` and ``histories``)."""
    header: dict[str, Any] = field(default_factory=dict)
    lanes: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Traces: per stream lane, its busy intervals in seconds from the start."""
    syncs: list[tuple[float, str, str, int | None]] = field(default_factory=list)
    """Traces: (seconds, call, site, rank) per sync point."""
    t0: float = 0.0
    """``time.time()`` of the first sample (recordings; 0 for a trace): timestamps count from it."""
    added: Callable[[], Mapping[str, int]] | None = None
    """Recordings: what the line of the frame just given added to each history (``samples_of``'s)."""
    note: str = ""
    """What the reader left out (a recording's truncated last line, a corrupt one), or '': known after
    a pass."""

    def samples(
        self, reads: Collection[str] | None = None, histories: bool | Collection[str] = True
    ) -> Iterator[TimedSnapshot]:
        """One pass over the samples (``reads``, ``histories``: as :attr:`frames`')."""
        return samples_of(self.frames(reads, histories), self.added)


def load_source(path: str) -> Source:
    """A recording (by its header) or a profiler trace.

    Raises:
        RecordingError, TraceError: the file is neither (one line).
    """
    kind = sniff(path)
    if kind == "recording":
        return recording_source(path)
    if kind == "export":
        raise RecordingError(f"{path} is an export already: export the recording or trace it came from")
    if kind == "headless":
        raise headless_output(path)
    return trace_source(path)


def recording_source(path: str) -> Source:
    """A recording's snapshots, at their time from the first, read as they stream (the header now: a file
    that is no recording fails here)."""
    reader = RecordingReader(path)
    source = Source(
        reader.path, "recording", lambda *_: iter(()), to_plain(reader.header), t0=reader.header.t
    )
    first = [reader]
    current = [reader]
    source.added = lambda: current[0].decoder.added

    def frames(
        reads: Collection[str] | None = None, histories: bool | Collection[str] = True
    ) -> Iterator[tuple[float, Snapshot]]:
        r = first.pop() if first else RecordingReader(path)
        current[0] = r
        t0 = None
        for snap in r.snapshots(derived=False, reads=reads, histories=histories):  # and no derived figure
            if t0 is None:
                t0 = source.t0 = snap.t
            yield snap.t - t0, _as_exported(snap)
        source.note = r.note

    source.frames = frames
    return source


def _as_exported(snap: Snapshot) -> Snapshot:
    """A recorded snapshot as the exports read it: its sync sites in ``model.snapshot.build``'s order (an
    older recording's may not be). The exports read no derived figure (``DERIVED``), so none is computed
    again: ``rebuild`` was a third of an export's time."""
    points = snap.syncpoints
    if len(points) > 1:
        ordered = tuple(sorted(points, key=figures.sync_order))
        if ordered != points:
            return dataclasses.replace(snap, syncpoints=ordered)
    return snap


def trace_source(path: str) -> Source:
    """A trace cut into :data:`TRACE_FRAMES` frames by the trace replay (same figures as on its screen),
    plus the exact busy intervals of its streams and its sync points."""
    from torchpar_top.sources.trace import TraceReplay

    session = TraceReplay(path, clock=False, interval=1.0)
    a = session.analysis
    lanes = {}
    multi = len(a.ranks) > 1
    for s in a.streams():
        name = f"cuda:{s.device} s{s.stream}"
        key = f"r{s.rank} {name}" if multi else name
        spans = zip(s.busy.starts, s.busy.ends, strict=True)
        lanes[key] = [((b - a.start) / 1e6, (e - a.start) / 1e6) for b, e in spans]
    syncs = [
        ((p.ts - a.start) / 1e6, p.call, p.site, p.rank if multi else None)
        for r in a.ranks
        for lane in r.frontend
        for p in lane.sync_points
    ]
    return Source(
        os.fspath(path),
        "trace",
        lambda *_: session.frames(TRACE_FRAMES),
        {"trace": os.fspath(path)},
        lanes,
        sorted(syncs),
    )


# -- trace events ---------------------------------------------------------------------------------


def _us(seconds: float) -> int:
    return round(seconds * 1e6)


class TraceEvents:
    """Trace-event JSON being written as it is made (to ``out``, comma-separated, 512 events at a time;
    :meth:`flush` writes the rest): names, counters, slices, instants."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._parts: list[bytes] = []
        self.count = 0
        """Events made (:meth:`flush` writes those not yet written)."""
        self.counters: dict[str, dict[str, Any]] = {}
        """Counter name → what it measures (for :func:`read_export`)."""
        self._threads: dict[tuple[int, str], int] = {}

    def _emit(self, event: dict[str, Any]) -> None:
        # orjson: a fifth of json's time per event, and an export is a dozen events per sample. Every
        # number in an event is finite (a snapshot's are checked when decoded; the rest are sums and
        # roundings of those), so orjson's writing NaN as null never happens.
        self._parts.append(orjson.dumps(event))
        self.count += 1
        if len(self._parts) >= 512:
            self.flush()

    def flush(self) -> None:
        """Write the events made since the last flush, comma-separated."""
        if self._parts:
            joined = b",".join(self._parts)
            self._out.write(b"," + joined if self.count > len(self._parts) else joined)
            self._parts.clear()

    def process(self, pid: int, name: str, sort: int) -> None:
        self._emit({"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0, "args": {"name": name}})
        self._emit(
            {
                "name": "process_sort_index",
                "ph": "M",
                "ts": 0,
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": sort},
            }
        )

    def thread(self, pid: int, key: str, name: str, tid: int | None = None) -> int:
        """The thread id for ``key`` in ``pid`` (named the first time)."""
        if (pid, key) not in self._threads:
            tid = tid if tid is not None else LANE_TID + sum(1 for p, _ in self._threads if p == pid)
            self._threads[(pid, key)] = tid
            self._emit(
                {"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": name}}
            )
        return self._threads[(pid, key)]

    def counter(
        self, pid: int, name: str, ts: int, key: str, value: float, meta: Callable[[T], dict[str, Any]], of: T
    ) -> None:
        """A counter's value at ``ts``; ``meta(of)`` says what it measures, asked the first time only."""
        if name not in self.counters:
            self.counters[name] = {"pid": pid, "key": key, **meta(of)}
        self._emit({"name": name, "ph": "C", "ts": ts, "pid": pid, "args": {key: value}})

    def slice(
        self, pid: int, tid: int, name: str, ts: int, dur: int, cat: str, args: dict[str, Any] | None = None
    ) -> None:
        if dur <= 0:
            return
        event = {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid}
        if args:
            event["args"] = args
        self._emit(event)

    def instant(self, pid: int, tid: int, name: str, ts: int, cat: str, args: dict[str, Any]) -> None:
        self._emit(
            {"name": name, "cat": cat, "ph": "i", "s": "t", "ts": ts, "pid": pid, "tid": tid, "args": args}
        )


def write_perfetto(source: Source, out: IO[str]) -> tuple[int, int]:
    """Write the trace-event JSON object for ``source``, streaming: the events go to a temporary file as
    the samples are read (one held at a time), then ``otherData`` (which describes every counter track
    seen) and the events are written to ``out``. Returns ``(events, samples)``.

    Raises:
        OSError: ``out`` or the temporary file could not be written (a full disk).
    """
    with tempfile.TemporaryFile("w+b") as tmp:  # bytes, as orjson writes them: no text layer per event
        ev = TraceEvents(tmp)
        samples, last = _events(ev, source)
        ev.process(HOST_PID, "host", 0)
        ev.process(RUN_PID, (last.target or last.experiment) if last else "run", 1)
        ev.flush()
        other = {
            "format": EXPORT_FORMAT,
            "version": FORMAT_VERSION,
            "source": source.path,
            "kind": source.kind,
            "t0": source.t0,
            "header": source.header,
            "counters": ev.counters,
        }
        out.write('{"otherData":' + json.dumps(other, separators=(",", ":"), allow_nan=False))
        out.write(',"displayTimeUnit":"ms","traceEvents":[')
        tmp.seek(0)
        text = codecs.getincrementaldecoder("utf-8")()  # a chunk may end inside a character
        while chunk := tmp.read(1 << 20):
            out.write(text.decode(chunk))
        out.write(text.decode(b"", final=True) + "]}\n")
    return ev.count, samples


def perfetto(source: Source) -> dict[str, Any]:
    """The trace-event JSON object for ``source``, in memory (for a test or a small source)."""
    buf = io.StringIO()
    write_perfetto(source, buf)
    return json.loads(buf.getvalue())


#: The snapshot fields the Perfetto export reads (beside ``REQUIRED``): a recording decodes only these.
PERFETTO_READS = (
    "cores",
    "gpus",
    "executors.rank",
    "executors.counts",
    "executors.samples",
    "samples",
    "throughput",
    "throughput_unit",
    "frontend_busy",
    "frontend_wait",
    "syncpoints",
    "attached",
    "ranks",
    "target",
)
#: The histories it reads (``Decoder``'s ``histories``): the lanes' and the steps'.
PERFETTO_HISTORIES = ("frontend_busy", "frontend_wait", "executors.busy", "ranks.steps.recent")


def _events(ev: TraceEvents, source: Source) -> tuple[int, Snapshot | None]:
    """One pass over the samples, each track written as it goes; returns the samples and the last one."""
    modes = _Modes(ev) if source.kind == "recording" else None
    tid = ev.thread(RUN_PID, "frontend", "frontend", FRONTEND_TID)
    prev: TimedSnapshot | None = None
    count = 0
    steps_seen: dict[int | None, float] = {}
    for s in source.samples(PERFETTO_READS, PERFETTO_HISTORIES):
        _counters(ev, s)
        if prev is not None and source.kind == "recording":
            _lanes(ev, prev, s)
            _frontend(ev, tid, prev, s)
        _steps(ev, steps_seen, s, source.t0)
        if modes is not None:
            modes.add(s)
        prev, count = s, count + 1
    if modes is not None:
        modes.end()
    if source.kind == "trace":  # the exact intervals and sync points
        _trace_lanes(ev, source)
        for t, call, site, rank in source.syncs:
            ev.instant(RUN_PID, tid, call, _us(t), "sync", {"where": site, "rank": rank})
    return count, prev.snap if prev is not None else None


def _steps(ev: TraceEvents, seen: dict[int | None, float], s: TimedSnapshot, t0: float) -> None:
    """Each rank's steps recorded whole since the last sample (``seen``: the last step end drawn per rank),
    on its steps track beside the frontend's: a ``step`` slice and under it a slice per phase. A step
    records how long each phase took, not when: the phases are laid end to end in the order of
    ``vocab.PHASES``, ending at the step's end."""
    for r in s.snap.ranks:
        if r.steps is None:
            continue
        last = seen.get(r.rank, float("-inf"))
        fresh = [rec for rec in r.steps.recent if rec.end > last]
        if not fresh:
            continue
        seen[r.rank] = fresh[-1].end
        name = "frontend: steps" if r.rank is None else f"rank {r.rank} frontend: steps"
        tid = ev.thread(RUN_PID, f"steps r{r.rank}", name)
        for rec in fresh:
            durations = [(p, getattr(rec.phases, p)) for p in PHASES]
            start = rec.end - t0 - sum(d for _, d in durations)
            ev.slice(RUN_PID, tid, "step", _us(start), _us(rec.end - t0) - _us(start), "step")
            for phase, d in durations:
                ev.slice(RUN_PID, tid, phase, _us(start), _us(start + d) - _us(start), "phase")
                start += d


def _counters(ev: TraceEvents, s: TimedSnapshot) -> None:
    ts, snap = _us(s.t), s.snap
    for i, load in enumerate(snap.cores):
        ev.counter(HOST_PID, _core_name(i), ts, "load", load, _core_meta, i)
    for g in snap.gpus:
        if g.util_percent is not None:
            ev.counter(HOST_PID, f"{g.label} util %", ts, "util", g.util_percent, _gpu_util_meta, g)
        if g.mem_used is not None:
            ev.counter(HOST_PID, f"{g.label} memory", ts, "bytes", g.mem_used, _gpu_mem_meta, g)
    for i, e in enumerate(snap.executors):
        q = e.quantity.value
        ev.counter(RUN_PID, _counter_name(s.exec_key(i, e), q), ts, q, e.value, _executor_meta, e)
    if snap.throughput is not None:
        unit = snap.throughput_unit
        ev.counter(RUN_PID, f"throughput {unit}", ts, "rate", snap.throughput, _throughput_meta, unit)


@cache
def _counter_name(key: str, quantity: str) -> str:
    return f"{key} {quantity}"


@cache
def _core_name(i: int) -> str:
    return f"core {i} load %"


def _throughput_meta(unit: str) -> dict[str, Any]:
    return {"what": "throughput", "unit": unit}


def _core_meta(i: int) -> dict[str, Any]:
    return {"what": "core", "core": i}


def _gpu_util_meta(g: GpuView) -> dict[str, Any]:
    return {"what": "gpu_util", "gpu": g.label, "name": g.name, "index": g.index}


def _gpu_mem_meta(g: GpuView) -> dict[str, Any]:
    return {"what": "gpu_mem", "gpu": g.label, "name": g.name, "index": g.index, "total": g.mem_total}


def _executor_meta(e: ExecutorView) -> dict[str, Any]:
    return {
        "what": "executor",
        "executor": _exec_key(e),
        "name": e.name,
        "rank": e.rank,
        "kind": e.kind.value,
        "quantity": e.quantity.value,
        "counts": e.counts.value,
        "capacity": e.capacity,
        "emulated": e.emulated,
    }


def _windows(prev_t: float, t: float, count: int) -> list[tuple[int, int]]:
    """``count`` equal windows tiling ``[prev_t, t]``, in whole µs."""
    bounds = [_us(prev_t + (t - prev_t) * k / count) for k in range(count + 1)]
    return list(itertools.pairwise(bounds))


def _plausible(prev_t: float, t: float, interval: float) -> int:
    """The most windows of ``interval`` that can have ended between two samples (a history that was reset
    in between, a new run, gains its whole length at once: only the newest ones are placed)."""
    return max(1, math.ceil((t - prev_t) / interval * 1.5)) if interval > 0 else 1


def _trace_lanes(ev: TraceEvents, source: Source) -> None:
    for key, intervals in source.lanes.items():
        tid = ev.thread(RUN_PID, key, f"{key} busy")
        for b, e in intervals:
            ev.slice(RUN_PID, tid, "busy", _us(b), _us(e) - _us(b), "lane")


def _lanes(ev: TraceEvents, prev: TimedSnapshot, s: TimedSnapshot) -> None:
    """A recording's busy windows between two samples, per executor lane."""
    plausible = _plausible(prev.t, s.t, s.snap.interval)
    windows: dict[int, list[tuple[int, int]]] = {}  # by count: the same for every lane
    for i, e in enumerate(s.snap.executors):
        key = s.exec_key(i, e)
        n = min(s.new.get(_busy_key(key), 0), len(e.busy), plausible)
        if not n:
            continue
        tid = ev.thread(RUN_PID, key, _lane_name(key))
        if n not in windows:
            windows[n] = _windows(prev.t, s.t, n)
        for (a, b), share in zip(windows[n], e.busy[-n:], strict=True):
            if share > 0:
                ev.slice(RUN_PID, tid, "busy", a, b - a, "lane", {"share": round(share, 4)})


class _Modes:
    """A slice per ASYNC or SYNC period (a trace has no mode: the program ran as it ran); holds only the
    period going on."""

    def __init__(self, ev: TraceEvents) -> None:
        self._ev = ev
        self._run: tuple[Mode, float, float] | None = None

    def add(self, s: TimedSnapshot) -> None:
        if s.snap.attached:
            return
        run = self._run
        if run is not None and run[0] == s.snap.mode:
            self._run = (run[0], run[1], s.t)
            return
        if run is not None:
            self._slice((run[0], run[1], s.t))
        self._run = (s.snap.mode, s.t, s.t)

    def end(self) -> None:
        if self._run is not None:
            self._slice(self._run)

    def _slice(self, run: tuple[Mode, float, float]) -> None:
        mode, a, b = run
        tid = self._ev.thread(RUN_PID, "mode", "mode (ASYNC / SYNC)", MODE_TID)
        self._ev.slice(RUN_PID, tid, mode.value.upper(), _us(a), _us(b) - _us(a), "mode")


def _frontend(ev: TraceEvents, tid: int, prev: TimedSnapshot, s: TimedSnapshot) -> None:
    """A recording's frontend windows (launching or waiting) and sync points between two samples."""
    snap = s.snap
    n = min(s.new.get("frontend_busy", 0), len(snap.frontend_busy), _plausible(prev.t, s.t, snap.interval))
    waits = snap.frontend_wait[-n:] if n and len(snap.frontend_wait) >= n else (0.0,) * n
    # strict=False: with n = 0 there is no window, while frontend_busy[-0:] is the whole history
    windows = _windows(prev.t, s.t, n) if n else []
    for (a, b), busy, wait in zip(windows, snap.frontend_busy[-n:], waits, strict=False):
        if busy > 0 or wait > 0:
            ev.slice(
                RUN_PID,
                tid,
                "waiting" if wait > busy else "launching",
                a,
                b - a,
                "frontend",
                {"busy": round(busy, 4), "wait": round(wait, 4)},
            )
    before = {(p.rank, p.where, p.call): p.count for p in prev.snap.syncpoints}
    for p in snap.syncpoints:
        gained = p.count - before.get((p.rank, p.where, p.call), 0)
        if gained > 0:
            ev.instant(
                RUN_PID,
                tid,
                p.call,
                _us(s.t),
                "sync",
                {"where": p.where, "rank": p.rank, "count": gained, "sampled": p.sampled},
            )


# -- CSV ------------------------------------------------------------------------------------------

#: The CSV's first columns; per core, executor and GPU ones follow, in the order first seen.
CSV_FIXED = (
    "t_s",
    "time",
    "mode",
    "paused",
    "child_state",
    "throughput",
    "throughput_unit",
    "num_threads",
    "frontend_busy",
    "frontend_wait",
    "overlap",
)


#: The snapshot fields the CSV reads (beside ``REQUIRED``): a recording decodes only these.
CSV_READS = (
    "attached",
    "throughput",
    "throughput_unit",
    "num_threads",
    "frontend_busy",
    "frontend_wait",
    "overlap",
    "cores",
    "executors.rank",
    "gpus",
    "syncpoints",
)
#: The histories it reads (their last values).
CSV_HISTORIES = ("frontend_busy", "frontend_wait", "overlap", "executors.busy")


def csv_row(kind: str, s: TimedSnapshot) -> dict[str, Any]:
    """One sample's row (a column it lacks is absent)."""
    snap = s.snap
    row: dict[str, Any] = {
        "t_s": round(s.t, 6),
        "time": round(snap.t, 3),
        "mode": "" if snap.attached or kind == "trace" else snap.mode.value,
        "paused": int(snap.paused),
        "child_state": snap.child.state.value,
        "throughput": "" if snap.throughput is None else snap.throughput,
        "throughput_unit": snap.throughput_unit,
        "num_threads": "" if snap.num_threads is None else snap.num_threads,
        "frontend_busy": snap.frontend_busy[-1] if snap.frontend_busy else "",
        "frontend_wait": snap.frontend_wait[-1] if snap.frontend_wait else "",
        "overlap": snap.overlap[-1] if snap.overlap else "",
    }
    for i, load in enumerate(snap.cores):
        row[f"core{i}_load_percent"] = load
    for e in snap.executors:
        row[f"{_exec_key(e)} {e.quantity.value}"] = e.value
        row[f"{_exec_key(e)} busy"] = e.busy[-1] if e.busy else ""
    for g in snap.gpus:
        row[f"{g.label} util_percent"] = "" if g.util_percent is None else g.util_percent
        row[f"{g.label} mem_used_bytes"] = "" if g.mem_used is None else g.mem_used
    return row


def write_csv(source: Source, out: IO[str]) -> int:
    """Write the CSV (a header, then one row per sample; a column a sample lacks is empty), streaming:
    the rows go to a temporary file as the samples are read, then the header (every column seen) and the
    rows to ``out``. Returns the number of rows.

    Raises:
        OSError: ``out`` or the temporary file could not be written (a full disk).
    """
    columns: dict[str, None] = dict.fromkeys(CSV_FIXED)
    rows = 0
    with tempfile.TemporaryFile("w+", encoding="utf-8") as tmp:
        # no history's gains (samples_of's): the CSV reads a history's last value alone
        for t, snap in source.frames(CSV_READS, CSV_HISTORIES):
            row = csv_row(source.kind, TimedSnapshot(t, snap, {}))
            for k in row:
                if k not in columns:
                    columns[k] = None
            tmp.write(orjson.dumps(row).decode() + "\n")  # a row's values are finite (the snapshot's)
            rows += 1
        writer = csv.DictWriter(out, fieldnames=list(columns), restval="", lineterminator="\n")
        writer.writeheader()
        tmp.seek(0)
        for line in tmp:
            writer.writerow(orjson.loads(line))
    return rows


# -- reading an export back -----------------------------------------------------------------------


def read_export(path: str) -> tuple[Recording, list[Snapshot]]:
    """An export read back as snapshots: per sample time, the cores, GPUs, executors (value, busy
    windows), throughput and mode it holds; histories rebuilt from the samples before.

    Raises:
        RecordingError: not an export this version reads (one line).
    """
    try:
        obj = loads(read_bytes(path, MAX_EXPORT_BYTES))
    except ValueError as exc:
        raise RecordingError(f"{path}: not valid JSON ({exc})") from None
    other = obj.get("otherData") if isinstance(obj, dict) else None
    if not isinstance(other, dict) or other.get("format") != EXPORT_FORMAT:
        raise RecordingError(f"{path}: not a torchpar-top export")
    if other.get("version") != FORMAT_VERSION:
        raise RecordingError(
            f"{path}: export version {other.get('version')!r}; this torchpar-top reads "
            f"version {FORMAT_VERSION}"
        )
    counters = other.get("counters") or {}
    events = obj.get("traceEvents")
    if not isinstance(events, list) or not isinstance(counters, dict):
        raise RecordingError(f"{path}: an export without traceEvents")
    try:
        return _rebuild_snapshots(path, other, counters, events)
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordingError(f"{path}: a malformed export ({type(exc).__name__}: {exc})") from None


def _rebuild_snapshots(
    path: str, other: dict[str, Any], counters: dict[str, Any], events: list[Any]
) -> tuple[Recording, list[Snapshot]]:
    by_ts: dict[int, dict[str, float]] = defaultdict(dict)
    # events are read in file order; slices of one thread are written in time order
    busy: dict[str, list[tuple[int, float]]] = defaultdict(list)
    modes: list[tuple[int, int, str]] = []
    thread_names: dict[tuple[int, int], str] = {}
    name = "export"
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "C" and e.get("name") in counters:
            key = counters[e["name"]]["key"]
            by_ts[int(e["ts"])][e["name"]] = float(e["args"][key])
        elif ph == "M" and e.get("name") == "thread_name":
            thread_names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif ph == "M" and e.get("name") == "process_name" and e.get("pid") == RUN_PID:
            name = e["args"]["name"]
        elif ph == "X" and e.get("cat") == "lane":
            lane = thread_names.get((e["pid"], e["tid"]), "")
            busy[lane.removesuffix(" busy")].append(
                (int(e["ts"]) + int(e["dur"]), float((e.get("args") or {}).get("share", 1.0)))
            )
        elif ph == "X" and e.get("cat") == "mode":
            modes.append((int(e["ts"]), int(e["ts"]) + int(e["dur"]), e["name"].lower()))
    header_plain = other.get("header") or {}
    t_start = float(other.get("t0", 0.0))
    interval = float(header_plain.get("interval", 0.1)) if isinstance(header_plain, dict) else 0.1
    header = Header(
        "torchpar-top-export", FORMAT_VERSION, 0, (), "", t_start, interval, Machine("", 0, (), None, "", "")
    )
    histories: dict[str, deque] = defaultdict(lambda: deque(maxlen=HISTORY))
    core_hist: dict[int, deque] = defaultdict(lambda: deque(maxlen=CORE_HISTORY))
    busy_pos = {k: 0 for k in busy}
    snaps = []
    for ts in sorted(by_ts):
        values = by_ts[ts]
        gpus: dict[Any, dict[str, Any]] = {}
        cores, execs, throughput, unit = {}, [], None, ThroughputUnit.ITEMS
        for cname, v in values.items():
            meta = counters[cname]
            what = meta.get("what")
            if what == "core":
                cores[int(meta["core"])] = v
            elif what in ("gpu_util", "gpu_mem"):
                gpus.setdefault(meta["gpu"], {"meta": meta})[what] = v
            elif what == "executor":
                key = meta["executor"]
                histories[key].append(v)
                spans = busy.get(key, [])
                while busy_pos.get(key, 0) < len(spans) and spans[busy_pos[key]][0] <= ts:
                    histories[f"{key}.busy"].append(spans[busy_pos[key]][1])
                    busy_pos[key] += 1
                execs.append(
                    ExecutorView(
                        name=meta["name"],
                        kind=ExecutorKind(meta["kind"]),
                        quantity=Quantity(meta["quantity"]),
                        value=int(v),
                        capacity=meta.get("capacity"),
                        launched=0,
                        completed=0,
                        emulated=bool(meta.get("emulated")),
                        history=tuple(histories[key]),
                        busy=tuple(histories[f"{key}.busy"]),
                        blocked=None,
                        rank=meta.get("rank"),
                        counts=Counted(meta.get("counts", "items")),
                    )
                )
            elif what == "throughput":
                throughput, unit = v, ThroughputUnit(meta["unit"])
                histories["throughput"].append(v)
        for i, load in cores.items():
            core_hist[i].append(load)
        gpu_views = []
        for label, g in gpus.items():
            meta = g["meta"]
            if "gpu_util" in g:
                histories[f"gpu {label}"].append(g["gpu_util"])
            gpu_views.append(
                GpuView(
                    int(meta["index"]),
                    label,
                    meta.get("name", ""),
                    g.get("gpu_util"),
                    tuple(histories[f"gpu {label}"]),
                    int(g["gpu_mem"]) if "gpu_mem" in g else None,
                    meta.get("total"),
                    None,
                    None,
                    None,
                )
            )
        mode = next((m for a, _, m in reversed(modes) if a <= ts), "async")  # the period begun last
        snaps.append(
            build(
                t=t_start + ts / 1e6,
                experiment="export",
                description=f"read back from {os.path.basename(path)}",
                mode=Mode(mode) if mode in ("async", "sync") else Mode.ASYNC,
                paused=False,
                interval=interval,
                child=ChildStatus(None, ChildState.RUNNING),
                cores=tuple(cores[i] for i in sorted(cores)),
                core_history=tuple(tuple(core_hist[i]) for i in sorted(cores)),
                executors=tuple(sorted(execs, key=lambda x: (x.rank or 0, x.name))),
                throughput=throughput,
                throughput_unit=unit,
                throughput_history=tuple(histories["throughput"]) if throughput is not None else (),
                gpus=tuple(gpu_views),
                target=name,
                notice="an export read back: counters and lanes only (no threads, log or stacks)",
            )
        )
    rec = Recording(path, header, (), tuple(s.t for s in snaps))
    return rec, snaps


#: The snapshot fields the summary reads (beside ``REQUIRED``): a recording decodes only these.
SUMMARY_READS = ("cores", "throughput", "throughput_unit", "executors.rank", "target", "scoreboard")


def export_summary(rec: RecordingReader | Recording) -> dict[str, Any]:
    """``replay RUN.jsonl --summary``: the recording's header and what its snapshots measured, whole,
    read as they stream (one snapshot held at a time).

    Raises:
        RecordingError: not even the first snapshot decodes.
    """
    count = 0
    first_t = last_t = 0.0
    last: Snapshot | None = None
    through = _Stat()
    load = _Stat()
    depth: dict[str, _Stat] = {}
    # its derived figures are computed below; it reads no history
    for s in rec.snapshots(derived=False, reads=SUMMARY_READS, histories=False):
        # the one derived figure read per snapshot, computed again (an older recording may lack it); the
        # whole rebuild (every DERIVED figure) was a third of the summary's time
        core_load = figures.core_load(s.cores)
        if count == 0:
            first_t = s.t
        count, last_t, last = count + 1, s.t, s
        if s.throughput is not None:
            through.add(s.throughput)
        if core_load is not None:
            load.add(core_load)
        for e in s.executors:
            depth.setdefault(_exec_key(e), _Stat()).add(e.value)
    out: dict[str, Any] = {
        "header": to_plain(rec.header),
        "snapshots": count,
        "seconds": round(last_t - first_t, 3),
        "note": rec.note,
    }
    if last is None:
        return out
    out["target"] = last.target
    out["child"] = to_plain(last.child)
    out["throughput"] = {
        "unit": last.throughput_unit,
        "mean": through.mean(),
        "min": through.lo,
        "max": through.hi,
    }
    out["mean_core_load"] = load.mean()
    out["executors"] = {k: {"max": v.hi, "mean": v.mean()} for k, v in depth.items()}
    out["scoreboard"] = {
        m.mode.value: {k: v for k, v in to_plain(m).items() if k != "mode"} for m in last.scoreboard
    }
    out["ratio"] = figures.ratio(last.scoreboard)
    return out


class _Stat:
    """Count, sum, least and most of numbers seen one at a time."""

    def __init__(self) -> None:
        self.n = 0
        self.total = 0.0
        self.lo: Any = None
        self.hi: Any = None

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value
        self.lo = value if self.lo is None or value < self.lo else self.lo
        self.hi = value if self.hi is None or value > self.hi else self.hi

    def mean(self) -> float | None:
        return round(self.total / self.n, 6) if self.n else None
