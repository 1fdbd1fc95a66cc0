"""Steps: one stacked bar per rank, the phases' shares of its step, its step time and rate; the straggler.

Everything comes from the snapshot (``RankView.steps``, ``Snapshot.straggler``): seconds per step in each
phase over the last seconds, as the store derives them from the agents' step clocks.
"""

from __future__ import annotations

from typing import ClassVar

from torchpar_top.contract.snapshot import RankView, Snapshot, StepsView
from torchpar_top.contract.vocab import PHASES
from torchpar_top.model.steps import MIN_WINDOWS
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel

#: Short names, for the legend and the ranks table where room is short.
SHORT = {
    "data": "data",
    "transfer": "xfer",
    "forward": "fwd",
    "backward": "bwd",
    "comm": "comm",
    "optimizer": "opt",
    "sync": "sync",
    "other": "other",
}
#: The bar's glyph (one per cell, in its phase's colour).
BLOCK = "█"
#: The glyph of a stalled rank's bar: its shares are those of its steps before the stall, drawn faded.
FADED = "░"


def stepping(snapshot: Snapshot) -> list[tuple[RankView | None, StepsView]]:
    """``(rank, steps)`` for each rank that has stepped; the snapshot's own steps when no rank has any."""
    rows: list[tuple[RankView | None, StepsView]] = [
        (r, r.steps) for r in snapshot.ranks if r.steps is not None
    ]
    if not rows and snapshot.steps is not None:
        rows = [(None, snapshot.steps)]
    return rows


def shares(steps: StepsView) -> list[tuple[str, float]]:
    """Each phase's share of the step over the last window, in ``PHASES`` order."""
    total = sum(getattr(steps.phases, p) for p in PHASES)
    return [(p, getattr(steps.phases, p) / total if total > 0 else 0.0) for p in PHASES]


def cells(parts: list[tuple[str, float]], width: int) -> list[tuple[str, int]]:
    """``width`` cells split among the parts by their shares (largest remainders: they add up exactly)."""
    raw = [(p, s * width) for p, s in parts]
    out = {p: int(x) for p, x in raw}
    left = width - sum(out.values())
    for p, _x in sorted(raw, key=lambda px: -(px[1] - int(px[1])))[: max(0, left)]:
        out[p] += 1
    return [(p, out[p]) for p, _ in parts if out[p] > 0]


def slowest(steps: StepsView) -> tuple[str, float] | None:
    """The phase that takes most of the step, and its share; None before a step."""
    parts = shares(steps)
    name, share = max(parts, key=lambda ps: ps[1])
    return (name, share) if share > 0 else None


class StepsPanel(SnapshotPanel):
    """``r0 ████▓▓▓▓░░  23.0 ms  43.5/s`` per rank under a legend; the straggler marked with its cause."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {f"steps--{p}" for p in PHASES} | {"steps--straggler"}

    DEFAULT_CSS = """
    StepsPanel {
        height: auto;
        & > .steps--data { color: gold; }
        & > .steps--transfer { color: plum; }
        & > .steps--forward { color: dodgerblue; }
        & > .steps--backward { color: mediumseagreen; }
        & > .steps--comm { color: tomato; }
        & > .steps--optimizer { color: darkturquoise; }
        & > .steps--sync { color: violet; }
        & > .steps--other { color: $foreground-muted; }
        & > .steps--straggler { color: $warning; text-style: bold; }
    }
    """

    redraw_every = 0.5
    """Its figures are means over the last 2 s: redrawn twice a second on the timer."""

    def shown(self, snapshot: Snapshot) -> bool:
        """Once a step was seen."""
        return bool(stepping(snapshot))

    def title(self, snapshot: Snapshot) -> str:
        """``steps · from backward calls · phases over the last 2 s`` (``GPU time`` where it is)."""
        rows = stepping(snapshot)
        if not rows:
            return "steps"
        first = rows[0][1]
        text = f"steps · from {first.source.words}"
        text += " · phases per step, GPU time" if first.gpu else " · phases per step"
        every = round(1 / first.timed_share) if first.timed_share else 1
        if every > 1:  # a fast loop's phases are timed in some steps, estimated for the rest
            text += f" (timed in 1 step of {every})"
        stalled = [s.stalled for _, s in rows]
        if all(s is not None for s in stalled):  # a hang: the rows say where each rank is
            return text + f" · no step for {render.seconds(min(s or 0.0 for s in stalled))}"
        if len(rows) > 1 and snapshot.straggler is None:
            pending = render.straggler_pending(snapshot.straggler_windows, MIN_WINDOWS, "s")
            text += f" · {pending or 'no straggler'}"
        return text

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """A legend, then a bar per rank scaled to the longest step, its step time, rate and mark."""
        rows = stepping(snapshot)
        if not rows:
            return []
        present = [p for p in PHASES if any(getattr(s.phases, p) > 0 for _, s in rows)] or list(PHASES)
        out = [self._legend(present, width)]
        longest = max((s.seconds or 0.0) for _, s in rows) or 1.0
        straggler = snapshot.straggler
        label_w = max(4, *(len(self._label(r)) + 1 for r, _ in rows))
        figures_w = 18  # " 23.0 ms  43.5/s "
        marks = [self._stall(rank, steps, width) for rank, steps in rows]
        if straggler is not None:
            marks = [
                m or (self._mark(snapshot, width) if r is not None and r.rank == straggler.rank else "")
                for m, (r, _) in zip(marks, rows, strict=True)
            ]
        mark_w = max((len(m) + 1 for m in marks if m), default=0)
        bar_w = max(4, width - label_w - figures_w - mark_w)
        if width - label_w - figures_w - mark_w < 4:  # a long stall's place cut to what fits
            marks = [render.clip(m, max(0, width - label_w - figures_w - 5)) for m in marks]
        for (rank, steps), mark in zip(rows, marks, strict=True):
            row = Row().add(self._label(rank).ljust(label_w), self.style("label"))
            n = round(bar_w * (steps.seconds or 0.0) / longest)
            stalled = steps.stalled is not None  # its bar and figures are from before the stall: faded
            for phase, k in cells(shares(steps), n):
                row.add((FADED if stalled else BLOCK) * k, self.style(f"steps--{phase}"))
            row.to(label_w + bar_w)
            row.add(
                render.seconds(steps.seconds).rjust(9) if steps.seconds else "—".rjust(9),
                self.style("dim" if stalled else "value"),
            )
            rate = "—" if steps.per_second is None else f"{render.num(steps.per_second)}/s"
            row.add(rate.rjust(9), self.style("dim"))
            if mark:
                row.add(" " + mark, self.style("steps--straggler"))
            out.append(row)
        return out

    @staticmethod
    def _label(rank: RankView | None) -> str:
        return "step" if rank is None or rank.rank is None else f"r{rank.rank}"

    def _legend(self, present: list[str], width: int) -> Row:
        """``■ data ■ forward ...`` in the phases' colours; short names where the long ones do not fit."""
        names = [p for p in present]
        if sum(len(p) + 3 for p in names) > width:
            names = [SHORT[p] for p in present]
        row = Row()
        for phase, name in zip(present, names, strict=True):
            if row.width + len(name) + 3 > width:
                break
            row.add("■ ", self.style(f"steps--{phase}")).add(name + " ", self.style("dim"))
        return row

    @staticmethod
    def _stall(rank: RankView | None, steps: StepsView, width: int) -> str:
        """``◀ no step for 12.3 s: sleep at ddp_steps.py:66 (forward)`` for a rank that stopped stepping
        (where its frontend is, from its latest stack, where there is one); '' while it steps."""
        if steps.stalled is None:
            return ""
        text = f"◀ no step for {render.seconds(steps.stalled)}"
        at = rank.at if rank is not None else ""
        return f"{text}: {at}" if at and width >= 70 else text

    @staticmethod
    def _mark(snapshot: Snapshot, width: int) -> str:
        """``◀ straggler: forward 4.0×, others wait 9.2 ms/step`` (shorter when narrow); where it is held
        back by CPU contention, ``◀ straggler: waits for a core (backward 2.0×), others wait ...``."""
        st = snapshot.straggler
        if st is None:
            return ""
        ratio = f" {st.ratio:.1f}×" if st.ratio is not None else ""
        cause = f"{st.cause}{ratio}"
        if st.core_wait is not None:
            if width >= 100:
                cause = f"waits for a core ({cause})"
            else:
                cause = f"{SHORT.get(st.cause, st.cause)}{ratio}, core wait"
        if width >= 100:
            return f"◀ straggler: {cause}, others wait {render.seconds(st.costs)}/step"
        if width >= 70:
            return f"◀ straggler: {cause}"
        if st.core_wait is not None:
            return f"◀ core wait{ratio}"
        return f"◀ {SHORT.get(st.cause, st.cause)}{ratio}"
