"""Per-collective cost from torch's own flight recorder, where the user turned it on.

torch.distributed keeps a ring buffer of the collectives each process group issued (the *flight
recorder*) when ``TORCH_FR_BUFFER_SIZE`` (older: ``TORCH_NCCL_TRACE_BUFFER_SIZE``) is above 0: per
collective its name (``nccl:all_reduce``, ``gloo:all_reduce``...), process group, sequence number, sizes,
state and, on NCCL with ``TORCH_NCCL_ENABLE_TIMING=1``, ``duration_ms``: the time between CUDA events
recorded before and after it on the NCCL stream (GPU time of the collective itself, not the host's wait).
torch keeps two rings and dumps each as JSON (the dump its watchdog writes on a timeout): NCCL's,
``torch._C._distributed_c10d._dump_nccl_trace_json`` (``FlightRecorder<CUDAEvent>``, present only in a
build with NCCL), and the generic one that Gloo and other CPU backends write, ``_dump_fr_trace_json``
(2.7 and later). Both are read, each with its own record ids: on a CUDA build the generic dump holds none
of the NCCL collectives (seen on an H100 with torch 2.11: reading it alone logged nothing), and a CPU
build has no NCCL dump at all.

:class:`FlightRecorderReader` reads the dump now and then (``EVERY_S``, on the agent's sampler thread,
never the frontend) and sums the collectives that finished since its last read, by name: how many, and
their NCCL time where measured. Gloo records the collectives but no timing (``duration_ms`` absent):
the counts are shown, the time is said to be unknown. The agent writes one log line per read with
something new (``Agent.log``), and reads once more when the user's code destroys the process group
(``CollectiveWatch.final``, from the step anatomy's ``destroy_process_group`` wrapper), so that a job
shorter than a read's spacing is logged too; each rank's ``comm`` phase (time the frontend waited in
collectives) is the step anatomy's.

Reading costs torch's dump of the whole ring and a JSON parse, and grows faster than the ring (measured on
this 2-core VM under load, Gloo, 2 ranks: 500 entries 0.23 MB, 6.6 ms; 2,000 entries 0.94 MB, 100-137 ms;
20,000 entries 9.5 MB, 2.3 s; docs/benchmarks.md). So the reads are spaced to keep their cost under
:data:`READ_SHARE` of the wall time: every 5 s at a few hundred entries, every 10-14 s at 2,000, minutes
at 20,000; the counts stay exact across the gaps (record ids are consecutive; what left the ring is
counted, not named). On NCCL: untested on hardware (``benchmarks/gpu_check.py``'s
``nccl_flight_recorder`` check).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The environment variables that size the flight recorder's ring (the first set one counts).
BUFFER_ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
#: Seconds between two reads of the ring, at least.
EVERY_S = 5.0
#: The most of the wall time reading may take: a read that took ``c`` seconds waits ``c / READ_SHARE``
#: before the next one (a large ring is read less often).
READ_SHARE = 0.01


def buffer_size() -> int:
    """Entries the user asked the flight recorder to keep (0: off)."""
    for name in BUFFER_ENV:
        value = os.environ.get(name)
        if value is not None:
            try:
                return max(0, int(value))
            except ValueError:
                return 0
    return 0


#: torch's JSON dumps of its flight recorders, NCCL's first: each a ring of its own.
DUMP_NAMES = ("_dump_nccl_trace_json", "_dump_fr_trace_json")


def dump_functions() -> list[Callable[..., Any]]:
    """The JSON dumps of the flight recorders this torch has (none without torch.distributed)."""
    try:
        import torch._C._distributed_c10d as c10d
    except ImportError:  # torch built without distributed
        return []
    return [fn for fn in (getattr(c10d, name, None) for name in DUMP_NAMES) if fn is not None]


@dataclass
class CollectiveCost:
    """The collectives of one name that finished since the previous read."""

    name: str
    count: int = 0
    timed: int = 0
    """How many of them carried ``duration_ms`` (NCCL with ``TORCH_NCCL_ENABLE_TIMING=1``)."""
    seconds: float = 0.0
    """Their measured time, summed (over the :attr:`timed` ones)."""

    @property
    def mean(self) -> float | None:
        """Mean seconds per timed collective, or None when none was timed."""
        return self.seconds / self.timed if self.timed else None


def finished(entry: dict[str, Any]) -> bool:
    """A collective is done: completed (its end event seen) or retired (its work object finished)."""
    return entry.get("state") == "completed" or bool(entry.get("retired"))


class FlightRecorderReader:
    """New finished collectives since the last read, by name, from ``dump()``'s JSON."""

    def __init__(self, dump: Callable[..., Any] | None) -> None:
        self._dump = dump
        self._last = -1
        """The last record id counted: entries up to it are counted."""

    @property
    def available(self) -> bool:
        """torch has the dump."""
        return self._dump is not None

    lost: int = 0
    """Collectives of the last read that had left the ring before it was read (counted in no name)."""

    def read(self) -> dict[str, CollectiveCost]:
        """Read the ring once; the collectives finished since the previous read (in record order, up to
        the first one not finished, so that none is counted twice nor skipped)."""
        if self._dump is None:
            return {}
        raw = self._dump(includeCollectives=True, onlyActive=False)
        return self.add(json.loads(raw))

    def add(self, dump: dict[str, Any]) -> dict[str, CollectiveCost]:
        """Fold one parsed dump in (see :meth:`read`)."""
        entries = sorted(
            (e for e in dump.get("entries") or () if isinstance(e.get("record_id"), int)),
            key=lambda e: e["record_id"],
        )
        last = self._last
        if entries and entries[-1]["record_id"] < last:
            last = -1  # the recorder was reset (ids start over)
        out: dict[str, CollectiveCost] = {}
        start = last
        self.lost = 0
        for e in entries:
            rid = e["record_id"]
            if rid <= last:
                continue
            if not finished(e):
                break
            if last == start and rid > start + 1:
                # record ids are consecutive from 0: these were overwritten before this read
                self.lost = rid - start - 1
            name = str(e.get("profiling_name") or "?")
            cost = out.setdefault(name, CollectiveCost(name))
            cost.count += 1
            duration = e.get("duration_ms")
            if isinstance(duration, (int, float)) and duration >= 0:
                cost.timed += 1
                cost.seconds += duration / 1000.0
            last = rid
        self._last = last
        return out


def describe(costs: dict[str, CollectiveCost], seconds: float, lost: int = 0, who: str = "") -> str:
    """One log line: ``collectives over 5.0 s (flight recorder): nccl:all_reduce ×120 (3.20 ms each...)``;
    with ``lost``, the ring was too small to keep them all: the total is said, the names are the kept."""
    parts = []
    for c in sorted(costs.values(), key=lambda c: (-c.seconds, -c.count, c.name)):
        mean = c.mean
        time = "time unknown" if mean is None else f"{mean * 1000:.3g} ms each, {c.seconds:.3g} s in all"
        parts.append(f"{c.name} ×{c.count} ({time})")
    kept = sum(c.count for c in costs.values())
    head = f"{who}collectives over {seconds:.1f} s (flight recorder)"
    if lost:
        head += f": {kept + lost} in all, the last {kept} still in its ring (TORCH_FR_BUFFER_SIZE)"
    return head + ": " + "; ".join(parts)


class CollectiveWatch:
    """The agent's hook (``Agent.on_sample``): every :data:`EVERY_S`, once the process group exists, one
    log line with the collectives that finished since the last (nothing while none finished), from
    every flight recorder torch has (``readers``: one per dump, default :func:`dump_functions`)."""

    def __init__(
        self,
        log: Callable[[str], None],
        readers: list[FlightRecorderReader] | None = None,
        who: str = "",
    ) -> None:
        self.log, self.who = log, who
        if readers is None:
            readers = [FlightRecorderReader(fn) for fn in dump_functions()]
        self.readers = [r for r in readers if r.available]
        self._born = time.monotonic()
        self._last: float | None = None
        self._gap = EVERY_S
        self._off = not self.readers
        self._lock = threading.Lock()
        """Reads come from the sampler thread (:meth:`tick`) and the user's (:meth:`final`)."""

    def tick(self) -> None:
        """Called after each sample, on the sampler thread."""
        if self._off:
            return
        now = time.monotonic()
        if self._last is not None and now - self._last < self._gap:
            return
        self._read(now)

    def final(self) -> None:
        """The user's code destroys the process group: one last read whatever the gap, so that the
        collectives since the last read (a short job's, all of them) are logged too."""
        if not self._off:
            self._read(time.monotonic())

    def _read(self, now: float) -> None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        with self._lock:
            since, self._last = (self._last if self._last is not None else self._born), now
            try:
                costs: dict[str, CollectiveCost] = {}
                for reader in self.readers:
                    for name, cost in reader.read().items():
                        into = costs.setdefault(name, CollectiveCost(name))
                        into.count, into.timed = into.count + cost.count, into.timed + cost.timed
                        into.seconds += cost.seconds
                self._gap = max(EVERY_S, (time.monotonic() - now) / READ_SHARE)
            except Exception as exc:  # a torch that changed its dump: say so once, stop reading
                self._off = True
                self.log(
                    f"flight recorder: cannot read torch's dump ({type(exc).__name__}: {exc}); not read again"
                )
                return
            if costs:
                lost = sum(r.lost for r in self.readers)
                self.log(describe(costs, now - since, lost, self.who))


def watch(log: Callable[[str], None], rank: int | None = None) -> CollectiveWatch | None:
    """The watch (its ``tick`` for ``Agent.on_sample``, its ``final`` for the process group's end) when
    the user turned the flight recorder on, else None."""
    if buffer_size() <= 0:
        return None
    return CollectiveWatch(log, who="" if rank is None else f"rank {rank}: ")
