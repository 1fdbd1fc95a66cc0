"""``torchpar-top cluster``: the whole job on one screen, read from Prometheus.

A header (the job's steps/s, nodes seen of expected, the newest scrape's age, what a refresh cost), and a
table with a row per (node, rank): state, steps/s, step time and its phases, launch-queue depth, data
wait, GPU use; the straggler marked with its cause, a stale node's rows dimmed and said *stale*. The app
only draws :class:`~torchpar_top.model.cluster.ClusterView`; a refresh (``source.refresh()``, a few HTTP
requests) runs on a worker thread every interval. A refresh that fails says why on the header's second
line and the next one tries again. Keys: ``p`` pause, ``?`` help, ``q`` quit.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.driver import Driver
from textual.widgets import Footer, Static
from torchpar_top.contract.snapshot import Straggler
from torchpar_top.contract.vocab import PHASES
from torchpar_top.model.cluster import ClusterRank, ClusterView
from torchpar_top.model.stacks import waits_for_peers
from torchpar_top.model.steps import MIN_WINDOWS
from torchpar_top.tui import render
from torchpar_top.tui.driver import driver_class
from torchpar_top.tui.screens.help import HelpScreen
from torchpar_top.tui.widgets.ranks import core_wait_shown

#: Short names of the phases in the phase column.
PHASE_SHORT = {
    "data": "data",
    "transfer": "h2d",
    "forward": "fwd",
    "backward": "bwd",
    "comm": "comm",
    "optimizer": "opt",
    "sync": "sync",
    "other": "oth",
}

HELP = """\
# torchpar-top cluster

The whole job, read from Prometheus: every node runs `torchpar-top run ... --metrics-port P`, Prometheus
scrapes them (docs/cluster.md), and this screen asks Prometheus for the `torchpar_*` series every interval.

**Header**: the job's steps/s (the slowest running rank's: in data-parallel training the job goes at its
pace; the rank is named where it is 5 % or more behind the others' median, not among ranks in lockstep),
nodes seen of expected (`--nodes`, else the scrape targets), the age of the newest scrape, and what
the refresh's queries took.

**A row per rank** (the global rank, with its node, host and local rank): state (`running`, `exited`,
`stale`: its node's monitor no longer answers Prometheus; the row keeps what it last said), steps/s, step
time and its largest phases (the step anatomy's series; `?` where a node does not export them), launch
queue depth, DataLoader wait, its frontend's wait for a core (`waits`, a column only where a rank waited
5 % or more: CPU contention), and the kernel-active share and memory used of the GPU whose index is its
local rank.

**Straggler**: the rank that holds the others back, from each rank's phases over the refreshes so far
(the same test as a live run's: its phase clearly longer than the others' in most windows); *waits for a
core* where most of its extra time was spent waiting for a CPU core (contention on its node, not its
code).

**Stalled**: a rank whose step count has not risen for ten of its steps and 3 s is marked *no step for
N s*, with where its frontend is as its node's monitor read it from the rank's stack (*sleep at
train.py:66 (forward)*, *collective at ...*, *waits at ...*: idle in a wait Python cannot see, as DDP's
all-reduce); when every running rank is, the header says so (a hang) and names the ranks that are not
waiting for their peers (not in a collective or such a wait): where the others' wait comes from.

Keys: `p` pause (stop asking Prometheus), `?` this help, `q` quit.
"""


def phases_text(phases: dict[str, float] | None, seconds: float | None, width: int = 24) -> str:
    """The largest phases as shares of the step: ``bwd 45% fwd 30% comm 20%``; ``?`` when unknown."""
    if not phases:
        return "?"
    total = seconds if seconds else sum(phases.values())
    if not total:
        return "—"
    parts = [
        f"{PHASE_SHORT.get(p, p)} {round(100 * v / total)}%"
        for p, v in sorted(phases.items(), key=lambda kv: (-kv[1], PHASES.index(kv[0])))
        if v > 0
    ]
    out = ""
    for part in parts:
        if len(out) + len(part) + (1 if out else 0) > width:
            break
        out = f"{out} {part}" if out else part
    return out or "—"


def header_lines(view: ClusterView, url: str, job: str | None, paused: bool) -> tuple[Text, Text]:
    """The header's two lines: the job's figures, then the error, the straggler or what is unknown."""
    first = Text()
    rate = "—" if view.steps_per_s is None else render.num(view.steps_per_s)
    first.append("job ")
    first.append(f"{rate} steps/s", style="bold")
    if view.slowest is not None:
        first.append(f" (r{view.slowest} slowest)", style="dim")
    first.append(f"  nodes {view.fresh_nodes}")
    stale = len(view.nodes) - view.fresh_nodes
    if stale:
        first.append(f"+{stale} stale", style="bold red")
    first.append(f"/{view.expected_nodes if view.expected_nodes is not None else '?'}")
    age = "—" if view.scrape_age is None else render.seconds(view.scrape_age)
    first.append(f"  scrape {age} ago")
    if view.query_seconds is not None:
        first.append(f"  query {render.seconds(view.query_seconds)}", style="dim")
    if paused:
        first.append("  PAUSED", style="bold yellow")
    first.append(f"  {url}{f' job={job}' if job else ''}", style="dim")
    first.no_wrap, first.overflow = True, "ellipsis"
    second = Text()
    live = [r for r in view.ranks if r.state == "running" and not r.stale]
    if view.error:
        second.append(view.error, style="bold red")
    elif live and all(r.stalled is not None for r in live):
        least = min(r.stalled or 0.0 for r in live)
        second.append(f"no step on any rank for {render.seconds(least)}: a hang?", style="bold yellow")
        own = [r for r in live if r.at and not waits_for_peers(r.at)]
        if own:  # the ranks not waiting for their peers: where the others' wait comes from
            second.append(" not waiting for peers: ")
            second.append(render.inert("; ".join(f"r{r.rank} {r.at}" for r in own[:NAMED])))
            if len(own) > NAMED:
                second.append(f"; {len(own) - NAMED} more", style="dim")
        elif not any(r.at for r in live):
            second.append(" (torchpar-top run on a node shows where each of its ranks waits)", style="dim")
    elif view.straggler is not None:
        s = view.straggler
        second.append(f"straggler r{s.rank}: ", style="bold yellow")
        second.append(f"{_cause(s)}, costs them {render.seconds(s.costs)} a step")
        if s.core_wait is not None:
            second.append(
                f"; it waits for a core {render.seconds(s.core_wait)} a step more: CPU contention",
                style="yellow",
            )
    elif not view.steps_known and not any(r.unit == "steps/s" for r in view.ranks if not r.stale):
        second.append(
            "no steps yet: the torchpar_step_* series come with the ranks' first steps", style="dim"
        )
    elif not view.steps_known:
        second.append(
            "steps unknown: no torchpar_step_* series (step time, phases and the straggler need them); "
            "steps/s from the ranks' throughput",
            style="dim",
        )
    else:
        pending = render.straggler_pending(view.straggler_windows, MIN_WINDOWS, "refreshes")
        second.append(pending or "no straggler", style="dim")
    return first, second


COLUMNS = (
    ("node host", 14, "l"),
    ("rank", 5, "l"),
    ("lr", 3, "r"),
    ("state", 8, "l"),
    ("steps/s", 8, "r"),
    ("step", 9, "r"),
    ("phases", 26, "l"),
    ("depth", 6, "r"),
    ("data", 5, "r"),
    ("waits", 6, "r"),
    ("gpu", 5, "r"),
    ("gmem", 7, "r"),
    ("", 46, "l"),
)


#: The header names this many of a hung job's ranks that are not waiting for their peers (the rows say
#: where every rank is).
NAMED = 3


def _cause(s: Straggler, short: bool = False) -> str:
    """``forward 4.0× the others'`` (``short``: ``forward 4.0×``; one decimal, as the live screen says
    it), or ``forward (none on the others)`` where they spend no time in it (no ratio)."""
    if s.ratio is None:
        return f"{s.cause} (none on the others)"
    return f"{s.cause} {s.ratio:.1f}×" + ("" if short else " the others'")


#: Put before a stalled rank's phases: they are its node's last window's, from before the stall.
BEFORE = "before: "


def _phases_cell(r: ClusterRank, width: int = 24) -> str:
    """:func:`phases_text`; a stalled rank's said to be from before its stall (``before: comm 85%``)."""
    if r.stalled is None or not r.phases:
        return phases_text(r.phases, r.step_seconds, width)
    return BEFORE + phases_text(r.phases, r.step_seconds, width - len(BEFORE))


def _cells(r: ClusterRank, straggler: Straggler | None) -> list[str]:
    node = "?" if r.node is None else str(r.node)
    note = ""
    if r.stalled is not None:
        note = f"◀ no step for {render.seconds(r.stalled)}" + (f": {r.at}" if r.at else "")
    elif straggler is not None and r.rank == straggler.rank:
        note = f"◀ straggler: {_cause(straggler, short=True)}"
        note += ", waits for a core" if straggler.core_wait is not None else ""
    elif r.stale:
        note = "no answer from its node's monitor"
    return [
        f"{node} {r.hostname}",
        "main" if r.rank is None else f"r{r.rank}",
        "" if r.local_rank is None else str(r.local_rank),
        r.state,
        render.num(r.steps_per_s),
        "—" if r.step_seconds is None else render.seconds(r.step_seconds),
        _phases_cell(r),
        "—" if r.depth is None else f"{r.depth:.0f}",
        render.pct(r.data_wait),
        render.pct(r.core_wait),
        render.pct(r.gpu_util),
        render.size(None if r.gpu_memory is None else int(r.gpu_memory)),
        note,
    ]


def table_lines(view: ClusterView, width: int) -> list[Text]:
    """The table: a header line and a line per rank, cut to ``width`` (the last column, the note, takes
    what the others leave; a stalled rank's place goes on a line of its own below where it does not fit,
    under the note or as far left as it needs).
    The ``waits`` column (each rank's
    frontend waiting for a core: CPU contention) is there only where a rank waited enough to say, as in
    the live screen's ranks table."""
    straggler = view.straggler.rank if view.straggler else None
    waited = core_wait_shown(r.core_wait for r in view.ranks)  # a stale rank's is None
    shown = [i for i, c in enumerate(COLUMNS) if waited or c[0] != "waits"]
    columns = [COLUMNS[i] for i in shown]

    left = sum(c[1] for c in columns[:-1])  # where the note starts
    room = max(columns[-1][1] - 1, width - left)  # the note: what is left

    def line(all_cells: list[str], style: str = "") -> Text:
        text = Text(style=style)
        cells = [all_cells[i] for i in shown]
        for i, ((_, w, align), raw) in enumerate(zip(columns, cells, strict=True)):
            last = i == len(columns) - 1
            cell = render.clip(render.inert(raw), room if last else w - 1)
            text.append((cell.rjust(w - 1) + " ") if align == "r" else cell if last else cell.ljust(w))
        text.truncate(width)
        return text

    out = [line([c[0] for c in COLUMNS], "dim")]
    indent = " " * (left + 2)
    for r in view.ranks:
        style = "dim" if r.stale or r.state == "exited" else "bold yellow" if r.rank == straggler else ""
        cells = _cells(r, view.straggler)
        head, colon, rest = cells[-1].partition(": ")
        if len(cells[-1]) > room and rest and len(head) < room:  # a stalled rank's place: on a line below
            cells[-1] = head + colon.rstrip()
            start = max(0, min(len(indent), width - len(rest)))  # left of the note where it must be
            below = Text(indent[:start] + render.clip(render.inert(rest), width - start), style=style)
            below.truncate(width)
            out += [line(cells, style), below]
        else:
            out.append(line(cells, style))
    return out


class ClusterApp(App[None]):
    """Draws ``source.refresh()``'s views, one refresh per ``interval`` seconds."""

    TITLE = "torchpar-top cluster"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pause", "pause"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]
    CSS = """
    #header { height: auto; max-height: 4; padding: 0 1; }
    #table { border: round $primary 50%; border-title-color: $accent; border-title-style: bold;
        padding: 0 1; height: 1fr; }
    """

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, made to survive the terminal going away (``tui/driver.py``)."""
        return driver_class(super().get_driver_class())

    def __init__(
        self,
        source: Any,
        interval: float,
        url: str,
        job: str | None,
        on_view: Callable[[ClusterView], None] | None = None,
    ) -> None:
        super().__init__()
        self.source, self.interval, self.url, self.job = source, interval, url, job
        self.on_view = on_view
        self.paused = False
        self.view: ClusterView | None = None
        self._busy = False
        self._signal_loop: asyncio.AbstractEventLoop | None = None
        self._quit_when_mounted = False

    def compose(self) -> ComposeResult:
        """Header, table, footer."""
        yield Static(id="header")
        with VerticalScroll(id="table") as box:
            box.border_title = "ranks"
            yield Static(id="rows")
        yield Footer()

    def on_mount(self) -> None:
        """First refresh now, then every interval."""
        self._signal_loop = asyncio.get_running_loop()
        if self._quit_when_mounted:
            self.exit()
            return
        self.query_one("#header", Static).update(Text(f"asking Prometheus at {self.url}…", style="dim"))
        self._tick()
        self.set_interval(self.interval, self._tick)

    def _tick(self) -> None:
        if self.paused or self._busy:
            return
        self._busy = True
        self.run_worker(self._refresh(), name="refresh", group="refresh")

    async def _refresh(self) -> None:
        try:
            view = await asyncio.to_thread(self.source.refresh)
        finally:
            self._busy = False
        self.view = view
        if self.on_view is not None:
            self.on_view(view)
        self.draw()

    def draw(self) -> None:
        """Draw the latest view."""
        view = self.view
        if view is None:
            return
        first, second = header_lines(view, self.url, self.job, self.paused)
        self.query_one("#header", Static).update(Text("\n").join([first, second]))
        table = self.query_one("#table", VerticalScroll)
        table.border_title = f"ranks · {len(view.ranks)} on {len(view.nodes)} nodes"
        width = max(20, table.scrollable_content_region.width)
        self.query_one("#rows", Static).update(Text("\n").join(table_lines(view, width)))

    def on_resize(self) -> None:
        """Draw again for the new width (the table's lines are cut to it)."""
        self.call_after_refresh(self.draw)

    def action_pause(self) -> None:
        """``p``: stop or resume asking Prometheus."""
        self.paused = not self.paused
        self.draw()

    def action_help(self) -> None:
        """``?``: the help screen."""
        self.push_screen(HelpScreen(HELP))

    def quit_from_signal(self) -> None:
        """SIGINT/SIGTERM/SIGHUP: schedule the exit on the app's loop (never blocks in the handler)."""
        signal.signal(signal.SIGCONT, signal.SIG_IGN)  # a hung-up terminal also sends SIGCONT
        loop = self._signal_loop
        if loop is None:
            self._quit_when_mounted = True
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed
            loop.call_soon_threadsafe(self.exit)
