"""Recordings: ``--record FILE`` keeps every snapshot of a run as JSON lines; :func:`read_recording` and
:class:`RecordingReader` read them. The writer, a thread, is :class:`torchpar_top.sinks.recording.Recorder`;
the format, its encoder and its reader are here.

A recording is a header line (:class:`Header`: the format and its version, the protocol version, the
command line, the machine, the start time), then one line per snapshot, written and flushed as each is
taken: a ``kill -9`` loses at most the line being written, and a reader ignores a truncated last line.

A line is the snapshot as :func:`~torchpar_top.contract.codec.to_plain` writes it, with one saving: a
snapshot carries rolling histories (600 values per series, 120 per core, the last 200 log lines), and
consecutive snapshots share all but their newest values. So each history holds only the values the
previous line did not have, and ``"_keep": {path: n}`` says how many of the previous line's last values
come first (``"executors.0.history": 599``: the previous line's last 599, then the one in the line).
The encoding is exact: :class:`Decoder` rebuilds every snapshot equal to the one recorded (tested), and a
line alone still decodes to a typed :class:`~torchpar_top.contract.snapshot.Snapshot` (its histories
short). docs/benchmarks.md has the sizes and costs that chose this over whole snapshots.

Version 2 adds three things. Fields that rarely change (the description, which holds the workload's
arguments, and the target) are written once and then named in ``"_same": [...]`` (and written empty)
while they stay equal. Every :data:`KEYFRAME` lines a line is written whole (no ``_keep``, no
``_same``): a reader that indexes the file's keyframes seeks by decoding at most that many lines.
And snapshot times come from a monotonic clock (the header's ``t`` is the wall time of the start, each
line's ``t`` that plus the monotonic seconds since), so a wall clock stepped back loses nothing.

A recording is untrusted input (it travels between machines): the reader bounds what a line may cost
before decoding it (:data:`MAX_LINE_BYTES`, :data:`MAX_DIGITS`, the nesting depth, :data:`MAX_SPAN` for
times, :data:`MAX_GZIP_RATIO` for what a gzip file inflates to); a line that breaks a bound, or is not a
snapshot, ends the recording there, said in :attr:`RecordingReader.note`.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
import platform
import socket
import stat
import zlib
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from functools import cache
from importlib import metadata
from typing import IO, Any

from torchpar_top.contract import codec
from torchpar_top.contract.codec import (
    ProtocolError,
    bounded,
    dataclass,
    from_plain,
    required_fields,
    to_plain,
)
from torchpar_top.contract.snapshot import DERIVED, Snapshot

#: The header's ``format``: what tells a recording from a profiler trace.
FORMAT = "torchpar-top-recording"
#: The version of the line format this code writes.
FORMAT_VERSION = 2
#: The versions it reads (version 1 has no ``_same`` and no keyframes: a subset).
READS_VERSIONS = (1, 2)

#: Snapshot fields that are rolling histories (oldest first), written as deltas.
SNAPSHOT_HISTORIES = (
    "frontend_busy",
    "frontend_wait",
    "frontend_core_wait",
    "overlap",
    "overlap_high",
    "timing",
    "overlap_in_progress",
    "throughput_history",
    "log",
)
#: The same within each executor and each GPU.
EXECUTOR_HISTORIES = ("history", "busy", "running", "core_wait")
GPU_HISTORIES = ("util_history",)
#: How many new values per history :func:`delta` looks for before writing the history whole.
MAX_NEW = 64
#: Top-level snapshot fields written once and then named in ``_same`` while unchanged.
SAME_FIELDS = ("description", "target")
#: Every this many lines one is written whole (a keyframe: a seek decodes at most this many lines).
KEYFRAME = 200

#: Bounds on what a recording's reader accepts (untrusted input): the longest line...
MAX_LINE_BYTES = 16 << 20
#: ...the most digits of an integer (a 64-bit one has 19; a float's range ends at 309)...
MAX_DIGITS = 40
#: ...the longest a recording may span, in seconds (a year), and the latest time it may have (year 5138)...
MAX_SPAN = 366 * 86400.0
MAX_TIME = 1e11
#: ...and how much more than its compressed size a gzip file may inflate to past the first
#: :data:`GZIP_FREE` bytes (recordings inflate about 5 to 10 times; a bomb of whitespace about 1000).
MAX_GZIP_RATIO = 100
GZIP_FREE = 64 << 20
#: The most items ``Header.command`` holds (a run's arguments, however many: above the codec's
#: MAX_ITEMS, which bounds the snapshot's lists).
MAX_COMMAND = 1 << 20

_GZIP_MAGIC = b"\x1f\x8b"


class RecordingError(Exception):
    """A file that is not a recording this version reads; ``str(error)`` is one line saying why."""


def headless_output(path: str) -> RecordingError:
    """The error for ``--headless`` output given where a recording is wanted."""
    return RecordingError(
        f"{path} is --headless output (one summary object per sample), not a recording: "
        "record a run with --record FILE"
    )


@dataclass(frozen=True)
class Machine:
    """Where the recording was made."""

    hostname: str
    cores: int
    """Logical CPUs (``os.cpu_count()``)."""
    gpus: tuple[str, ...]
    """GPU names as NVML reports them in the first snapshot (empty without NVML or GPUs)."""
    torch: str | None
    """The installed torch's version (package metadata; the monitor never imports torch)."""
    python: str
    platform: str


@dataclass(frozen=True)
class Header:
    """The first line of a recording."""

    format: str
    version: int
    """:data:`FORMAT_VERSION` of the writer."""
    protocol: int
    """The agent protocol's version (``contract.messages.VERSION``) of the writer."""
    command: tuple[str, ...]
    """The command line, as typed after ``torchpar-top``."""
    started: str
    """Start time, ISO 8601 in UTC."""
    t: float
    """Start time, ``time.time()``."""
    interval: float = bounded(above=0.0)
    """Seconds between samples."""
    machine: Machine


def machine_info(snap: Snapshot | None) -> Machine:
    """This machine: host name, cores, the GPUs the snapshot shows, torch's version (without importing it)."""
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    gpus = tuple(g.name for g in snap.gpus) if snap is not None else ()
    return Machine(
        socket.gethostname(), os.cpu_count() or 1, gpus, torch, platform.python_version(), platform.platform()
    )


# -- the line format ------------------------------------------------------------------------------


def delta(prev: Sequence[Any], cur: Sequence[Any], added: int | None = None) -> tuple[int, tuple[Any, ...]]:
    """``(keep, new)`` with ``cur == prev[len(prev) - keep:] + new``: the ``added`` values appended since
    ``prev`` where that count is known (:attr:`Snapshot.samples` and the like) and agrees with the
    values, else the fewest new values (up to :data:`MAX_NEW`) that rebuild ``cur`` from ``prev``;
    ``(0, cur)`` when none do.

    Why the count: a history that keeps a fixed number of values and repeats one (a stream busy 100 %
    of every window) reads the same after a new value as before it, so the fewest new values is none:
    a recording of such a run gave its reader no new window once the history was full (600 of 800
    samples, before the counts)."""
    n, p = len(cur), len(prev)
    if added is not None and added >= 0:
        keep = n - min(added, n)
        if keep <= p and prev[p - keep :] == cur[:keep]:
            return keep, tuple(cur[keep:])
    if not p:
        return 0, tuple(cur)
    last = prev[-1]
    for m in range(0, min(n, MAX_NEW) + 1):
        keep = n - m
        if keep == 0 or keep > p or cur[keep - 1] != last:  # the cheap test first: the slices are long
            continue
        if prev[p - keep :] == cur[:keep]:
            return keep, tuple(cur[keep:])
    return 0, tuple(cur)


_INT = frozenset({int})


@cache
def history_path(field: str, i: int, name: str) -> str:
    """``executors.3.busy``: the path of the ``i``-th executor's (or GPU's) history in a line's ``_keep``
    and in ``Decoder.added`` (made once each)."""
    return f"{field}.{i}.{name}"


_SNAPSHOT_FIELDS = frozenset(f.name for f in dataclasses.fields(Snapshot))
#: The snapshot fields every line has (no default): decoded whatever a reader ``reads``.
REQUIRED = required_fields(Snapshot)


def _histories(snap: Snapshot) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Every history of a snapshot with its path."""
    for name in SNAPSHOT_HISTORIES:
        yield name, getattr(snap, name)
    for i, h in enumerate(snap.core_history):
        yield f"core_history.{i}", h
    for i, e in enumerate(snap.executors):
        for name in EXECUTOR_HISTORIES:
            yield history_path("executors", i, name), getattr(e, name)
    for i, g in enumerate(snap.gpus):
        for name in GPU_HISTORIES:
            yield history_path("gpus", i, name), getattr(g, name)
    for i, r in enumerate(snap.ranks):
        if r.steps is not None:
            yield f"ranks.{i}.steps.recent", r.steps.recent


def _counts(snap: Snapshot) -> Iterator[tuple[str, tuple[Any, int]]]:
    """The counted histories of a snapshot: path → (what the count belongs to, values appended so far);
    a count of 0 is not counted. A path names a place (the 3rd executor), so the count is compared only
    where the same executor (GPU, set of cores) is there in both snapshots."""
    if snap.samples:
        for name in SNAPSHOT_HISTORIES:
            if name != "log":  # its lines are numbered: no two read the same
                yield name, ((), snap.samples)
    if snap.host_samples:
        for i in range(len(snap.core_history)):
            yield f"core_history.{i}", (len(snap.core_history), snap.host_samples)
    for i, e in enumerate(snap.executors):
        if e.samples:
            for name in EXECUTOR_HISTORIES:
                yield history_path("executors", i, name), ((e.name, e.rank), e.samples)
    for i, g in enumerate(snap.gpus):
        if g.samples:
            for name in GPU_HISTORIES:
                yield history_path("gpus", i, name), ((g.index, g.uuid), g.samples)


def counted_between(before: int, after: int) -> int | None:
    """Values appended to a history between two of its counts (:attr:`Snapshot.samples` and the like),
    for :func:`delta`; None where either is 0 (not counted) or the count went back (another store)."""
    return after - before if before and after >= before else None


def _added(prev: tuple[Any, int] | None, cur: tuple[Any, int] | None) -> int | None:
    """Values appended between two counts of :func:`_counts` (None: not known, or another history)."""
    if prev is None or cur is None or prev[0] != cur[0]:
        return None
    return counted_between(prev[1], cur[1])


def _with_histories(snap: Snapshot, values: dict[str, Any]) -> Snapshot:
    """``snap`` with its histories replaced by ``values`` (by path)."""
    top = {name: values[name] for name in SNAPSHOT_HISTORIES}
    cores = tuple(values[f"core_history.{i}"] for i in range(len(snap.core_history)))
    executors = tuple(
        _replaced(e, {n: values[f"executors.{i}.{n}"] for n in EXECUTOR_HISTORIES})
        for i, e in enumerate(snap.executors)
    )
    gpus = tuple(
        _replaced(g, {n: values[f"gpus.{i}.{n}"] for n in GPU_HISTORIES}) for i, g in enumerate(snap.gpus)
    )
    ranks = tuple(
        r
        if r.steps is None
        else dataclasses.replace(
            r, steps=dataclasses.replace(r.steps, recent=values[f"ranks.{i}.steps.recent"])
        )
        for i, r in enumerate(snap.ranks)
    )
    return _replaced(
        snap, {"core_history": cores, "executors": executors, "gpus": gpus, "ranks": ranks, **top}
    )


def _replaced(obj: Any, changes: dict[str, Any]) -> Any:
    """A copy of the frozen dataclass ``obj`` with ``changes`` (histories of the same type, already checked):
    ``dataclasses.replace`` without running ``__init__`` again, a third of a line's decoding."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    return new


class Encoder:
    """Snapshots to recording lines, each history as a delta against the previous line's."""

    def __init__(self, keyframe: int = KEYFRAME) -> None:
        """``keyframe``: every this many lines one is written whole (0: only the first)."""
        self._prev: dict[str, Any] = {}
        self._keyframe = keyframe
        self._count = 0

    def encode(self, snap: Snapshot) -> dict[str, Any]:
        """The line for ``snap`` (a JSON-able dict); the next line is a delta against it."""
        plain, self._prev = self._encode(snap)
        self._count += 1
        return plain

    def _encode(self, snap: Snapshot) -> tuple[dict[str, Any], dict[str, Any]]:
        keyframe = self._keyframe > 0 and self._count % self._keyframe == 0
        prev: dict[str, Any] = {} if keyframe else self._prev
        keep: dict[str, int] = {}
        new: dict[str, tuple[Any, ...]] = {}
        current: dict[str, Any] = {}
        counts = dict(_counts(snap))
        for path, values in _histories(snap):
            current[path] = values
            count = counts.get(path)
            if count is not None:
                current["#" + path] = count
            k, added = delta(prev.get(path, ()), values, _added(prev.get("#" + path), count))
            if k:
                keep[path] = k
            new[path] = added
        plain = to_plain(_with_histories(snap, new))
        same = []
        for name in SAME_FIELDS:
            current[f"={name}"] = plain[name]
            if prev.get(f"={name}") == plain[name]:
                same.append(name)
                plain[name] = ""  # a line alone still decodes: its description short, as its histories
        if keep:
            plain["_keep"] = keep
        if same:
            plain["_same"] = same
        return plain, current

    def line(self, snap: Snapshot) -> str:
        """The line for ``snap``, compact JSON with its newline.

        Raises:
            ValueError: a number in it is NaN or infinite (not JSON); nothing changes, so the next line
                is a delta against the last line returned.
        """
        plain, current = self._encode(snap)
        text = codec.dumps(plain) + "\n"
        self._prev = current
        self._count += 1
        return text


class Decoder:
    """Recording lines back to the snapshots recorded (histories rebuilt on the previous line's)."""

    def __init__(
        self,
        prev: Snapshot | None = None,
        derived: bool = True,
        reads: Collection[str] | None = None,
        histories: bool | Collection[str] = True,
    ) -> None:
        """``derived=False``: the line's derived figures (``DERIVED``) are left out, neither decoded nor
        checked (``None`` in the snapshot), for a reader that computes those it shows (a sixth of a line's
        decoding).

        ``reads``: the only snapshot fields decoded (with those every line has, ``REQUIRED``); the others
        are neither decoded nor checked, and hold their defaults (empty, ``None``). ``executors.rank``
        reads, of each executor, its ``rank`` and the fields every executor has (``from_plain``'s
        ``only``). For a reader that says
        what it reads (the summary, the exports: tests/unit/test_export.py holds each to what it makes
        from every field): a line's decoding is mostly fields such a reader never looks at.

        ``histories``: which histories are rebuilt (``False``: none; or their names: ``frontend_busy``,
        ``core_history``, ``executors.busy``, ``gpus.util_history``, ``ranks.steps.recent``...); any other
        holds the values its line carried, not the history, and what its line keeps of it is not checked.
        For a reader of a few histories or none (the exports, the summary): with 8 ranks of 5 streams a
        line has 160 histories of up to 600 values.

        Raises:
            ValueError: ``reads`` names a field a snapshot does not have.
        """
        self._derived = derived
        self._histories: bool | frozenset[str] = (
            histories if isinstance(histories, bool) else frozenset(histories)
        )
        self.added: dict[str, int] = {}
        """History path → how many values the last line decoded added to it, for each history the line
        kept values of (one written whole is not here: how much of it is new, the line does not say)."""
        self._reads: frozenset[str] | None = None
        if reads is not None:
            tops = {name.partition(".")[0] for name in reads}  # "executors.rank": of executors, rank
            unknown = tops - _SNAPSHOT_FIELDS
            if unknown:
                raise ValueError(f"a snapshot has no field {sorted(unknown)[0]!r}")
            self._reads = frozenset(reads) | tops | REQUIRED
        self._prev: dict[str, tuple[Any, ...]] = dict(_histories(prev)) if prev is not None else {}
        self._same: dict[str, Any] = {n: getattr(prev, n) for n in SAME_FIELDS} if prev is not None else {}

    def decode(self, data: Any, where: str = "line") -> Snapshot:
        """The snapshot of one decoded JSON line.

        Raises:
            ProtocolError: the line is not a snapshot, or keeps more of a history than there was.
        """
        same = data.get("_same", []) if isinstance(data, dict) else []
        if not isinstance(same, list) or not all(isinstance(n, str) for n in same):
            raise ProtocolError(f"{where}: _same must list field names")
        reads = self._reads
        for name in same:
            if name not in self._same:
                raise ProtocolError(f"{where}: _same names {name!r}, which no line before gave")
            if reads is None or name in reads:
                data[name] = self._same[name]
        if not self._derived and isinstance(data, dict):
            for name in DERIVED:
                data.pop(name, None)
        snap = from_plain(Snapshot, data, where, reads)
        keep = data.get("_keep", {})
        if not isinstance(keep, dict) or not (
            set(map(type, keep.values())) <= _INT and min(keep.values(), default=0) >= 0
        ):
            raise ProtocolError(f"{where}: _keep must map history paths to counts")
        values: dict[str, tuple[Any, ...]] = {}
        self.added = added = {}
        prev = self._prev

        def rebuilt(path: str, new: tuple[Any, ...]) -> tuple[Any, ...]:
            k = keep.get(path, 0)
            if k:
                before = prev.get(path, ())
                if k > len(before):
                    raise ProtocolError(
                        f"{where}: {path}: keeps {k} values of a history that had {len(before)}"
                    )
                added[path] = len(new)
                new = (before if k == len(before) else before[len(before) - k :]) + new
            values[path] = new
            return new

        wanted = self._histories
        if wanted is not False:
            every = wanted is True
            names: frozenset[str] = frozenset() if isinstance(wanted, bool) else wanted
            # The objects were just built for this line and are held nowhere else: their histories are set in
            # place (each as _histories walks them), not copied again with dataclasses.replace.
            top = snap.__dict__
            for name in SNAPSHOT_HISTORIES:
                if (reads is None or name in reads) and (every or name in names):
                    top[name] = rebuilt(name, top[name])
            if every or "core_history" in names:
                top["core_history"] = tuple(
                    rebuilt(f"core_history.{i}", h) for i, h in enumerate(snap.core_history)
                )
            for name in EXECUTOR_HISTORIES:
                if every or f"executors.{name}" in names:
                    for i, e in enumerate(snap.executors):
                        e.__dict__[name] = rebuilt(history_path("executors", i, name), e.__dict__[name])
            for name in GPU_HISTORIES:
                if every or f"gpus.{name}" in names:
                    for i, g in enumerate(snap.gpus):
                        g.__dict__[name] = rebuilt(history_path("gpus", i, name), g.__dict__[name])
            if every or "ranks.steps.recent" in names:
                for i, r in enumerate(snap.ranks):
                    if r.steps is not None:
                        r.steps.__dict__["recent"] = rebuilt(f"ranks.{i}.steps.recent", r.steps.recent)
            if every and not keep.keys() <= values.keys():
                unknown = set(keep) - set(values)
                if reads is not None:  # a history of a field left out was not rebuilt, nor looked at
                    unknown = {path for path in unknown if path.partition(".")[0] in reads}
                if unknown:
                    raise ProtocolError(
                        f"{where}: _keep names no history of the line: {sorted(unknown)[0]!r}"
                    )
            self._prev = values
        self._same = {n: getattr(snap, n) for n in SAME_FIELDS}
        return snap


# -- writing --------------------------------------------------------------------------------------


def open_output(path: str, say: Callable[[str], None] | None = None) -> IO[str]:
    """Open ``path`` for writing a recording (or an export); gzipped when it ends in ``.gz`` (each flush
    ends a deflate block, so a killed writer leaves every line flushed before readable).

    A FIFO with no reader yet is waited for, said first through ``say`` (the open blocks until a reader
    comes; Ctrl-C gives up).

    Raises:
        RecordingError: it cannot be written (one line: the path and why).
    """
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode) and not _fifo_has_reader(path) and say is not None:
            say(f"waiting for a reader of FIFO {path} (Ctrl-C gives up)")
    except OSError:
        pass  # no such file yet: opened below
    try:
        if path.endswith(".gz"):
            return gzip.open(path, "wt", encoding="utf-8")
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise RecordingError(f"cannot write {path}: {exc.strerror or exc}") from None


def _fifo_has_reader(path: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: nobody reads it yet
        return False
    os.close(fd)
    return True


def check_writable(out: IO[str], path: str) -> None:
    """Write and flush nothing but what is buffered, and check the destination can take bytes: a full
    disk (or ``/dev/full``) is found before the run, not at its end.

    Raises:
        RecordingError: one line, the path and why.
    """
    try:
        out.flush()
        fd = out.fileno()
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            vfs = os.fstatvfs(fd)
            if vfs.f_bavail * vfs.f_frsize < MIN_FREE:
                raise OSError(28, os.strerror(28))
    except OSError as exc:
        raise RecordingError(f"cannot write {path}: {exc.strerror or exc}") from None


#: The least free space a file system must have for a recording or a report to be started on it.
MIN_FREE = 1 << 20


# -- reading --------------------------------------------------------------------------------------


def _open_for_reading(path: str) -> IO[bytes]:
    try:
        return open(path, "rb")
    except IsADirectoryError:
        raise RecordingError(f"{path} is a folder, not a recording") from None
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_bytes(path: str, limit: int) -> bytes:
    """The whole file (decompressed when gzipped), at most ``limit`` bytes: for a file read whole (an
    export read back).

    Raises:
        RecordingError: it cannot be read, is no gzip after gzip's first bytes, or is larger than ``limit``.
    """
    out = bytearray()
    with _open_for_reading(path) as f:
        for piece in _inflated(f, path):
            out += piece
            if len(out) > limit:
                raise RecordingError(f"{path}: larger than {limit >> 20} MiB, more than this reads whole")
    return bytes(out)


def _inflated(f: IO[bytes], path: str, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The file's bytes, gunzipped as they stream when it is gzip (members one after another, a member
    cut off by a killed writer up to where it ends), each piece at most ``chunk`` bytes.

    Raises:
        RecordingError: not gzip after gzip's first bytes, or it inflates more than
            :data:`MAX_GZIP_RATIO` times its size (a gzip bomb).
    """
    pending = f.read(chunk)
    if pending[:2] != _GZIP_MAGIC:
        while pending:
            yield pending
            pending = f.read(chunk)
        return
    read_in, out_total = len(pending), 0
    d = zlib.decompressobj(wbits=31)
    while True:
        if not pending:
            pending = f.read(chunk)
            read_in += len(pending)
            if not pending:
                return
        try:
            out = d.decompress(pending, chunk)
        except zlib.error as exc:
            raise RecordingError(f"{path}: not a readable gzip file ({exc})") from None
        if d.eof:  # another member may follow
            pending = d.unused_data
            d = zlib.decompressobj(wbits=31)
        else:
            pending = d.unconsumed_tail
        out_total += len(out)
        if out_total > GZIP_FREE and out_total > MAX_GZIP_RATIO * read_in:
            raise RecordingError(
                f"{path}: inflates to more than {MAX_GZIP_RATIO} times its compressed size "
                f"({out_total >> 20} MiB from {max(1, read_in >> 20)} MiB so far): a gzip bomb, not a "
                "recording"
            )
        if out:
            yield out


def _iter_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """The file's lines with their offsets in the (decompressed) stream, each with its newline but the
    last, without holding the whole file.

    Raises:
        RecordingError: it cannot be read, is no gzip after gzip's first bytes, is a gzip bomb, or has a
            line longer than :data:`MAX_LINE_BYTES`.
    """
    with _open_for_reading(path) as f:
        tail = b""
        offset = 0
        number = 1
        for out in _inflated(f, path):
            parts = (tail + out).split(b"\n")
            tail = parts.pop()
            for part in parts:
                yield offset, part + b"\n"
                offset += len(part) + 1
                number += 1
            if len(tail) > MAX_LINE_BYTES:
                raise RecordingError(
                    f"{path} line {number}: longer than {MAX_LINE_BYTES >> 20} MiB, not a recording's line"
                )
        if tail:
            yield offset, tail


def gunzip(data: bytes, limit: int = 0) -> bytes:
    """What can be decompressed of gzip ``data``, members one after another, without its end if it was
    cut off (a writer killed mid-stream): at most ``limit`` bytes when given.

    Raises:
        zlib.error: the data is not gzip.
    """
    out = bytearray()
    while data:
        d = zlib.decompressobj(wbits=31)
        out += d.decompress(data, max(0, limit - len(out))) if limit else d.decompress(data)
        if (limit and len(out) >= limit) or not d.eof:
            break
        data = d.unused_data
    return bytes(out)


def sniff(path: str) -> str:
    """What ``path`` holds, from its first bytes: ``"recording"``, ``"export"`` (a trace-event file written
    by ``torchpar-top export``), ``"headless"`` (``--headless`` output: no recording) or ``"trace"``
    (anything else: a profiler trace, or an error for the trace loader to name). Blank space before the
    first line is passed over."""
    if os.path.isdir(path):
        return "trace"
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        if head[:2] == _GZIP_MAGIC:
            head = gunzip(head, 1 << 16)
    except (OSError, zlib.error):
        return "trace"  # the trace loader says why it cannot be read
    first = head.lstrip().split(b"\n", 1)[0]
    if first.startswith((b'{"format":', b'{"format" :')):
        return "recording"
    if first.startswith(b'{"t":') and b'"experiment":' in first:
        return "headless"
    if b'"torchpar-top-export"' in head:
        return "export"
    return "trace"


class Lines(Sequence[bytes]):
    """A recording's lines kept compressed in memory, given back whole by index. Consecutive lines share
    most of their text, so each is compressed (zlib) with the first line of its block of :data:`BLOCK` as
    the preset dictionary: docs/benchmarks.md has the memory and the cost. (A gzipped recording's lines:
    a plain file's are read where they lie, :class:`FileLines`.)"""

    BLOCK = 100

    def __init__(self, lines: Iterable[bytes] = ()) -> None:
        self._packed: list[bytes] = []
        self._head = b""
        self._cached: tuple[int, bytes] = (-1, b"")
        for line in lines:
            self.append(line)

    def append(self, line: bytes) -> None:
        """Keep one more line."""
        if len(self._packed) % self.BLOCK == 0:
            self._head = line
            self._packed.append(zlib.compress(line, 1))
            return
        c = zlib.compressobj(1, zdict=self._head)
        self._packed.append(c.compress(line) + c.flush())

    def __len__(self) -> int:
        return len(self._packed)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        first = i - i % self.BLOCK
        if self._cached[0] != first:
            self._cached = (first, zlib.decompress(self._packed[first]))
        if i == first:
            return self._cached[1]
        d = zlib.decompressobj(zdict=self._cached[1])
        return d.decompress(self._packed[i]) + d.flush()

    def stored_bytes(self) -> int:
        """What the lines take, compressed."""
        return sum(len(p) for p in self._packed)


class FileLines(Sequence[bytes]):
    """A plain recording's lines read from the file where they lie: only each line's offset and length
    are held (12 bytes a line)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._offsets = array("q")
        self._lengths = array("l")

    def append(self, offset: int, length: int) -> None:
        """One more line, ``length`` bytes (its newline not counted) at ``offset``."""
        self._offsets.append(offset)
        self._lengths.append(length)

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        with _open_for_reading(self.path) as f:
            f.seek(self._offsets[i])
            return f.read(self._lengths[i])

    def __iter__(self) -> Iterator[bytes]:
        with _open_for_reading(self.path) as f:
            for offset, length in zip(self._offsets, self._lengths, strict=True):
                f.seek(offset)
                yield f.read(length)

    def stored_bytes(self) -> int:
        """What the index takes."""
        return self._offsets.itemsize * len(self._offsets) + self._lengths.itemsize * len(self._lengths)


@dataclass(frozen=True)
class Recording:
    """A recording indexed: its header, every snapshot line (raw, decoded on demand) and each one's time;
    the keyframes (lines written whole) a seek decodes from."""

    path: str
    header: Header
    lines: Sequence[bytes]
    times: Sequence[float]
    """Each line's snapshot ``t`` (never decreasing: a time before the one before is taken as that)."""
    note: str = ""
    """Where and why the reader stopped early (a truncated last line, a corrupt one), for the log;
    '' when it read the whole file."""
    keyframes: tuple[int, ...] = ()
    """Indexes of the lines written whole (sorted)."""

    def snapshots(
        self,
        derived: bool = True,
        reads: Collection[str] | None = None,
        histories: bool | Collection[str] = True,
    ) -> Iterator[Snapshot]:
        """Every snapshot, in order, exactly as recorded (``derived``, ``reads``, ``histories``: as
        :class:`Decoder`'s).

        Raises:
            RecordingError: a line that does not decode (named).
        """
        decoder = Decoder(derived=derived, reads=reads, histories=histories)
        for i, raw in enumerate(self.lines):
            yield decode_line(decoder, raw, f"{self.path} line {i + 2}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _bounded_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_DIGITS:
        raise ValueError(f"an integer of {digits} digits (at most {MAX_DIGITS})")
    return int(text)


def loads(raw: bytes | str) -> Any:
    """JSON with the reader's bounds: integers of at most :data:`MAX_DIGITS` digits (one past a float's
    range, or past Python's 4300 digits, is refused before it is converted), no NaN or infinity by name,
    a nesting Python's parser can take. (A float that overflows to infinity, ``1e999``, is refused where
    it is used: the codec takes finite numbers only, and a line's time is bounded.)

    Raises:
        ValueError: not JSON, or over a bound (the message says which).
    """
    try:
        return codec.loads(raw, parse_int=_bounded_int, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def decode_line(decoder: Decoder, raw: bytes, where: str) -> Snapshot:
    """One line through ``decoder``; any problem is a :class:`RecordingError` naming ``where``."""
    try:
        data = loads(raw)
    except ValueError as exc:  # not JSON, or over a bound
        raise RecordingError(f"{where}: not JSON ({exc})") from None
    try:
        return decoder.decode(data, where)
    except ProtocolError as exc:
        raise RecordingError(str(exc)) from None
    except RecursionError:
        raise RecordingError(f"{where}: nested too deeply") from None


def read_header(first: bytes, path: str) -> Header:
    """The header of a recording, checked: the format and a version this reads.

    Raises:
        RecordingError: not a recording, or another version of the format (one line).
    """
    try:
        data = loads(first)
    except ValueError:
        raise RecordingError(f"{path}: not a torchpar-top recording (its first line is not JSON)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RecordingError(f'{path}: not a torchpar-top recording (no "format": "{FORMAT}" header)')
    version = data.get("version")
    if version not in READS_VERSIONS:
        age = "an older" if isinstance(version, int) and version < min(READS_VERSIONS) else "a newer"
        raise RecordingError(
            f"{path}: recording format version {version!r} ({age} torchpar-top's); this "
            f"torchpar-top reads version {', '.join(map(str, READS_VERSIONS))}"
        )
    command = data.get("command")
    if (
        not isinstance(command, list)
        or len(command) > MAX_COMMAND
        or not all(isinstance(a, str) for a in command)
    ):
        raise RecordingError(
            f"{path}: bad recording header: header.command must be a list of at most {MAX_COMMAND} strings"
        )
    try:
        header = from_plain(Header, {**data, "command": []}, "header")
    except ProtocolError as exc:
        raise RecordingError(f"{path}: bad recording header: {exc}") from None
    return dataclasses.replace(header, command=tuple(command))


class RecordingReader:
    """A recording read once, front to back, holding only the line being read: its header (read when
    built), then :meth:`lines` (each line's time) or :meth:`snapshots` (decoded). What ``replay
    --summary`` and ``export`` stream; :func:`read_recording` indexes a file with it.

    A line that cannot be read (not JSON, over a bound, no time, a time outside the recording's span,
    cut off by a kill) ends the recording there: :attr:`note` says where and why, and what came before
    is kept.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Read the header.

        Raises:
            RecordingError: not a recording this version reads, or unreadable (one line).
        """
        self.path = os.fspath(path)
        self.note = ""
        """Where and why the reader stopped early, or ''."""
        self._raw = _iter_lines(self.path)
        self._number = 0
        header: Header | None = None
        for _offset, raw in self._raw:
            self._number += 1
            if not raw.strip():
                continue
            if not raw.endswith(b"\n") and not raw.strip().endswith(b"}"):
                break
            header = read_header(raw, self.path)
            break
        if header is None:
            raise RecordingError(f"{self.path}: empty, not a torchpar-top recording")
        self.header = header
        self._used = False
        self.decoder = Decoder()
        """The decoder of :meth:`snapshots` (what the last line added: its ``added``)."""

    def lines(self) -> Iterator[tuple[int, float, bytes, Any]]:
        """``(offset, t, raw line without its newline, the line's JSON)`` for every snapshot line, in
        order, until the end or a line that cannot be read (then :attr:`note`). Once only."""
        if self._used:
            raise RuntimeError("a RecordingReader reads its file once")
        self._used = True
        prev_t = -math.inf
        lo, hi = -MAX_TIME, MAX_TIME
        for offset, raw in self._raw:
            self._number += 1
            where = f"{self.path} line {self._number}"
            if not raw.endswith(b"\n"):  # the end of the file without a newline: cut off by a kill
                if raw.strip():
                    self.note = f"{where} ({len(raw)} bytes) was cut off while being written and is left out"
                return
            if not raw.strip():
                continue
            try:
                data = loads(raw)
            except ValueError as exc:
                self._stop(where, f"not a JSON object ({exc})")
                return
            t = data.get("t") if isinstance(data, dict) else None
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                self._stop(where, 'no time ("t") in the line')
                return
            if not lo <= t <= hi:
                self._stop(
                    where, f"time {t:.6g} is not within a year of the first line's ({lo + MAX_SPAN:.6g})"
                )
                return
            if prev_t == -math.inf:
                lo, hi = max(lo, t - MAX_SPAN), min(hi, t + MAX_SPAN)
            prev_t = max(prev_t, float(t))
            yield offset, prev_t, raw[:-1], data

    def _stop(self, where: str, why: str) -> None:
        self.note = f"{where}: {why}: the recording is read up to the line before it"

    def snapshots(
        self,
        derived: bool = True,
        reads: Collection[str] | None = None,
        histories: bool | Collection[str] = True,
    ) -> Iterator[Snapshot]:
        """Every snapshot, in order, decoded, until the end or a line that is not one (then :attr:`note`,
        and the snapshots before it are what there is). Once only. ``derived``, ``reads``,
        ``histories``: as :class:`Decoder`'s."""
        decoder = self.decoder = Decoder(derived=derived, reads=reads, histories=histories)
        first = True
        for _, _, _raw, data in self.lines():
            where = f"{self.path} line {self._number}"
            try:
                snap = decoder.decode(data, where)
            except ProtocolError as exc:
                if first:
                    raise RecordingError(str(exc)) from None
                self.note = f"{exc}: the recording is read up to the line before it"
                return
            except RecursionError:
                self._stop(where, "nested too deeply")
                return
            first = False
            yield snap


def read_recording(path: str, check: bool = False) -> Recording:
    """Index a recording (``.jsonl`` or gzipped) in one pass: its header, each line's time and where it
    lies, the keyframes. A plain file's lines stay in the file (:class:`FileLines`); a gzipped one's are
    kept compressed in memory (:class:`Lines`).

    A line that cannot be read ends the recording there, said in :attr:`Recording.note` (a kill's
    truncated last line, a corrupt line in the middle). With ``check``, every line is decoded too (about
    25 µs each, docs/benchmarks.md); without, a line that is JSON but no snapshot is found when
    :meth:`Recording.snapshots` (or a replay) reaches it.

    Raises:
        RecordingError: one line naming the file and why (not a recording, unreadable).
    """
    reader = RecordingReader(path)
    plain = not _is_gzip(reader.path)
    lines: FileLines | Lines = FileLines(reader.path) if plain else Lines()
    times = array("d")
    keyframes = []
    for offset, t, raw, data in reader.lines():
        if isinstance(data, dict) and "_keep" not in data and "_same" not in data:
            keyframes.append(len(times))
        times.append(t)
        if isinstance(lines, FileLines):
            lines.append(offset, len(raw))
        else:
            lines.append(raw)
    rec = Recording(reader.path, reader.header, lines, times, reader.note, tuple(keyframes))
    if check:
        for _ in rec.snapshots():
            pass
    return rec


def _is_gzip(path: str) -> bool:
    with _open_for_reading(path) as f:
        return f.read(2) == _GZIP_MAGIC
