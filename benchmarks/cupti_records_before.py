"""The CUPTI path's record handling BEFORE the incremental queue (main at 72def4f), kept only so that
``bench_cupti_records.py`` can time old and new side by side in one run. Not used by the package.

Each record became an ``analysis.Event`` (``RecordConverter.events``), pairs were kept by ``RecordQueues.add``
and every sample ran ``analysis.queue_series`` over the pairs still open.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from math import inf, nextafter
from typing import Any

from torchpar_top.analysis import LAUNCH_NAMES, QUEUE_CAP, Event, QueueSeries, queue_series

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
    """Turns cupti-python activity records into analysis events (one converter per cupti module)."""

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

    def events(self, records: Iterable[Any]) -> list[Event]:
        """The records the queue needs, as events: launch calls (runtime or driver API records whose
        cbid names a call in :data:`~torchpar_top.analysis.LAUNCH_NAMES`) and GPU ops; the rest are
        skipped unread. A GPU op is named by its category (its kernel name is not read: converting it
        from C is the costliest field, and the queue does not use it).

        This loop is the CUDA path's Python per record (``benchmarks/bench_cupti_records.py``).
        """
        out: list[Event] = []
        append, new = out.append, tuple.__new__  # Event(...) without its Python-level __new__
        runtime, launch_cbids, gpu_cats = self.runtime, self.launch_cbids, self.gpu_cats
        for r in records:
            kind = r.kind
            cat = gpu_cats.get(kind)
            if cat is None:
                names = launch_cbids.get(kind)
                if names is None:
                    continue
                name = names.get(r.cbid)
                if name is None:
                    continue  # not a launch: nothing the queue needs
                start = r.start / 1000  # int ns / int: correctly rounded µs (epoch ns exceed 53 bits)
                append(
                    new(
                        Event,
                        (
                            name,
                            "cuda_runtime" if kind == runtime else "cuda_driver",
                            start,
                            r.end / 1000 - start,
                            r.process_id,
                            r.thread_id,
                            r.correlation_id,
                            None,
                            None,
                        ),
                    )
                )
            else:
                start = r.start / 1000
                device, stream = r.device_id, r.stream_id
                append(
                    new(
                        Event,
                        (
                            cat,
                            cat,
                            start,
                            r.end / 1000 - start,
                            device,
                            stream,
                            r.correlation_id,
                            device,
                            stream,
                        ),
                    )
                )
        return out


class RecordQueues:
    """Launch queue depth per ``(device, stream)`` from events that arrive in buffers, in any order."""

    def __init__(
        self, rank: int = 0, cap: int = QUEUE_CAP, orphan_us: float = 2e6, margin_us: float = 10_000.0
    ) -> None:
        self.rank, self.cap, self.orphan_us, self.margin_us = rank, cap, orphan_us, margin_us
        self._launches: dict[int, Event] = {}
        """Launch records whose GPU op has not been seen yet, by correlation id."""
        self._gpu: dict[int, Event] = {}
        """GPU op records whose launch record has not been seen yet (buffers come in any order)."""
        self._pairs: list[tuple[Event, Event]] = []
        self._base: dict[Key, int] = defaultdict(int)
        """Per stream, pairs folded away: launched and started before :attr:`since`."""
        self.newest = float("-inf")
        """The latest record end seen (µs)."""
        self.since = float("-inf")
        """The previous settled time: the series is exact from here to :attr:`settled`."""
        self.settled = float("-inf")
        """The settled time of the last update (µs): every launch before it has its GPU op."""
        self.series: dict[Key, QueueSeries] = {}
        """The last update's series over the kept pairs."""
        self.orphans = 0
        """Launches given up on: no GPU op ``orphan_us`` after the newest record."""
        self.launch_records = 0
        """Launch records seen (the launches CUPTI recorded, paired or not)."""

    def add(self, events: Iterable[Event]) -> None:
        """Take one buffer's events (launches and GPU ops are kept, the rest only move :attr:`newest`)."""
        launches, gpu, pairs = self._launches, self._gpu, self._pairs
        newest = self.newest
        for e in events:
            name, _cat, ts, dur, _pid, _tid, c, _device, stream = e
            if ts + dur > newest:
                newest = ts + dur
            if c is None:
                continue
            if stream is not None:
                launch = launches.pop(c, None)
                if launch is not None:
                    pairs.append((launch, e))
                elif c not in gpu:
                    gpu[c] = e
            elif name in LAUNCH_NAMES:
                self.launch_records += 1
                op = gpu.pop(c, None)
                if op is not None:
                    pairs.append((e, op))
                else:
                    launches.setdefault(c, e)
        self.newest = newest

    def drop_launches_between(self, t0: float, t1: float) -> int:
        """Forget pending launches made within ``[t0, t1]`` (recorded into a CUDA graph, not run)."""
        gone = [c for c, e in self._launches.items() if t0 <= e.ts <= t1]
        for c in gone:
            del self._launches[c]
        return len(gone)

    def update(self, now: float | None = None) -> dict[Key, QueueSeries]:
        """Analyse what is settled: the series per stream, exact in ``[since, settled]``.

        ``now`` (µs, CUPTI's clock) is when the records were flushed. A call still in progress then
        has no record yet, so nothing later than ``now - margin_us`` is settled: a launch call that
        lasts longer (blocked at the cap) can arrive after its start was settled, and the depth at
        those instants reads low by the launches it stands for.
        """
        now = (self.newest if now is None else now) - self.margin_us
        horizon = max(now + self.margin_us, self.newest) - self.orphan_us
        stale = [c for c, e in self._launches.items() if e.ts < horizon]
        for c in stale:
            del self._launches[c]
        self.orphans += len(stale)
        for c in [c for c, e in self._gpu.items() if e.ts < horizon]:
            del self._gpu[c]
        pending = min((e.ts for e in self._launches.values()), default=None)
        settled = now if pending is None else min(now, nextafter(pending, -inf))  # just before it
        self.since, self.settled = self.settled, max(self.settled, settled)
        kept: list[tuple[Event, Event]] = []
        for launch, op in self._pairs:
            if op.ts < self.since:
                self._base[(op.device, op.stream)] += 1  # launched and started before since
            else:
                kept.append((launch, op))
        self._pairs = kept
        self.series = queue_series(
            [e for pair in kept for e in pair],
            rank=self.rank,
            cap=self.cap,
            trace_span=max(0.0, self.settled - self.since),
        )
        return self.series

    def keys(self) -> list[Key]:
        """Every stream seen so far."""
        return sorted(set(self._base) | set(self.series))

    def launched(self, key: Key, t: float | None = None) -> int:
        """``L`` of a stream at ``t`` (default: the settled time)."""
        t = self.settled if t is None else t
        s = self.series.get(key)
        return self._base.get(key, 0) + (s.launched_by(t) if s is not None else 0)

    def started(self, key: Key, t: float | None = None) -> int:
        """``S`` of a stream at ``t`` (default: the settled time)."""
        t = self.settled if t is None else t
        s = self.series.get(key)
        return self._base.get(key, 0) + (s.started_by(t) if s is not None else 0)

    def depth(self, key: Key, t: float | None = None) -> int:
        """``Q = L - S`` of a stream at ``t`` (default: the settled time)."""
        t = self.settled if t is None else t
        s = self.series.get(key)
        return s.depth_at(t) if s is not None else 0

    def busy(self, key: Key, t0: float, t1: float) -> list[tuple[float, float]]:
        """Intervals (µs) of the kept GPU ops of one stream that overlap ``[t0, t1]``."""
        return [
            (max(op.ts, t0), min(op.ts + op.dur, t1))
            for _, op in self._pairs
            if (op.device, op.stream) == key and op.ts < t1 and op.ts + op.dur > t0
        ]

    def time_at_cap(self, key: Key) -> float:
        """µs the stream spent at the cap in ``[since, settled]`` (a launch would have blocked)."""
        s = self.series.get(key)
        return s.time_at_cap_between(self.since, self.settled) if s is not None else 0.0

    @property
    def pending(self) -> int:
        """Launch records still waiting for their GPU op."""
        return len(self._launches)
