"""Recordings: ``--record FILE`` keeps every snapshot of a run as JSON lines; :func:`read_recording` reads
them.

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
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import platform
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from importlib import metadata
from typing import IO, Any

from torchpar_top.contract.codec import ProtocolError, bounded, dataclass, from_plain, to_plain
from torchpar_top.contract.messages import VERSION as PROTOCOL_VERSION
from torchpar_top.contract.snapshot import Snapshot

#: The header's ``format``: what tells a recording from a profiler trace.
FORMAT = "torchpar-top-recording"
#: The version of the line format this code writes and reads.
FORMAT_VERSION = 1

#: Snapshot fields that are rolling histories (oldest first), written as deltas.
SNAPSHOT_HISTORIES = (
    "frontend_busy",
    "frontend_wait",
    "frontend_core_wait",
    "overlap",
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


def delta(prev: Sequence[Any], cur: Sequence[Any]) -> tuple[int, tuple[Any, ...]]:
    """``(keep, new)`` with ``cur == prev[len(prev) - keep:] + new``: the fewest new values (up to
    :data:`MAX_NEW`) that rebuild ``cur`` from ``prev``; ``(0, cur)`` when none do."""
    n, p = len(cur), len(prev)
    for m in range(0, min(n, MAX_NEW) + 1):
        keep = n - m
        if keep == 0 or keep > p:
            continue
        if prev[p - keep :] == cur[:keep]:
            return keep, tuple(cur[keep:])
    return 0, tuple(cur)


def _rebuild(prev: Sequence[Any], keep: int, new: tuple[Any, ...], where: str) -> tuple[Any, ...]:
    if keep == 0:
        return new
    if keep > len(prev):
        raise ProtocolError(f"{where}: keeps {keep} values of a history that had {len(prev)}")
    return tuple(prev[len(prev) - keep :]) + new


def _histories(snap: Snapshot) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Every history of a snapshot with its path."""
    for name in SNAPSHOT_HISTORIES:
        yield name, getattr(snap, name)
    for i, h in enumerate(snap.core_history):
        yield f"core_history.{i}", h
    for i, e in enumerate(snap.executors):
        for name in EXECUTOR_HISTORIES:
            yield f"executors.{i}.{name}", getattr(e, name)
    for i, g in enumerate(snap.gpus):
        for name in GPU_HISTORIES:
            yield f"gpus.{i}.{name}", getattr(g, name)
    for i, r in enumerate(snap.ranks):
        if r.steps is not None:
            yield f"ranks.{i}.steps.recent", r.steps.recent


def _with_histories(snap: Snapshot, values: dict[str, Any]) -> Snapshot:
    """``snap`` with its histories replaced by ``values`` (by path)."""
    top = {name: values[name] for name in SNAPSHOT_HISTORIES}
    cores = tuple(values[f"core_history.{i}"] for i in range(len(snap.core_history)))
    executors = tuple(
        dataclasses.replace(e, **{n: values[f"executors.{i}.{n}"] for n in EXECUTOR_HISTORIES})
        for i, e in enumerate(snap.executors)
    )
    gpus = tuple(
        dataclasses.replace(g, **{n: values[f"gpus.{i}.{n}"] for n in GPU_HISTORIES})
        for i, g in enumerate(snap.gpus)
    )
    ranks = tuple(
        r
        if r.steps is None
        else dataclasses.replace(
            r, steps=dataclasses.replace(r.steps, recent=values[f"ranks.{i}.steps.recent"])
        )
        for i, r in enumerate(snap.ranks)
    )
    return dataclasses.replace(snap, core_history=cores, executors=executors, gpus=gpus, ranks=ranks, **top)


class Encoder:
    """Snapshots to recording lines, each history as a delta against the previous line's."""

    def __init__(self) -> None:
        self._prev: dict[str, tuple[Any, ...]] = {}

    def encode(self, snap: Snapshot) -> dict[str, Any]:
        """The line for ``snap`` (a JSON-able dict); the next line is a delta against it."""
        plain, self._prev = self._encode(snap)
        return plain

    def _encode(self, snap: Snapshot) -> tuple[dict[str, Any], dict[str, tuple[Any, ...]]]:
        keep: dict[str, int] = {}
        new: dict[str, tuple[Any, ...]] = {}
        current: dict[str, tuple[Any, ...]] = {}
        for path, values in _histories(snap):
            current[path] = values
            k, added = delta(self._prev.get(path, ()), values)
            if k:
                keep[path] = k
            new[path] = added
        plain = to_plain(_with_histories(snap, new))
        if keep:
            plain["_keep"] = keep
        return plain, current

    def line(self, snap: Snapshot) -> str:
        """The line for ``snap``, compact JSON with its newline.

        Raises:
            ValueError: a number in it is NaN or infinite (not JSON); nothing changes, so the next line
                is a delta against the last line returned.
        """
        plain, current = self._encode(snap)
        text = json.dumps(plain, separators=(",", ":"), allow_nan=False) + "\n"
        self._prev = current
        return text


class Decoder:
    """Recording lines back to the snapshots recorded (histories rebuilt on the previous line's)."""

    def __init__(self, prev: Snapshot | None = None) -> None:
        self._prev: dict[str, tuple[Any, ...]] = dict(_histories(prev)) if prev is not None else {}

    def decode(self, data: Any, where: str = "line") -> Snapshot:
        """The snapshot of one decoded JSON line.

        Raises:
            ProtocolError: the line is not a snapshot, or keeps more of a history than there was.
        """
        snap = from_plain(Snapshot, data, where)
        keep = data.get("_keep", {})
        if not isinstance(keep, dict) or not all(
            isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in keep.values()
        ):
            raise ProtocolError(f"{where}: _keep must map history paths to counts")
        values = {}
        for path, added in _histories(snap):
            values[path] = _rebuild(self._prev.get(path, ()), keep.get(path, 0), added, f"{where}: {path}")
        unknown = set(keep) - set(values)
        if unknown:
            raise ProtocolError(f"{where}: _keep names no history of the line: {sorted(unknown)[0]!r}")
        self._prev = values
        return _with_histories(snap, values)


# -- writing --------------------------------------------------------------------------------------


def open_output(path: str) -> IO[str]:
    """Open ``path`` for writing a recording (or an export); gzipped when it ends in ``.gz`` (each flush
    ends a deflate block, so a killed writer leaves every line flushed before readable).

    Raises:
        RecordingError: it cannot be written (one line: the path and why).
    """
    try:
        if path.endswith(".gz"):
            return gzip.open(path, "wt", encoding="utf-8")
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise RecordingError(f"cannot write {path}: {exc.strerror or exc}") from None


class Recorder:
    """Writes a session's snapshots to a file: a small thread takes ``session.snapshot()`` after each
    host sample (as headless mode does), so the TUI and headless mode record the same thing."""

    def __init__(
        self, session: Any, out: IO[str], command: Sequence[str], clock: Callable[[], float] = time.time
    ) -> None:
        """Nothing is written until :meth:`start` (or :meth:`write`)."""
        self.session = session
        self._out = out
        self._command = tuple(command)
        self._clock = clock
        self._started = clock()
        self._encoder = Encoder()
        self._header_written = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen = -1
        self.lines = 0
        """Snapshot lines written."""
        self.error: str | None = None
        """Why recording stopped early (the disk filled...), or None."""
        self.skipped = 0
        """Snapshots left out because a number in them was not finite (not JSON)."""
        self.skip_reason = ""

    def start(self) -> None:
        """Start the recording thread."""
        self._thread = threading.Thread(target=self._loop, name="tpt-recorder", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.session.interval / 4):
            self._take()

    def _take(self) -> None:
        samples = self.session.host_samples
        if samples in (self._seen, 0):
            return
        self._seen = samples
        self.write(self.session.snapshot())

    def write(self, snap: Snapshot) -> None:
        """Write ``snap`` as the next line (after the header, the first time), and flush."""
        with self._lock:
            if self.error is not None or self._out.closed:
                return
            try:
                line = self._encoder.line(snap)
            except ValueError as exc:  # a NaN somewhere: this snapshot is left out, the next ones are not
                self.skipped += 1
                self.skip_reason = str(exc)
                return
            try:
                if not self._header_written:
                    self._write_header(snap)
                self._out.write(line)
                self._out.flush()
                self.lines += 1
            except (OSError, ValueError) as exc:
                self.error = f"recording stopped: {exc}"

    def _write_header(self, snap: Snapshot | None) -> None:
        header = Header(
            FORMAT,
            FORMAT_VERSION,
            PROTOCOL_VERSION,
            self._command,
            datetime.fromtimestamp(self._started, timezone.utc).isoformat(timespec="seconds"),
            self._started,
            self.session.interval,
            machine_info(snap),
        )
        self._out.write(json.dumps(to_plain(header), separators=(",", ":")) + "\n")
        self._out.flush()
        self._header_written = True

    def close(self) -> None:
        """Stop the thread, write the last snapshot if it is new, close the file. Idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        if not self._out.closed:
            try:
                self._take()
                with self._lock:
                    if not self._header_written and self.error is None:
                        self._write_header(None)
            except (OSError, ValueError) as exc:
                self.error = f"recording stopped: {exc}"
            finally:
                try:
                    self._out.close()
                except OSError as exc:
                    self.error = self.error or f"recording stopped: {exc}"


# -- reading --------------------------------------------------------------------------------------


def read_bytes(path: str) -> bytes:
    """The file's bytes, gunzipped when it is gzip (a recording or an export, ``.gz`` or not)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except IsADirectoryError:
        raise RecordingError(f"{path} is a folder, not a recording") from None
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gunzip(data)
        except zlib.error as exc:
            raise RecordingError(f"{path}: not a readable gzip file ({exc})") from None
    return data


def _iter_lines(path: str, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The file's lines, each with its newline but the last (gzip decompressed as it streams, what a
    killed writer left of it included), without holding the whole file.

    Raises:
        RecordingError: it cannot be read, or is no gzip after gzip's first bytes.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 opened apart from the with below: its errors get their own words
    except IsADirectoryError:
        raise RecordingError(f"{path} is a folder, not a recording") from None
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f:
        first = f.read(chunk)
        gz = first[:2] == _GZIP_MAGIC
        d = zlib.decompressobj(wbits=31) if gz else None
        tail = b""
        data = first
        while data:
            if d is not None:
                try:
                    out = d.decompress(data)
                    while d.eof and d.unused_data:  # another gzip member follows
                        rest, d = d.unused_data, zlib.decompressobj(wbits=31)
                        out += d.decompress(rest)
                except zlib.error as exc:
                    raise RecordingError(f"{path}: not a readable gzip file ({exc})") from None
            else:
                out = data
            parts = (tail + out).split(b"\n")
            tail = parts.pop()
            for part in parts:
                yield part + b"\n"
            data = f.read(chunk)
        if tail:
            yield tail


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
    (anything else: a profiler trace, or an error for the trace loader to name)."""
    if os.path.isdir(path):
        return "trace"
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        if head[:2] == _GZIP_MAGIC:
            head = gunzip(head, 4096)
    except (OSError, zlib.error):
        return "trace"  # the trace loader says why it cannot be read
    first = head.split(b"\n", 1)[0].lstrip()
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
    the preset dictionary: docs/benchmarks.md has the memory and the cost."""

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


@dataclass(frozen=True)
class Recording:
    """A recording read back: its header and every snapshot line (raw, decoded on demand)."""

    path: str
    header: Header
    lines: Sequence[bytes]
    times: tuple[float, ...]
    """Each line's snapshot ``t``."""
    note: str = ""
    """Something the reader left out (a truncated last line), for the log; '' when nothing."""

    def snapshots(self) -> Iterator[Snapshot]:
        """Every snapshot, in order, exactly as recorded.

        Raises:
            RecordingError: a line that does not decode (named).
        """
        decoder = Decoder()
        for i, raw in enumerate(self.lines):
            yield decode_line(decoder, raw, f"{self.path} line {i + 2}")


def decode_line(decoder: Decoder, raw: bytes, where: str) -> Snapshot:
    """One line through ``decoder``; any problem is a :class:`RecordingError` naming ``where``."""
    try:
        return decoder.decode(json.loads(raw), where)
    except ProtocolError as exc:
        raise RecordingError(str(exc)) from None
    except ValueError as exc:  # not JSON
        raise RecordingError(f"{where}: not JSON ({exc})") from None


def read_header(first: bytes, path: str) -> Header:
    """The header of a recording, checked: the format and this version.

    Raises:
        RecordingError: not a recording, or another version of the format (one line).
    """
    try:
        data = json.loads(first)
    except ValueError:
        raise RecordingError(f"{path}: not a torchpar-top recording (its first line is not JSON)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RecordingError(f'{path}: not a torchpar-top recording (no "format": "{FORMAT}" header)')
    version = data.get("version")
    if version != FORMAT_VERSION:
        age = "an older" if isinstance(version, int) and version < FORMAT_VERSION else "a newer"
        raise RecordingError(
            f"{path}: recording format version {version!r} ({age} torchpar-top's); this "
            f"torchpar-top reads version {FORMAT_VERSION}"
        )
    try:
        return from_plain(Header, data, "header")
    except ProtocolError as exc:
        raise RecordingError(f"{path}: bad recording header: {exc}") from None


def read_recording(path: str, check: bool = False) -> Recording:
    """Read a recording (``.jsonl`` or gzipped): its header, and each line's time.

    A last line without its newline (a ``kill -9`` while writing) is left out and said in
    :attr:`Recording.note`; a line that is not JSON is an error. With ``check``, every line is decoded
    too (about a millisecond each, docs/benchmarks.md); without, a line that is JSON but no snapshot
    is found when :meth:`Recording.snapshots` (or a replay) reaches it.

    Raises:
        RecordingError: one line naming the file, the line and why.
    """
    path = os.fspath(path)
    header: Header | None = None
    lines = Lines()
    times: list[float] = []
    note = ""
    for raw in _iter_lines(path):
        if not raw.endswith(b"\n"):  # the end of the file without a newline: cut off by a kill
            if raw.strip():
                note = (
                    f"{path}: the last line ({len(raw)} bytes) was cut off while being written and is "
                    "left out"
                )
            break
        if header is None:
            if not raw.strip():
                break
            header = read_header(raw, path)
            continue
        if not raw.strip():
            continue
        where = f"{path} line {len(lines) + 2}"
        try:
            t = json.loads(raw).get("t")
        except (ValueError, AttributeError) as exc:
            raise RecordingError(f"{where}: not a JSON object ({exc})") from None
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            raise RecordingError(f'{where}: no time ("t") in the line')
        times.append(float(t))
        lines.append(raw[:-1])
    if header is None:
        raise RecordingError(f"{path}: empty, not a torchpar-top recording")
    rec = Recording(path, header, lines, tuple(times), note)
    if check:
        for _ in rec.snapshots():
            pass
    return rec
