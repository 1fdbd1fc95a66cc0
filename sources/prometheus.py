"""The whole job, read back from Prometheus: instant queries over its HTTP API (``/api/v1/query``).

Every node runs ``torchpar-top run ... --metrics-port P``; Prometheus scrapes them all (``docs/cluster.md``);
``torchpar-top cluster --prometheus URL`` reads the ``torchpar_*`` series back with a handful of instant
queries per refresh (:data:`QUERIES`), whatever the number of nodes: one query per figure, each returning
one series per rank. Nothing is aggregated here beyond what the queries return; ``model/cluster.py`` turns
a :class:`Poll` into the rows and the job summary.

Which rank is *stale*: Prometheus writes a staleness marker into every series of a target whose scrape
failed (its node's monitor ended, the host went away), so the series leave instant queries at once; the
rank is still found by ``last_over_time(...[LOOKBACK])`` (range selections skip the markers) and is shown
stale, with what it last said, rather than dropped.

Errors (unreachable, not Prometheus, a query refused) are :class:`PrometheusError` with one line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from torchpar_top.model.cluster import ClusterModel, ClusterView

#: How far back a rank that stopped being scraped is still listed (as stale).
LOOKBACK = "10m"
#: Seconds one HTTP request may take.
TIMEOUT_S = 5.0

#: One labelled value: (the series' labels, its value).
Series = tuple[dict[str, str], float]


def selector(job: str | None) -> str:
    """The label matcher every query carries: ``{job="NAME"}``, or none."""
    if not job:
        return ""
    return '{job="' + job.replace("\\", "\\\\").replace('"', '\\"') + '"}'


def queries(job: str | None) -> dict[str, str]:
    """The instant queries of one refresh, by the name :class:`Poll` keeps their results under."""
    j = selector(job)
    return {
        # every rank seen within LOOKBACK (its last value: 1 running, 0 exited), stale ones included
        "seen": f"last_over_time(torchpar_rank_running{j}[{LOOKBACK}])",
        # ranks whose monitor answered the latest scrape (stale markers drop the others)
        "running": f"torchpar_rank_running{j}",
        "throughput": f"torchpar_rank_throughput_per_second{j}",
        "depth": f"torchpar_rank_queue_depth{j}",
        "data_wait": f"torchpar_data_wait_ratio{j}",
        "core_wait": f"torchpar_rank_core_wait_ratio{j}",
        "gpu_util": f"torchpar_gpu_utilization_ratio{j}",
        "gpu_memory": f"torchpar_gpu_memory_used_bytes{j}",
        # the step anatomy's series (absent until the monitor exports them: steps unknown then)
        "steps_total": f"torchpar_steps_total{j}",
        # the last two scrapes' rate (rate() over a window reads low while a series is younger than it)
        "steps_rate": f"irate(torchpar_steps_total{j}[{LOOKBACK}])",
        "step_seconds": f"torchpar_step_seconds{j}",
        "phase_seconds": f"torchpar_step_phase_seconds{j}",
        # a rank that stopped stepping, as its node's monitor judged it, and where its frontend is then
        "stalled": f"torchpar_step_stalled_seconds{j}",
        "stalled_at": f"torchpar_rank_stalled_at_info{j}",
        # the scrape targets of the job: expected nodes, which answered, how old the newest scrape is
        "up": f"up{j}",
        "scraped": f"timestamp(up{j})",
    }


#: The query names, in order (for the benchmark and the docs).
QUERIES = tuple(queries(None))


class PrometheusError(RuntimeError):
    """Prometheus could not be read: one line that says why."""


def check_url(url: str) -> str:
    """What is wrong with ``--prometheus URL`` before any request, in one line, or ''."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"--prometheus {url!r}: not an http(s)://HOST:PORT address"
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        return f"--prometheus {url!r}: the port is not a number 1 to 65535"
    return ""


@dataclass
class Poll:
    """The results of one refresh's queries, as Prometheus returned them."""

    t: float
    """Prometheus' own time of the evaluation (seconds since the epoch)."""
    results: dict[str, list[Series]] = field(default_factory=dict)
    seconds: float = 0.0
    """Wall time the queries took, together."""

    def get(self, name: str) -> list[Series]:
        """One query's series (empty when it returned none)."""
        return self.results.get(name, [])


class Prometheus:
    """A Prometheus server's HTTP API: instant queries, with one connection kept open."""

    def __init__(self, url: str, timeout: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, timeout=timeout, follow_redirects=True)

    def close(self) -> None:
        """Close the connection."""
        self._client.close()

    def query(self, expr: str, at: float | None = None) -> list[Series]:
        """``/api/v1/query``: the vector ``expr`` evaluates to, one (labels, value) per series."""
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        try:
            resp = self._client.get("/api/v1/query", params=params)
        except httpx.HTTPError as exc:
            raise PrometheusError(f"Prometheus at {self.url} cannot be reached: {_reason(exc)}") from None
        try:
            body = resp.json()
        except ValueError:
            raise PrometheusError(
                f"{self.url} is not Prometheus' API (HTTP {resp.status_code} on /api/v1/query, not JSON)"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise PrometheusError(
                f"{self.url}: query {expr!r} refused (HTTP {resp.status_code}): {error or 'no status'}"
            )
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise PrometheusError(f"{self.url}: query {expr!r} did not return an instant vector")
        out: list[Series] = []
        for item in data.get("result") or ():
            try:
                out.append((dict(item["metric"]), float(item["value"][1])))
            except (KeyError, IndexError, TypeError, ValueError):
                continue  # not a sample: skip it rather than fail the refresh
        return out

    def poll(self, job: str | None) -> Poll:
        """Run a refresh's queries, all at the same evaluation time (Prometheus' now, read first)."""
        start = time.perf_counter()
        now = self._now()
        poll = Poll(t=now)
        for name, expr in queries(job).items():
            poll.results[name] = self.query(expr, at=now)
        poll.seconds = time.perf_counter() - start
        return poll

    def _now(self) -> float:
        """Prometheus' clock (``time()``, a scalar): staleness is judged on its time, not ours."""
        try:
            resp = self._client.get("/api/v1/query", params={"query": "time()"})
            body = resp.json()
            return float(body["data"]["result"][0])
        except httpx.HTTPError as exc:
            raise PrometheusError(f"Prometheus at {self.url} cannot be reached: {_reason(exc)}") from None
        except (ValueError, KeyError, IndexError, TypeError):
            raise PrometheusError(
                f"{self.url} is not Prometheus' API (HTTP {resp.status_code} on /api/v1/query)"
            ) from None


def _reason(exc: httpx.HTTPError) -> str:
    """The innermost reason of a transport error, short (``connection refused``, ``timed out``...)."""
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    cause: BaseException | None = exc
    while cause is not None and cause.__cause__ is not None:
        cause = cause.__cause__
    text = str(getattr(cause, "strerror", None) or cause or exc)
    return text.removeprefix("[Errno 111] ").lower() or type(exc).__name__


class ClusterSource:
    """What the cluster screen and its headless lines read: one :class:`ClusterView` per refresh, a
    failed refresh being a view with its one-line error (the screen says it and tries again)."""

    def __init__(self, url: str, job: str | None = None, expected_nodes: int | None = None) -> None:
        self.url, self.job = url.rstrip("/"), job
        self.prometheus = Prometheus(url)
        self.model = ClusterModel(expected_nodes)

    def refresh(self) -> ClusterView:
        """Query Prometheus once and fold the results in; never raises for Prometheus' sake."""
        try:
            poll = self.prometheus.poll(self.job)
        except PrometheusError as exc:
            return self.model.error(time.time(), str(exc))
        view = self.model.update(poll.t, poll.results, poll.seconds)
        if not view.ranks:
            where = f" with job={self.job!r}" if self.job else ""
            targets = f"{view.targets} scrape targets{where}" if view.targets else f"no scrape targets{where}"
            view = ClusterView(
                t=view.t,
                targets=view.targets,
                expected_nodes=view.expected_nodes,
                scrape_age=view.scrape_age,
                error=f"no torchpar_* series in Prometheus at {self.url} ({targets}): is every node's "
                "`torchpar-top run --metrics-port` scraped? (docs/cluster.md)",
                query_seconds=view.query_seconds,
            )
        return view

    def close(self) -> None:
        """Close the connection to Prometheus."""
        self.prometheus.close()
