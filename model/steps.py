"""Training steps across ranks: which rank holds the others back, and why.

In data-parallel training every rank takes the same step time: the fast ranks wait for the slow one in
the collectives (DDP's all-reduce inside ``backward``), so that wait shows as their ``comm`` phase. The
straggler is therefore found by the phases other than ``comm``: the rank whose ``data``, ``forward``,
``backward``... is clearly longer than the other ranks' and that waits least.

"Clearly" is judged on the run's distribution, not one step: each rank's figures come as windows (the
steps of one sampling interval, summed), and a rank is named only when its cause phase is longer than the
others' median in most windows (``CONSISTENT``), by a margin that matters (``MIN_RATIO`` of the others'
median and ``MIN_SHARE`` of the step time), over enough windows (``MIN_WINDOWS``). Two identical ranks
then give no straggler whatever their noise.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from torchpar_top.contract.messages import Memory, StepPhases, StepRecord, Steps
from torchpar_top.contract.snapshot import RankMemory, StepsView, Straggler
from torchpar_top.contract.vocab import PHASES

#: Phases a rank can be slow in (``comm`` is where the others wait for it, not a cause).
CAUSES = tuple(p for p in PHASES if p != "comm")
#: The cause phase must be at least this many times the other ranks' median.
MIN_RATIO = 1.2
#: ... and longer by at least this share of the (median) step time: a 2x on a phase that takes 1 % of
#: the step holds nobody back. 15 %, not less: two identical DDP ranks on a 2-core machine with a third
#: process busy on one core read one rank's backward 2.1x the other's, steadily (the rank that shares its
#: core with the busy process), costing 0.37 ms of a ~4 ms step (9 %): real, but scheduling, not the rank.
MIN_SHARE = 0.15
#: ... in at least this share of the windows where every rank stepped.
CONSISTENT = 0.75
#: Windows needed before anyone is named.
MIN_WINDOWS = 5
#: The straggler's cause is said to be CPU contention when its frontend waited for a core (the kernel's
#: run-queue delay) longer than the others' median by at least this share of its extra time in the
#: phases other than ``comm``: its code is not slower, it got less of a core.
CONTENTION_SHARE = 0.5

#: One window of one rank: (steps completed in it, their phases summed).
Window = tuple[int, StepPhases]


def per_step(window: Window) -> dict[str, float]:
    """Seconds per step in each phase over one window (``{}`` for a window without steps)."""
    steps, phases = window
    if steps <= 0:
        return {}
    return {p: getattr(phases, p) / steps for p in PHASES}


def mean_per_step(windows: Sequence[Window]) -> dict[str, float]:
    """Seconds per step in each phase over all the windows (weighted by their steps)."""
    steps = sum(n for n, _ in windows)
    if steps <= 0:
        return {}
    return {p: sum(getattr(ph, p) for _, ph in windows) / steps for p in PHASES}


def find_straggler(
    windows: Mapping[int, Sequence[Window]], waits: Mapping[int, Sequence[float | None]] | None = None
) -> Straggler | None:
    """The rank that holds the others back, or None (one rank, too few windows, or nobody clearly).

    Args:
        windows: per rank, its windows in time order; window ``i`` of every rank should cover the same
            span of time (the last ``n`` windows of each are compared, ``n`` the fewest any rank has).
        waits: per rank, aligned with its windows, the seconds its frontend waited for a core in each
            (None where that was not measured): where given, a straggler whose extra wait accounts for
            its extra time is said to be held back by CPU contention (:attr:`Straggler.core_wait`).

    Returns:
        The straggler with its cause phase, the ratio of that phase to the other ranks' median, what it
        costs the others per step, and its extra wait for a core where that is the reason.
    """
    ranks, n, tail, shared = _aligned(windows)
    if len(ranks) < 2 or len(shared) < MIN_WINDOWS:
        return None
    means = {r: mean_per_step([tail[r][i] for i in shared]) for r in ranks}
    each: dict[int, list[dict[str, float]]] = {}  # per window, computed once, when a candidate needs it
    step = statistics.median(sum(m.values()) for m in means.values())
    best: tuple[float, int, str] | None = None
    for r in ranks:
        others = [o for o in ranks if o != r]
        if statistics.median(means[o]["comm"] for o in others) < means[r]["comm"]:
            continue  # it waits for others more than they wait for it
        for phase in CAUSES:
            theirs = statistics.median(means[o][phase] for o in others)
            excess = means[r][phase] - theirs
            if excess < MIN_SHARE * step or means[r][phase] < MIN_RATIO * theirs:
                continue
            if not each:
                each.update({o: [per_step(tail[o][i]) for i in shared] for o in ranks})
            ahead = sum(
                each[r][j][phase] > statistics.median(each[o][j][phase] for o in others)
                for j in range(len(shared))
            )
            if ahead < CONSISTENT * len(shared):
                continue
            if best is None or excess > best[0]:
                best = (excess, r, phase)
    if best is None:
        return None
    excess, rank, cause = best
    others = [o for o in ranks if o != rank]
    theirs = statistics.median(means[o][cause] for o in others)
    waited = statistics.median(means[o]["comm"] for o in others) - means[rank]["comm"]
    return Straggler(
        rank=rank,
        cause=cause,
        ratio=means[rank][cause] / theirs if theirs > 0 else None,
        costs=waited if waited > 0 else excess,
        core_wait=contention(rank, means, tail, shared, _tails(waits, windows, n)),
    )


def compared_windows(windows: Mapping[int, Sequence[Window]]) -> int:
    """How many windows :func:`find_straggler` compares the ranks over (0 with fewer than two stepping
    ranks): it names no one before :data:`MIN_WINDOWS`, so a None from it is "not judged yet" until then."""
    ranks, _, _, shared = _aligned(windows)
    return len(shared) if len(ranks) >= 2 else 0


def _aligned(
    windows: Mapping[int, Sequence[Window]],
) -> tuple[list[int], int, dict[int, list[Window]], list[int]]:
    """The ranks that stepped, how many windows each is compared over (the fewest any has), each one's
    last that many windows, and the indexes of those in which every rank completed a step."""
    ranks = sorted(r for r, w in windows.items() if any(n > 0 for n, _ in w))
    n = min((len(windows[r]) for r in ranks), default=0)
    tail = {r: list(windows[r])[-n:] if n else [] for r in ranks}
    shared = [i for i in range(n) if all(tail[r][i][0] > 0 for r in ranks)]
    return ranks, n, tail, shared


def _tails(
    waits: Mapping[int, Sequence[float | None]] | None, windows: Mapping[int, Sequence[Window]], n: int
) -> dict[int, list[float | None]] | None:
    """Each rank's last ``n`` waits, where every rank's are aligned with its windows; else None."""
    if waits is None or any(r not in waits or len(waits[r]) != len(w) for r, w in windows.items()):
        return None
    return {r: list(w)[-n:] if n else [] for r, w in waits.items() if r in windows}


def contention(
    rank: int,
    means: Mapping[int, Mapping[str, float]],
    tail: Mapping[int, Sequence[Window]],
    shared: Sequence[int],
    waits: Mapping[int, Sequence[float | None]] | None,
) -> float | None:
    """Seconds per step the straggler's frontend waited for a core beyond the others' median, where that
    is at least :data:`CONTENTION_SHARE` of its extra time in the phases other than ``comm``; else None
    (also where a rank's waits were not measured in every compared window).

    Args:
        rank: the straggler.
        means: per rank, seconds per step in each phase over the ``shared`` windows.
        tail: per rank, the compared windows; ``shared`` indexes the ones where every rank stepped.
        waits: per rank, seconds its frontend waited for a core in each window of ``tail``.
    """
    if waits is None:
        return None
    per_step: dict[int, float] = {}
    for r, rows in tail.items():
        got = [waits[r][i] for i in shared]
        steps = sum(rows[i][0] for i in shared)
        if steps <= 0 or any(w is None for w in got):
            return None
        per_step[r] = sum(w for w in got if w is not None) / steps
    others = [o for o in tail if o != rank]
    extra = per_step[rank] - statistics.median(per_step[o] for o in others)
    slower = sum(max(0.0, means[rank][p] - statistics.median(means[o][p] for o in others)) for p in CAUSES)
    return extra if extra > 0 and slower > 0 and extra >= CONTENTION_SHARE * slower else None


# -- the store's side: each rank's steps over time ---------------------------------------------------

#: Seconds over which ranks' step rates (and each rank's window phases) are taken: a common span ending
#: at the same moment for every rank, so ranks in lockstep read the same steps/s.
RATE_SPAN = 2.0
#: Step ends the rate span covers at least on every rank, where that takes longer than RATE_SPAN ...
RATE_STEPS = 4
#: ... up to this many seconds.
MAX_RATE_SPAN = 30.0
#: Seconds of one straggler window: every rank's steps are summed into windows aligned on the clock
#: (``floor(t / STRAGGLER_WINDOW)``), so window ``i`` covers the same span of time on every rank.
STRAGGLER_WINDOW = 1.0
#: Straggler windows kept (the run's distribution, bounded: the last ten minutes).
STRAGGLER_KEEP = 600
#: Step end times kept per rank (enough for :data:`RATE_SPAN` at 2,000 steps/s; a faster loop's rate
#: comes from its counts).
ENDS_KEEP = 4096
#: A rank that finished no step for this many of its mean steps (over the run) ...
STALL_STEPS = 10
#: ... and at least this many seconds has stopped stepping: said with where its frontend is (a hang in a
#: collective, a rank stuck in its own code, a long checkpoint or evaluation).
STALL_MIN = 3.0
#: Whole steps kept per rank for the export (a slice per phase per step).
RECENT_KEEP = 64
#: Per-sample differences kept per rank (the window phases).
DIFFS_KEEP = 600
#: Resident-memory points kept per rank for the growth slope; when full, every other one is dropped and
#: the spacing doubles, so a run of any length is covered from its start.
MEMORY_POINTS = 512
#: Seconds between two memory points, at first.
MEMORY_EVERY = 1.0
#: Memory points start once this many steps are done: the first steps allocate the model's gradients,
#: the optimizer's state and the loader's workers, which is set-up, not growth (an 8 s run read
#: +500 MiB/min from importing and the first step alone).
MEMORY_WARMUP_STEPS = 10

ZERO = StepPhases()


def add_phases(a: StepPhases, b: StepPhases, sign: float = 1.0) -> StepPhases:
    """``a + sign * b``, phase by phase (never below 0: a counter reset is not negative time)."""
    return StepPhases(**{p: max(0.0, getattr(a, p) + sign * getattr(b, p)) for p in PHASES})


def divide(phases: StepPhases, n: float) -> StepPhases:
    """Seconds per step: each phase over ``n`` steps."""
    return StepPhases(**{p: getattr(phases, p) / n for p in PHASES}) if n > 0 else ZERO


def later_half(points: Sequence[tuple[float, float]]) -> Sequence[tuple[float, float]]:
    """The ``(seconds, value)`` points of the later half of the time they cover. A leak rises at the
    same rate all run long; the allocator's warm-up (pages of memory already mapped being touched as
    short-lived objects churn: ~11 KiB/s in a 0.36 ms loop under ``run``, flat after a few minutes)
    rises early and flattens, and would make a short run's slope read growth."""
    if len(points) < 2:
        return points
    mid = (points[0][0] + points[-1][0]) / 2
    return [p for p in points if p[0] >= mid]


def slope_per_min(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of ``(seconds, value)`` points, per minute; None for fewer than 3 points
    or less than a second covered."""
    if len(points) < 3 or points[-1][0] - points[0][0] < 1.0:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var <= 0:
        return None
    return 60.0 * sum((t - mt) * (v - mv) for t, v in points) / var


def compact(record: StepRecord) -> StepRecord:
    """A step rounded to the microsecond (its end) and a tenth of one (its phases): what a recording
    keeps of each step (a float's 17 digits would triple its size)."""
    return StepRecord(
        round(record.end, 6), StepPhases(*(round(getattr(record.phases, p), 7) for p in PHASES))
    )


def _keep_latest(by_window: dict[int, Any]) -> None:
    """Drop the oldest straggler windows beyond :data:`STRAGGLER_KEEP`."""
    if len(by_window) > STRAGGLER_KEEP:
        for old in sorted(by_window)[: len(by_window) - STRAGGLER_KEEP]:
            del by_window[old]


class RankSteps:
    """One rank's steps as its samples come: the cumulative figures, each sample's difference, the step
    ends (rates over any span), clock-aligned windows (the straggler's), whole recent steps, memory."""

    def __init__(self) -> None:
        self.total: Steps | None = None
        self.t: float | None = None
        """The newest sample's time (the child's ``time.time()``)."""
        self.since: float | None = None
        """Where this rank's samples begin (the first one's start)."""
        self.marks: list[tuple[float, int, float, tuple[float, ...]]] = []
        """Per sample with new steps: (t, count, seconds, phases in ``PHASES`` order), cumulative, the
        latest :data:`DIFFS_KEEP` to twice that: a window's figures are the difference of two marks."""
        self._marks_cut = False
        self.ends: list[float] = []
        """Step end times, ascending (the latest :data:`ENDS_KEEP` to ``2 * ENDS_KEEP``)."""
        self._ends_cut = False
        """Whether older ends were dropped (a span before ``ends[0]`` is then counted from the counts)."""
        self._views: tuple[tuple[object, ...], StepsView | None] = ((), None)
        self._slope: tuple[int, float | None] = (-1, None)
        self.counts: deque[tuple[float, int]] = deque(maxlen=DIFFS_KEEP)
        """(t, cumulative count) per sample: the rate where the ends are not all there."""
        self.gaps: deque[tuple[float, float]] = deque(maxlen=DIFFS_KEEP)
        """Spans whose step ends were not all sent (a sample carries the latest ``MAX_STEP_ENDS``)."""
        self.windows: dict[int, tuple[int, StepPhases]] = {}
        self.waits: dict[int, float | None] = {}
        """Per straggler window: seconds the frontend waited for a core in it, None where a sample in it
        did not say (no schedstat)."""
        self.recent: deque[StepRecord] = deque(maxlen=RECENT_KEEP)
        self.memory: Memory | None = None
        self.rss: list[tuple[float, float]] = []
        self.last_step: float | None = None
        """When its last step ended (the newest end its samples carried; the sample's time where they
        carried none)."""
        self._run_base: Steps | None = None
        """The cumulative steps in the sample where another source took over the count (a late first
        optimizer step after backward calls went out): the run's mean step and phases are taken from
        the steps after it, once there are any (LBFGS,
        whose closure's backward calls went out as steps before its first step ended, read a 5.7 s mean
        "step" for 66.7 s optimizer steps)."""
        self._rss_every = MEMORY_EVERY
        self.closed_stall: float | None = None
        """How long its newest step took, where it closed alone after a stall (ten of the mean step before
        it and 3 s or more): a hang a stop ended (its all-reduce returned once its peer was killed, and
        the stop took it at its next step); None where its newest step was like the others, or others
        followed it. The store keeps such a rank stalled once it ended."""

    def add(
        self,
        t: float,
        window: float,
        steps: Steps | None,
        memory: Memory | None,
        core_wait: float | None = None,
    ) -> None:
        """One sample of this rank (its steps and memory may be missing); ``core_wait``: the share of the
        sample's window its frontend waited for a core, None where not measured."""
        if self.since is None:
            self.since = t - window
        if self.t is not None and t <= self.t:
            return  # a sample out of order (clock stepped back): its differences mean nothing
        self.t = t
        k = int(t // STRAGGLER_WINDOW)
        had_wait = self.waits.get(k, 0.0)
        self.waits[k] = None if had_wait is None or core_wait is None else had_wait + core_wait * window
        _keep_latest(self.waits)
        if memory is not None:
            self.memory = memory
            warm = steps is not None and steps.count >= MEMORY_WARMUP_STEPS
            if warm and (not self.rss or t - self.rss[-1][0] >= self._rss_every):
                self.rss.append((t, float(memory.rss_bytes)))
                if len(self.rss) >= MEMORY_POINTS:
                    self.rss = self.rss[::2]
                    self._rss_every *= 2
        if steps is None:
            return
        prev = self.total
        n = steps.count - (prev.count if prev else 0)
        if n < 0:  # the agent started over (a restart is a new run: the store resets before it)
            prev, n = None, steps.count
        if prev is not None and steps.source != prev.source:
            # the run's figures are the new source's steps alone from after this sample: its first step
            # began where the old source's last one ended (LBFGS: its last closure's backward), not at
            # a step of its own (three LBFGS steps of ~55 s read a mean of 18.6 s)
            self._run_base = steps
        phases = add_phases(steps.phases, prev.phases, -1.0) if prev else steps.phases
        self.total = steps
        self.counts.append((t, steps.count))
        if n > len(steps.ends):
            self.gaps.append((t - window, t))
        last_end = self.ends[-1] if self.ends else float("-inf")
        self.ends.extend(e for e in steps.ends if e > last_end)
        if len(self.ends) > 2 * ENDS_KEEP:
            del self.ends[:-ENDS_KEEP]
            self._ends_cut = True
        last = self.recent[-1].end if self.recent else float("-inf")
        self.recent.extend(compact(r) for r in steps.recent if r.end > last)
        if n <= 0:
            return
        before, mean = self.last_step, self._run_mean(prev)
        self.last_step = steps.ends[-1] if steps.ends else t
        self.closed_stall = None
        if n == 1 and before is not None and mean is not None:  # one step, after a stall or not?
            length = self.last_step - before
            self.closed_stall = length if length >= max(STALL_MIN, STALL_STEPS * mean) else None
        self.marks.append((t, steps.count, steps.seconds, tuple(getattr(steps.phases, p) for p in PHASES)))
        if len(self.marks) > 2 * DIFFS_KEEP:
            del self.marks[:-DIFFS_KEEP]
            self._marks_cut = True
        had = self.windows.get(k, (0, ZERO))
        self.windows[k] = (had[0] + n, add_phases(had[1], phases))
        _keep_latest(self.windows)

    def _base(self, total: Steps) -> Steps | None:
        """Where the run's figures of ``total`` (cumulative) start from: the count in the sample where its
        source took over (:attr:`_run_base`), once steps followed it; None where they are the whole of it."""
        base = self._run_base
        return base if base is not None and total.count > base.count else None

    def _run_mean(self, total: Steps | None) -> float | None:
        """The mean step of ``total`` (cumulative), from where its source took over the count."""
        if total is None:
            return None
        base = self._base(total)
        n, seconds = total.count, total.seconds
        if base is not None:
            n, seconds = total.count - base.count, total.seconds - base.seconds
        return max(0.0, seconds) / n if n > 0 else None

    def stalled(self, run_mean: float | None) -> float | None:
        """Seconds from its last step to its latest sample, where that is :data:`STALL_STEPS` of its
        mean step (``run_mean``) and :data:`STALL_MIN` or more; None while it steps."""
        if self.t is None or self.last_step is None or run_mean is None:
            return None
        gap = self.t - self.last_step
        return gap if gap >= max(STALL_MIN, STALL_STEPS * run_mean) else None

    def stepped_until(self) -> float | None:
        """Its last step's end, where every step's end came (else its latest sample): a rank that ended
        is rated up to there, not over what came after (a DDP rank whose peer died waited a second in
        its all-reduce before it failed too, and read 147 steps/s beside its peer's 312)."""
        last = self.ends[-1] if self.ends else None
        if last is None or self.t is None or any(b > last for _, b in self.gaps):
            return self.t
        return min(last, self.t)

    def count_at(self, x: float) -> float:
        """Steps done by time ``x``, interpolated between samples."""
        pts = self.counts
        if not pts or x <= pts[0][0]:
            return float(pts[0][1]) if pts else 0.0
        i = bisect_right(pts, x, key=lambda p: p[0])
        if i >= len(pts):
            return float(pts[-1][1])
        (t0, c0), (t1, c1) = pts[i - 1], pts[i]
        return c0 + (c1 - c0) * (x - t0) / (t1 - t0) if t1 > t0 else float(c1)

    def rate(self, start: float, end: float) -> float | None:
        """Steps per second over ``(start, end]``: the step ends in it, or the counts where some ends
        were not sent."""
        if end <= start or self.total is None:
            return None
        if any(a < end and b > start for a, b in self.gaps) or (
            self._ends_cut and self.ends and self.ends[0] > start
        ):
            return max(0.0, self.count_at(end) - self.count_at(start)) / (end - start)
        return (bisect_right(self.ends, end) - bisect_right(self.ends, start)) / (end - start)

    def window_figures(self) -> tuple[float | None, StepPhases]:
        """Mean step time and seconds per step in each phase over the last :data:`RATE_SPAN` of samples
        (further back to the latest sample with a step, for steps slower than that)."""
        marks = self.marks
        if not marks or self.t is None:
            return None, ZERO
        last = marks[-1]
        i = bisect_right(marks, self.t - RATE_SPAN, key=lambda m: m[0]) - 1
        if i == len(marks) - 1:  # no step in the span: back to the latest step's own sample
            i -= 1
        if i < 0 and self._marks_cut:
            i = 0
        base = marks[i] if i >= 0 else (0.0, 0, 0.0, (0.0,) * len(PHASES))
        n = last[1] - base[1]
        if n <= 0:
            return None, ZERO
        phases = StepPhases(*(max(0.0, a - b) / n for a, b in zip(last[3], base[3], strict=True)))
        return max(0.0, last[2] - base[2]) / n, phases

    def view(self, per_second: float | None) -> StepsView | None:
        """This rank's steps as the snapshot shows them."""
        total = self.total
        if total is None or total.count <= 0:
            return None
        key = (id(total), self.t, per_second)
        if self._views[0] == key:  # nothing new since the last snapshot
            return self._views[1]
        seconds, phases = self.window_figures()
        base = self._base(total)
        run_n, run_ph = total.count, total.phases
        if base is not None:
            run_n = total.count - base.count
            run_ph = add_phases(total.phases, base.phases, -1.0)
        run_mean = self._run_mean(total) or 0.0
        view = StepsView(
            source=total.source,
            count=max(0, total.count - total.before),  # a malformed "before" above the count reads 0
            per_second=per_second,
            seconds=seconds,
            phases=phases,
            run_seconds=run_mean,
            run_phases=divide(run_ph, run_n),
            gpu=total.gpu,
            timed_share=None if total.timed is None else total.timed / total.count,
            recent=tuple(self.recent),
            stalled=self.stalled(run_mean),
        )
        self._views = (key, view)
        return view

    def memory_view(self, rank: int | None) -> RankMemory | None:
        """This rank's memory now, with its resident set's growth over the later half of the run."""
        if self.memory is None:
            return None
        if self._slope[0] != len(self.rss) or not self.rss:  # a new point: once a second at most
            self._slope = (len(self.rss), slope_per_min(later_half(self.rss)))
        return RankMemory(rank, self.memory.rss_bytes, self.memory.devices, self._slope[1])


def span_for(ranks: Sequence[RankSteps], end: float) -> float:
    """:data:`RATE_SPAN`, or longer (up to :data:`MAX_RATE_SPAN`) where a rank's steps are slow: long
    enough for every rank's last :data:`RATE_STEPS` step ends before ``end`` (a 3 s step would otherwise
    read 0 or 0.5 steps/s over 2 s)."""
    span = RATE_SPAN
    for r in ranks:
        k = bisect_right(r.ends, end)
        if k >= RATE_STEPS:
            span = max(span, end - r.ends[k - RATE_STEPS])
        elif r.since is not None:
            span = max(span, end - r.since)
    return min(span, MAX_RATE_SPAN)


class StepsBook:
    """Every rank's steps: rates over a common span, the straggler over the run, memory."""

    def __init__(self) -> None:
        self.ranks: dict[int, RankSteps] = {}
        self._straggler_key: tuple[object, ...] | None = None
        self._straggler: Straggler | None = None
        self.judged = 0
        """How many windows the straggler was last judged over (:func:`compared_windows`)."""

    def add(
        self,
        key: int,
        t: float,
        window: float,
        steps: Steps | None,
        memory: Memory | None,
        core_wait: float | None = None,
    ) -> None:
        """A sample of rank ``key`` (the store's source number); ``core_wait`` as :meth:`RankSteps.add`."""
        rs = self.ranks.get(key)
        if rs is None:
            rs = self.ranks[key] = RankSteps()
        rs.add(t, window, steps, memory, core_wait)

    def rates(self, running: set[int]) -> dict[int, float | None]:
        """Each rank's steps/s over the same span: the last :data:`RATE_SPAN` seconds ending at the
        newest sample of the rank that is furthest behind (of the running ranks still sampling); a rank
        that ended is rated over the span ending at its last step (:meth:`RankSteps.stepped_until`)."""
        stepping = {k: r for k, r in self.ranks.items() if r.total is not None and r.t is not None}
        live = {k: r for k, r in stepping.items() if k in running}
        newest = max((r.t for r in live.values() if r.t is not None), default=None)
        sampling = [
            r for r in live.values() if newest is not None and r.t is not None and r.t >= newest - RATE_SPAN
        ]
        common = min((r.t for r in sampling if r.t is not None), default=None)
        begun = max((r.since for r in sampling if r.since is not None), default=None)
        out: dict[int, float | None] = {}
        shared = span_for([r for r in sampling], common) if common is not None else RATE_SPAN
        for k, r in stepping.items():
            in_common = common is not None and k in live and r in sampling
            end = common if in_common else r.t if k in live else r.stepped_until()
            start_of = begun if in_common else r.since
            assert end is not None
            span = shared if in_common else span_for([r], end)
            start = max(end - span, start_of if start_of is not None else end)
            out[k] = r.rate(start, end)
        return out

    def straggler(self, ranks: dict[int, int], running: set[int]) -> Straggler | None:
        """:func:`find_straggler` over the clock-aligned windows every rank has completed (``ranks``:
        source number → rank number); computed again only when a window completes."""
        stepping = {k: r for k, r in self.ranks.items() if r.windows and k in ranks}
        if len(stepping) < 2:
            self.judged = 0
            return None
        live = [r.t for k, r in stepping.items() if k in running and r.t is not None]
        last = int(min(live) // STRAGGLER_WINDOW) if live else None  # the window still filling
        key = (tuple(sorted(stepping)), last, len(live))
        if key != self._straggler_key:  # a window completed (once a second): judge again
            self._straggler_key = key
            indexes = sorted({i for r in stepping.values() for i in r.windows if last is None or i < last})
            windows = {ranks[k]: [r.windows.get(i, (0, ZERO)) for i in indexes] for k, r in stepping.items()}
            self._straggler = find_straggler(
                windows, {ranks[k]: [r.waits.get(i) for i in indexes] for k, r in stepping.items()}
            )
            self.judged = compared_windows(windows)
        return self._straggler
