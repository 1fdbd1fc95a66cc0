"""Sync points: the source lines whose calls make the frontend wait for the device, busiest first.

``.item()``, ``.cpu()``, printing a tensor... block until the device has finished the work queued
before them. On the CPU nothing is queued, so these are counted as the syncs they would be on a GPU.
"""

from __future__ import annotations

from torchpar_top.contract.snapshot import Snapshot, SyncSite
from torchpar_top.contract.vocab import ExecutorKind
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel
from torchpar_top.tui.widgets.ranks import with_rank

TOP_SITES = 5
"""How many sites are listed."""


def top_sites(snapshot: Snapshot, n: int = TOP_SITES) -> list[SyncSite]:
    """The ``n`` sites with the highest rate (then the highest count): the snapshot lists them in that
    order (``model/figures.sync_order``)."""
    return list(snapshot.syncpoints[:n])


def count_text(count: int) -> str:
    """A count as digits up to 99999, then ``123k``."""
    return str(count) if count < 100_000 else render.num(count)


def rate_text(per_second: float) -> str:
    """``6.2/s``, ``0.0/s``, ``1.23k/s``: one decimal, as the rates are small."""
    return f"{per_second:.1f}/s" if per_second < 1000 else f"{render.num(per_second)}/s"


def on_device(snapshot: Snapshot) -> bool:
    """Whether the work runs on a real device (a CUDA stream), so the syncs really wait."""
    return any(e.kind == ExecutorKind.CUDA_STREAM for e in snapshot.executors)


class SyncPointsPanel(SnapshotPanel):
    """``train.py:42   item()   12.0/s   1.23k`` per site, busiest first."""

    DEFAULT_CSS = """
    SyncPointsPanel { height: auto; }
    """

    redraw_every = 0.5
    """Its rates are means between two of the agent's reports (each sample's, or every ~2.5 s when the op
    counter samples): redrawn twice a second on the timer."""

    def shown(self, snapshot: Snapshot) -> bool:
        """When the agent reported any site."""
        return bool(snapshot.syncpoints)

    def title(self, snapshot: Snapshot) -> str:
        """``sync points`` (``would-be, CPU`` when nothing runs on a device; ``sampled`` when counted in
        the op counter's slices: the rate is scaled, the total is what the slices saw)."""
        text = "sync points" if on_device(snapshot) else "sync points (would-be, on CPU)"
        if any(s.sampled for s in snapshot.syncpoints):
            coverage = snapshot.op_coverage
            text += " · sampled" + (f" {render.pct(coverage, 0)} of the time" if coverage else "")
        return text

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """A header and the top sites; ``+N more`` when there are more."""
        sites = top_sites(snapshot)
        rate_w, total_w = 8, (7 if width >= 44 else 0)  # narrow: no total column
        room = max(10, width - rate_w - total_w - 1)  # for line, a space, and call
        where_need = max([4, *(len(with_rank(s.where, s.rank)) for s in sites)])
        call_need = max([4, *(len(s.call) for s in sites)])
        where_w = min(where_need, max(room - 1 - call_need, room * 3 // 5))
        call_w = max(4, min(call_need, room - 1 - where_w))
        out = [
            Row()
            .add("line".ljust(where_w + 1), self.style("dim"))
            .add("call".ljust(call_w), self.style("dim"))
            .add("per s".rjust(rate_w), self.style("dim"))
            .add("total".rjust(total_w)[:total_w], self.style("dim"))
        ]
        for site in sites:
            hot = site.per_second >= 1.0
            out.append(
                Row()
                .add(
                    render.clip(with_rank(site.where, site.rank), where_w).ljust(where_w + 1),
                    self.style("label"),
                )
                .add(render.clip(site.call, call_w).ljust(call_w), self.style("accent"))
                .add(rate_text(site.per_second).rjust(rate_w), self.style("value" if hot else "dim"))
                .add(count_text(site.count).rjust(total_w)[:total_w], self.style("dim"))
            )
        more = len(snapshot.syncpoints) - len(sites)
        if more > 0:
            out.append(Row().add(f"+{more} more", self.style("dim")))
        return out
