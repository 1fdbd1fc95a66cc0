"""Headless mode: the same session, one JSON object per sample on stdout (JSON lines).

Fields of each line (see README, "Headless output"):
``t``, ``experiment``, ``target``, ``mode`` (null when attached), ``notice``, ``child`` {pid, state, exit_code}, ``cores`` [percent per core],
``threads`` [{role, count, busy, cpu_percent, wait_percent}], ``executors`` [{name, kind, quantity, value, capacity,
launched, completed, busy, blocked, emulated}], ``throughput`` {value, unit}, ``num_threads``,
``frontend`` {busy, wait}, ``overlap``, ``scoreboard`` {async|sync: {seconds, throughput, mean_depth,
frontend_wait}}, ``ratio``, ``results`` [{label, value, unit}], ``scaling`` [{threads, gflops}],
``gpus`` [...], ``ranks`` [{rank, pid, state, throughput, unit, depth, data_wait, exit_code}],
``syncpoints`` [{where, call, count, per_second}], ``data_verdict``, ``stack`` {thread, idle,
waiting_in, frames} or null, ``stack_status``, ``log`` [new log lines since the previous object].
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any, TextIO

from torchpar_top.session.model import Snapshot


def _last(series: tuple[float, ...]) -> float | None:
    return round(series[-1], 4) if series else None


def to_record(snap: Snapshot, log_after: int = 0) -> dict[str, Any]:
    """One headless JSON object from a snapshot; ``log`` holds lines with ``seq > log_after``."""
    return {
        "t": round(snap.t, 3),
        "experiment": snap.experiment,
        "target": snap.target,
        "mode": None if snap.experiment == "attach" else snap.mode,
        "notice": snap.notice,
        "paused": snap.paused,
        "child": {"pid": snap.child.pid, "state": snap.child.state, "exit_code": snap.child.exit_code},
        "cores": [round(c, 1) for c in snap.cores],
        "threads": [
            {"role": g.role, "count": g.count, "busy": g.busy, "cpu_percent": round(g.cpu_percent, 1),
             "wait_percent": round(g.wait_percent, 1)}
            for g in snap.thread_groups
        ],
        "executors": [
            {
                "name": e.name, "kind": e.kind, "quantity": e.quantity, "value": e.value,
                "capacity": e.capacity, "launched": e.launched, "completed": e.completed,
                "busy": _last(e.busy), "blocked": round(e.blocked, 4), "emulated": e.emulated,
            }
            for e in snap.executors
        ],
        "throughput": {"value": None if snap.throughput is None else round(snap.throughput, 3),
                       "unit": snap.throughput_unit},
        "num_threads": snap.num_threads,
        "frontend": {"busy": _last(snap.frontend_busy), "wait": _last(snap.frontend_wait)},
        "overlap": _last(snap.overlap),
        "scoreboard": {m.mode: {k: v for k, v in asdict(m).items() if k != "mode"} for m in snap.scoreboard},
        "ratio": snap.ratio,
        "results": [asdict(r) for r in snap.results],
        "scaling": [{"threads": p.threads, "gflops": round(p.gflops, 2)} for p in snap.scaling],
        "gpus": [asdict(g) | {"util_history": None} for g in snap.gpus],
        "gpu_status": snap.gpu_status,
        "ranks": [asdict(r) for r in snap.ranks],
        "syncpoints": [asdict(s) for s in snap.syncpoints],
        "data_verdict": snap.data_verdict,
        "stack": None if snap.stack is None else {
            "thread": snap.stack.thread, "idle": snap.stack.idle, "waiting_in": snap.stack.waiting_in,
            "frames": [f"{f.function} ({f.filename}:{f.line})" for f in snap.stack.frames],
        },
        "stack_status": snap.stack_status,
        "log": [{"source": line.source, "text": line.text} for line in snap.log if line.seq > log_after],
    }


def run(session: Any, duration: float, out: TextIO) -> int:
    """Start ``session``, print one line per host sample for ``duration`` seconds, close it.

    Returns:
        0, or 1 when the workload exited with a failure before the end.
    """
    session.start()
    log_after, seen = 0, 0
    try:
        end = time.monotonic() + duration
        while time.monotonic() < end:
            time.sleep(min(session.interval / 4, max(0.0, end - time.monotonic())))
            if session.host_samples == seen:
                continue
            seen = session.host_samples
            snap = session.snapshot()
            out.write(json.dumps(to_record(snap, log_after)) + "\n")
            out.flush()
            if snap.log:
                log_after = snap.log[-1].seq
    finally:
        session.close()
    child = session.snapshot().child
    return 1 if child.state == "failed" or (child.state == "exited" and child.exit_code) else 0
