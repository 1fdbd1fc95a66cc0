"""Reading profiler traces: one ``.json`` / ``.json.gz`` file, or a folder of per-rank files.

Every way a trace can fail to load is one :class:`TraceError` with a one-line message for a person.

A trace is untrusted input (it travels between machines): what it may cost is bounded before or while it
is read: what a gzip file inflates to (:data:`MAX_TRACE_BYTES`), numbers JSON cannot hold as a float
(skipped with the event), the number of streams (:data:`MAX_STREAMS`) and the span of its events
(:data:`MAX_SPAN_US`: an absurd ``ts`` or ``dur`` would make every frame of the replay, and its memory,
huge).
"""

from __future__ import annotations

import gc
import json
import os
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torchpar_top.analysis.events import Event, events_from_chrome

#: File names a folder of traces may hold (``rank-0.json.gz``, ``x.pt.trace.json.gz``, ``y.json``).
TRACE_SUFFIXES = (".json", ".json.gz")

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_GZIP_MAGIC = b"\x1f\x8b"
_NOT_SPACE = re.compile(rb"\S")

#: The most a trace file may hold once gunzipped (Kineto traces of a few steps are tens of MB; a long
#: one a few GB).
MAX_TRACE_BYTES = 4 << 30
#: Past its first GZIP_FREE bytes, a gzip trace may inflate at most this many times its compressed size
#: (JSON traces inflate about 10 to 20 times; a bomb of blank space about 1000).
MAX_GZIP_RATIO = 100
GZIP_FREE = 64 << 20
#: The most GPU streams one rank's trace may have (a rank drives one device, which has a few dozen).
MAX_STREAMS = 256
#: The longest span a trace's events may cover: a day, in µs (profiler traces cover seconds to minutes).
MAX_SPAN_US = 86400e6


class TraceError(Exception):
    """A trace that cannot be read; ``str(error)`` is one line saying why."""


@dataclass(frozen=True)
class RankTrace:
    """The events of one rank's trace file."""

    rank: int
    path: str
    events: tuple[Event, ...]
    metadata: dict[str, Any]
    """The trace's top-level fields other than ``traceEvents`` (``deviceProperties``...)."""


@dataclass(frozen=True)
class Trace:
    """A loaded trace: one or more ranks, sorted by rank."""

    path: str
    ranks: tuple[RankTrace, ...]


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Load a trace file or a folder of rank traces.

    Args:
        path: a ``.json`` or ``.json.gz`` Chrome trace, or a folder of them (one per rank).

    Returns:
        The trace, ranks sorted. A rank comes from ``distributedInfo.rank``, else from the file name
        (``rank-3``, ``rank_3``), else it is 0.

    Raises:
        TraceError: the path is missing, unreadable, not a Chrome trace, or has no events.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        try:
            names = sorted(n for n in os.listdir(path) if n.endswith(TRACE_SUFFIXES))
        except OSError as exc:
            raise TraceError(f"{path}: {exc.strerror or exc}") from None
        if not names:
            raise TraceError(f"{path}: no trace files (*.json, *.json.gz) in this folder")
        ranks = [load_rank(os.path.join(path, n)) for n in names]
    elif os.path.exists(path):
        ranks = [load_rank(path)]
    else:
        raise TraceError(f"{path}: no such file or folder")
    by_rank: dict[int, RankTrace] = {}
    for r in ranks:
        if r.rank in by_rank:
            raise TraceError(
                f"{path}: two traces claim rank {r.rank}: "
                f"{os.path.basename(by_rank[r.rank].path)} and {os.path.basename(r.path)}"
            )
        by_rank[r.rank] = r
    return Trace(path, tuple(by_rank[k] for k in sorted(by_rank)))


def load_rank(path: str) -> RankTrace:
    """Load one trace file (gzipped or not, whatever its name says)."""
    data = _read(path)
    with _no_cyclic_gc():
        document = _parse(path, data)
        if isinstance(document, list):
            document = {"traceEvents": document}
        if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
            raise TraceError(
                f"{path}: not a Chrome trace (no traceEvents list); expected a torch.profiler "
                "export (.json or .json.gz)"
            )
        events = tuple(events_from_chrome(document))
    if not events:
        raise TraceError(f"{path}: the trace has no events")
    _check_bounds(path, events)
    metadata = {k: v for k, v in document.items() if k != "traceEvents"}
    return RankTrace(_rank(path, metadata), path, events, metadata)


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building a trace's objects (none of them form cycles):
    otherwise it rescans them all again and again, and loading takes twice as long."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_bounds(path: str, events: tuple[Event, ...]) -> None:
    """Refuse a trace whose streams or span would make the analysis huge (one line: what and where)."""
    streams = {(e.device, e.stream) for e in events if e.stream is not None}
    if len(streams) > MAX_STREAMS:
        raise TraceError(f"{path}: {len(streams)} GPU streams in one trace, at most {MAX_STREAMS}")
    first = min(e.ts for e in events)
    last = max(e.ts + max(e.dur, 0.0) for e in events)
    if last - first > MAX_SPAN_US:
        worst = max(events, key=lambda e: max(e.ts - first, e.ts + max(e.dur, 0.0) - first))
        raise TraceError(
            f"{path}: its events span {(last - first) / 3.6e9:.3g} hours (event {worst.name!r} at ts "
            f"{worst.ts:.17g}, dur {worst.dur:.17g}), at most {MAX_SPAN_US / 3.6e9:g}: not a profiler trace"
        )


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    if not data.startswith(_GZIP_MAGIC):
        if path.endswith(".gz"):
            raise TraceError(f"{path}: not a gzip file, though its name ends in .gz")
        if len(data) > MAX_TRACE_BYTES:
            raise TraceError(f"{path}: {len(data) >> 20} MiB, more than {MAX_TRACE_BYTES >> 20} MiB")
        return data
    try:
        return _gunzip(data, MAX_TRACE_BYTES)
    except EOFError:
        raise TraceError(f"{path}: truncated gzip file (it ends before the compressed data does)") from None
    except ValueError as exc:
        raise TraceError(f"{path}: {exc}") from None
    except (OSError, zlib.error) as exc:
        raise TraceError(f"{path}: corrupt gzip file ({exc})") from None


def _gunzip(data: bytes, limit: int) -> bytes:
    """gzip ``data`` decompressed (members one after another), at most ``limit`` bytes, and past
    :data:`GZIP_FREE` at most :data:`MAX_GZIP_RATIO` times the compressed size.

    Raises:
        ValueError: it inflates past a bound (a gzip bomb, or a trace too large to analyse).
        EOFError: it ends before the compressed data does.
        zlib.error: it is not gzip.
    """
    out = bytearray()
    size = len(data)
    bound = min(limit, max(GZIP_FREE, MAX_GZIP_RATIO * size))
    while data:
        d = zlib.decompressobj(wbits=31)
        while True:
            out += d.decompress(data, 1 << 24)
            data = d.unconsumed_tail
            if len(out) > bound:
                raise ValueError(
                    f"inflates to more than {bound >> 20} MiB from {size >> 10} KiB: a gzip bomb, or a trace "
                    "too large to analyse"
                )
            if d.eof or not data:
                break
        if not d.eof:
            raise EOFError
        data = d.unused_data.lstrip(b"\0")
    return bytes(out)


def _parse(path: str, data: bytes) -> Any:
    start = _NOT_SPACE.search(data)
    if start is None:
        raise TraceError(
            f"{path}: the file is empty" if not data else f"{path}: the file is only blank space"
        )
    head = data[start.start() : start.start() + 64]
    if head[:1] not in (b"{", b"["):
        raise TraceError(
            f"{path}: unknown format, not JSON; expected a torch.profiler Chrome trace (.json or .json.gz)"
        )
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise TraceError(f"{path}: unknown format, not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        where = "truncated JSON" if exc.pos >= len(data.rstrip()) else "invalid JSON"
        raise TraceError(f"{path}: {where} (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise TraceError(f"{path}: invalid JSON (nested too deeply)") from None
    except ValueError as exc:  # an integer of more digits than Python converts (4300)
        raise TraceError(f"{path}: invalid JSON ({exc})") from None


def _rank(path: str, metadata: dict[str, Any]) -> int:
    info = metadata.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, int) and not isinstance(rank, bool):
        return rank
    match = _RANK_IN_NAME.search(os.path.basename(path))
    return int(match.group(1)) if match else 0
