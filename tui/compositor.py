"""A Textual compositor that, on a partial update, renders only the widgets and lines that changed.

Textual's partial update (``Compositor.render_partial_update``, Textual 8.2.8, pinned) crops to the
bounding box of every region that changed and asks *every* widget overlapping that box for *all* of its
lines, then writes only the changed spans. On this screen a header line and a log line change in the
same frame, so the box is the whole screen: every panel rendered every line every frame (measured on
the async experiment at 10 Hz: about 36 screen lines and 2 % of a core in ``render_lines`` for about 10
lines that changed).

:class:`LineCompositor` gives the same output (only the changed spans are written, and a span's pixels
come from the widgets that overlap it) while asking a widget only for the lines a changed region
covers, and not at all when no changed region overlaps it; the lines it does not render are blank
placeholders that no span reaches. ``tests/functional/test_tui_frames.py`` checks that a partial update
writes exactly what Textual's own writes.

It overrides a private method of Textual's compositor, checked against :data:`TESTED_TEXTUAL` only.
Why private API: Textual has no public way to say what a partial update renders, and the saving is
measured (above). The pin: ``pyproject.toml`` pins Textual to exactly that version, which the snapshot
tests need anyway (their SVGs change across Textual versions); ``tests/unit/test_tui_compositor.py``
fails, saying what to re-check, when the installed Textual is another or the Textual code this relies on
(``render_partial_update``, ``_get_renders``, ``visible_widgets``, ``Screen._compositor``) reads
differently; and under any other version :func:`screen_class` falls back to Textual's own
:class:`~textual.screen.Screen`, so an unpinned install still draws correctly, only slower.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from textual import _time
from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import UPDATE_PERIOD, Screen
from textual.strip import Strip
from textual.timer import EventTargetGone, Timer
from textual.widget import Widget

TESTED_TEXTUAL = "8.2.8"
"""The Textual version :class:`LineCompositor` was checked against (its ``_get_renders`` is private)."""


def textual_version() -> str | None:
    """The installed Textual's version, or None when it cannot be read."""
    try:
        return version("textual")
    except PackageNotFoundError:
        return None


class LineCompositor(Compositor):
    """Renders, in a partial update, only what the changed regions cover."""

    _changed: list[Region] | None = None

    def render_partial_update(self) -> ChopsUpdate | None:
        """Textual's partial update, with :meth:`_get_renders` limited to the changed regions."""
        self._changed = list(self._dirty_regions)
        try:
            return super().render_partial_update()
        finally:
            self._changed = None

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        """As Textual's, except during a partial update: widgets no changed region overlaps are skipped,
        a widget renders only the lines changed regions cover (blank strips stand in for the rest), and a
        widget is skipped when the widgets in front of it already cover every changed cell it overlaps
        (a container behind its children, the screen behind its panels: Textual paints front to back and
        the first strip for a cell wins, so theirs would never be written)."""
        changed = self._changed
        if changed is None:
            yield from super()._get_renders(crop)
            return
        covered: dict[int, list[tuple[int, int]]] = {}  # screen line -> x spans of the widgets yielded
        for widget, (region, clip) in self.visible_widgets.items():
            visible = region.intersection(clip)
            if not visible.width or not visible.height:
                continue
            top, bottom = visible.bottom, visible.y
            hidden = True  # every changed cell of this widget is behind a widget already yielded
            for r in changed:
                if r.overlaps(visible):
                    part = r.intersection(visible)
                    top, bottom = min(top, part.y), max(bottom, part.bottom)
                    if hidden:
                        hidden = _covered(covered, part)
            if top >= bottom or hidden:
                continue
            x0, x1 = visible.x, visible.right
            for y in range(visible.y, visible.bottom):
                covered.setdefault(y, []).append((x0, x1))
            blank = Strip.blank(visible.width)
            strips = widget.render_lines(
                Region(visible.x - region.x, top - region.y, visible.width, bottom - top)
            )
            yield (
                region,
                clip,
                [blank] * (top - visible.y) + list(strips) + [blank] * (visible.bottom - bottom),
            )


def _covered(covered: dict[int, list[tuple[int, int]]], part: Region) -> bool:
    """Whether every cell of ``part`` lies in the x spans ``covered`` holds for its line."""
    x0, x1 = part.x, part.right
    for y in range(part.y, part.bottom):
        x = x0
        for a, b in sorted(covered.get(y, ())):
            if a > x:
                break
            x = max(x, b)
            if x >= x1:
                break
        if x < x1:
            return False
    return True


class ComposeTimer(Timer):
    """Textual's screen-update timer without the wake-up after each compose.

    Textual's (``Timer._run``, Textual 8.2.8) ticks on a grid of ``interval`` (1/60 s): a refresh
    resumes it, it composes at once (the grid point has passed) and pauses itself, then sleeps to the
    next grid point before it finds itself paused. So every frame of this app woke the main thread twice:
    the frame's timer, and ~17 ms later this sleep, to do nothing (``strace``: ``epoll_wait(.., 21)``
    after each frame). This one waits for a resume first and sleeps only when resumed sooner than
    ``interval`` after its last tick, so the cap on composes a second stays and an idle screen sleeps.
    """

    async def _run(self) -> None:
        count = 0
        last = float("-inf")
        while self._repeat is None or count <= self._repeat:
            await self._active.wait()
            wait = last + self._interval - _time.get_time()
            if wait > 0:  # resumed within a period of the last compose: keep the cap
                await _time.sleep(wait)
                await self._active.wait()
            count += 1
            last = _time.get_time()
            try:
                await self._tick(next_timer=last, count=count)
            except EventTargetGone:
                break


class LineScreen(Screen[Any]):
    """A screen drawn with :class:`LineCompositor`, refreshed by :class:`ComposeTimer`, to which a panel
    hands its changed lines directly (:meth:`repaint`)."""

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._compositor = LineCompositor()
        self._compose_timer: ComposeTimer | None = None
        self._in_frame = False
        """Inside :meth:`frame`: repaints wait for the frame's end rather than resume the timer."""
        self._framed = False
        """A repaint came inside the current :meth:`frame`."""

    @contextmanager
    def frame(self) -> Iterator[None]:
        """Compose what the block repaints (:meth:`repaint`) at its end, in the same turn of the event loop.

        Why: a repaint resumed the update timer, whose task then woke in a turn of its own to compose: at
        10 Hz, 300 wake-ups in 30 s, each a turn of the loop (a poll of the selector, the task's step,
        Textual's ``invoke`` of the callback) for nothing a synchronous call cannot do. The compose is
        the timer's own callback (``Screen._on_timer_update``); where it cannot compose (this screen is not
        the current one, or an app batch is open) the dirty widgets stay and the timer is resumed, as a
        repaint outside a frame would. Nested frames compose once, at the outer end.
        """
        if self._in_frame:
            yield
            return
        self._in_frame = True
        try:
            yield
        finally:
            self._in_frame = False
            if self._framed:
                self._framed = False
                self._on_timer_update()
                if self._dirty_widgets:
                    self._update_timer.resume()

    def repaint(self, widget: Widget, regions: Sequence[Region]) -> None:
        """Draw ``regions`` of ``widget`` (content cells; its size and layout unchanged) in the next compose.

        As ``widget.refresh(*regions)`` without the two messages Textual sends on the way: a Prompt to
        the widget's own task, whose idle handler posts an Update to the screen's task, whose idle
        handler resumes the update timer. Each wakes a task for a turn of the event loop: at 10 Hz a
        frame took five turns of the loop, three with this (``cProfile``: 1502 and 903 in 300 frames);
        with :meth:`~torchpar_top.tui.widgets.panel.SnapshotPanel.inner_size`, the app's CPU 0.91× side by
        side (docs/benchmarks.md, session 14). What Textual's refresh does besides is not needed for a
        same-size repaint: clearing the widget's layout and dimension caches, and its rich-style cache
        (panels keep their own styles). Private Textual (``Widget._set_dirty``, ``_dirty_widgets``):
        ``tests/unit/test_tui_compositor.py`` holds digests of the code it stands in for.
        """
        widget._set_dirty(*regions)
        self._dirty_widgets.add(widget)
        if self._in_frame:  # composed at the frame's end
            self._framed = True
        else:
            self._update_timer.resume()

    @property
    def _update_timer(self) -> Timer:
        """As Textual's ``Screen._update_timer`` (made on first use, started, kept with the screen's
        timers so that they stop with it), a :class:`ComposeTimer`."""
        if self._compose_timer is None:
            timer = ComposeTimer(
                self, UPDATE_PERIOD, name="screen_update", callback=self._on_timer_update, pause=True
            )
            timer._start()
            self._timers.add(timer)
            self._compose_timer = timer
        return self._compose_timer


def screen_class(installed: str | None = None) -> type[Screen[Any]]:
    """:class:`LineScreen` under the Textual version it was tested with, Textual's own screen otherwise
    (``installed``: the version to decide for; default the installed one)."""
    installed = textual_version() if installed is None else installed
    return LineScreen if installed == TESTED_TEXTUAL else Screen
