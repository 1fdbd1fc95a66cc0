"""Every :class:`Snapshot` field reaches headless JSON and, where it is a number, Prometheus.

The test walks the snapshot's dataclasses (``dataclasses.fields``, into nested views and tuples of them),
builds a snapshot with every field set (through ``model.snapshot.build``, so the derived figures are set
too), and checks each leaf: it is found in the headless record (``HEADLESS``: where) or listed in
``NOT_IN_HEADLESS`` with the reason; a numeric leaf also names its Prometheus family (``PROMETHEUS``),
which must carry a series, or is in ``NOT_IN_PROMETHEUS`` with the reason. A new field fails here until
it is exported or said not to be.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from torchpar_top.contract import snapshot as S
from torchpar_top.contract.snapshot import DERIVED, Snapshot
from torchpar_top.contract.vocab import PHASES, Mode
from torchpar_top.model.snapshot import build
from torchpar_top.sinks import headless
from torchpar_top.sinks.metrics import SnapshotCollector

HISTORY = (
    "a history: headless and Prometheus give its newest value (the field it is the history of); a "
    "recording keeps it whole"
)

COUNTED = (
    "how many values the histories gained so far: what tells a recording's lines how many are new where "
    "the values repeat (contract.recording.delta), not a figure"
)

RECENT = "whole recent steps: the recording and the Perfetto export draw them; the window's phases are here"

#: Leaf path in the snapshot (``[]``: each item of a tuple) -> where it is in the headless record
#: (``a.b``; ``[]``: the first item of a list; ``{}``: the first value of a dict).
HEADLESS = {
    "t": "t",
    "experiment": "experiment",
    "description": "description",
    "mode": "mode",
    "paused": "paused",
    "interval": "interval",
    "child.pid": "child.pid",
    "child.state": "child.state",
    "child.exit_code": "child.exit_code",
    "child.message": "child.message",
    "cores": "cores",
    "thread_groups[].role": "threads[].role",
    "thread_groups[].count": "threads[].count",
    "thread_groups[].busy": "threads[].busy",
    "thread_groups[].cpu_percent": "threads[].cpu_percent",
    "thread_groups[].wait_percent": "threads[].wait_percent",
    "thread_groups[].executor": "threads[].executor",
    **{
        f"executors[].{k}": f"executors[].{k}"
        for k in [
            "name",
            "kind",
            "quantity",
            "value",
            "capacity",
            "launched",
            "completed",
            "emulated",
            "busy",
            "blocked",
            "rank",
            "counts",
            "ready",
            "running",
            "core_wait",
            "note",
        ]
    },
    "frontend_busy": "frontend.busy",
    "frontend_wait": "frontend.wait",
    "frontend_core_wait": "frontend.core_wait",
    "overlap": "overlap",
    "overlap_high": "overlap_high",
    "overlap_in_progress": "overlap_in_progress",
    "timing": "timing",
    "throughput": "throughput.value",
    "throughput_unit": "throughput.unit",
    "num_threads": "num_threads",
    "interop_threads": "interop_threads",
    "scoreboard[].mode": "scoreboard",  # the keys
    **{
        f"scoreboard[].{k}": f"scoreboard.{{}}.{k}"
        for k in ("seconds", "throughput", "mean_depth", "frontend_wait")
    },
    **{
        f"results[].{k}": f"results[].{k}"
        for k in ("label", "value", "unit", "round", "median", "low", "high", "rounds")
    },
    **{f"scaling[].{k}": f"scaling[].{k}" for k in ("threads", "gflops", "samples")},
    **{
        f"gpus[].{k}": f"gpus[].{k}"
        for k in [
            "index",
            "label",
            "name",
            "util_percent",
            "mem_used",
            "mem_total",
            "power_w",
            "power_limit_w",
            "temperature_c",
            "process_util_percent",
            "process_mem",
            "lost",
            "uuid",
        ]
    },
    "gpu_status": "gpu_status",
    "log[].source": "log[].source",
    "log[].text": "log[].text",
    "op_coverage": "op_coverage",
    "sample_t": "sample_t",
    "target": "target",
    "notice": "notice",
    **{
        f"ranks[].{k}": f"ranks[].{k}"
        for k in ("rank", "pid", "state", "throughput", "unit", "depth", "data_wait", "exit_code")
    },
    "ranks[].data_verdict.bound": "ranks[].data_verdict.bound",
    "ranks[].data_verdict.wait": "ranks[].data_verdict.wait",
    **{
        f"syncpoints[].{k}": f"syncpoints[].{k}"
        for k in ("where", "call", "count", "per_second", "rank", "sampled")
    },
    "data_verdict.bound": "data_verdict.bound",
    "data_verdict.wait": "data_verdict.wait",
    "attached": "attached",
    "starved": "starved",
    "frontend_hot_in_sync": "frontend_hot_in_sync",
    "monitor_cpu": "monitor_cpu",
    "straggler_windows": "straggler_windows",
    **{f"stack.{k}": f"stack.{k}" for k in ("pid", "thread", "idle", "t", "waiting_in", "source")},
    "stack.frames[].function": "stack.frames[]",  # "function (filename:line)"
    "stack.frames[].filename": "stack.frames[]",
    "stack.frames[].line": "stack.frames[]",
    "stack_status": "stack_status",
    **{
        f"replay.{k}": f"replay.{k}"
        for k in ("path", "position", "duration", "speed", "frame", "finished", "recorded")
    },
    "primary_rank": "primary_rank",
    "ratio": "ratio",
    "ranks_running": "ranks_running",
    "depth.value": "depth.value",
    "depth.capacity": "depth.capacity",
    "core_load": "core_load",
    "lanes.windows": "lanes.windows",
    **{
        f"lanes.{part}.{k}": f"lanes.{part}.{k}"
        for part in ("frontend", "executors[]")
        for k in ("name", "rank", "busy", "running", "core_wait", "wait")
    },
    "lanes.overlap": "lanes.overlap",
    "lanes.overlap_high": "lanes.overlap_high",
    "lanes.overlap_in_progress": "lanes.overlap_in_progress",
    **{
        f"steady.{k}": f"steady.{k}" for k in ("seconds", "done", "throughput", "mean_depth", "frontend_wait")
    },
    **{
        f"{where}steps.{k}": f"{where}steps.{k}"
        for where in ("", "ranks[].")
        for k in ("source", "count", "per_second", "seconds", "run_seconds", "gpu", "timed_share", "stalled")
    },
    **{
        f"{where}steps.{part}.{p}": f"{where}steps.{part}.{p}"
        for where in ("", "ranks[].")
        for part in ("phases", "run_phases")
        for p in PHASES
    },
    **{
        f"ranks[].{k}": f"ranks[].{k}"
        for k in ("local_rank", "node_rank", "hostname", "note", "core_wait", "at")
    },
    **{f"straggler.{k}": f"straggler.{k}" for k in ("rank", "cause", "ratio", "costs", "core_wait")},
    **{f"memory[].{k}": f"memory[].{k}" for k in ("rank", "rss_bytes", "rss_growth_bytes_per_min")},
    **{
        f"memory[].devices[].{k}": f"memory[].devices[].{k}"
        for k in ("device", "allocated_bytes", "reserved_bytes", "peak_bytes")
    },
}

NOT_IN_HEADLESS = {
    **{
        f"{where}steps.recent[].{k}": RECENT
        for where in ("", "ranks[].")
        for k in ("end", *(f"phases.{p}" for p in PHASES))
    },
    "child.last_stderr": "the same lines are in the log, source stderr",
    **{
        f"log_partial[].{k}": "a line still being written (a progress bar's latest state): the screen shows "
        "it live; headless and recordings keep finished lines only"
        for k in ("seq", "source", "text")
    },
    "core_history": HISTORY,
    "threads[].tid": "headless gives the threads summed per role (thread_groups), as the panel shows them",
    "threads[].name": "as threads[].tid",
    "threads[].role": "as threads[].tid",
    "threads[].cpu_percent": "as threads[].tid",
    "threads[].wait_percent": "as threads[].tid",
    "threads[].pid": "as threads[].tid",
    "threads[].executor": "as threads[].tid",
    "thread_groups[].tids": "which threads make a group: the screen's detail, not a figure",
    "executors[].history": HISTORY,
    "throughput_history": HISTORY,
    "gpus[].util_history": HISTORY,
    "log[].seq": "the lines come in order; a gap is the dropped marker",
    **{k: COUNTED for k in ("samples", "host_samples", "executors[].samples", "gpus[].samples")},
    "stack.python_tids": "the threads panel's naming of py-spy's threads when attached, not a figure",
}

#: Numeric leaf path -> its Prometheus family (``torchpar_`` prefixed, as the parser names it).
PROMETHEUS = {
    "interval": "torchpar_sample_interval_seconds",
    "child.exit_code": "torchpar_workload_exit_code",
    "cores": "torchpar_cpu_load_ratio",
    "thread_groups[].count": "torchpar_threads",
    "thread_groups[].busy": "torchpar_threads_busy",
    "thread_groups[].cpu_percent": "torchpar_threads_cpu_cores",
    "thread_groups[].wait_percent": "torchpar_threads_run_queue_wait_cores",
    "executors[].value": "torchpar_queue_depth",
    "executors[].capacity": "torchpar_queue_capacity",
    "executors[].launched": "torchpar_queue_launches",
    "executors[].completed": "torchpar_queue_completions",
    "executors[].busy": "torchpar_executor_busy_ratio",
    "executors[].blocked": "torchpar_queue_blocked_ratio",
    "executors[].ready": "torchpar_queue_ready",
    "executors[].running": "torchpar_executor_running_ratio",
    "executors[].core_wait": "torchpar_executor_core_wait_ratio",
    "frontend_busy": "torchpar_frontend_busy_ratio",
    "frontend_wait": "torchpar_frontend_wait_ratio",
    "frontend_core_wait": "torchpar_frontend_core_wait_ratio",
    "overlap": "torchpar_overlap_ratio",
    "overlap_high": "torchpar_overlap_high_ratio",
    "overlap_in_progress": "torchpar_overlap_in_progress_ratio",
    "throughput": "torchpar_throughput_per_second",
    "num_threads": "torchpar_intraop_threads",
    "interop_threads": "torchpar_interop_threads",
    "scoreboard[].seconds": "torchpar_mode_seconds",
    "scoreboard[].throughput": "torchpar_mode_throughput_per_second",
    "scoreboard[].mean_depth": "torchpar_mode_queue_depth_mean",
    "scoreboard[].frontend_wait": "torchpar_mode_frontend_wait_ratio",
    "scaling[].gflops": "torchpar_scaling_gflops",
    "scaling[].threads": "torchpar_scaling_gflops",  # its label
    "gpus[].index": "torchpar_gpu_utilization_ratio",  # the gpu label
    "gpus[].util_percent": "torchpar_gpu_utilization_ratio",
    "gpus[].mem_used": "torchpar_gpu_memory_used_bytes",
    "gpus[].mem_total": "torchpar_gpu_memory_total_bytes",
    "gpus[].power_w": "torchpar_gpu_power_watts",
    "gpus[].power_limit_w": "torchpar_gpu_power_limit_watts",
    "gpus[].temperature_c": "torchpar_gpu_temperature_celsius",
    "gpus[].process_util_percent": "torchpar_gpu_process_utilization_ratio",
    "gpus[].process_mem": "torchpar_gpu_process_memory_used_bytes",
    "op_coverage": "torchpar_op_counter_coverage_ratio",
    "executors[].rank": "torchpar_queue_depth",  # the rank label
    "ranks[].rank": "torchpar_rank_running",  # the rank label
    "ranks[].throughput": "torchpar_rank_throughput_per_second",
    "ranks[].depth": "torchpar_rank_queue_depth",
    "ranks[].data_wait": "torchpar_data_wait_ratio",
    "ranks[].exit_code": "torchpar_rank_exit_code",
    "syncpoints[].count": "torchpar_sync_points",
    "syncpoints[].rank": "torchpar_sync_points",  # the rank label
    "starved": "torchpar_starved_cores",
    "monitor_cpu": "torchpar_monitor_cpu_cores",
    "replay.position": "torchpar_replay_position_seconds",
    "replay.duration": "torchpar_replay_duration_seconds",
    "replay.speed": "torchpar_replay_speed",
    "replay.frame": "torchpar_replay_frame_seconds",
    "primary_rank": "torchpar_primary_rank",
    "ratio": "torchpar_async_sync_speedup",
    "steady.done": "torchpar_work",
    **{
        f"{where}steps.{k}": name
        for where in ("", "ranks[].")
        for k, name in (
            ("count", "torchpar_steps"),
            ("per_second", "torchpar_steps_per_second"),
            ("seconds", "torchpar_step_seconds"),
        )
    },
    **{
        f"{where}steps.phases.{p}": "torchpar_step_phase_seconds"
        for where in ("", "ranks[].")
        for p in PHASES
    },
    "ranks[].core_wait": "torchpar_rank_core_wait_ratio",
    "ranks[].steps.stalled": "torchpar_step_stalled_seconds",
    "ranks[].local_rank": "torchpar_rank_running",  # its label
    "ranks[].node_rank": "torchpar_rank_running",  # its label
    "straggler.rank": "torchpar_straggler_ratio",  # its label
    "straggler.ratio": "torchpar_straggler_ratio",
    "straggler.core_wait": "torchpar_straggler_core_wait_seconds",
    "memory[].rank": "torchpar_rss_bytes",  # its label
    "memory[].rss_bytes": "torchpar_rss_bytes",
    "memory[].rss_growth_bytes_per_min": "torchpar_rss_growth_bytes_per_minute",
    "memory[].devices[].allocated_bytes": "torchpar_cuda_memory_allocated_bytes",
    "memory[].devices[].reserved_bytes": "torchpar_cuda_memory_reserved_bytes",
    "memory[].devices[].peak_bytes": "torchpar_cuda_memory_peak_bytes",
}

PROMQL = "PromQL computes it from the series exported"
NOT_IN_PROMETHEUS = {
    **{
        f"{where}steps.recent[].{k}": "whole steps are per-step detail, not a series: " + RECENT
        for where in ("", "ranks[].")
        for k in ("end", *(f"phases.{p}" for p in PHASES))
    },
    **{
        f"{where}steps.{part}": f"over the run: the report's; avg_over_time of the window's series, {PROMQL}"
        for where in ("", "ranks[].")
        for part in ("run_seconds", *(f"run_phases.{p}" for p in PHASES))
    },
    "steps.stalled": "the primary rank's: ranks[].steps.stalled is exported per rank "
    "(torchpar_step_stalled_seconds)",
    **{
        f"{where}steps.timed_share": "how the phases were measured (a fast loop's in one step of "
        "several), not a figure of the workload: headless and the steps panel's title say it"
        for where in ("", "ranks[].")
    },
    "straggler.costs": "the others' torchpar_step_phase_seconds{phase='comm'} less the straggler's: "
    + PROMQL,
    "t": "the scrape has its own time",
    "child.pid": "a process id: the monitor's info, not a measurement",
    "core_history": HISTORY,
    "threads[].tid": "per thread: Prometheus gets the groups (thread_groups), as the panel shows them",
    "threads[].cpu_percent": "as threads[].tid",
    "threads[].wait_percent": "as threads[].tid",
    "threads[].pid": "as threads[].tid",
    "thread_groups[].tids": "thread ids, not a figure",
    "executors[].history": HISTORY,
    "throughput_history": HISTORY,
    "results[].value": "an experiment's own table (its own units and rounds): headless and the screen",
    "results[].round": "as results[].value",
    "results[].median": "as results[].value",
    "results[].low": "as results[].value",
    "results[].high": "as results[].value",
    "results[].rounds": "as results[].value",
    "scaling[].samples": "how many timings the GFLOP/s is the mean of, not a figure",
    "gpus[].util_history": HISTORY,
    "log[].seq": "log lines are not metrics",
    **{k: COUNTED for k in ("samples", "host_samples", "executors[].samples", "gpus[].samples")},
    "log_partial[].seq": "log lines are not metrics",
    "sample_t": "the child's clock at its newest sample (latency measurements), not a figure",
    "straggler_windows": "a count of the windows behind the straggler's judgment; the cluster view counts "
    "its own from the step series",
    "ranks[].pid": "a process id, not a measurement",
    "ranks[].data_verdict.wait": "the same figure as ranks[].data_wait (torchpar_data_wait_ratio)",
    "data_verdict.wait": "the primary rank's data_wait (torchpar_data_wait_ratio)",
    "syncpoints[].per_second": f"rate() of torchpar_sync_points_total: {PROMQL}",
    "stack.pid": "a stack is text, not a metric",
    "stack.frames[].line": "as stack.pid",
    "stack.t": "as stack.pid",
    "stack.python_tids": "as stack.pid",
    "ranks_running": f"sum(torchpar_rank_running): {PROMQL}",
    "depth.value": f"sum(torchpar_queue_depth): {PROMQL}",
    "depth.capacity": f"sum(torchpar_queue_capacity): {PROMQL}",
    "core_load": f"avg(torchpar_cpu_load_ratio): {PROMQL}",
    "lanes.windows": f"the lanes' window: avg_over_time of the ratios exported, {PROMQL}",
    **{
        f"lanes.{part}.{k}": f"avg_over_time of the matching ratio: {PROMQL}"
        for part in ("frontend", "executors[]")
        for k in ("rank", "busy", "running", "core_wait", "wait")
    },
    "lanes.overlap": "avg_over_time(torchpar_overlap_ratio)",
    "lanes.overlap_high": "avg_over_time(torchpar_overlap_high_ratio)",
    "lanes.overlap_in_progress": "avg_over_time(torchpar_overlap_in_progress_ratio)",
    "steady.seconds": f"sum(torchpar_mode_seconds_total): {PROMQL}",
    "steady.throughput": f"torchpar_work_total / sum(torchpar_mode_seconds_total): {PROMQL}",
    "steady.mean_depth": f"torchpar_mode_queue_depth_mean weighted by torchpar_mode_seconds_total: {PROMQL}",
    "steady.frontend_wait": f"as steady.mean_depth, torchpar_mode_frontend_wait_ratio: {PROMQL}",
}


def _unwrap(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return _unwrap(next(a for a in typing.get_args(hint) if a is not type(None)))
    return hint


def leaves(cls: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(path, type) of every leaf field of ``cls``, into nested dataclasses and tuples of them."""
    hints = typing.get_type_hints(cls, vars(S))
    out = []
    for f in dataclasses.fields(cls):
        hint, path = _unwrap(hints[f.name]), prefix + f.name
        inner = _unwrap(typing.get_args(hint)[0]) if typing.get_origin(hint) is tuple else None
        if inner is not None and dataclasses.is_dataclass(inner):
            out += leaves(inner, path + "[].")
        elif dataclasses.is_dataclass(hint):
            out += leaves(hint, path + ".")
        else:
            out.append((path, hint))
    return out


def numeric(hint: Any) -> bool:
    """A number, or a tuple of numbers (bools and enums are not)."""
    if typing.get_origin(hint) is tuple:
        return numeric(_unwrap(typing.get_args(hint)[0]))
    return hint in (int, float)


def fill(given: Any, counter: list[int]) -> Any:
    """A value of type ``given`` with nothing missing: every optional set, every tuple one item long."""
    hint: Any = _unwrap(given)
    counter[0] += 1
    if typing.get_origin(hint) is tuple:
        return (fill(typing.get_args(hint)[0], counter),)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint, vars(S))
        return hint(**{f.name: fill(hints[f.name], counter) for f in dataclasses.fields(hint)})
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return next(m for m in hint if m.value)  # a word, not an empty one
    if hint is bool:
        return True
    if hint is int:
        return counter[0]
    if hint is float:
        return 0.25 + counter[0] / 1000
    if hint is str:
        return f"s{counter[0]}"
    raise AssertionError(f"no value for {hint}")


def full_snapshot() -> Snapshot:
    hints = typing.get_type_hints(Snapshot, vars(S))
    counter = [0]
    fields = {
        f.name: fill(hints[f.name], counter) for f in dataclasses.fields(Snapshot) if f.name not in DERIVED
    }
    fields["attached"] = False  # attached shows no mode: a snapshot of a run with an agent
    fields["log"] = (dataclasses.replace(fields["log"][0], seq=1),)  # the first line: no dropped marker
    board = fields["scoreboard"][0]  # both modes: the ratio of their throughputs
    fields["scoreboard"] = (board, dataclasses.replace(board, mode=Mode.SYNC))
    return build(**fields)


def value_at(snap: Any, path: str) -> Any:
    for part in path.split("."):
        many = part.endswith("[]")
        snap = getattr(snap, part.removesuffix("[]"))
        if snap is None:
            return None
        if many:
            snap = snap[0]
    return snap


def record_at(record: Any, path: str) -> Any:
    for part in path.split("."):
        if part == "{}":
            record = next(iter(record.values()))
            continue
        many = part.endswith("[]")
        name = part.removesuffix("[]")
        assert isinstance(record, dict) and name in record, f"no {name!r} on the way to {path!r}"
        record = record[name]
        if many and record is not None:
            record = record[0]
    return record


SNAP = full_snapshot()
LEAVES = leaves(Snapshot)


def test_every_leaf_is_listed_once() -> None:
    paths = {p for p, _ in LEAVES}
    missing = sorted(p for p in paths if (p in HEADLESS) == (p in NOT_IN_HEADLESS))
    assert not missing, f"export in headless.to_record (and add to HEADLESS) or say why not: {missing}"
    numbers = {p for p, h in LEAVES if numeric(h)}
    missing = sorted(p for p in numbers if (p in PROMETHEUS) == (p in NOT_IN_PROMETHEUS))
    assert not missing, (
        f"export in metrics.SnapshotCollector (and add to PROMETHEUS) or say why not: {missing}"
    )
    stale = sorted((set(HEADLESS) | set(NOT_IN_HEADLESS) | set(PROMETHEUS) | set(NOT_IN_PROMETHEUS)) - paths)
    assert not stale, f"listed but no such field: {stale}"


def test_the_full_snapshot_has_every_leaf_set() -> None:
    unset = [p for p, _ in LEAVES if value_at(SNAP, p) is None and p not in ("lanes.frontend.rank",)]
    # the frontend's lane has no rank or running share; an executor's lane has no blocked wait
    assert sorted(unset) == ["lanes.executors[].wait", "lanes.frontend.running"]


@pytest.mark.parametrize("path", sorted(HEADLESS))
def test_headless_carries_it(path: str) -> None:
    record = headless.to_record(SNAP)
    found = record_at(record, HEADLESS[path])
    value = value_at(SNAP, path)
    if value is not None:
        assert found is not None, f"{path} is set, but headless {HEADLESS[path]} is null"
    if path.startswith("stack.frames[]."):
        assert str(value) in found
    elif isinstance(value, str) and HEADLESS[path] != "scoreboard":
        assert found == value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        assert found == pytest.approx(value, abs=0.051)  # rounded to a tenth at the coarsest


def _families(snap: Snapshot) -> dict[str, Any]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap, hostname="h"))
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


@pytest.mark.parametrize("path", sorted(PROMETHEUS))
def test_prometheus_carries_it(path: str) -> None:
    families = _families(SNAP)
    name = PROMETHEUS[path]
    assert name in families, f"{path}: no family {name}"
    assert families[name].samples, f"{path}: {name} has no series although the field is set"
