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
from collections.abc import Mapping, Sequence

from torchpar_top.contract.messages import StepPhases
from torchpar_top.contract.snapshot import Straggler
from torchpar_top.contract.vocab import PHASES

#: Phases a rank can be slow in (``comm`` is where the others wait for it, not a cause).
CAUSES = tuple(p for p in PHASES if p != "comm")
#: The cause phase must be at least this many times the other ranks' median.
MIN_RATIO = 1.2
#: ... and longer by at least this share of the (median) step time: a 2x on a phase that takes 1 % of
#: the step holds nobody back.
MIN_SHARE = 0.05
#: ... in at least this share of the windows where every rank stepped.
CONSISTENT = 0.75
#: Windows needed before anyone is named.
MIN_WINDOWS = 5

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


def find_straggler(windows: Mapping[int, Sequence[Window]]) -> Straggler | None:
    """The rank that holds the others back, or None (one rank, too few windows, or nobody clearly).

    Args:
        windows: per rank, its windows in time order; window ``i`` of every rank should cover the same
            span of time (the last ``n`` windows of each are compared, ``n`` the fewest any rank has).

    Returns:
        The straggler with its cause phase, the ratio of that phase to the other ranks' median, and what
        it costs the others per step.
    """
    ranks = sorted(r for r, w in windows.items() if any(n > 0 for n, _ in w))
    if len(ranks) < 2:
        return None
    n = min(len(windows[r]) for r in ranks)
    tail = {r: list(windows[r])[-n:] if n else [] for r in ranks}
    # windows in which every rank completed a step: the ones the ranks can be compared in
    shared = [i for i in range(n) if all(tail[r][i][0] > 0 for r in ranks)]
    if len(shared) < MIN_WINDOWS:
        return None
    means = {r: mean_per_step([tail[r][i] for i in shared]) for r in ranks}
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
            ahead = sum(
                per_step(tail[r][i])[phase] > statistics.median(per_step(tail[o][i])[phase] for o in others)
                for i in shared
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
        ratio=means[rank][cause] / theirs if theirs > 0 else float("inf"),
        costs=waited if waited > 0 else excess,
    )
