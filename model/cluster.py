"""The whole job from Prometheus' series: a row per (node, rank) and the job's summary.

:class:`ClusterModel` is fed one refresh's query results at a time (``sources/prometheus.py`` runs the
queries; this module only reads their labelled values) and builds a frozen :class:`ClusterView`:

- a rank is a ``torchpar_rank_running`` series seen within the lookback, keyed by its scrape target
  (``instance``) and its global ``rank`` label; its node, host name and local rank are the labels each
  node's ``run --metrics-port`` puts beside the rank (``sinks/metrics.py``);
- a rank whose series left the latest scrape (its monitor stopped answering: Prometheus' staleness
  marker) or whose target is down is *stale*: kept, with what it last said;
- steps/s is the rank's throughput where its unit is steps (its node's monitor counts step ends over the
  last 2 s, the same span for every rank of the node, as the live screen does), else
  ``irate(torchpar_steps_total[...])`` (its last two scrapes: a count that moves once a sample, so two DDP
  ranks of one node in lockstep read 44 and 45 steps/s there, 42 and 42 from their throughput); the job's
  steps/s is the slowest fresh, running rank's, and that rank is named only where it is clearly behind
  the others (:data:`SLOWEST_MARGIN`);
- step time and phases are ``torchpar_step_seconds`` and ``torchpar_step_phase_seconds{phase}`` (seconds
  per step over the monitor's last window); each refresh adds one window per rank, (steps since the last
  refresh, phases × those steps), and :func:`torchpar_top.model.steps.find_straggler` names the
  straggler from them, as a live run does from its samples. Without those series, steps are unknown.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from torchpar_top.contract.messages import StepPhases
from torchpar_top.contract.snapshot import Straggler
from torchpar_top.contract.vocab import PHASES
from torchpar_top.model.steps import STALL_MIN, STALL_STEPS, Window, compared_windows, find_straggler

#: One labelled value from a query.
Series = tuple[dict[str, str], float]
#: The slowest rank is named where its steps/s is below the other ranks' median by this share or more.
#: Two nodes' DDP ranks in lockstep read 39.5 and 39.0 steps/s at one refresh (their monitors' latest
#: samples end at different times), so the lowest of equal rates would be named at random.
SLOWEST_MARGIN = 0.05
#: Windows kept per rank for the straggler (at a 2 s refresh, two minutes).
WINDOWS = 60


@dataclass(frozen=True)
class ClusterRank:
    """One rank of the job, as its node's monitor last exported it."""

    node: int | None
    """Its node's rank (torchrun's ``GROUP_RANK``); None where the series do not say."""
    hostname: str
    rank: int | None
    """The global rank (``RANK``); None for a single workload."""
    local_rank: int | None
    instance: str
    """The scrape target it came from (``HOST:PORT`` of that node's ``--metrics-port``)."""
    state: str
    """``running``, ``exited`` (its process ended, its monitor still answers) or ``stale`` (no answer)."""
    stale: bool
    """Its series were not in the latest scrape of its node (or the target is down)."""
    steps_per_s: float | None
    throughput: float | None
    """Its throughput in its own unit (steps, ops...), over the monitor's last window."""
    unit: str
    step_seconds: float | None
    phases: dict[str, float] | None
    """Seconds per step in each phase; None where the step anatomy's series are absent."""
    depth: float | None
    data_wait: float | None
    gpu_util: float | None
    """Its GPU's kernel-active share (the node's GPU whose NVML index is its local rank), 0-1."""
    gpu_memory: float | None = None
    """Bytes used on that GPU (by every process on it, as NVML counts)."""
    core_wait: float | None = None
    """Share of its node monitor's last second its frontend waited for a core (None: not exported)."""
    stalled: float | None = None
    """Seconds since its step count last rose (as this screen saw it), where that is ten of its steps
    and 3 s or more (``model.steps.STALL_STEPS``, ``STALL_MIN``), or its node's monitor's own figure
    (``torchpar_step_stalled_seconds``, timed from its step ends) where that is longer: a hang; None while
    it steps."""
    at: str = ""
    """Where a stalled rank's frontend is (``sleep at train.py:66 (forward)``), as its node's monitor read
    it from the rank's stack (``torchpar_rank_stalled_at_info``); '' while it steps or where not said."""


@dataclass(frozen=True)
class ClusterNode:
    """One node (one monitor, one scrape target)."""

    node: int | None
    hostname: str
    instance: str
    up: bool | None
    """Prometheus' ``up`` for its target: whether the latest scrape answered (None: not a target now)."""
    ranks: int
    stale: bool
    """No fresh series from it (its target is down or its series went stale)."""


@dataclass(frozen=True)
class ClusterView:
    """Everything the cluster screen and its headless lines show at one refresh."""

    t: float
    """Prometheus' time of the refresh."""
    ranks: tuple[ClusterRank, ...] = ()
    nodes: tuple[ClusterNode, ...] = ()
    targets: int = 0
    """Scrape targets of the job (``up`` series)."""
    expected_nodes: int | None = None
    """``--nodes`` where given, else the number of targets."""
    steps_per_s: float | None = None
    """The job's steps/s: its slowest fresh, running rank's."""
    slowest: int | None = None
    """That rank, where its steps/s is below the others' median by :data:`SLOWEST_MARGIN` or more; None
    where the ranks go at one pace (data-parallel ranks in lockstep: naming one would name noise)."""
    scrape_age: float | None = None
    """Seconds since the newest scrape of any of the job's targets."""
    steps_known: bool = False
    """The step anatomy's series exist (step time, phases and the straggler can be shown)."""
    straggler: Straggler | None = None
    straggler_windows: int = 0
    """How many refreshes (every rank stepping in each) the straggler was judged over: nobody is named
    before ``model.steps.MIN_WINDOWS``."""
    error: str = ""
    """Why there is nothing (or nothing new) to show: Prometheus unreachable, no series..."""
    query_seconds: float | None = None
    """Wall time of the refresh's queries."""

    @property
    def fresh_nodes(self) -> int:
        """Nodes with fresh series."""
        return sum(not n.stale for n in self.nodes)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


Key = tuple[str, str]
"""A rank's key: (instance, rank label)."""


def _key(labels: Mapping[str, str]) -> Key:
    return labels.get("instance", ""), labels.get("rank", "")


def _by_key(series: Sequence[Series]) -> dict[Key, float]:
    return {_key(labels): value for labels, value in series}


@dataclass
class _Steps:
    """A rank's step count at the previous refresh and its windows since."""

    count: float | None = None
    windows: deque[Window] = field(default_factory=lambda: deque(maxlen=WINDOWS))
    waits: deque[float | None] = field(default_factory=lambda: deque(maxlen=WINDOWS))
    """Per window, seconds its frontend waited for a core (None where ``core_wait`` was not exported)."""
    top: float | None = None
    """Its count as it last changed, and when (Prometheus' time): a stall is timed from then (kept apart
    from :attr:`count`, which only the straggler's ranks move on)."""
    rose_at: float = 0.0


class ClusterModel:
    """Folds successive refreshes into :class:`ClusterView`; keeps per-rank step windows."""

    def __init__(self, expected_nodes: int | None = None) -> None:
        self.expected_nodes = expected_nodes
        self._steps: dict[Key, _Steps] = {}

    def error(self, t: float, text: str) -> ClusterView:
        """A refresh that failed: the message, no rows."""
        return ClusterView(t=t, expected_nodes=self.expected_nodes, error=text)

    def update(self, t: float, results: Mapping[str, Sequence[Series]], seconds: float = 0.0) -> ClusterView:
        """The view of one refresh: ``results`` by the names of ``sources.prometheus.queries``."""

        def get(name: str) -> Sequence[Series]:
            return results.get(name, ())

        seen, running = get("seen"), _by_key(get("running"))
        up = {labels.get("instance", ""): value for labels, value in get("up")}
        scraped = [value for _, value in get("scraped")]
        throughput = {_key(labels): (value, labels.get("what", "")) for labels, value in get("throughput")}
        depth, data = _by_key(get("depth")), _by_key(get("data_wait"))
        core = _by_key(get("core_wait"))
        rate = _by_key(get("steps_rate"))
        step_s = _by_key(get("step_seconds"))
        totals = _by_key(get("steps_total"))
        phases: dict[Key, dict[str, float]] = {}
        for labels, value in get("phase_seconds"):
            if labels.get("phase") in PHASES:
                phases.setdefault(_key(labels), {})[labels["phase"]] = value
        gpus = {
            (labels.get("instance", ""), labels.get("gpu", "")): value for labels, value in get("gpu_util")
        }
        gpu_mem = {
            (labels.get("instance", ""), labels.get("gpu", "")): value for labels, value in get("gpu_memory")
        }
        steps_known = bool(totals or step_s or phases)
        stalled = self._stalls(t, totals, step_s)
        for key, gap in _by_key(get("stalled")).items():
            if math.isfinite(gap) and gap > stalled.get(key, 0.0):
                stalled[key] = gap
        at = {_key(labels): labels.get("at", "") for labels, _ in get("stalled_at")}

        rows: list[ClusterRank] = []
        for labels, last in seen:
            key = _key(labels)
            instance = key[0]
            stale = key not in running or up.get(instance) == 0
            value = running.get(key, last)
            state = "exited" if value == 0 else "stale" if stale else "running"
            tp, what = throughput.get(key, (None, "")) if not stale else (None, "")
            per_s = tp if what == "steps" else rate.get(key) if key in totals else None
            local = _int(labels.get("local_rank"))
            rows.append(
                ClusterRank(
                    node=_int(labels.get("node")),
                    hostname=labels.get("hostname") or labels.get("Hostname", ""),
                    rank=_int(key[1]),
                    local_rank=local,
                    instance=instance,
                    state=state,
                    stale=stale,
                    steps_per_s=None if stale else _finite(per_s),
                    throughput=_finite(tp),
                    unit=f"{what}/s" if what else "",
                    step_seconds=None if stale else _finite(step_s.get(key)),
                    phases=None if stale or key not in phases else dict(phases[key]),
                    depth=None if stale else depth.get(key),
                    data_wait=None if stale else data.get(key),
                    gpu_util=None if stale else gpus.get((instance, "" if local is None else str(local))),
                    gpu_memory=None
                    if stale
                    else gpu_mem.get((instance, "" if local is None else str(local))),
                    core_wait=None if stale else core.get(key),
                    stalled=stalled.get(key) if state == "running" else None,
                    at=at.get(key, "") if state == "running" and key in stalled else "",
                )
            )
        rows.sort(key=lambda r: (r.rank is None, r.rank or 0, r.node or 0, r.instance))
        straggler, judged = self._straggler(rows, totals, phases) if steps_known else (None, 0)

        nodes: dict[tuple[int | None, str], list[ClusterRank]] = {}
        for r in rows:
            nodes.setdefault((r.node, r.instance), []).append(r)
        node_views = tuple(
            ClusterNode(
                node=node,
                hostname=members[0].hostname,
                instance=instance,
                up=None if instance not in up else up[instance] == 1,
                ranks=len(members),
                stale=all(m.stale for m in members),
            )
            for (node, instance), members in sorted(nodes.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1]))
        )
        live = [r for r in rows if r.state == "running" and r.steps_per_s is not None]
        slowest = min(live, key=lambda r: r.steps_per_s or 0.0) if live else None
        behind = slowest is not None and _behind(slowest, [r for r in live if r is not slowest])
        return ClusterView(
            t=t,
            ranks=tuple(rows),
            nodes=node_views,
            targets=len(up),
            expected_nodes=self.expected_nodes if self.expected_nodes is not None else len(up) or None,
            steps_per_s=slowest.steps_per_s if slowest else None,
            slowest=slowest.rank if slowest is not None and behind else None,
            scrape_age=max(0.0, t - max(scraped)) if scraped else None,
            steps_known=steps_known,
            straggler=straggler,
            straggler_windows=judged,
            query_seconds=seconds,
        )

    def _stalls(self, t: float, totals: Mapping[Key, float], step_s: Mapping[Key, float]) -> dict[Key, float]:
        """Each rank whose count has not risen for ten of its steps and 3 s (its stall in seconds)."""
        out: dict[Key, float] = {}
        for key, count in totals.items():
            steps = self._steps.setdefault(key, _Steps())
            if steps.top is None or count != steps.top:  # rose (or started over: its monitor restarted)
                steps.top, steps.rose_at = count, t
                continue
            step, gap = step_s.get(key), t - steps.rose_at
            if step is not None and math.isfinite(step) and gap >= max(STALL_MIN, STALL_STEPS * step):
                out[key] = gap
        return out

    def _straggler(
        self,
        rows: Sequence[ClusterRank],
        totals: Mapping[Key, float],
        phases: Mapping[Key, Mapping[str, float]],
    ) -> tuple[Straggler | None, int]:
        """Add this refresh's window to each fresh rank's and ask :func:`find_straggler`; with how many
        windows it compared (:func:`compared_windows`)."""
        windows: dict[int, list[Window]] = {}
        waits: dict[int, list[float | None]] = {}
        for r in rows:
            key = (r.instance, "" if r.rank is None else str(r.rank))
            if r.stale or r.rank is None or key not in totals:
                continue
            steps = self._steps.setdefault(key, _Steps())
            count = totals[key]
            done = 0 if steps.count is None else count - steps.count
            if done < 0:
                done = count  # the counter started over (the node's monitor restarted)
            steps.count = count
            n = round(done)
            per = phases.get(key, {})
            steps.windows.append((n, StepPhases(**{p: max(0.0, per.get(p, 0.0)) * n for p in PHASES})))
            # its wait for a core in seconds per step (its share of the time × its step time), × the steps
            waited = None if r.core_wait is None or r.step_seconds is None else r.core_wait * r.step_seconds
            steps.waits.append(None if waited is None else waited * n)
            if r.state == "running":
                windows[r.rank] = list(steps.windows)
                waits[r.rank] = list(steps.waits)
        return find_straggler(windows, waits), compared_windows(windows)


def _behind(rank: ClusterRank, others: Sequence[ClusterRank]) -> bool:
    """Whether ``rank`` steps clearly slower than ``others`` (:data:`SLOWEST_MARGIN`); a rank alone is
    slower than nobody."""
    rates = [r.steps_per_s for r in others if r.steps_per_s is not None]
    if not rates or rank.steps_per_s is None:
        return False
    return rank.steps_per_s < (1 - SLOWEST_MARGIN) * statistics.median(rates)
