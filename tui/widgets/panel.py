"""The base of every panel: a Line API widget that draws the latest snapshot, many rows in one widget."""

from __future__ import annotations

import time
from typing import ClassVar, NamedTuple

from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import LineFilter
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget
from torchpar_top.contract.snapshot import Snapshot
from torchpar_top.tui.compositor import LineScreen
from torchpar_top.tui.render import inert


class Row:
    """One screen line being built from pieces of text, each with its own style."""

    __slots__ = ("segments", "width")

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.width = 0
        """Cells used so far (every glyph drawn here is one cell wide)."""

    def add(self, text: str, style: Style | None = None) -> Row:
        """Append ``text``, made :func:`~torchpar_top.tui.render.inert` (every panel draws workload text
        somewhere: nothing reaches the terminal as a control character); returns the row so calls chain.
        Text in the style of the previous piece joins it (fewer segments to compare, style and write: a
        lane is one run per colour, not one per cell)."""
        if text:
            text = inert(text)
            segments = self.segments
            if segments and ((last := segments[-1]).style is style or last.style == style):
                segments[-1] = Segment(last.text + text, style)
            else:
                segments.append(Segment(text, style))
            self.width += len(text)
        return self

    def to(self, column: int, style: Style | None = None) -> Row:
        """Pad with spaces up to ``column`` (nothing when already past it)."""
        return self.add(" " * (column - self.width), style)

    def strip(self, width: int, base: Style) -> Strip:
        """The row as a Strip of exactly ``width`` cells on the widget's ``base`` style."""
        segments = list(Segment.apply_style(self.segments, base)) if self.segments else []
        if self.width > width:  # too long: Textual's crop (it measures the cells)
            return Strip(segments, self.width).crop_extend(0, width, base)
        if self.width < width:  # what crop_extend would add, without its intermediate strips
            segments.append(Segment(" " * (width - self.width), base))
        return Strip(segments, width)


class Pad(Row):
    """A blank row that keeps a panel as tall as it was (see :data:`SHRINK_AFTER`)."""

    __slots__ = ()


SHRINK_AFTER = 5.0
"""Seconds a panel keeps the height it had after its content needs fewer rows. A line that comes and
goes (a note, a stack's depth) would otherwise relayout the whole screen each time (measured: 24-49
relayouts in 20 s of the async experiment on a loaded machine, about 5 ms each, 0.7-1.2 % of a core)."""


def same_rows(a: list[Row], b: list[Row]) -> bool:
    """Whether two builds draw the same text in the same styles."""
    return len(a) == len(b) and all(x.segments == y.segments for x, y in zip(a, b, strict=True))


def changed_lines(old: list[Row], new: list[Row], height: int) -> list[tuple[int, int]]:
    """The runs ``(first, count)`` of lines among the first ``height`` that draw differently in ``new``
    than in ``old`` (a line that only one of them has counts as changed)."""
    runs: list[tuple[int, int]] = []
    n_old = len(old)
    start = -1
    for y in range(min(height, max(n_old, len(new)))):
        differs = y >= n_old or y >= len(new) or old[y].segments != new[y].segments
        if differs and start < 0:
            start = y
        elif not differs and start >= 0:
            runs.append((start, y - start))
            start = -1
    if start >= 0:
        runs.append((start, min(height, max(n_old, len(new))) - start))
    return runs


class Sides(NamedTuple):
    """What Textual draws around a panel's content line: see :meth:`SnapshotPanel.sides`."""

    top: int
    """Rows above the content (border, padding)."""
    bottom: int
    """Rows below it."""
    left: list[Segment]
    """The cells left of the content (border, padding), line filters applied."""
    right: list[Segment]
    """The cells right of it."""
    filters: tuple[LineFilter, ...]
    """The line filters Textual applies to every line (e.g. an ANSI theme's colours)."""
    background: Color
    """The background the filters are given (the panel's)."""

    def join(self, content: Strip, width: int) -> Strip:
        """The line of ``width`` cells: ``content`` (as the panel rendered it) with its sides."""
        for line_filter in self.filters:
            content = content.apply_filter(line_filter, self.background)
        return Strip([*self.left, *content, *self.right], width)


class SnapshotPanel(Widget):
    """Draws one snapshot as rows; subclasses implement :meth:`build`.

    ``update_snapshot`` stores the snapshot, builds its rows and asks for a repaint only when they differ
    from the rows on screen, and then only of the lines that differ (Textual keeps the others, with their
    border, from the last paint); ``render_line`` serves them line by line (rebuilt for another width on
    the next paint).
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "panel--label",
        "panel--dim",
        "panel--value",
        "panel--ok",
        "panel--warm",
        "panel--hot",
        "panel--track",
        "panel--accent",
        "panel--note",
        "panel--warn",
    }

    DEFAULT_CSS = """
    SnapshotPanel {
        height: auto;
        & > .panel--label { color: $foreground; }
        & > .panel--dim { color: $foreground-muted; }
        & > .panel--value { color: $foreground; text-style: bold; }
        & > .panel--ok { color: $success; background: $foreground 7%; }
        & > .panel--warm { color: $warning; background: $foreground 7%; }
        & > .panel--hot { color: $error; background: $foreground 7%; }
        & > .panel--track { color: $secondary; background: $foreground 7%; }
        & > .panel--accent { color: $accent; }
        & > .panel--note { color: $warning; text-style: italic; }
        & > .panel--warn { color: $warning; }
    }
    """

    snapshot: Snapshot | None
    """The snapshot drawn; ``None`` before the first one."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.snapshot = None
        self._generation = 0
        self._rows_cache: tuple[tuple[int, int], list[Row]] | None = None
        self._lines_cache: tuple[tuple[int, int, int], Style, list[Row], list[Strip | None]] | None = None
        self._height = 1
        self._styles: dict[str, Style] = {}
        self._backgrounds: tuple[tuple[Color, Color], float] | None = None
        self._base: Style | None = None
        self._blank = Strip([])
        self._sides: tuple[tuple[object, ...], Sides | None] | None = None
        """:meth:`sides` and what it was worked out for (size, line filters, inline styles); emptied by a
        style update."""
        self._shown = True
        self._title: str | None = None
        """The title :meth:`title` gave when the border title was last set."""
        self._drawn_key: tuple[tuple[int, int], object] | None = None
        """What the rows cached were drawn from (:meth:`drawn_key`), with the cache's key."""
        self._drawn: tuple[tuple[int, int], list[Row]] | None = None
        """The rows whose lines Textual holds for this widget ((width, height), fitted rows), or ``None``
        when unknown (then the next change repaints the whole panel)."""
        self._tall = 0
        self._tall_t = 0.0
        self._turn = -1
        """The :attr:`redraw_every` period of the clock last redrawn in on the timer: periods are counted
        from the clock's zero, so panels of the same period redraw in the same frame (one frame builds
        them all while the code they share is warm, the frames between build none of them)."""
        self._empty = False
        self.shape = 0
        """Counts the changes that may change the panel's outer height (its number of rows, shown or
        hidden, empty, its size): the app refits the rows of panels only after one."""
        self.clock = time.monotonic
        """Time for :data:`SHRINK_AFTER` (tests replace it)."""

    follows_timed = False
    """Whether the panel shows figures of the panels that :attr:`redraw_every` (the header's step rate):
    it is updated after them in a frame, and again whenever one of them takes a snapshot it skipped."""

    redraw_every: float = 0.0
    """Seconds between two redraws on the render timer, for a panel whose figures are means over a
    second or more (a redraw per frame would repaint their jitter, not news); 0 redraws every frame.
    A key's redraw (not the timer's) is immediate whatever this says."""

    def empty(self, snapshot: Snapshot) -> bool:
        """Whether the panel shrinks to one borderless line for ``snapshot`` (class ``-empty``, styled by
        the panel's CSS): no GPU, no host readings in a replay. Never, unless a panel says so."""
        return False

    def update_snapshot(self, snapshot: Snapshot, timed: bool = False) -> None:
        """Draw ``snapshot`` on the next paint (and relayout when the number of rows changes).

        A panel with nothing to say about ``snapshot`` (:meth:`shown` is false) is hidden; one that is
        :meth:`empty` gets the class ``-empty``. On the render timer (``timed``) a panel with
        :attr:`redraw_every` is redrawn at most that often.
        """
        empty = self.empty(snapshot)
        if empty != self._empty:
            self._empty = empty
            self.shape += 1
            self.set_class(empty, "-empty")
        if timed and self.redraw_every and self._rows_cache is not None:
            turn = int(self.clock() // self.redraw_every)
            if turn == self._turn:
                return
            self._turn = turn
        self.snapshot = snapshot
        shown = self.shown(snapshot)
        if shown != self._shown:  # only on a change: CSS may hide a panel too (e.g. on short screens)
            self._shown = self.display = shown
            self.shape += 1
        if not shown:
            self._generation += 1  # rebuilt when shown again
            self._drawn = None
            return
        title = self.title(snapshot)
        # compared with the title last set, not Textual's border_title (its getter writes the title's
        # markup again on every call); titles carry workload text too (a pid's stack source, rank names...)
        if title is not None and title != self._title:
            self._title = title
            self.border_title = inert(title)
        width, lines = self.inner_size()
        if width <= 0:  # not laid out yet (or no room at all): build on the first paint
            self._generation += 1
            self._drawn = None
            self.shape += 1
            self.refresh()
            return
        key = self.drawn_key(snapshot, width)
        cached = self._rows_cache
        here = (self._generation, width)
        if key is not None and cached is not None and cached[0] == here and self._drawn_key == (here, key):
            self.keep_height(cached[1])  # the height they need is still needed now, as after a build
            return  # drawn from the same figures: the same rows, not built again
        rows = self.keep_height(self.build(snapshot, width))
        if cached is not None and cached[0][1] == width and same_rows(rows, cached[1]):
            self._keep_key(cached, key)
            return  # the same picture as on screen: no repaint (most panels of a steady run)
        self._generation += 1
        self._rows_cache = ((self._generation, width), rows)
        self._keep_key(self._rows_cache, key)
        height = len(rows)
        drawn = self._drawn
        if height == self._height and drawn is not None and drawn[0] == (width, lines):
            # same size: repaint only the lines that changed (the others stay as Textual cached them)
            fitted = self.fit_rows(rows, lines)
            self._drawn = ((width, lines), fitted)
            regions = [Region(0, y, width, n) for y, n in changed_lines(drawn[1], fitted, lines)]
            if regions:
                screen = self.screen
                if isinstance(screen, LineScreen):  # straight to the next compose (see repaint)
                    screen.repaint(self, regions)
                else:
                    self.refresh(*regions)
            return
        self._drawn = None
        self.shape += 1
        self.refresh(layout=height != self._height)
        self._height = height

    def drawn_key(self, snapshot: Snapshot, width: int) -> object:
        """What the rows for ``snapshot`` at ``width`` are drawn from, where a panel can say it for less
        than a build costs: equal keys give equal rows, so a frame whose key equals the last one's builds
        nothing. ``None`` (here): build every time.

        Why: a panel whose figures did not move still built its rows every frame to find them the same
        (measured: the header 271 of 300 frames, 2.1 ms of CPU a second; the GPU line without a GPU, all
        of them). Everything :meth:`build` reads must be in the key; the panel's styles need not be (a
        style update empties the rows, and with them the key)."""
        return None

    def _keep_key(self, cached: tuple[tuple[int, int], list[Row]], key: object) -> None:
        """Remember ``key`` as what the rows of ``cached`` were drawn from; not for rows padded to a
        kept height (:meth:`keep_height` shrinks them on the clock, not on the figures)."""
        rows = cached[1]
        self._drawn_key = None if key is None or any(type(r) is Pad for r in rows) else (cached[0], key)

    def keep_height(self, rows: list[Row]) -> list[Row]:
        """``rows``, padded with :class:`Pad` rows to the height the panel had until it has needed fewer
        rows for :data:`SHRINK_AFTER` seconds (then it shrinks: one relayout, not one per change)."""
        now = self.clock()
        if len(rows) >= self._tall or now - self._tall_t >= SHRINK_AFTER:
            self._tall, self._tall_t = len(rows), now
            return rows
        return rows + [Pad() for _ in range(self._tall - len(rows))]

    def invalidate(self) -> None:
        """Rebuild the rows on the next paint (after a setting that changes them)."""
        self._generation += 1
        self._drawn = None
        self.shape += 1
        self.refresh(layout=True)

    def shown(self, snapshot: Snapshot) -> bool:
        """Whether the panel has anything to show for ``snapshot`` (hidden otherwise); always, here."""
        return True

    def title(self, snapshot: Snapshot) -> str | None:
        """The border title for ``snapshot``; ``None`` leaves it as it is."""
        return None

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """The rows for ``snapshot`` at ``width`` cells; subclasses implement this."""
        raise NotImplementedError

    def style(self, name: str) -> Style:
        """The Rich style of component class ``name`` (``panel--`` may be left off).

        Kept until the CSS or theme changes (Textual's own cache empties on every ``refresh``).
        """
        style = self._styles.get(name)
        if style is None:
            style = self.get_component_rich_style(name if "--" in name else f"panel--{name}")
            self._styles[name] = style
        return style

    def level_style(self, frac: float, warm: float = 0.5, hot: float = 0.85) -> Style:
        """Green, yellow or red for a load fraction 0..1."""
        return self.style("hot" if frac >= hot else "warm" if frac >= warm else "ok")

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """As many rows as the snapshot needs (at least one)."""
        self._height = max(1, len(self._rows(width)))
        return self._height

    def notify_style_update(self) -> None:
        """Rebuild the rows with the new colours when the theme or CSS changes."""
        super().notify_style_update()
        self._rows_cache = self._lines_cache = self._drawn = None
        self._styles = {}
        self._backgrounds = None
        self._base = None
        self._sides = None

    def _blend(self) -> tuple[tuple[Color, Color], float]:
        """Textual's :attr:`background_colors` and :attr:`opacity`, computed once per style update.

        Textual computes both for every widget it renders, each frame, by walking every ancestor's
        styles (a fifth of the main thread's time at 10 Hz). They change only with the CSS: a theme,
        a class on this panel or an ancestor (Textual then restyles the subtree, which calls
        :meth:`notify_style_update` here). Nothing in this app sets an ancestor's background or
        opacity inline.
        """
        cached = self._backgrounds
        if cached is None:
            cached = self._backgrounds = (super().background_colors, super().opacity)
        return cached

    @property
    def background_colors(self) -> tuple[Color, Color]:
        """As Textual's (``(base background, background)``), cached until the next style update."""
        return self._blend()[0]

    @property
    def rich_style(self) -> Style:
        """As Textual's (this panel's text style over every ancestor's background), cached until the next
        style update as :meth:`_blend` is: Textual walks the ancestors on every call, and each repaint
        of a panel asked for it once."""
        base = self._base
        if base is None:
            base = self._base = super().rich_style
        return base

    @property
    def opacity(self) -> float:
        """As Textual's (the product of every ancestor's opacity), cached until the next style update."""
        return self._blend()[1]

    def fit_rows(self, rows: list[Row], height: int) -> list[Row]:
        """The rows to draw when ``height`` lines are available; here all (the bottom ones get cut).

        Panels whose last rows matter most (a stack, innermost frame last) override this.
        """
        return rows

    def inner_size(self) -> Size:
        """Textual's :attr:`size` (the content's cells), worked out from the outer size the last layout gave
        the panel: Textual's looks the panel up in the screen's map of widgets every time (``cProfile``:
        a tenth of :meth:`update_snapshot`, which asks every frame). The two differ only for a panel the
        layout left out (CSS-hidden), where Textual's is 0 × 0 and this the size it had."""
        width, height = self.outer_size
        gutter = self.styles.gutter
        return Size(max(0, width - gutter.width), max(0, height - gutter.height))

    def render_line(self, y: int) -> Strip:
        """Line ``y`` of the panel."""
        width, height = self.inner_size()
        key = (self._generation, width, height)
        if self._lines_cache is None or self._lines_cache[0] != key:
            base = self.rich_style
            self._blank = Strip.blank(width, base)
            rows = self.fit_rows(self._rows(width), height)
            self._drawn = ((width, height), rows)
            self._lines_cache = (key, base, rows, [None] * len(rows))
        _, base, rows, lines = self._lines_cache
        if not 0 <= y < len(lines):
            return self._blank
        line = lines[y]
        if line is None:  # made when first asked for: Textual asks only for the lines it repaints
            line = lines[y] = rows[y].strip(width, base)
        return line

    def render_lines(self, crop: Region) -> list[Strip]:
        """As Textual's (``Widget.render_lines``): the lines of ``crop`` with border and padding, except
        that a content line is joined to its border and padding here, from :class:`Sides` that Textual
        drew.

        Why: each line Textual repaints goes through its ``StylesCache.render_line``, which rebuilds the
        border and padding around the content from the styles (``get_box``, the colours blended, a Style
        per side) and, per call, the border title's styles; at 10 Hz that was half of a frame's compose
        (``cProfile``: 0.34 of 0.63 s over 300 frames), for the 3-4 content lines a frame changes.
        The border rows (the title) still come from Textual, as does everything when :meth:`sides` says
        the join would not draw what Textual draws.
        """
        sides = self.sides()
        if sides is None:
            return super().render_lines(crop)
        width, height = self.outer_size
        first, end = max(crop.y, sides.top), min(crop.bottom, height - sides.bottom)
        if first >= end:  # only border rows
            return super().render_lines(crop)
        strips: list[Strip] = []
        if crop.y < first:
            strips += super().render_lines(Region(crop.x, crop.y, crop.width, first - crop.y))
        cropped = crop.x != 0 or crop.width != width
        for y in range(first, end):
            strip = sides.join(self.render_line(y - sides.top), width)
            strips.append(strip.crop(crop.x, crop.right) if cropped else strip)
        if end < crop.bottom:
            strips += super().render_lines(Region(crop.x, end, crop.width, crop.bottom - end))
        return strips

    def sides(self) -> Sides | None:
        """The left and right of a content line as Textual draws them now (border and padding, line
        filters applied), or ``None`` where joining them to the content would not give Textual's line.

        Worked out again after a change of size, line filters (an ANSI theme, ``NO_COLOR``), style update
        or inline style that draws a line (border, padding, tint...): Textual draws the first content
        line, its first and last gutter cells are kept, and the join of those around this panel's own
        line is compared with Textual's. A style that changes the content itself
        (``tint``, ``text-opacity``, ``opacity``, ``hatch``) fails that comparison, and Textual draws.
        """
        size = self.outer_size
        filters = tuple(self.get_line_filters())
        styles = self.styles
        # a style update (CSS, theme, classes) empties the cache (notify_style_update); a style set inline
        # on the panel does not call notify_style_update, so the ones that draw the sides or change the
        # content count here themselves
        key = (
            size,
            filters,
            styles.border,
            styles.padding,
            styles.outline,
            styles.tint,
            styles.text_opacity,
            styles.opacity,
            styles.hatch,
        )
        cached = self._sides
        if cached is not None and cached[0] == key:
            return cached[1]
        sides = None
        gutter = styles.gutter
        width, height = size
        if height - gutter.bottom > gutter.top and width > gutter.width:
            textual = super().render_lines(Region(0, gutter.top, width, 1))[0]
            candidate = Sides(
                gutter.top,
                gutter.bottom,
                list(textual.crop(0, gutter.left)),
                list(textual.crop(width - gutter.right, width)),
                filters,
                self.background_colors[1],
            )
            if candidate.join(self.render_line(0), width) == textual:
                sides = candidate
        self._sides = (key, sides)
        return sides

    def _rows(self, width: int) -> list[Row]:
        """The rows of the current snapshot at ``width``, built once per snapshot and width."""
        key = (self._generation, width)
        if self._rows_cache is None or self._rows_cache[0] != key:
            rows = self.build(self.snapshot, width) if self.snapshot is not None and width > 0 else []
            self._rows_cache = (key, rows)
        return self._rows_cache[1]

    def rows_at(self, width: int) -> int:
        """Rows the current snapshot needs at ``width`` content cells (at least one)."""
        return max(1, len(self._rows(width)))

    def outer_height(self) -> int | None:
        """Lines the panel needs with its border at its current width; ``None`` before it has a width."""
        if self.size.width <= 0:
            return None
        return self.rows_at(self.size.width) + self.styles.gutter.height
