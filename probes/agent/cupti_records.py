"""CUPTI activity records read straight into the launch queue per stream, live.

CUPTI hands its activity records over in buffers (``cupti-python``: a list of record objects per
completed buffer). Only two sorts matter for the queue, the same two a Kineto trace gives HTA (Kineto is
itself a CUPTI client): a runtime or driver API record (``RUNTIME``/``DRIVER``: ``cbid``,
``correlation_id``, ``start``/``end`` in ns) whose cbid names a call in
:data:`~torchpar_top.analysis.LAUNCH_NAMES`, and a kernel, memcpy or memset record (``device_id``,
``stream_id``, ``correlation_id``, ``start``/``end``). :class:`RecordConverter` knows the binding's
kinds and cbids (and the monitor asks CUPTI not to record the other API calls at all, see
:mod:`~torchpar_top.probes.agent.cuda_cupti`).

:class:`RecordQueues` reads those fields and nothing else (no event objects are made): a launch's
start (µs of CUPTI's clock, as in a trace) waits in a dict by correlation id until its GPU op's record
names the stream; then the pair ``(launch time, GPU start)`` goes to that stream. The definition is
HTA's, as :func:`~torchpar_top.analysis.queue_series` implements it for ``replay`` (+1 at a launch, -1
when its GPU op starts, both ends joined by correlation id, launches without a GPU op not counted), in
its incremental form: per ``(device, stream)``,

    L(t) = launches paired so far made at or before t,   S(t) = their GPU ops started at or before t,
    Q(t) = L(t) - S(t),

kept as a base count plus the sorted times after the previous settled time. ``tests/unit/test_cupti.py``
checks L, S, Q and the time at the cap equal to ``queue_series`` (itself checked against HTA) on every
shipped A100 trace at every launch and start time of every settled span.

A live process has a difficulty a finished trace has not: a GPU op's record arrives only after the op
completed, and a launch record does not name the stream. So the depth is exact only up to the
**settled time**: the moment before the oldest launch whose GPU op has not been seen yet (or the flush
less ``margin_us`` when none is pending). Every launch made before it has its stream and start, so the
depth there is HTA's depth, in kernels; the screen shows the queue as of that time (behind the present
by about the time the queue takes to drain). A launch still unpaired
``orphan_us`` after the newest record (its op never ran: recorded into a CUDA graph being captured, or a
lost record) stops holding the settled time back and is counted in :attr:`RecordQueues.orphans`.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable
from math import inf, nextafter
from operator import gt
from typing import Any

from torchpar_top.analysis import LAUNCH_NAMES, QUEUE_CAP

Key = tuple[int, int]
"""``(device, stream)``: CUPTI's device ordinal and stream id."""

_SUFFIX = re.compile(r"(_v\d+)?(_ptsz|_ptds)?(_v\d+)?$")


def cbid_names(enum_cls: Any) -> dict[int, str]:
    """``{cbid: API name}`` from cupti-python's ``Runtime_api_trace_cbid``/``Driver_api_trace_cbid``.

    The members are named like the C enum less its prefix (``cudaLaunchKernel_v7000``,
    ``cudaLaunchKernel_ptsz_v7000``): the version and the per-thread-stream suffix are dropped, so the
    name is the one Kineto writes and :data:`~torchpar_top.analysis.LAUNCH_NAMES` lists.
    """
    names: dict[int, str] = {}
    for name, member in getattr(enum_cls, "__members__", {}).items():
        value = int(member.value if hasattr(member, "value") else member)
        names.setdefault(value, _SUFFIX.sub("", name) or name)
    return names


class RecordConverter:
    """The binding's activity kinds and API cbids, as the queue reads them (one per cupti module)."""

    def __init__(self, cupti: Any) -> None:
        kind = cupti.ActivityKind
        self.runtime, self.driver = int(kind.RUNTIME), int(kind.DRIVER)
        self.gpu_cats = {
            int(kind.CONCURRENT_KERNEL): "kernel",
            int(kind.MEMCPY): "gpu_memcpy",
            int(kind.MEMSET): "gpu_memset",
        }
        if hasattr(kind, "KERNEL"):
            self.gpu_cats[int(kind.KERNEL)] = "kernel"
        # ``Runtime_api_trace_cbid`` in current releases, ``runtime_api_trace_cbid`` in early ones
        self.runtime_names = cbid_names(
            getattr(cupti, "Runtime_api_trace_cbid", None) or getattr(cupti, "runtime_api_trace_cbid", None)
        )
        self.driver_names = cbid_names(
            getattr(cupti, "Driver_api_trace_cbid", None) or getattr(cupti, "driver_api_trace_cbid", None)
        )

        self.launch_cbids = {
            self.runtime: {c: n for c, n in self.runtime_names.items() if n in LAUNCH_NAMES},
            self.driver: {c: n for c, n in self.driver_names.items() if n in LAUNCH_NAMES},
        }
        """Per API record kind, ``{cbid: name}`` of the calls that enqueue work on a stream."""

    def name(self, kind: int, cbid: int) -> str:
        """The API call's name (``cbid_N`` where the binding does not know it)."""
        names = self.runtime_names if kind == self.runtime else self.driver_names
        return names.get(cbid) or f"cbid_{cbid}"

    def other_cbids(self, kind: int) -> list[int]:
        """The cbids of ``kind`` (RUNTIME or DRIVER) that are not launches: records not needed."""
        names = self.runtime_names if kind == self.runtime else self.driver_names
        return [c for c in names if c not in self.launch_cbids[kind]]


class _Stream:
    """One stream's launch and start times: a base count, and the sorted times after it."""

    __slots__ = ("at_cap", "base_l", "base_s", "launches", "ops", "starts", "valid_from")

    def __init__(self, valid_from: float) -> None:
        self.valid_from = valid_from
        """The depth is exact from here on (``-inf`` when recording never stopped; in a window, the start
        of one of its launches' GPU ops: a stream runs in launch order, so every launch made before the
        window has started by then and adds as much to S as to L)."""
        self.base_l = self.base_s = 0
        """Launches (GPU starts) folded away: made (started) before the previous settled time."""
        self.launches: list[float] = []
        self.starts: list[float] = []
        self.ops: list[tuple[float, float]] = []
        """``(start, end)`` of the paired GPU ops that may still overlap a span to come."""
        self.at_cap = 0.0


#: The fields the queue reads, in the order of :func:`layout`'s positions.
FIELDS = ("kind", "correlation_id", "start", "end", "device_id", "stream_id", "cbid")


def layout(record: Any) -> tuple[int, ...]:
    """Where :data:`FIELDS` sit in ``record._data.item(0)``'s tuple, for records of its type; ``()`` where
    the record holds no one-element numpy record array (read by attribute then).

    cupti-python's record classes keep the record in ``_data`` (``numpy.recarray`` of the binding's
    structured dtype) and read each field through it: 2.6-3.5 µs a field with cupti-python 13.0.1 on
    this project's CPU, where ``_data.item(0)`` gives every field of a record in 0.3 µs (a launch call)
    to 1.3 µs (a kernel: 48 fields). A field a kind lacks (a GPU op's ``cbid``, a launch's stream) is
    never read: its position is 0.
    """
    data = getattr(record, "_data", None)
    names = getattr(getattr(data, "dtype", None), "names", None)
    if not names or getattr(data, "shape", None) != (1,):
        return ()
    if not (set(_GPU_FIELDS) <= set(names) or set(_API_FIELDS) <= set(names)):
        return ()  # neither a GPU op nor an API call as the queue reads them: by attribute
    return tuple(names.index(f) if f in names else 0 for f in FIELDS)


#: The fields a GPU op's record and a launch call's record must have to be read by position.
_GPU_FIELDS = ("kind", "correlation_id", "start", "end", "device_id", "stream_id")
_API_FIELDS = ("kind", "correlation_id", "start", "cbid")


class RecordQueues:
    """Launch queue depth per ``(device, stream)`` from CUPTI records that arrive in buffers, in any order."""

    def __init__(
        self,
        converter: RecordConverter,
        rank: int = 0,
        cap: int = QUEUE_CAP,
        orphan_us: float = 2e6,
        margin_us: float = 10_000.0,
    ) -> None:
        self.rank, self.cap, self.orphan_us, self.margin_us = rank, cap, orphan_us, margin_us
        self._gpu_kinds = frozenset(converter.gpu_cats)
        self._launch_cbids = {kind: frozenset(cbids) for kind, cbids in converter.launch_cbids.items()}
        self._layouts: dict[type, tuple[int, ...]] = {}
        """Per record type, :func:`layout`'s answer."""
        self._launches: dict[int, float] = {}
        """Launch times (µs) whose GPU op has not been seen yet, by correlation id."""
        self._gpu: dict[int, tuple[float, float, Key]] = {}
        """GPU ops ``(start, end, key)`` whose launch record has not been seen yet (buffers come in any
        order), by correlation id."""
        self._new: defaultdict[Key, list[tuple[float, float, float]]] = defaultdict(list)
        """Pairs ``(launch, start, end)`` made since the last update, per stream."""
        self._streams: dict[Key, _Stream] = {}
        self.newest = float("-inf")
        """The latest end of a GPU op record seen (µs)."""
        self.since = float("-inf")
        """The previous settled time: the counts are exact from here to :attr:`settled`."""
        self.settled = float("-inf")
        """The settled time of the last update (µs): every launch before it has its GPU op."""
        self.orphans = 0
        """Launches given up on: no GPU op ``orphan_us`` after the newest record."""
        self.launch_records = 0
        """Launch records seen (the launches CUPTI recorded, paired or not)."""
        self.window = -inf
        """When the current recording window began (``-inf``: recording never stopped)."""
        self.until = inf
        """When launch recording stopped in the current window (``inf``: it goes on)."""
        self.window_drops = 0
        """Launches of closed windows whose GPU op was never recorded."""

    def add_records(self, records: Iterable[Any]) -> None:
        """Take one buffer's records: launch calls and GPU ops are read (their kind is the first field
        looked at, a launch's cbid the second), anything else is skipped.

        This loop is the CUDA path's Python per record (``benchmarks/bench_cupti_records.py``). Records
        of cupti-python hold their fields in a one-element numpy record array (``_data``) whose
        properties each cost a trip through numpy: they are read in one ``_data.item(0)`` instead, at
        the positions :func:`layout` found for their type (other records, by attribute).
        """
        gpu_kinds, launch_cbids = self._gpu_kinds, self._launch_cbids
        launches, early, new = self._launches, self._gpu, self._new
        layouts = self._layouts
        newest, n_launch = self.newest, 0
        for r in records:
            t = type(r)
            at = layouts.get(t)
            if at is None:
                at = layouts[t] = layout(r)
            if at:
                v = r._data.item(0)
                kind = v[at[0]]
            else:
                kind = r.kind
            if kind in gpu_kinds:
                if at:
                    c, s, e, key = v[at[1]], v[at[2]], v[at[3]], (v[at[4]], v[at[5]])
                else:
                    c, s, e, key = r.correlation_id, r.start, r.end, (r.device_id, r.stream_id)
                end = e / 1000  # int ns / int: correctly rounded µs
                if end > newest:
                    newest = end
                ts = launches.pop(c, None)
                if ts is None:
                    if c not in early:
                        early[c] = (s / 1000, end, key)
                else:
                    new[key].append((ts, s / 1000, end))
            else:
                cbids = launch_cbids.get(kind)
                if cbids is None or (v[at[6]] if at else r.cbid) not in cbids:
                    continue  # not a launch: nothing the queue needs
                n_launch += 1
                if at:
                    c, s = v[at[1]], v[at[2]]
                else:
                    c, s = r.correlation_id, r.start
                op = early.pop(c, None)
                if op is None:
                    if c not in launches:
                        launches[c] = s / 1000
                else:
                    start, end, key = op
                    new[key].append((s / 1000, start, end))
        self.newest = newest
        self.launch_records += n_launch

    def new_window(self, t0: float) -> None:
        """Recording (re)starts at ``t0`` (µs) after a pause: nothing earlier is known, so every stream
        starts over (L and S count from the window on; their difference is the depth from each stream's
        :attr:`_Stream.valid_from`)."""
        self._launches.clear()
        self._gpu.clear()
        self._new = defaultdict(list)
        self._streams = {}
        self.window, self.until = t0, inf
        self.since = self.settled = t0

    def end_window(self, t1: float) -> None:
        """Launch records stop at ``t1`` (µs): nothing after it is settled in this window."""
        self.until = t1

    def close_window(self) -> None:
        """The GPU ops stop too: launches still waiting for theirs are dropped (counted)."""
        self.window_drops += len(self._launches)
        self._launches.clear()
        self._gpu.clear()

    def valid_from(self, key: Key) -> float:
        """From when the stream's depth is exact (``-inf`` when recording never stopped)."""
        s = self._streams.get(key)
        return s.valid_from if s is not None else inf

    def drop_launches_between(self, t0: float, t1: float) -> int:
        """Forget pending launches made within ``[t0, t1]`` (recorded into a CUDA graph, not run)."""
        gone = [c for c, ts in self._launches.items() if t0 <= ts <= t1]
        for c in gone:
            del self._launches[c]
        return len(gone)

    def update(self, now: float | None = None) -> None:
        """Settle what can be: the counts per stream become exact in ``[since, settled]``.

        ``now`` (µs, CUPTI's clock) is when the records were flushed. A call still in progress then
        has no record yet, so nothing later than ``now - margin_us`` is settled: a launch call that
        lasts longer (blocked at the cap) can arrive after its start was settled, and the depth at
        those instants reads low by the launches it stands for.
        """
        now = (self.newest if now is None else now) - self.margin_us
        horizon = max(now + self.margin_us, self.newest) - self.orphan_us
        launches, oldest, stale = self._launches, inf, []
        for c, ts in launches.items():
            if ts < horizon:
                stale.append(c)
            elif ts < oldest:
                oldest = ts
        for c in stale:
            del launches[c]
        self.orphans += len(stale)
        early, old = self._gpu, []
        for c, op in early.items():  # in about the order they came: stop at the first young one
            if op[0] >= horizon:
                break
            old.append(c)
        for c in old:
            del early[c]
        settled = now if oldest == inf else min(now, nextafter(oldest, -inf))  # just before it
        settled = min(settled, self.until)
        since = self.since = self.settled
        settled = self.settled = max(since, settled)

        streams = self._streams
        for key, pairs in self._new.items():
            s = streams.get(key)
            launched, started, ended = zip(*pairs, strict=True)
            if s is None:
                s = streams[key] = _Stream(-inf if self.window == -inf else min(started))
            s.launches += launched
            s.launches.sort()  # timsort: a run per buffer, nearly in order
            s.starts += started
            s.starts.sort()
            s.ops += zip(started, ended, strict=True)
            s.ops.sort()  # by start: a stream runs in launch order, so this is nearly sorted already
        self._new = defaultdict(list)
        for s in streams.values():
            i = bisect_left(s.launches, since)  # fold what is before since: [since, settled] stays exact
            if i:
                s.base_l += i
                del s.launches[:i]
            i = bisect_left(s.starts, since)
            if i:
                s.base_s += i
                del s.starts[:i]
            ops, i = s.ops, 0
            while i < len(ops) and ops[i][1] <= since:  # ended before since: no span to come needs it
                i += 1
            if i:
                del ops[:i]
            s.at_cap = self._time_at_cap(s, since, settled)

    def _time_at_cap(self, s: _Stream, t0: float, t1: float) -> float:
        """µs within ``[t0, t1]`` with the depth at or above the cap (walked only when it can get there)."""
        if t1 <= t0:
            return 0.0
        cap, launches, starts = self.cap, s.launches, s.starts
        lo, hi = bisect_right(launches, t0), bisect_right(launches, t1)
        depth = s.base_l + lo - s.base_s - bisect_right(starts, t0)
        if depth < cap:
            # the depth only rises at launches: the k-th launch (0-based, counting the folded ones) leaves
            # it at the cap or above iff fewer than k + 2 - cap GPU ops started by then, i.e. iff start
            # number k + 1 - cap is later than the launch; compared for the whole span at once, in C
            off = s.base_l - cap + 1 - s.base_s
            first = max(lo, -off)
            if first >= hi or not any(map(gt, starts[first + off : hi + off], launches[first:hi])):
                return 0.0
        steps = sorted(
            [(t, 1) for t in s.launches[lo:hi]]
            + [(t, -1) for t in s.starts[bisect_right(s.starts, t0) : bisect_right(s.starts, t1)]]
        )
        total, prev = 0.0, t0
        for t, delta in steps:
            if depth >= self.cap:
                total += t - prev
            prev, depth = t, depth + delta
        if depth >= self.cap:
            total += t1 - prev
        return total

    def keys(self) -> list[Key]:
        """Every stream seen so far (paired launches settled at least once)."""
        return sorted(self._streams)

    def launched(self, key: Key, t: float | None = None) -> int:
        """``L`` of a stream at ``t`` in ``[since, settled]`` (default: the settled time)."""
        s = self._streams.get(key)
        if s is None:
            return 0
        return s.base_l + bisect_right(s.launches, self.settled if t is None else t)

    def started(self, key: Key, t: float | None = None) -> int:
        """``S`` of a stream at ``t`` in ``[since, settled]`` (default: the settled time)."""
        s = self._streams.get(key)
        if s is None:
            return 0
        return s.base_s + bisect_right(s.starts, self.settled if t is None else t)

    def depth(self, key: Key, t: float | None = None) -> int:
        """``Q = L - S`` of a stream at ``t`` in ``[since, settled]`` (default: the settled time)."""
        return self.launched(key, t) - self.started(key, t)

    def busy(self, key: Key, t0: float, t1: float, gap: float = 0.0) -> list[tuple[float, float]]:
        """Intervals (µs) of the stream's paired GPU ops within ``[t0, t1]`` (``t0 >= since``), in order,
        those less than ``gap`` µs apart merged."""
        s = self._streams.get(key)
        out: list[tuple[float, float]] = []
        if s is None:
            return out
        for start, end in s.ops:
            if start >= t1:
                break
            if end <= t0:
                continue
            a = t0 if start < t0 else start
            b = t1 if end > t1 else end
            if out and a - out[-1][1] <= gap:
                if b > out[-1][1]:
                    out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
        return out

    def time_at_cap(self, key: Key) -> float:
        """µs the stream spent at the cap in ``[since, settled]`` (a launch would have blocked)."""
        s = self._streams.get(key)
        return s.at_cap if s is not None else 0.0

    @property
    def pending(self) -> int:
        """Launch records still waiting for their GPU op."""
        return len(self._launches)
