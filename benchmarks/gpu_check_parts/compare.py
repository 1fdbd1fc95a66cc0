"""The GPU check's comparisons: pure functions over recorded numbers (unit-tested without a GPU).

Nothing here touches a device, spawns a process or reads the clock. The check (``gpu_check.py``)
measures; these functions parse what it measured, put two sources side by side and say whether they
agree within the tolerances named here. Every verdict comes with the numbers it was made from.

Units: utilisation in percent, memory in MiB, power in W, times in seconds unless a name says µs.
"""

from __future__ import annotations

import json
import re
import statistics
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# -- NVML (our probe) against nvidia-smi ---------------------------------------------------------------------

#: What nvidia-smi is asked for (``--format=csv,noheader,nounits``), in this order.
SMI_FIELDS = ("index", "uuid", "utilization.gpu", "memory.used", "memory.total", "power.draw")
SMI_QUERY = ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
#: The compute processes nvidia-smi lists (to see that the monitor has no CUDA context).
SMI_APPS_QUERY = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]

METRICS = ("util", "mem_used_mib", "mem_total_mib", "power_w")
#: Allowed |probe - nvidia-smi| per metric: the larger of an absolute and a relative (to nvidia-smi's
#: value) amount. Both read the same driver, but not at the same instant: utilisation is an average
#: over the driver's last sample period (ours: the mean of the samples since the previous poll), power
#: moves by tens of watts within a second under load, memory only when something allocates.
TOLERANCES: dict[str, tuple[float, float]] = {
    "util": (10.0, 0.0),
    "mem_used_mib": (64.0, 0.02),
    "mem_total_mib": (1.0, 0.01),
    "power_w": (25.0, 0.10),
}
MIB = 1 << 20


def _smi_number(text: str) -> float | None:
    """A number from one nvidia-smi CSV cell; ``[N/A]``, ``[Not Supported]``, ``N/A``... are None."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None


def parse_smi_gpus(text: str) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,power.draw
    --format=csv,noheader,nounits``; lines that do not have the six fields are skipped."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(SMI_FIELDS) or not cells[0].isdigit():
            continue
        rows.append(
            {
                "index": int(cells[0]),
                "uuid": cells[1],
                "util": _smi_number(cells[2]),
                "mem_used_mib": _smi_number(cells[3]),
                "mem_total_mib": _smi_number(cells[4]),
                "power_w": _smi_number(cells[5]),
            }
        )
    return rows


def parse_smi_apps(text: str) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits``."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 1 and cells[0].isdigit():
            rows.append({"pid": int(cells[0]), "used_mib": _smi_number(cells[1]) if len(cells) > 1 else None})
    return rows


def probe_row(view: Any) -> dict[str, Any]:
    """One ``GpuView`` of our NVML probe in nvidia-smi's units (MiB, W, percent)."""
    return {
        "index": view.index,
        "label": view.label,
        "util": view.util_percent,
        "mem_used_mib": None if view.mem_used is None else view.mem_used / MIB,
        "mem_total_mib": None if view.mem_total is None else view.mem_total / MIB,
        "power_w": view.power_w,
    }


def allowed(
    metric: str, reference: float, tolerances: Mapping[str, tuple[float, float]] = TOLERANCES
) -> float:
    """The largest |difference| accepted for ``metric`` when nvidia-smi reads ``reference``."""
    absolute, relative = tolerances[metric]
    return max(absolute, relative * abs(reference))


def _median(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def compare_nvml(
    pairs: Sequence[tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]],
    tolerances: Mapping[str, tuple[float, float]] = TOLERANCES,
) -> list[dict[str, Any]]:
    """Per GPU (NVML index) and metric: the median of our probe's readings, of nvidia-smi's, the
    difference (probe - nvidia-smi), what is allowed, and whether it is within (None: a side has no value).

    Args:
        pairs: readings taken back to back, ``(probe rows, nvidia-smi rows)`` per moment, rows as
            :func:`probe_row` and :func:`parse_smi_gpus` make them (matched by ``index``).
    """
    indices = sorted({r["index"] for probe, smi in pairs for r in list(probe) + list(smi)})
    out = []
    for index in indices:
        label = next((r.get("label") for probe, _ in pairs for r in probe if r["index"] == index), None)
        row: dict[str, Any] = {"index": index, "label": label, "readings": len(pairs)}
        for metric in METRICS:
            ours = _median(r.get(metric) for probe, _ in pairs for r in probe if r["index"] == index)
            theirs = _median(r.get(metric) for _, smi in pairs for r in smi if r["index"] == index)
            if ours is None or theirs is None:
                row[metric] = {"probe": ours, "smi": theirs, "diff": None, "allowed": None, "ok": None}
                continue
            diff, limit = ours - theirs, allowed(metric, theirs, tolerances)
            row[metric] = {
                "probe": round(ours, 2),
                "smi": round(theirs, 2),
                "diff": round(diff, 2),
                "allowed": round(limit, 2),
                "ok": abs(diff) <= limit,
            }
        out.append(row)
    return out


def nvml_problems(phases: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """What disagrees, one line each (``phase cuda:0 power_w: probe 312 W, nvidia-smi 250 W...``), and
    metrics our probe lacks where nvidia-smi has a value."""
    problems = []
    for phase, rows in phases.items():
        for row in rows:
            who = row.get("label") or f"nvml:{row['index']}"
            for metric in METRICS:
                cell = row.get(metric) or {}
                if cell.get("ok") is False:
                    problems.append(
                        f"{phase}, {who}, {metric}: probe {cell['probe']}, nvidia-smi {cell['smi']} "
                        f"(difference {cell['diff']}, allowed ±{cell['allowed']})"
                    )
                elif cell.get("probe") is None and cell.get("smi") is not None:
                    problems.append(
                        f"{phase}, {who}, {metric}: the probe has no value, nvidia-smi reads {cell['smi']}"
                    )
    return problems


def table_of_nvml(phases: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The comparison as one table for the Markdown summary."""
    rows = []
    for phase, gpus in phases.items():
        for row in gpus:
            cells = [phase, row.get("label") or f"nvml:{row['index']}"]
            for metric in METRICS:
                cell = row.get(metric) or {}
                mark = "" if cell.get("ok") is not False else " ✗"
                cells.append(f"{_fmt(cell.get('probe'))} / {_fmt(cell.get('smi'))}{mark}")
            rows.append(cells)
    return {
        "title": "NVML probe / nvidia-smi (medians)",
        "columns": ["phase", "GPU", "util %", "memory used MiB", "memory total MiB", "power W"],
        "rows": rows,
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


# -- cuda:N <-> NVML labels ----------------------------------------------------------------------------------


def nvml_uuid(uuid: str) -> str:
    """A UUID as NVML and nvidia-smi spell it (``GPU-...``): torch prints it without the prefix."""
    uuid = uuid.strip()
    return uuid if uuid.upper().startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def compare_labels(
    torch_uuids: Sequence[str],
    agent_uuids: Sequence[str] | None,
    smi_rows: Sequence[Mapping[str, Any]],
    probe_labels: Mapping[str, Mapping[int, str]],
) -> dict[str, Any]:
    """Whether each way of labelling GPUs puts ``cuda:N`` on the GPU torch calls ``cuda:N``.

    Args:
        torch_uuids: ``str(torch.cuda.get_device_properties(i).uuid)`` for i = 0, 1...
        agent_uuids: what the agent sends (``CudaMonitor.uuids()``), or None when it could not be read.
        smi_rows: nvidia-smi's rows (index = NVML index, uuid).
        probe_labels: per labelling ("from the agent's UUIDs", "from the environment", "live session"),
            ``{NVML index: label}`` as our probe gave them.

    Returns:
        ``expected`` ({cuda:N: NVML index}), per labelling its mismatches, whether the agent's UUID
        strings are nvidia-smi's exactly, and ``ok``.
    """
    by_uuid = {r["uuid"].lower(): r["index"] for r in smi_rows}
    expected: dict[str, int | None] = {
        f"cuda:{i}": by_uuid.get(nvml_uuid(u).lower()) for i, u in enumerate(torch_uuids)
    }
    problems = [
        f"{label}: torch's UUID {torch_uuids[int(label[5:])]} is not among nvidia-smi's"
        for label, index in expected.items()
        if index is None
    ]
    agent_exact = None
    if agent_uuids is not None:
        smi_exact = {r["uuid"] for r in smi_rows}
        agent_exact = all(u in smi_exact for u in agent_uuids) and len(agent_uuids) == len(torch_uuids)
        if not agent_exact:
            problems.append(
                f"the agent's UUIDs {list(agent_uuids)} are not nvidia-smi's spelling {sorted(smi_exact)}"
            )
    labellings = {}
    for name, labels in probe_labels.items():
        wrong = []
        for cuda_label, index in expected.items():
            if index is None:
                continue
            got = labels.get(index)
            if got != cuda_label:
                wrong.append(f"NVML {index} labelled {got!r}, torch calls it {cuda_label}")
        labellings[name] = {"labels": {str(k): v for k, v in sorted(labels.items())}, "wrong": wrong}
        problems += [f"{name}: {w}" for w in wrong]
    return {
        "expected": expected,
        "agent_uuids_exact": agent_exact,
        "labellings": labellings,
        "problems": problems,
        "ok": not problems,
    }


# -- live queue rows against a profiler trace ----------------------------------------------------------------

#: Regimes a queue can be in over a window: the agent's and the trace's must agree on it.
DRAINED_AT_MOST = 8
"""Depth (kernels) at or below which a queue counts as drained: SYNC leaves an item's few ops."""
FULL_SHARE = 0.5
"""Share of the capacity at or above which a queue counts as full."""


def trace_to_unix(ts_us: float, base_ns: float) -> float:
    """A Kineto trace time (µs) as Unix seconds: torch writes ``baseTimeNanoseconds`` with the trace
    and its ``ts`` count from there (checked on torch 2.13's CPU traces against the wall clock)."""
    return base_ns / 1e9 + ts_us / 1e6


def live_window(
    records: Sequence[Mapping[str, Any]], executor: str, t0: float, t1: float
) -> dict[str, Any] | None:
    """What the live rows said about ``executor`` over ``[t0, t1]`` (Unix seconds, the child's clock).

    Args:
        records: one per agent sample, oldest first: ``{"t": sample time, "mode", "overlap",
            "executors": {name: {launched, completed, value, busy, counts, quantity, capacity}}}``.

    Returns:
        None without two samples of the executor around the window; else the samples used, the span
        between the bounding samples, launches and completions in it (their unit is the row's
        ``counts``: torch calls for a CUDA stream fed by the launch counter), the rate, and the row's
        value (outstanding) and busy share over the samples inside.
    """
    rows = [(r["t"], r["executors"][executor], r) for r in records if executor in r.get("executors", {})]
    if len(rows) < 2:
        return None
    times = [t for t, _, _ in rows]
    a = max(bisect_right(times, t0) - 1, 0)
    b = min(bisect_right(times, t1 - 1e-9), len(rows) - 1)  # the first sample at or after t1 (or the last)
    if b <= a:
        return None
    inside = rows[a + 1 : b + 1]
    first, last = rows[a][1], rows[b][1]
    span = times[b] - times[a]
    values = [row["value"] for _, row, _ in inside]
    busy = [row["busy"] for _, row, _ in inside if row.get("busy") is not None]
    overlap = [r["overlap"] for _, _, r in inside if r.get("overlap") is not None]
    launched = last["launched"] - first["launched"]
    return {
        "executor": executor,
        "counts": last.get("counts"),
        "quantity": last.get("quantity"),
        "capacity": last.get("capacity"),
        "samples": len(inside),
        "from": times[a],
        "to": times[b],
        "span": span,
        "launched": launched,
        "completed": last["completed"] - first["completed"],
        "launch_rate": launched / span if span > 0 else None,
        "mean_value": statistics.fmean(values) if values else None,
        "max_value": max(values) if values else None,
        "mean_busy": statistics.fmean(busy) if busy else None,
        "mean_overlap": statistics.fmean(overlap) if overlap else None,
        "modes": sorted({r.get("mode") for _, _, r in inside if r.get("mode")}),
    }


def time_weighted_depth(times: Sequence[float], depths: Sequence[int], t0: float, t1: float) -> float | None:
    """Mean of a depth step function over ``[t0, t1]`` weighted by time (the depth is
    ``depths[i]`` from ``times[i]`` on, 0 before the first)."""
    if t1 <= t0:
        return None
    i = bisect_right(times, t0) - 1
    depth = depths[i] if i >= 0 else 0
    area, t = 0.0, t0
    for j in range(i + 1, len(times)):
        if times[j] >= t1:
            break
        area += depth * (times[j] - t)
        t, depth = times[j], depths[j]
    area += depth * (t1 - t)
    return area / (t1 - t0)


def regime(depth: float | None, cap: int) -> str | None:
    """``drained``, ``partial`` or ``full`` (see :data:`DRAINED_AT_MOST`, :data:`FULL_SHARE`)."""
    if depth is None:
        return None
    if depth <= DRAINED_AT_MOST:
        return "drained"
    return "full" if depth >= FULL_SHARE * cap else "partial"


def compare_queue(
    live: Mapping[str, Any] | None,
    trace: Mapping[str, Any] | None,
    cap: int = 1024,
) -> dict[str, Any]:
    """The live row and the trace's queue over the same window, side by side.

    ``live`` is :func:`live_window`'s result; ``trace`` has ``launches``, ``duration`` (s), ``max_depth``,
    ``mean_depth`` (HTA's, over events), ``time_mean_depth`` (over time) and ``seconds_at_cap``.
    The live row counts torch calls (launched, outstanding = launched - completed, at each sample); the
    trace counts kernels, memcpys and memsets (depth = launched - started). Kernels per call is the
    ratio of the two launch rates; the live outstanding value times it estimates kernels. They agree
    when both put the queue in the same :func:`regime`.
    """
    out: dict[str, Any] = {
        "live": dict(live) if live else None,
        "trace": dict(trace) if trace else None,
        "wording": "live: torch calls (launched - completed, sampled); "
        "trace: kernels/memcpy/memset (launched - started, every event)",
    }
    if not live or not trace or not trace.get("launches"):
        out.update(
            agree=None, note="no live samples in the window" if not live else "no launches in the trace"
        )
        return out
    trace_rate = trace["launches"] / trace["duration"] if trace.get("duration") else None
    live_rate = live.get("launch_rate")
    kpc = trace_rate / live_rate if trace_rate and live_rate else None
    estimate = (
        live["mean_value"] * kpc
        if kpc is not None and live.get("mean_value") is not None
        else live.get("mean_value")
    )
    trace_depth = trace.get("time_mean_depth")
    if trace_depth is None:
        trace_depth = trace.get("mean_depth")
    live_regime, trace_regime = regime(estimate, cap), regime(trace_depth, cap)
    out.update(
        trace_launch_rate=trace_rate,
        live_launch_rate=live_rate,
        kernels_per_call=kpc,
        live_depth_in_kernels=estimate,
        trace_depth=trace_depth,
        live_regime=live_regime,
        trace_regime=trace_regime,
        agree=live_regime == trace_regime,
        note=f"live {live_regime}, trace {trace_regime}",
    )
    return out


def table_of_queues(rows: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """``(window name, compare_queue result)`` pairs as one Markdown table."""
    body = []
    for name, c in rows:
        live, trace = c.get("live") or {}, c.get("trace") or {}
        body.append(
            [
                name,
                _fmt(live.get("launch_rate")),
                _fmt(live.get("mean_value")),
                _fmt(live.get("max_value")),
                _fmt(c.get("trace_launch_rate")),
                _fmt(trace.get("mean_depth")),
                _fmt(trace.get("time_mean_depth")),
                _fmt(trace.get("max_depth")),
                _fmt(c.get("kernels_per_call")),
                "yes" if c.get("agree") else "no" if c.get("agree") is False else "–",
            ]
        )
    return {
        "title": "live row (torch calls) / trace (kernels) over the same window",
        "columns": [
            "window",
            "live calls/s",
            "live mean outstanding",
            "live max",
            "trace launches/s",
            "trace mean depth (HTA)",
            "trace mean depth (time)",
            "trace max depth",
            "kernels per call",
            "same regime",
        ],
        "rows": body,
    }


def outstanding_lanes(events: Iterable[Any]) -> dict[int, list[tuple[float, float]]]:
    """Per device, ``(launch, end of its GPU op)`` pairs (µs): when work was outstanding, which is what
    the agent's lanes show (busy from a launch until the marker after it completes), as opposed to a
    kernel running (the trace's own busy time). ``events`` are ``torchpar_top.analysis.Event``s."""
    events = list(events)
    launches = {
        e.correlation: e
        for e in events
        if e.correlation is not None and e.stream is None and e.name in _launch_names()
    }
    lanes: dict[int, list[tuple[float, float]]] = {}
    for g in events:
        if g.stream is not None and g.correlation in launches:
            lanes.setdefault(g.device, []).append((launches[g.correlation].ts, g.ts + g.dur))
    return lanes


def _launch_names() -> frozenset[str]:
    from torchpar_top.analysis import LAUNCH_NAMES

    return LAUNCH_NAMES


def share_covered(pairs: Iterable[tuple[float, float]], t0: float, t1: float) -> float:
    """Share of ``[t0, t1]`` covered by the union of ``pairs``."""
    from torchpar_top.analysis import Intervals

    return Intervals.union(pairs).covered(t0, t1) / (t1 - t0) if t1 > t0 else 0.0


def share_overlapping(lanes: Sequence[Iterable[tuple[float, float]]], t0: float, t1: float) -> float:
    """Share of ``[t0, t1]`` where two or more lanes are covered at once."""
    from torchpar_top.analysis import Intervals, at_least

    merged = [Intervals.union(p) for p in lanes]
    return at_least(2, merged).covered(t0, t1) / (t1 - t0) if t1 > t0 else 0.0


#: Allowed |live - trace| for busy and overlap shares (0..1): the agent's lanes are built from marker
#: polls every 2 ms and merged across gaps under 0.2 ms; sample windows do not start with the trace.
LANE_TOLERANCE = 0.2


def compare_share(
    name: str, live: float | None, trace: float | None, tolerance: float = LANE_TOLERANCE
) -> dict[str, Any]:
    """One share measured live and from the trace."""
    if live is None or trace is None:
        return {"what": name, "live": live, "trace": trace, "diff": None, "ok": None}
    return {
        "what": name,
        "live": round(live, 3),
        "trace": round(trace, 3),
        "diff": round(live - trace, 3),
        "allowed": tolerance,
        "ok": abs(live - trace) <= tolerance,
    }


# -- our analysis against HTA --------------------------------------------------------------------------------


def hta_first_event_miss(trace: Mapping[str, Any], rank: int = 0) -> tuple[int, int] | None:
    """The ``(rank, stream)`` on which HTA 0.5.0 misses one launch of this trace, or None.

    HTA links a launch to its GPU op by the op's index in the file and reads index 0 as "no linked
    event": when the file's first event is a GPU op (kernel, memcpy, memset) whose launch is in the
    trace, HTA drops that launch and its op, and counts one launch fewer than there are (seen on an
    H200: tests/data/h200/README.md, tests/unit/test_analysis_hta_judge.py)."""
    events = trace.get("traceEvents") or []
    if not events or not isinstance(events[0], Mapping):
        return None
    first = events[0]
    args = first.get("args") or {}
    if first.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset") or "correlation" not in args:
        return None
    corr = args["correlation"]
    launched = any(
        isinstance(e, Mapping)
        and e.get("cat") == "cuda_runtime"
        and (e.get("args") or {}).get("correlation") == corr
        for e in events[1:]
    )
    return (rank, int(args.get("stream", -1))) if launched else None


def compare_hta(
    ours: Sequence[Mapping[str, Any]],
    hta: Mapping[tuple[int, int], Mapping[str, Any]],
    hta_misses: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Our summary's streams (``rank``, ``stream``, ``launches``, ``max_depth``, ``mean_depth``) against
    HTA's ``get_queue_length_summary`` per ``(rank, stream)`` (``launches`` = count / 2, ``max``, ``mean``).

    Launches must be equal, but on ``hta_misses`` (:func:`hta_first_event_miss`) where ours must be HTA's
    plus one; at equal timestamps HTA's order is arbitrary (tests/unit/test_analysis_hta_judge.py), so the
    max may differ by one and the mean by half a launch or 1 %.
    """
    ours_by = {(int(s["rank"]), int(s["stream"])): s for s in ours if s.get("launches")}
    rows, problems = [], []
    for key in sorted(set(ours_by) | set(hta)):
        o, h = ours_by.get(key), hta.get(key)
        if o is None or h is None:
            problems.append(f"rank {key[0]} stream {key[1]}: only {'HTA' if o is None else 'ours'} has it")
            continue
        mean_tol = max(0.5, 0.01 * abs(h["mean"]))
        ok = (
            o["launches"] == h["launches"] + (1 if key == hta_misses else 0)
            and abs(o["max_depth"] - h["max"]) <= 1
            and abs(o["mean_depth"] - h["mean"]) <= mean_tol
        )
        rows.append(
            {
                "rank": key[0],
                "stream": key[1],
                "launches": [o["launches"], h["launches"]],
                "max": [o["max_depth"], h["max"]],
                "mean": [round(o["mean_depth"], 3), round(h["mean"], 3)],
                "hta_misses_first_event": key == hta_misses,
                "ok": ok,
            }
        )
        if not ok:
            problems.append(
                f"rank {key[0]} stream {key[1]}: ours launches {o['launches']} max {o['max_depth']} "
                f"mean {o['mean_depth']:.3f}, HTA {h['launches']} / {h['max']} / {h['mean']:.3f}"
            )
    return {"streams": rows, "problems": problems, "ok": bool(rows) and not problems}


# -- scripts under ``torchpar-top run --headless`` -----------------------------------------------------------

#: The line a check script prints with its own verdict: ``GPU-CHECK {json}``.
MARKER = "GPU-CHECK "
_ERROR = re.compile(r"Traceback|\b\w*(Error|Exception)\b|\berror\b|\bfailed\b|\bCUDA error\b", re.IGNORECASE)
_WARNING = re.compile(r"warn|skipping cudagraphs|graph break|recompil", re.IGNORECASE)


def error_lines(lines: Iterable[str]) -> list[str]:
    """Lines that report an error (a traceback, ``...Error``, ``error``, ``failed``); warnings are not."""
    return [line for line in lines if _ERROR.search(line) and not re.search(r"warn", line, re.IGNORECASE)]


def warning_lines(lines: Iterable[str]) -> list[str]:
    """Warnings and torch.compile notes worth reading (cudagraph skips, graph breaks, recompiles)."""
    return [line for line in lines if _WARNING.search(line)]


def marker_result(lines: Iterable[str]) -> dict[str, Any] | None:
    """The last ``GPU-CHECK {json}`` a script printed, decoded; None if it printed none (or bad JSON)."""
    found = None
    for line in lines:
        at = line.find(MARKER)
        if at < 0:
            continue
        try:
            value = json.loads(line[at + len(MARKER) :])
        except ValueError:
            continue
        if isinstance(value, dict):
            found = value
    return found


def summarise_headless(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a ``--headless`` run's JSON lines say: the child's end, every log line, and per executor
    what its queue row showed (its unit, the largest value, the last launched and completed counts)."""
    child = records[-1]["child"] if records else {}
    log = [
        {"source": line.get("source"), "text": line.get("text", "")}
        for r in records
        for line in r.get("log") or ()
    ]
    executors: dict[str, dict[str, Any]] = {}
    for r in records:
        for e in r.get("executors") or ():
            row = executors.setdefault(
                e["name"],
                {
                    "name": e["name"],
                    "kind": e.get("kind"),
                    "counts": e.get("counts"),
                    "quantity": e.get("quantity"),
                    "samples": 0,
                    "max_value": 0,
                    "nonzero_samples": 0,
                },
            )
            row["samples"] += 1
            row["max_value"] = max(row["max_value"], e.get("value") or 0)
            row["nonzero_samples"] += 1 if e.get("value") else 0
            row.update(launched=e.get("launched"), completed=e.get("completed"), capacity=e.get("capacity"))
    gpus = [g for r in records for g in r.get("gpus") or ()]
    utils = [g["util_percent"] for g in gpus if g.get("util_percent") is not None]
    return {
        "records": len(records),
        "state": child.get("state"),
        "exit_code": child.get("exit_code"),
        "log": log,
        "executors": list(executors.values()),
        "max_gpu_util": max(utils) if utils else None,
        "modes": sorted({r.get("mode") for r in records if r.get("mode")}),
    }


def judge_script_run(
    summary: Mapping[str, Any], plain: Mapping[str, Any] | None = None, extra_lines: Sequence[str] = ()
) -> dict[str, Any]:
    """Whether a script ran to completion under ``torchpar-top run --headless`` with its own output correct
    and no error in the log; with ``plain`` (the script's ``GPU-CHECK`` result without torchpar-top), also
    whether torch.compile's counters (graph breaks, recompiles, cudagraph skips) are the same.

    Args:
        summary: :func:`summarise_headless`'s result.
        plain: the marker result of the same script run with plain ``python``, or None.
        extra_lines: the headless command's own stderr and non-JSON stdout.
    """
    lines = [f"[{x['source']}] {x['text']}" for x in summary.get("log", ())] + list(extra_lines)
    result = marker_result(x["text"] for x in summary.get("log", ()))
    errors = error_lines(lines)
    problems = []
    if summary.get("state") != "exited" or summary.get("exit_code") != 0:
        problems.append(
            f"the script did not exit 0 (state {summary.get('state')}, exit code {summary.get('exit_code')})"
        )
    if result is None:
        problems.append(f"the script's {MARKER.strip()} line is missing from the log")
    elif not result.get("ok"):
        problems.append(f"the script's own check failed: {result}")
    if errors:
        problems.append(f"{len(errors)} error line(s) in the log, first: {errors[0]}")
    counters = {}
    if plain is not None and result is not None:
        for key in ("graph_breaks", "unique_graphs", "cudagraph_skips", "recompiles"):
            if key in plain or key in result:
                counters[key] = {"plain": plain.get(key), "under torchpar-top": result.get(key)}
                if plain.get(key) != result.get(key):
                    problems.append(f"{key}: {result.get(key)} under torchpar-top, {plain.get(key)} plain")
    return {
        "result": result,
        "errors": errors,
        "warnings": warning_lines(lines),
        "counters": counters,
        "problems": problems,
        "ok": not problems,
    }
