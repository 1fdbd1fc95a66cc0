"""The Textual app: draws the session's snapshots on a render timer and turns keys into session calls.

It never measures, spawns or parses: everything on screen comes from ``session.snapshot()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from collections.abc import Callable
from functools import partial
from typing import ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import BindingsMap, BindingType
from textual.driver import Driver
from textual.screen import Screen
from textual.widgets import Footer
from textual.worker import Worker
from torchpar_top.contract.snapshot import LiveControls, ReplayControls, Snapshot, SnapshotSource
from torchpar_top.tui import keys
from torchpar_top.tui.commands import TorchparCommands
from torchpar_top.tui.compositor import LineScreen, screen_class
from torchpar_top.tui.driver import driver_class
from torchpar_top.tui.screens.help import HelpScreen
from torchpar_top.tui.screens.picker import PickerScreen
from torchpar_top.tui.widgets.cores import CoresPanel
from torchpar_top.tui.widgets.gpus import GpusPanel
from torchpar_top.tui.widgets.header import HeaderBar
from torchpar_top.tui.widgets.lanes import LanesPanel
from torchpar_top.tui.widgets.log import LogPanel
from torchpar_top.tui.widgets.panel import SnapshotPanel
from torchpar_top.tui.widgets.panel_row import PanelRow
from torchpar_top.tui.widgets.queues import QueuesPanel
from torchpar_top.tui.widgets.ranks import RanksPanel, shows_ranks
from torchpar_top.tui.widgets.scoreboard import ScoreboardPanel
from torchpar_top.tui.widgets.stack import StackPanel
from torchpar_top.tui.widgets.steps import StepsPanel
from torchpar_top.tui.widgets.syncpoints import SyncPointsPanel
from torchpar_top.tui.widgets.threads import ThreadsPanel

SHORT_SCREEN_ROWS = 30
"""Below this many rows the screen gets class ``-short`` (shorter panels, room for the log)."""

NARROW_SCREEN_COLUMNS = 100
"""Below this many columns the footer's keys need all its room."""

NARROW_LANES_COLUMNS = 70
"""Below this many columns the screen gets class ``-narrow``: the lanes, beside the async-vs-sync table
(which needs its 34 columns), would have too few cells to show a lane, and give the row to the table."""

NO_STACK_HINT = "no Python stack here: stacks are sampled for `torchpar-top run` and `attach`"
"""Said when ``k`` is pressed where there is no stack to show."""

SEEK_SHARE = 0.05
"""How far ``left`` and ``right`` move a replay, as a share of the trace or recording."""

FrameHook = Callable[[Snapshot], None]
"""Called with each snapshot once it is on screen (see ``on_frame``)."""


#: gc thresholds while the screen runs: the first generation is collected after this many net
#: allocations instead of Python's 700 (each frame allocates thousands of short-lived segments and strips).
GC_THRESHOLDS = (20_000, 50, 100)


def quiet_gc() -> None:
    """Make the collector cheap for a long-running screen: what exists before the first frame (imports,
    CSS, the DOM's classes) is moved out of the collector's reach (``gc.freeze``), and young objects are
    collected after :data:`GC_THRESHOLDS` allocations. Measured (``benchmarks/bench_tui.py --footprint``,
    alternated): the app's CPU at 10 Hz was lower with it in 8 of 8 paired rounds, median 5.93 → 4.87 %
    of a core (docs/benchmarks.md).
    Cycles are still collected, only less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class TorchparTopApp(App[None]):
    """``top`` for PyTorch parallelism, drawing one :class:`SnapshotSource`."""

    CSS_PATH = "app.tcss"
    TITLE = "torchpar-top"
    COMMANDS = App.COMMANDS | {TorchparCommands}

    BINDINGS: ClassVar[list[BindingType]] = keys.bindings()  # type: ignore[assignment]

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, made to survive the terminal going away (``tui/driver.py``)."""
        return driver_class(super().get_driver_class())

    def __init__(
        self,
        session: SnapshotSource,
        *,
        render_interval: float | None = 0.1,
        title_extra: str = "",
        on_frame: FrameHook | None = None,
    ) -> None:
        """Create the app; nothing starts before it is mounted.

        Args:
            session: Where snapshots come from and where commands go; started on mount, closed on exit.
            render_interval: Seconds between redraws; ``None`` for no timer (tests call
                :meth:`refresh_from_session` themselves).
            title_extra: Shown after the name in the header (e.g. the user's script).
            on_frame: A measurement hook (``benchmarks/bench_tui.py``): called with every snapshot drawn,
                after the screen refresh that shows it. Not for drawing; keep it cheap.
        """
        super().__init__()
        self.session = session
        """The session drawn and commanded."""
        self.render_interval = render_interval
        self.title_extra = title_extra
        self.on_frame = on_frame
        """The measurement hook, or ``None``."""
        self.paused = False
        """Whether sampling is paused (``p``)."""
        self.last_snapshot: Snapshot | None = None
        """The snapshot drawn last."""
        self._panels: list[SnapshotPanel] = []
        self._rows: list[PanelRow] = []
        self._fitted: tuple[int, ...] | None = None
        """The panels' :attr:`~SnapshotPanel.shape` counts and the screen's classes when the rows were last
        fitted: a frame that changes none of them leaves the rows as they are."""
        self._log_panel: LogPanel | None = None
        self._cores: CoresPanel | None = None
        self._stack: StackPanel | None = None
        self._top: PanelRow | None = None
        self._detail: PanelRow | None = None
        self._footer: Footer | None = None
        self._main_screen: Screen[object] | None = None
        self._session_closed = False
        self._quitting = False
        self._replay_keys = False
        self._narrow_keys = False
        self._columns = 0
        self._signal_loop: asyncio.AbstractEventLoop | None = None
        self._quit_when_mounted = False
        self._switching: Worker[None] | None = None

    def get_default_screen(self) -> Screen[object]:
        """The main screen, drawn with :class:`~torchpar_top.tui.compositor.LineCompositor` (a frame
        renders the lines that changed, not every line of every panel) under the Textual version it was
        tested with."""
        return screen_class()(id="_default")

    def compose(self) -> ComposeResult:
        """Header; cores | threads (| ranks); queues; lanes | scoreboard; steps; GPUs; stack | sync points;
        log."""
        yield HeaderBar(title_extra=self.title_extra, id="header")
        with PanelRow(id="top"):
            yield CoresPanel(id="cores", classes="panel")
            yield ThreadsPanel(id="threads", classes="panel")
            yield RanksPanel(id="ranks", classes="panel")
        yield QueuesPanel(id="queues", classes="panel")
        with PanelRow(id="middle"):
            yield LanesPanel(id="lanes", classes="panel")
            yield ScoreboardPanel(id="scoreboard", classes="panel")
        yield StepsPanel(id="steps", classes="panel")
        yield GpusPanel(id="gpus", classes="panel")
        with PanelRow(id="detail", flexible=True):
            yield StackPanel(id="stack", classes="panel")
            yield SyncPointsPanel(id="syncpoints", classes="panel")
        log = LogPanel(id="log")
        log.add_class("panel")
        log.border_title = "log"
        yield log
        yield Footer(compact=True)

    def on_mount(self) -> None:
        """Cache the widgets, start the session, draw once, start the render timer."""
        # a panel that shows other panels' figures is updated after them (a stable sort: DOM order else)
        self._panels = sorted(self.query(SnapshotPanel), key=lambda p: p.follows_timed)
        steps = self.query_one(StepsPanel)
        self.query_one(HeaderBar).steps_drawn = lambda: steps.snapshot
        self._rows = list(self.query(PanelRow))
        self._log_panel = self.query_one(LogPanel)
        self._cores = self.query_one(CoresPanel)
        self._stack = self.query_one(StackPanel)
        self._top = self.query_one("#top", PanelRow)
        self._detail = self.query_one("#detail", PanelRow)
        self._footer = self.query_one(Footer)
        self._main_screen = self.screen
        self._signal_loop = asyncio.get_running_loop()
        if self._quit_when_mounted:  # a signal came before the app ran: start nothing
            self._session_closed = True
            self.exit()
            return
        self._set_short(self.size.height)
        self._set_narrow(self.size.width)
        self.session.start()
        self.refresh_from_session()
        self.paused = bool(self.last_snapshot and self.last_snapshot.paused)
        if self.render_interval is not None:
            self.set_interval(self.render_interval, self._frame)

    def on_resize(self, event: events.Resize) -> None:
        """Short terminals get shorter panels; narrow ones a footer without the palette hint."""
        self._set_short(event.size.height)
        self._set_narrow(event.size.width)
        self._fitted = None  # the next frame refits the rows (CSS may have shown or hidden panels)

    def on_unmount(self) -> None:
        """Close the session (once)."""
        self._close_session()

    def refresh_from_session(self, force: bool = False, timed: bool = False) -> None:
        """Take one snapshot, push it to every panel and compose the lines that changed.

        Args:
            force: Redraw even when the session returns the snapshot drawn last (a display setting
                changed, e.g. ``k``).
            timed: Called by the render timer: panels that redraw less often may skip this frame.
        """
        log = self._log_panel
        if self._session_closed or log is None:
            return
        snapshot = self.session.snapshot()
        screen = self._main_screen
        # the panels' changed lines composed at the end, in this turn of the event loop (LineScreen.frame)
        with screen.frame() if isinstance(screen, LineScreen) else contextlib.nullcontext():
            self._draw(snapshot, log, force, timed)

    def _draw(self, snapshot: Snapshot, log: LogPanel, force: bool, timed: bool) -> None:
        """Push ``snapshot`` to the panels and the log (see :meth:`refresh_from_session`)."""
        panels = self._panels
        if snapshot is self.last_snapshot and not force:
            # nothing new (e.g. paused): nothing to redraw, but for a panel that skipped it on the timer
            panels = [p for p in panels if p.redraw_every and p.snapshot is not snapshot]
            if not panels:
                return
            panels += [p for p in self._panels if p.follows_timed]
            for panel in panels:
                panel.update_snapshot(snapshot, timed)
            return
        self.last_snapshot = snapshot
        # No ``batch_update()`` around the panels: this method awaits nothing, so no compose can run
        # between two panels' updates (Textual composes from its own timer's task), and the batch's only
        # effect was its end, a Prompt to the app's message queue: a turn of the event loop and the app's
        # idle handlers every frame (measured: 299 wake-ups of the app's task in 30 s, 1.3 ms of CPU a
        # second, and the loop's own turn besides).
        for panel in panels:
            panel.update_snapshot(snapshot, timed)
        log.update_snapshot(snapshot)
        ranks = shows_ranks(snapshot)
        steps = bool(snapshot.steps or any(r.steps for r in snapshot.ranks))
        replay_trace = snapshot.replay is not None and snapshot.replay.trace
        shapes = tuple(p.shape for p in panels)
        # rows, panels shown or classes changed (Textual's set_class and a fit cost ~0.2 ms a frame
        # even when nothing changes)
        if (ranks, self._detail_shown(), steps, replay_trace, *shapes) != self._fitted:
            if self._top is not None:
                self._top.set_class(ranks, "-ranks")
            for row in self._rows:
                row.fit()
            detail = self._detail_shown()  # as the fit left it
            if self._main_screen is not None:
                self._main_screen.set_class(detail, "-detail")
                self._main_screen.set_class(steps, "-steps")
                self._main_screen.set_class(replay_trace, "-replay")
            self._fitted = (ranks, detail, steps, replay_trace, *shapes)
        replay = snapshot.replay is not None
        self._footer_for(replay, 0 < self._columns < keys.footer_width(replay))
        if self.on_frame is not None:
            self.call_after_refresh(self.on_frame, snapshot)

    def _detail_shown(self) -> bool:
        """Whether the stack | sync points row is shown (its fit hides it when both panels are)."""
        return self._detail is not None and self._detail.display

    def _footer_for(self, replay: bool, narrow: bool) -> None:
        """The footer shows a replay's keys in a replay, a live session's otherwise, and only the essential
        ones when the terminal is too narrow for all (every key stays bound:
        :func:`~torchpar_top.tui.keys.bindings`)."""
        if (replay, narrow) == (self._replay_keys, self._narrow_keys):
            return
        self._replay_keys, self._narrow_keys = replay, narrow
        merged = self._bindings.copy()  # Textual's own map (its defaults too), made from BINDINGS
        merged.key_to_bindings.update(BindingsMap(keys.bindings(replay, narrow)).key_to_bindings)
        self._bindings = merged
        self.refresh_bindings()

    def _frame(self) -> None:
        """The render timer's frame."""
        self.refresh_from_session(timed=True)

    # actions: each one is a session call, then a redraw so its effect shows at once

    def live(self, what: str = "") -> LiveControls | None:
        """The session's live controls; ``None`` (and, when ``what`` is said, a note saying ``what`` is
        only for a live run) for a source without them (a replay)."""
        if isinstance(self.session, LiveControls):
            return self.session
        if what:
            self.notify(f"{what}: only in a live run (a replay shows what was recorded)", timeout=4)
        return None

    def action_toggle_sync(self) -> None:
        """``s``: ASYNC <-> SYNC."""
        if live := self.live("switching ASYNC / SYNC"):
            live.toggle_sync()
        self.refresh_from_session()

    def action_more_threads(self) -> None:
        """``+``: one more intra-op thread."""
        if live := self.live("changing the thread count"):
            live.change_threads(+1)
        self.refresh_from_session()

    def action_fewer_threads(self) -> None:
        """``-``: one fewer intra-op thread."""
        if live := self.live("changing the thread count"):
            live.change_threads(-1)
        self.refresh_from_session()

    def action_restart(self) -> None:
        """``r``: run the same target again (the user's script after it ended, or the experiment)."""
        self._switch_off_loop(self.session.restart, "restarting…")

    def action_profile(self) -> None:
        """``h``: a 1 s torch.profiler window in the child, analysed the way HTA computes queue length."""
        if live := self.live("a torch.profiler window"):
            live.profile(1.0)
        self.refresh_from_session()

    def action_toggle_stack(self) -> None:
        """``k``: show or hide the frontend's Python stack."""
        if self._stack is None:
            return
        self._stack.enabled = not self._stack.enabled
        snapshot = self.last_snapshot
        if (
            self._stack.enabled
            and snapshot is not None
            and snapshot.stack is None
            and not snapshot.stack_status
        ):
            self.notify(NO_STACK_HINT, timeout=4)
        self.refresh_from_session(force=True)

    def action_toggle_pause(self) -> None:
        """``p``: pause or resume sampling."""
        self.paused = not self.paused
        self.session.set_paused(self.paused)
        self.refresh_from_session()

    def action_pick_experiment(self) -> None:
        """``w``: the experiment picker; Enter runs the chosen one."""
        current = self.last_snapshot.experiment if self.last_snapshot else ""
        live = self.live("running an experiment")
        if live is None:
            return
        experiments = live.experiments()
        if not experiments:  # none to pick from: the session says why
            self.run_experiment("")
            return

        def chosen(name: str | None) -> None:
            if name:
                self.run_experiment(name)

        self.push_screen(PickerScreen(experiments, current), chosen)

    # replay: each a call on the source's replay controls; a live source has none (the app says so)

    def action_step_forward(self) -> None:
        """``.``: pause the replay and show the next frame."""
        self._replay_call("stepping frame by frame", lambda r: r.step(1))

    def action_step_back(self) -> None:
        """``,``: pause the replay and show the previous frame."""
        self._replay_call("stepping frame by frame", lambda r: r.step(-1))

    def action_seek_back(self) -> None:
        """``left``: 5 % of the trace or recording back."""
        self._replay_call("seeking", lambda r: r.seek(-SEEK_SHARE))

    def action_seek_forward(self) -> None:
        """``right``: 5 % of the trace or recording on."""
        self._replay_call("seeking", lambda r: r.seek(SEEK_SHARE))

    def action_seek_start(self) -> None:
        """``home``: the trace's start."""
        self._replay_call("going back to the start", lambda r: r.seek_start())

    def action_slower(self) -> None:
        """``[``: half the replay's speed."""
        self._replay_call("changing the speed", lambda r: r.change_speed(0.5))

    def action_faster(self) -> None:
        """``]``: double the replay's speed."""
        self._replay_call("changing the speed", lambda r: r.change_speed(2.0))

    def _replay_call(self, what: str, call: Callable[[ReplayControls], None]) -> None:
        """Call the source's replay controls (or say ``what`` is only for a replay), redraw, and take
        ``paused`` from a replay (stepping pauses it)."""
        if isinstance(self.session, ReplayControls):
            call(self.session)
        else:
            self.notify(f"{what}: only in a replay (torchpar-top replay FILE)", timeout=4)
        self.refresh_from_session()
        snapshot = self.last_snapshot
        if snapshot is not None and snapshot.replay is not None:
            self.paused = snapshot.paused

    def action_help(self) -> None:
        """``?``: what the panels mean."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def run_experiment(self, name: str) -> None:
        """Stop the running child and start experiment ``name``."""
        if live := self.live("running an experiment"):
            self._switch_off_loop(partial(live.switch_experiment, name), f"starting {name}…")

    def _switch_off_loop(self, call: Callable[[], None], message: str) -> None:
        """Stop what runs and start something, in a worker thread: stopping a script that ignores signals
        takes seconds, and the screen must keep answering meanwhile. Presses while one runs are ignored;
        ``q`` closes the session at once (which waits for it, see ``SnapshotSource.close``)."""
        if self._quitting or (self._switching is not None and self._switching.is_running):
            return
        self.notify(message, timeout=3)
        self._switching = self.run_worker(self._switch_then_draw(call), name="switch", group="switch")

    async def _switch_then_draw(self, call: Callable[[], None]) -> None:
        await asyncio.to_thread(call)
        self.refresh_from_session()

    def quit_from_signal(self) -> None:
        """Quit as ``q`` does, from a signal handler: it only schedules the quit on the app's event loop
        (never blocks, never closes the session itself); before the app runs, it quits once mounted.

        A terminal that hangs up sends SIGCONT with SIGHUP, and Textual's SIGCONT handler would start the
        screen again on the dead terminal (its writer thread dies, the next write blocks forever): from
        here on SIGCONT does nothing."""
        signal.signal(signal.SIGCONT, _ignore_signal)
        loop = self._signal_loop
        if loop is None:
            self._quit_when_mounted = True
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: whoever ran the app closes the session
            loop.call_soon_threadsafe(self._begin_quit)

    async def action_quit(self) -> None:
        """``q``: close the session and exit (see :meth:`_begin_quit`)."""
        self._begin_quit()

    def _begin_quit(self) -> None:
        """Close the session and exit. Closing may take seconds (the user's code gets up to 1.5 s to
        unwind, then SIGTERM, then SIGKILL), so it runs off the event loop and the screen says so."""
        if self._quitting:
            return
        self._quitting = True
        self.notify("stopping the workload…", title="quitting", timeout=10)
        # A worker, not an await here: the app's messages (this notification, frames) are handled while
        # the session closes; an action awaiting would hold the app's message queue until it returned.
        self.run_worker(self._close_then_exit(), name="quit", exclusive=True)

    async def _close_then_exit(self) -> None:
        # Not after a restart in progress: close() waits for it, and it then starts nothing (SnapshotSource).
        await asyncio.to_thread(self._close_session)
        self.exit()

    def _close_session(self) -> None:
        """``session.close()``, exactly once."""
        if not self._session_closed:
            self._session_closed = True
            self.session.close()

    def _set_narrow(self, columns: int) -> None:
        """Below :data:`NARROW_SCREEN_COLUMNS` the footer leaves out ``^p palette`` (help names it); below
        the width of every key (:func:`~torchpar_top.tui.keys.footer_width`) it keeps the essential keys
        rather than cutting the last one in half; below :data:`NARROW_LANES_COLUMNS` the lanes step aside."""
        if self._footer is not None:
            self._footer.show_command_palette = columns >= NARROW_SCREEN_COLUMNS
        if self._main_screen is not None:
            self._main_screen.set_class(0 < columns < NARROW_LANES_COLUMNS, "-narrow")
        self._columns = columns
        self._footer_for(self._replay_keys, 0 < columns < keys.footer_width(self._replay_keys))

    def _set_short(self, rows: int) -> None:
        """Short terminals: the ``-short`` class on the screen, and fewer rows of cores."""
        short = 0 < rows < SHORT_SCREEN_ROWS
        if self._main_screen is not None:
            self._main_screen.set_class(short, "-short")
        max_rows = 5 if short else 8
        if self._cores is not None and self._cores.max_rows != max_rows:
            self._cores.max_rows = max_rows
            self._cores.invalidate()


def _ignore_signal(signum: int, frame: object) -> None:
    """A signal handler that does nothing."""
