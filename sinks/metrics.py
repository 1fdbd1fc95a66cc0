"""``--metrics-port``: the live figures in Prometheus / OpenMetrics text, with the official client.

:class:`SnapshotCollector` is a custom collector: at each scrape it takes the session's current
:class:`~torchpar_top.contract.snapshot.Snapshot` and yields metric families built from it (nothing is
kept between scrapes; counters are the snapshot's own cumulative counts). It is registered on a
:class:`~prometheus_client.CollectorRegistry` of its own, with a :class:`~prometheus_client.ProcessCollector`
for the monitor's own process, and served by :class:`MetricsServer` (``prometheus_client``'s WSGI
server), which :meth:`MetricsServer.close` shuts down: nothing is left running at exit.

Names are prefixed ``torchpar_``, in base units (seconds, bytes, ratios 0-1, watts, cores), counters end
in ``_total``. Labels join with dcgm-exporter's series: ``Hostname`` (the node), ``gpu`` (the NVML
index), ``UUID`` (``GPU-...``), ``device`` (``nvidiaN``) and ``modelName`` on GPU series; ``rank`` (the
torchrun's global rank, empty for a single workload; beside it ``node``, ``hostname`` and ``local_rank``,
where the rank runs) and ``executor``/``stream``/``kind`` on queue series,
``core`` on CPU series, ``role`` on thread series.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from torchpar_top.contract.snapshot import Snapshot
from torchpar_top.contract.vocab import PHASES, ChildState, ExecutorKind, Mode

PREFIX = "torchpar_"
#: A stalled rank's ``at`` label is cut to this many characters (a label value is kept per series).
AT_CHARS = 160


def _rank(rank: int | None) -> str:
    return "" if rank is None else str(rank)


#: Labels beside ``rank`` on every per-rank series: where the (global) rank runs, from its hello.
WHERE = ["node", "hostname", "local_rank"]


def _where(snap: Snapshot, host: str) -> Callable[[int | None], list[str]]:
    """``rank -> [node, hostname, local_rank]`` (node rank, its host, ``LOCAL_RANK``; '' where unknown)."""
    known = {r.rank: [_rank(r.node_rank), r.hostname or host, _rank(r.local_rank)] for r in snap.ranks}
    return lambda rank: known.get(rank) or ["", host, ""]


def _stream(name: str, kind: ExecutorKind) -> str:
    """The stream part of a CUDA stream executor's name (``cuda:0 s1`` → ``s1``, the default →
    ``default``)."""
    if kind != ExecutorKind.CUDA_STREAM:
        return ""
    _, _, rest = name.partition(" ")
    return rest or "default"


def _device_of(name: str, kind: ExecutorKind) -> str:
    """The CUDA device a CUDA stream executor is on, as the workload names it (``cuda:1 s2`` → ``cuda:1``)."""
    if kind != ExecutorKind.CUDA_STREAM or not name.startswith("cuda:"):
        return ""
    return name.split(" ", maxsplit=1)[0]


class SnapshotCollector:
    """Yields the snapshot's figures as metric families at each scrape."""

    def __init__(
        self, snapshot: Callable[[], Snapshot], hostname: str | None = None, version: str = ""
    ) -> None:
        """``snapshot``: the session's ``snapshot`` method (called once per scrape)."""
        self._snapshot = snapshot
        self.hostname = hostname or socket.gethostname()
        self.version = version

    def collect(self) -> Iterator[Metric]:
        """The metric families of the current snapshot."""
        snap = self._snapshot()
        host = self.hostname
        H = ["Hostname"]

        info = InfoMetricFamily(PREFIX + "monitor", "What torchpar-top watches", labels=H)
        info.add_metric(
            [host],
            {
                "version": self.version,
                "target": snap.target,
                "experiment": snap.experiment,
                "state": snap.child.state.value,
                "replay": "" if snap.replay is None else snap.replay.path,
            },
        )
        yield info
        up = GaugeMetricFamily(
            PREFIX + "workload_running", "1 while the watched workload (or replay) runs", labels=H
        )
        up.add_metric([host], 1.0 if snap.child.state in (ChildState.RUNNING, ChildState.ATTACHED) else 0.0)
        yield up
        paused = GaugeMetricFamily(PREFIX + "monitor_paused", "1 while sampling is paused (key p)", labels=H)
        paused.add_metric([host], 1.0 if snap.paused else 0.0)
        yield paused
        yield from self._cpu(snap, host)
        yield from self._gpus(snap, host)
        yield from self._queues(snap, host)
        yield from self._frontend(snap, host)
        yield from self._ranks(snap, host)
        yield from self._steps(snap, host)
        yield from self._syncpoints(snap, host)
        yield from self._run(snap, host)

    # -- families -------------------------------------------------------------------------------------

    def _cpu(self, snap: Snapshot, host: str) -> Iterator[Metric]:
        load = GaugeMetricFamily(
            PREFIX + "cpu_load_ratio",
            "Per-core CPU load over the last sample, 0-1",
            labels=["Hostname", "core"],
            unit="ratio",
        )
        for i, value in enumerate(snap.cores):
            load.add_metric([host, str(i)], value / 100.0)
        yield load
        cpu = GaugeMetricFamily(
            PREFIX + "threads_cpu_cores",
            "CPU used by the workload's threads of a role, in cores (1 = one core busy)",
            labels=["Hostname", "role", "executor"],
            unit="cores",
        )
        wait = GaugeMetricFamily(
            PREFIX + "threads_run_queue_wait_cores",
            "Run-queue wait (runnable, no core) of the workload's threads of a role, in cores",
            labels=["Hostname", "role", "executor"],
            unit="cores",
        )
        count = GaugeMetricFamily(
            PREFIX + "threads", "The workload's threads of a role", labels=["Hostname", "role", "executor"]
        )
        busy = GaugeMetricFamily(
            PREFIX + "threads_busy",
            "The workload's threads of a role that used more than a tenth of a core",
            labels=["Hostname", "role", "executor"],
        )
        for g in snap.thread_groups:
            labels = [host, g.role.value, g.executor]
            cpu.add_metric(labels, g.cpu_percent / 100.0)
            wait.add_metric(labels, g.wait_percent / 100.0)
            count.add_metric(labels, g.count)
            busy.add_metric(labels, g.busy)
        yield cpu
        yield wait
        yield count
        yield busy
        starved = GaugeMetricFamily(
            PREFIX + "starved_cores",
            "Cores' worth of run-queue wait when the threads "
            "are starved of CPU (torchpar-top's verdict), else 0",
            labels=["Hostname"],
            unit="cores",
        )
        starved.add_metric([host], snap.starved or 0.0)
        yield starved

    def _gpus(self, snap: Snapshot, host: str) -> Iterator[Metric]:
        names = ["Hostname", "gpu", "UUID", "device", "modelName"]
        util = GaugeMetricFamily(
            PREFIX + "gpu_utilization_ratio",
            "Kernel-active share of time (NVML utilization.gpu), 0-1",
            labels=names,
            unit="ratio",
        )
        used = GaugeMetricFamily(
            PREFIX + "gpu_memory_used_bytes", "GPU memory used", labels=names, unit="bytes"
        )
        total = GaugeMetricFamily(
            PREFIX + "gpu_memory_total_bytes", "GPU memory in all", labels=names, unit="bytes"
        )
        power = GaugeMetricFamily(PREFIX + "gpu_power_watts", "GPU power draw", labels=names, unit="watts")
        proc = GaugeMetricFamily(
            PREFIX + "gpu_process_utilization_ratio",
            "The workload's own kernel-active share of the GPU, 0-1",
            labels=names,
            unit="ratio",
        )
        limit = GaugeMetricFamily(
            PREFIX + "gpu_power_limit_watts", "GPU power limit", labels=names, unit="watts"
        )
        temp = GaugeMetricFamily(
            PREFIX + "gpu_temperature_celsius", "GPU temperature", labels=names, unit="celsius"
        )
        proc_mem = GaugeMetricFamily(
            PREFIX + "gpu_process_memory_used_bytes",
            "GPU memory used by the workload's own processes",
            labels=names,
            unit="bytes",
        )
        for g in snap.gpus:
            labels = [host, str(g.index), g.uuid, f"nvidia{g.index}", g.name]
            for family, value in (
                (util, None if g.util_percent is None else g.util_percent / 100.0),
                (used, g.mem_used),
                (total, g.mem_total),
                (power, g.power_w),
                (proc, None if g.process_util_percent is None else g.process_util_percent / 100.0),
                (limit, g.power_limit_w),
                (temp, g.temperature_c),
                (proc_mem, g.process_mem),
            ):
                if value is not None:
                    family.add_metric(labels, value)
        yield from (util, used, total, power, proc, limit, temp, proc_mem)

    def _queues(self, snap: Snapshot, host: str) -> Iterator[Metric]:
        names = ["Hostname", "rank", "executor", "kind", "quantity", "gpu", "UUID", "stream", *WHERE]
        where = _where(snap, host)
        # A CUDA stream's GPU by NVML index and UUID, as dcgm-exporter labels it: the GPU panel's label is
        # the workload's own ``cuda:N`` (mapped through its CUDA UUIDs or CUDA_VISIBLE_DEVICES).
        nvml = {g.label: (str(g.index), g.uuid) for g in snap.gpus}
        depth = GaugeMetricFamily(
            PREFIX + "queue_depth",
            "An executor's queue: launched - started (depth) or "
            "launched - completed (outstanding, the quantity label)",
            labels=names,
        )
        cap = GaugeMetricFamily(
            PREFIX + "queue_capacity",
            "Where launching into the executor blocks (bounded executors only)",
            labels=names,
        )
        blocked = GaugeMetricFamily(
            PREFIX + "queue_blocked_ratio",
            "Share of the last window the frontend was blocked launching into this executor (full), 0-1",
            labels=names,
            unit="ratio",
        )
        busy = GaugeMetricFamily(
            PREFIX + "executor_busy_ratio",
            "Share of the last window the executor had work in progress, 0-1",
            labels=names,
            unit="ratio",
        )
        running = GaugeMetricFamily(
            PREFIX + "executor_running_ratio",
            "Share of the last window the executor's thread was on a core with work in progress, 0-1",
            labels=names,
            unit="ratio",
        )
        core_wait = GaugeMetricFamily(
            PREFIX + "executor_core_wait_ratio",
            "Share of the last window the executor had work in progress but waited for a core, 0-1",
            labels=names,
            unit="ratio",
        )
        ready = GaugeMetricFamily(
            PREFIX + "queue_ready",
            "DataLoader: batches fetched and waiting for the frontend",
            labels=names,
        )
        launched = CounterMetricFamily(
            PREFIX + "queue_launches", "Launches into the executor (L)", labels=names
        )
        completed = CounterMetricFamily(
            PREFIX + "queue_completions", "Completions of the executor (C)", labels=names
        )
        for e in snap.executors:
            gpu, uuid = nvml.get(_device_of(e.name, e.kind), ("", ""))
            labels = [
                host,
                _rank(e.rank),
                e.name,
                e.kind.value,
                e.quantity.value,
                gpu,
                uuid,
                _stream(e.name, e.kind),
                *where(e.rank),
            ]
            depth.add_metric(labels, e.value)
            if e.capacity is not None:
                cap.add_metric(labels, e.capacity)
            if e.blocked is not None:
                blocked.add_metric(labels, e.blocked)
            for family, series in ((busy, e.busy), (running, e.running), (core_wait, e.core_wait)):
                if series:
                    family.add_metric(labels, series[-1])
            if e.ready is not None:
                ready.add_metric(labels, e.ready)
            launched.add_metric(labels, e.launched)
            completed.add_metric(labels, e.completed)
        yield from (depth, cap, blocked, busy, running, core_wait, ready, launched, completed)

    def _frontend(self, snap: Snapshot, host: str) -> Iterator[Metric]:
        H = ["Hostname"]
        for key, series, text in (
            ("busy", snap.frontend_busy, "on a core outside its waits"),
            ("wait", snap.frontend_wait, "blocked: full queue, synchronize, data"),
            ("core_wait", snap.frontend_core_wait, "runnable but waiting for a core"),
        ):
            family = GaugeMetricFamily(
                PREFIX + f"frontend_{key}_ratio",
                f"Share of the last window the frontend was {text}, 0-1",
                labels=H,
                unit="ratio",
            )
            if series:
                family.add_metric([host], series[-1])
            yield family
        for key, series, text in (
            ("overlap", snap.overlap, "two or more executors ran at once (at least)"),
            ("overlap_high", snap.overlap_high, "two or more executors ran at once (at most)"),
            ("overlap_in_progress", snap.overlap_in_progress, "two or more executors had work in progress"),
        ):
            family = GaugeMetricFamily(
                PREFIX + f"{key}_ratio", f"Share of the last window {text}, 0-1", labels=H, unit="ratio"
            )
            if series:
                family.add_metric([host], series[-1])
            yield family
        sync = GaugeMetricFamily(
            PREFIX + "sync_mode", "1 in SYNC mode (synchronize after every op or step), 0 in ASYNC", labels=H
        )
        if not snap.attached:
            sync.add_metric([host], 1.0 if snap.mode == Mode.SYNC else 0.0)
        yield sync
        unit = snap.throughput_unit.what
        tp = GaugeMetricFamily(
            PREFIX + "throughput_per_second",
            "The workload's throughput over the last "
            "window, in its unit per second (the what label: steps, it, ops, launches)",
            labels=["Hostname", "what"],
        )
        if snap.throughput is not None:
            tp.add_metric([host, unit], snap.throughput)
        yield tp
        done = CounterMetricFamily(
            PREFIX + "work",
            "Work done in steady ASYNC or SYNC windows (the "
            "scoreboard's: throughput × seconds), in the what label's unit",
            labels=["Hostname", "what"],
        )
        seconds = CounterMetricFamily(
            PREFIX + "mode_seconds",
            "Seconds measured in each mode",
            labels=["Hostname", "mode"],
            unit="seconds",
        )
        mode_tp = GaugeMetricFamily(
            PREFIX + "mode_throughput_per_second",
            "Mean throughput in each mode's steady windows (the scoreboard), in the what label's unit",
            labels=["Hostname", "mode", "what"],
        )
        mode_depth = GaugeMetricFamily(
            PREFIX + "mode_queue_depth_mean",
            "Mean of the primary rank's summed queues in each mode's steady windows (the scoreboard)",
            labels=["Hostname", "mode"],
        )
        mode_wait = GaugeMetricFamily(
            PREFIX + "mode_frontend_wait_ratio",
            "Mean share of time the frontend was blocked in each mode's steady windows, 0-1",
            labels=["Hostname", "mode"],
            unit="ratio",
        )
        if snap.scoreboard:
            done.add_metric([host, unit], snap.steady.done if snap.steady is not None else 0.0)
            for m in snap.scoreboard:
                seconds.add_metric([host, m.mode.value], m.seconds)
                for family, value, labels in (
                    (mode_tp, m.throughput, [host, m.mode.value, unit]),
                    (mode_depth, m.mean_depth, [host, m.mode.value]),
                    (mode_wait, m.frontend_wait, [host, m.mode.value]),
                ):
                    if value is not None:
                        family.add_metric(labels, value)
        yield from (done, seconds, mode_tp, mode_depth, mode_wait)

    def _ranks(self, snap: Snapshot, host: str) -> Iterator[Metric]:
        names, where = ["Hostname", "rank", *WHERE], _where(snap, host)
        up = GaugeMetricFamily(
            PREFIX + "rank_running",
            "1 while an agent process (the workload, or a torchrun rank) runs",
            labels=names,
        )
        tp = GaugeMetricFamily(
            PREFIX + "rank_throughput_per_second",
            "A rank's throughput over its last window",
            labels=[*names, "what"],
        )
        depth = GaugeMetricFamily(
            PREFIX + "rank_queue_depth", "Sum of a rank's executor queues", labels=names
        )
        data = GaugeMetricFamily(
            PREFIX + "data_wait_ratio",
            "Share of the last window the rank's frontend waited for its next batch (DataLoader), 0-1",
            labels=names,
            unit="ratio",
        )
        core = GaugeMetricFamily(
            PREFIX + "rank_core_wait_ratio",
            "Share of the last second the rank's frontend was runnable but waited for a core, 0-1",
            labels=names,
            unit="ratio",
        )
        code = GaugeMetricFamily(
            PREFIX + "rank_exit_code", "The exit status of an agent process that ended", labels=names
        )
        for r in snap.ranks:
            labels = [host, _rank(r.rank), *where(r.rank)]
            up.add_metric(labels, 1.0 if r.state == ChildState.RUNNING else 0.0)
            if r.exit_code is not None:
                code.add_metric(labels, r.exit_code)
            if r.throughput is not None:
                tp.add_metric([*labels, r.unit.what], r.throughput)
            depth.add_metric(labels, r.depth)
            if r.data_wait is not None:
                data.add_metric(labels, r.data_wait)
            if r.core_wait is not None:
                core.add_metric(labels, r.core_wait)
        yield from (up, tp, depth, data, core, code)

    def _run(self, snap: Snapshot, host: str) -> Iterator[Metric]:
        """The session's settings and the workload's own: interval, thread counts, coverage, replay."""
        yield _gauge("sample_interval_seconds", "Seconds between samples", snap.interval, host, "seconds")
        yield _gauge("intraop_threads", "torch.get_num_threads() in the workload", snap.num_threads, host)
        yield _gauge(
            "interop_threads", "torch.get_num_interop_threads() in the workload", snap.interop_threads, host
        )
        yield _gauge(
            "primary_rank",
            "The rank whose frontend, lanes and scoreboard are shown (none for a single workload)",
            snap.primary_rank,
            host,
        )
        yield _gauge(
            "async_sync_speedup",
            "ASYNC throughput over SYNC throughput, once both were measured (the scoreboard's)",
            snap.ratio,
            host,
        )
        yield _gauge(
            "op_counter_coverage_ratio",
            "Share of the last window the op counter was on (ops/s and sync points sampled), 0-1",
            snap.op_coverage,
            host,
            "ratio",
        )
        yield _gauge(
            "monitor_cpu_cores",
            "torchpar-top's own CPU over the last second, py-spy's dumps included, in cores",
            snap.monitor_cpu,
            host,
            "cores",
        )
        yield _gauge(
            "workload_exit_code", "The workload's exit status once it ended", snap.child.exit_code, host
        )
        replay = snap.replay
        for key, value, text in (
            ("position", None if replay is None else replay.position, "position"),
            ("duration", None if replay is None else replay.duration, "length"),
            ("frame", None if replay is None else replay.frame, "timeline seconds per frame"),
        ):
            yield _gauge(f"replay_{key}_seconds", f"A replay's {text}", value, host, "seconds")
        yield _gauge(
            "replay_speed",
            "A replay's timeline seconds per second",
            None if replay is None else replay.speed,
            host,
        )
        scaling = GaugeMetricFamily(
            PREFIX + "scaling_gflops",
            "The intra-op experiment's measured GFLOP/s at a thread count",
            labels=["Hostname", "threads"],
        )
        for p in snap.scaling:
            scaling.add_metric([host, str(p.threads)], p.gflops)
        yield scaling

    def _steps(self, snap: Snapshot, host: str) -> Iterator[Metric]:
        """Training steps per rank (count, rate, mean step, seconds per step in each phase), the
        straggler, and each rank's memory."""
        names = ["Hostname", "rank"]
        total = CounterMetricFamily(PREFIX + "steps", "Training steps a rank completed", labels=names)
        rate = GaugeMetricFamily(
            PREFIX + "steps_per_second", "A rank's steps per second over the last seconds", labels=names
        )
        step = GaugeMetricFamily(
            PREFIX + "step_seconds",
            "A rank's mean step time over the last seconds",
            labels=names,
            unit="seconds",
        )
        phase = GaugeMetricFamily(
            PREFIX + "step_phase_seconds",
            "Seconds per step a rank spent in each phase over the last seconds (they add up to the step)",
            labels=[*names, "phase"],
            unit="seconds",
        )
        stalled = GaugeMetricFamily(
            PREFIX + "step_stalled_seconds",
            "Seconds since a rank's last step, while that is ten of its mean steps and 3 s or more: it has "
            "stopped stepping (absent while it steps)",
            labels=names,
            unit="seconds",
        )
        at = InfoMetricFamily(
            PREFIX + "rank_stalled_at",
            "Where a rank that stopped stepping is, from its frontend's latest stack: what it waits in and "
            "the innermost line of the user's code (absent while it steps)",
            labels=names,
        )
        for r in snap.ranks:
            if r.steps is None:
                continue
            labels = [host, _rank(r.rank)]
            if r.steps.stalled is not None:
                stalled.add_metric(labels, r.steps.stalled)
                if r.at:
                    at.add_metric(labels, {"at": r.at[:AT_CHARS]})
            total.add_metric(labels, r.steps.count)
            if r.steps.per_second is not None:
                rate.add_metric(labels, r.steps.per_second)
            if r.steps.seconds is not None:
                step.add_metric(labels, r.steps.seconds)
                for p in PHASES:
                    phase.add_metric([*labels, p], getattr(r.steps.phases, p))
        straggler = GaugeMetricFamily(
            PREFIX + "straggler_ratio",
            "The straggler rank's cause phase over the other ranks' median (absent: no straggler)",
            labels=[*names, "cause"],
            unit="ratio",
        )
        st = snap.straggler
        if st is not None and st.ratio is not None:
            straggler.add_metric([host, str(st.rank), st.cause], st.ratio)
        contended = GaugeMetricFamily(
            PREFIX + "straggler_core_wait_seconds",
            "Seconds per step the straggler's frontend waited for a core beyond the other ranks' median, "
            "where that is why it is slow: CPU contention (absent: no straggler, or another reason)",
            labels=names,
            unit="seconds",
        )
        if st is not None and st.core_wait is not None:
            contended.add_metric([host, str(st.rank)], st.core_wait)
        rss = GaugeMetricFamily(PREFIX + "rss_bytes", "A rank's resident memory", labels=names, unit="bytes")
        growth = GaugeMetricFamily(
            PREFIX + "rss_growth_bytes_per_minute",
            "A rank's resident memory growth over the run (least-squares slope)",
            labels=names,
        )
        dev = ["Hostname", "rank", "device"]
        allocated = GaugeMetricFamily(
            PREFIX + "cuda_memory_allocated_bytes",
            "CUDA caching allocator: allocated",
            labels=dev,
            unit="bytes",
        )
        reserved = GaugeMetricFamily(
            PREFIX + "cuda_memory_reserved_bytes",
            "CUDA caching allocator: reserved",
            labels=dev,
            unit="bytes",
        )
        peak = GaugeMetricFamily(
            PREFIX + "cuda_memory_peak_bytes",
            "CUDA caching allocator: peak allocated",
            labels=dev,
            unit="bytes",
        )
        for mem in snap.memory:
            labels = [host, _rank(mem.rank)]
            rss.add_metric(labels, mem.rss_bytes)
            if mem.rss_growth_bytes_per_min is not None:
                growth.add_metric(labels, mem.rss_growth_bytes_per_min)
            for d in mem.devices:
                allocated.add_metric([*labels, d.device], d.allocated_bytes)
                reserved.add_metric([*labels, d.device], d.reserved_bytes)
                peak.add_metric([*labels, d.device], d.peak_bytes)
        yield from (total, rate, step, phase, stalled, at, straggler, contended, rss, growth)
        yield from (allocated, reserved, peak)

    def _syncpoints(self, snap: Snapshot, host: str) -> Iterator[Metric]:
        sites = CounterMetricFamily(
            PREFIX + "sync_points",
            "Calls that wait for the device, per source line "
            "(counted in the op counter's slices unless --every-op: sampled=1)",
            labels=["Hostname", "rank", "where", "call", "sampled", *WHERE],
        )
        at = _where(snap, host)
        for s in snap.syncpoints:
            sites.add_metric(
                [host, _rank(s.rank), s.where, s.call, "1" if s.sampled else "0", *at(s.rank)], s.count
            )
        yield sites


def _gauge(name: str, text: str, value: float | None, host: str, unit: str = "") -> Metric:
    """A gauge with the one series ``Hostname`` (none when ``value`` is unknown)."""
    family = GaugeMetricFamily(PREFIX + name, text, labels=["Hostname"], unit=unit)
    if value is not None:
        family.add_metric([host], value)
    return family


class MetricsError(RuntimeError):
    """The metrics server could not start (a one-line reason)."""


class MetricsServer:
    """``prometheus_client``'s WSGI server on ``addr:port`` for a :class:`SnapshotCollector`."""

    def __init__(self, collector: Any, port: int, addr: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        ProcessCollector(
            namespace="torchpar_monitor", registry=self.registry
        )  # the monitor's own CPU, memory
        try:
            server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as exc:
            reason = "in use" if exc.errno in (98, 48) else exc.strerror or str(exc)
            raise MetricsError(f"--metrics-port {port} on {addr}: {reason}") from None
        self._server: WSGIServer | None = server
        self.port = server.server_port

    def close(self) -> None:
        """Stop serving and close the socket; returns once the server's thread has ended. Idempotent."""
        server, self._server = getattr(self, "_server", None), None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        self._thread.join(timeout=5)
