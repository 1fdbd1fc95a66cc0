"""``torchpar-top cluster``'s outputs besides the screen: headless JSON lines and the end-of-run report.

One JSON object per refresh (``--headless``): ``t`` (Prometheus' time), ``url``, ``job``, ``steps_per_s``
(the job's: its slowest fresh, running rank's), ``slowest`` (that rank where it is clearly behind the
others, else null), ``nodes_seen``, ``nodes_fresh``,
``nodes_expected``, ``targets``, ``scrape_age``, ``steps_known``, ``query_seconds``, ``error`` ('' or
one line), ``nodes`` [{node, hostname, instance, up, ranks, stale}], ``ranks`` [{node, hostname, rank,
local_rank, instance, state, steps_per_s, throughput, unit, step_seconds, phases, depth, data_wait,
gpu_util, gpu_memory, stale, core_wait, stalled, at}], ``straggler`` {rank, cause, ratio, costs, core_wait} or
null. Every figure is a :class:`~torchpar_top.model.cluster.ClusterView` field, itself read from Prometheus'
series.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from torchpar_top.model.cluster import ClusterView

REPORT_VERSION = 1


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def to_record(view: ClusterView, url: str, job: str | None) -> dict[str, Any]:
    """One headless JSON object of a refresh."""
    return {
        "t": round(view.t, 3),
        "url": url,
        "job": job,
        "steps_per_s": _round(view.steps_per_s),
        "slowest": view.slowest,
        "nodes_seen": len(view.nodes),
        "nodes_fresh": view.fresh_nodes,
        "nodes_expected": view.expected_nodes,
        "targets": view.targets,
        "scrape_age": _round(view.scrape_age, 3),
        "steps_known": view.steps_known,
        "query_seconds": _round(view.query_seconds),
        "error": view.error,
        "nodes": [dataclasses.asdict(n) for n in view.nodes],
        "ranks": [
            {k: _round(v) if isinstance(v, float) else v for k, v in dataclasses.asdict(r).items()}
            for r in view.ranks
        ],
        "straggler": None if view.straggler is None else dataclasses.asdict(view.straggler),
    }


class ClusterTally:
    """What the report says at the end: kept from every refresh's view."""

    def __init__(self) -> None:
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self._t0 = time.monotonic()
        self.refreshes = 0
        self.errors = 0
        self.last_error = ""
        self.job_rates: list[float] = []
        self.query_seconds: list[float] = []
        self.rank_rates: dict[tuple[str, int | None], list[float]] = {}
        self.last: ClusterView | None = None
        self.straggler: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def add(self, view: ClusterView) -> None:
        """Count one refresh."""
        with self._lock:
            self.refreshes += 1
            if view.error:
                self.errors += 1
                self.last_error = view.error
                return
            self.last = view
            if view.query_seconds is not None:
                self.query_seconds.append(view.query_seconds)
            if view.steps_per_s is not None:
                self.job_rates.append(view.steps_per_s)
            for r in view.ranks:
                if r.steps_per_s is not None:
                    self.rank_rates.setdefault((r.instance, r.rank), []).append(r.steps_per_s)
            if view.straggler is not None:
                self.straggler = dataclasses.asdict(view.straggler)

    def report(self, url: str, job: str | None, ended_by: str, tool: str) -> dict[str, Any]:
        """The whole watch as a plain dict (``--report``)."""
        with self._lock:
            last = self.last
            ranks = []
            for r in last.ranks if last else ():
                rates = self.rank_rates.get((r.instance, r.rank), [])
                ranks.append(
                    {
                        "rank": r.rank,
                        "node": r.node,
                        "hostname": r.hostname,
                        "local_rank": r.local_rank,
                        "instance": r.instance,
                        "state": r.state,
                        "stale": r.stale,
                        "steps_per_s_mean": _round(statistics.fmean(rates)) if rates else None,
                    }
                )
            return {
                "report_version": REPORT_VERSION,
                "tool": tool,
                "url": url,
                "job": job,
                "started": self.started.isoformat(timespec="seconds"),
                "ended": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "ended_by": ended_by,
                "seconds": round(time.monotonic() - self._t0, 3),
                "refreshes": self.refreshes,
                "failed_refreshes": self.errors,
                "last_error": self.last_error,
                "steps_per_s_mean": _round(statistics.fmean(self.job_rates)) if self.job_rates else None,
                "steps_per_s_is": "the slowest fresh running rank's steps/s at each refresh, averaged",
                "nodes_seen": len(last.nodes) if last else 0,
                "nodes_stale": sum(n.stale for n in last.nodes) if last else 0,
                "nodes_expected": last.expected_nodes if last else None,
                "steps_known": last.steps_known if last else False,
                "straggler": self.straggler,
                "query_seconds": {
                    "median": _round(statistics.median(self.query_seconds)) if self.query_seconds else None,
                    "max": _round(max(self.query_seconds)) if self.query_seconds else None,
                },
                "ranks": ranks,
            }


def render(report: dict[str, Any], path: str | None) -> str:
    """The report in a few lines for the terminal."""
    rate = report["steps_per_s_mean"]
    lines = [
        f"torchpar-top cluster {report['url']}: {report['refreshes']} refreshes, {report['ended_by']}",
        f"  job: {'unknown' if rate is None else f'{rate:.3g}'} steps/s (slowest rank), "
        f"{report['nodes_seen']} nodes seen of {report['nodes_expected'] or '?'}, "
        f"{report['nodes_stale']} stale",
    ]
    if report["straggler"]:
        s = report["straggler"]
        lines.append(f"  straggler: r{s['rank']} ({s['cause']} {s['ratio']:.2g}x the others')")
    if report["failed_refreshes"]:
        lines.append(f"  {report['failed_refreshes']} refreshes failed; last: {report['last_error']}")
    if path:
        lines.append(f"  report: {path}")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], path: str) -> None:
    """Write ``--report``."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


def run_headless(
    refresh: Callable[[], ClusterView],
    tally: ClusterTally,
    url: str,
    job: str | None,
    duration: float,
    interval: float,
    out: TextIO,
    stop: threading.Event,
) -> int:
    """One JSON line per refresh for ``duration`` seconds; status 2 (one line on stderr) when the first
    refresh finds nothing to read (unreachable, not Prometheus, no series), 0 otherwise."""
    deadline = time.monotonic() + duration
    first = True
    while not stop.is_set():
        view = refresh()
        if first and view.error:
            sys.stderr.write(f"torchpar-top: error: {view.error}\n")
            return 2
        first = False
        tally.add(view)
        try:
            out.write(json.dumps(to_record(view, url, job)) + "\n")
            out.flush()
        except (BrokenPipeError, ValueError):
            return 0  # nobody reads any more
        left = deadline - time.monotonic()
        if left <= 0:
            break
        stop.wait(min(interval, left))
    return 0
