"""Headless mode: the same session, one JSON object per sample on stdout (JSON lines).

Fields of each line (see README, "Headless output"): ``t``, ``experiment``, ``target``, ``description``,
``mode`` (null when attached), ``attached``, ``notice``, ``paused``, ``interval``, ``child`` {pid, state,
exit_code, message}, ``cores`` [percent per core], ``threads`` [{role, executor, count, busy, cpu_percent,
wait_percent}], ``starved`` (cores of run-queue wait, or null), ``frontend_hot_in_sync``, ``executors``
[{name, rank, kind, quantity, counts, value, capacity, launched, completed, ready, busy, running, core_wait,
blocked, emulated, note}], ``throughput`` {value, unit}, ``num_threads``, ``interop_threads``,
``op_coverage``, ``sample_t``, ``frontend`` {busy, wait, core_wait}, ``overlap`` and ``overlap_high``
(running at once: at least, at most), ``overlap_in_progress``, ``timing`` (the live loop paused for a timing
round), ``scoreboard`` {async|sync: {seconds, throughput, mean_depth, frontend_wait}}, ``ratio``,
``results`` [{label, value, unit, round, median, low, high, rounds}], ``scaling`` [{threads, gflops,
samples}], ``gpus`` [...], ``gpu_status``, ``ranks`` [{rank, pid, state, throughput, unit, depth, data_wait,
exit_code, data_verdict, steps, local_rank, node_rank, hostname, note, core_wait, at (where its frontend
was at its latest stack)}], ``syncpoints`` [{where, rank, call,
count, per_second, sampled}], ``data_verdict`` {bound, wait} or null, ``stack`` {pid, t, thread, idle,
waiting_in, source, frames} or null, ``stack_status``, ``monitor_cpu`` (torchpar-top's own share of a core
over the last second), ``replay`` {path, position, duration, speed, frame, finished, recorded} or null,
``steps`` {source, count, per_second, seconds, phases {data, transfer, forward, backward, comm, optimizer,
sync, other: seconds per step}, run_seconds, run_phases, gpu, timed_share, stalled} or null (also in each
of ``ranks``),
``straggler`` {rank, cause, ratio, costs, core_wait} or null, ``straggler_windows`` (how many 1 s windows
it was judged over: null before 5 means not judged yet), ``memory`` [{rank, rss_bytes,
rss_growth_bytes_per_min, devices [{device, allocated_bytes, reserved_bytes, peak_bytes}]}]; derived in
``model/`` (``model/figures.py``): ``primary_rank``, ``depth`` {value, capacity} (the header's),
``core_load`` (mean over the cores, percent), ``lanes`` {windows, frontend, executors, overlap, overlap_high,
overlap_in_progress} (the lanes panel's percentages, as shares), ``steady`` {seconds, done, throughput,
mean_depth, frontend_wait} (the scoreboard's modes together); ``log`` [new log lines since the previous
object, after a ``dropped`` marker when some came and went between two objects]. Every field is a
:class:`~torchpar_top.contract.snapshot.Snapshot` field (the last value of a history); nothing is derived
here but the count of log lines left out (``tests/unit/test_snapshot_fields.py`` checks every field is here
or says why not).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import fields
from typing import Any, TextIO

from torchpar_top.contract.codec import to_plain
from torchpar_top.contract.snapshot import ChildStatus, Snapshot, StepsView
from torchpar_top.contract.vocab import ChildState, LogSource


def _last(series: tuple[float, ...]) -> float | None:
    return round(series[-1], 4) if series else None


def _rounded(plain: Any) -> Any:
    """A plain dict of figures with every float to 4 decimals (shares; means)."""
    if isinstance(plain, dict):
        return {k: _rounded(v) for k, v in plain.items()}
    if isinstance(plain, list):
        return [_rounded(v) for v in plain]
    return round(plain, 4) if isinstance(plain, float) else plain


def to_record(snap: Snapshot, log_after: int = 0) -> dict[str, Any]:
    """One headless JSON object from a snapshot; ``log`` holds lines with ``seq > log_after``."""
    return {
        "t": round(snap.t, 3),
        "experiment": snap.experiment,
        "target": snap.target,
        "description": snap.description,
        "mode": None if snap.attached else snap.mode.value,
        "attached": snap.attached,
        "notice": snap.notice,
        "paused": snap.paused,
        "interval": snap.interval,
        "child": {
            "pid": snap.child.pid,
            "state": snap.child.state.value,
            "exit_code": snap.child.exit_code,
            "message": snap.child.message,
        },
        "cores": [round(c, 1) for c in snap.cores],
        "threads": [
            {
                "role": g.role.value,
                "executor": g.executor,
                "count": g.count,
                "busy": g.busy,
                "cpu_percent": round(g.cpu_percent, 1),
                "wait_percent": round(g.wait_percent, 1),
            }
            for g in snap.thread_groups
        ],
        "starved": None if snap.starved is None else round(snap.starved, 2),
        "frontend_hot_in_sync": snap.frontend_hot_in_sync,
        "executors": [
            {
                "name": e.name,
                "rank": e.rank,
                "kind": e.kind.value,
                "quantity": e.quantity.value,
                "counts": e.counts.value,
                "value": e.value,
                "capacity": e.capacity,
                "launched": e.launched,
                "completed": e.completed,
                "ready": e.ready,
                "busy": _last(e.busy),
                "running": _last(e.running),
                "core_wait": _last(e.core_wait),
                "blocked": None if e.blocked is None else round(e.blocked, 4),
                "emulated": e.emulated,
                "note": e.note,
            }
            for e in snap.executors
        ],
        "throughput": {
            "value": None if snap.throughput is None else round(snap.throughput, 3),
            "unit": snap.throughput_unit,
        },
        "num_threads": snap.num_threads,
        "interop_threads": snap.interop_threads,
        "op_coverage": None if snap.op_coverage is None else round(snap.op_coverage, 4),
        "sample_t": None if snap.sample_t is None else round(snap.sample_t, 3),
        "frontend": {
            "busy": _last(snap.frontend_busy),
            "wait": _last(snap.frontend_wait),
            "core_wait": _last(snap.frontend_core_wait),
        },
        "overlap": _last(snap.overlap),
        "overlap_high": _last(snap.overlap_high),
        "overlap_in_progress": _last(snap.overlap_in_progress),
        "timing": bool(snap.timing and snap.timing[-1]),
        "scoreboard": {
            m.mode.value: {k: v for k, v in to_plain(m).items() if k != "mode"} for m in snap.scoreboard
        },
        "ratio": snap.ratio,
        "results": to_plain(snap.results),
        "scaling": [
            {"threads": p.threads, "gflops": round(p.gflops, 2), "samples": p.samples} for p in snap.scaling
        ],
        "gpus": [to_plain(g) | {"util_history": None} for g in snap.gpus],
        "gpu_status": snap.gpu_status,
        "ranks": [
            {f.name: to_plain(getattr(r, f.name)) for f in fields(r) if f.name != "steps"}
            | {"steps": steps_record(r.steps)}
            for r in snap.ranks
        ],
        "syncpoints": to_plain(snap.syncpoints),
        "data_verdict": to_plain(snap.data_verdict),
        "stack": None
        if snap.stack is None
        else {
            "pid": snap.stack.pid,
            "t": round(snap.stack.t, 3),
            "thread": snap.stack.thread,
            "idle": snap.stack.idle,
            "waiting_in": snap.stack.waiting_in,
            "source": snap.stack.source,
            "frames": [f"{f.function} ({f.filename}:{f.line})" for f in snap.stack.frames],
        },
        "stack_status": snap.stack_status,
        "monitor_cpu": None if snap.monitor_cpu is None else round(snap.monitor_cpu, 4),
        "replay": to_plain(snap.replay),
        "steps": steps_record(snap.steps),
        "straggler": to_plain(snap.straggler),
        "straggler_windows": snap.straggler_windows,
        "memory": to_plain(snap.memory),
        "primary_rank": snap.primary_rank,
        "ranks_running": snap.ranks_running,
        "depth": to_plain(snap.depth),
        "core_load": None if snap.core_load is None else round(snap.core_load, 1),
        "lanes": _rounded(to_plain(snap.lanes)),
        "steady": _rounded(to_plain(snap.steady)),
        "log": log_lines(snap, log_after),
    }


def steps_record(steps: StepsView | None) -> dict[str, Any] | None:
    """The ``steps`` object: the view less its whole recent steps (the recording and export have them)."""
    if steps is None:
        return None
    return {f.name: to_plain(getattr(steps, f.name)) for f in fields(steps) if f.name != "recent"}


def log_lines(snap: Snapshot, log_after: int) -> list[dict[str, Any]]:
    """The log lines with ``seq > log_after``, after a marker ``{"source": "app", "text": "[N log lines
    left out...]", "dropped": N}`` when lines came and went between two records (the snapshot carries
    the newest lines only): nothing is dropped silently."""
    new = [line for line in snap.log if line.seq > log_after]
    out: list[dict[str, Any]] = []
    dropped = new[0].seq - log_after - 1 if new else 0
    if dropped > 0:
        out.append(
            {
                "source": LogSource.APP.value,
                "text": f"[{dropped} log lines left out: more came between two records than the log keeps]",
                "dropped": dropped,
            }
        )
    out += [{"source": line.source.value, "text": line.text} for line in new]
    return out


#: The exit status after the reader of stdout went away: what a shell reports for a process killed by SIGPIPE.
BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE


def _discard_output(out: TextIO) -> None:
    """Point ``out``'s descriptor at /dev/null, so that flushing it at exit raises nothing more."""
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def run(session: Any, duration: float, out: TextIO, stop: threading.Event | None = None) -> int:
    """Start ``session`` and print one line per host sample until the workload ends (after a last line
    that says so), ``duration`` seconds pass or ``stop`` is set (a signal handler); then close it.

    Returns:
        The workload's exit status when it ended first (see :func:`exit_status`), 0 when the time ran
        out or ``stop`` was set, or :data:`BROKEN_PIPE_STATUS` when nobody reads ``out`` any more.
    """
    session.start()
    try:
        ended = _write_records(session, duration, out, stop or threading.Event())
    except BrokenPipeError:  # the reader went away (| head -3): end as SIGPIPE would, quietly
        _discard_output(out)
        return BROKEN_PIPE_STATUS
    finally:
        session.close()
    return 0 if ended is None else exit_status(ended)


def _write_records(session: Any, duration: float, out: TextIO, stop: threading.Event) -> ChildStatus | None:
    """Write a record per host sample; returns the workload's status if it ended before the time ran out."""
    log_after, seen = 0, 0
    end = time.monotonic() + duration
    due = 0.0  # when the next sample is expected: sleep until then, then poll every interval / 4
    pull = getattr(session, "pull", None)  # a live session reads the host and its agents in our wake-up
    while time.monotonic() < end and not stop.is_set():
        now = time.monotonic()
        stop.wait(min(max(due - now, session.interval / 4), max(0.0, end - now)))
        if pull is not None:
            pull()
        if session.host_samples == seen:
            continue
        seen = session.host_samples
        due = time.monotonic() + session.interval * 0.8  # 40 wake-ups a second at 10 Hz became ~20
        snap = session.snapshot()
        out.write(json.dumps(to_record(snap, log_after)) + "\n")
        out.flush()
        if snap.log:
            log_after = snap.log[-1].seq
        if snap.child.state in (ChildState.EXITED, ChildState.FAILED, ChildState.FINISHED):
            status: ChildStatus = snap.child
            return status  # the workload ended (or the replay reached the end of its trace)
    return None


def exit_status(child: ChildStatus) -> int:
    """The status a batch job expects from the monitor of a workload that ended: the workload's own, as
    ``python SCRIPT`` would give it (128 + N when a signal N killed it, as shells report it), 1 when it
    could not start, 0 for a process it did not start (``attach``: its status is not ours to know)."""
    if child.state == ChildState.FAILED:
        return 1
    if child.exit_code is None:
        return 0
    return 128 - child.exit_code if child.exit_code < 0 else child.exit_code
