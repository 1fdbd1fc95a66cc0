"""The log pane: the child's stdout/stderr and agent messages, and the child's fate when it ends.

A Line API widget like the panels: appending lines only repaints it (a ``RichLog`` grows its virtual
size on every write, which relayouts the whole screen: a script printing every step would cost a
layout per frame). It shows the newest lines; the mouse wheel scrolls back. A line wider than the pane
wraps, its text continuing under itself (a traceback's long path keeps its line number).
"""

from __future__ import annotations

from collections import deque
from typing import ClassVar

from rich.cells import cell_len, chop_cells
from rich.style import Style
from textual import events
from textual.strip import Strip
from textual.widget import Widget
from torchpar_top.contract.snapshot import ChildStatus, LogLine, Snapshot
from torchpar_top.contract.vocab import CHILD_ENDED, LOG_LINE_MAX, ChildState, LogSource
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row

SOURCE_TAGS = {
    LogSource.STDOUT: "out",
    LogSource.STDERR: "err",
    LogSource.CHILD: "child",
    LogSource.APP: "app",
    LogSource.PROTOCOL: "proto",
}
"""The tag shown before each line."""

inert = render.inert
"""The log's name for :func:`render.inert` (every panel's rows go through it, see ``Row.add``)."""

STDERR_SEEN = 64
"""Newest stderr lines remembered to find a child's last ones in the pane (the store keeps fewer)."""

APP_SEEN = 8
"""Newest app lines remembered to find the one that said the child's exit (the session logs it as the
exit happens, so it is among the newest)."""

MAX_LINES = 1000
"""Lines kept for scrolling back (each at most :data:`LOG_LINE_MAX` characters: bounded in bytes too)."""

Piece = tuple[str, str]
"""Some text and the component class that colours it."""

WRAP_INDENT = 2
"""Cells a wrapped line of one piece (a status line) is indented by after its first row; a tagged line's
rows continue under its text."""

WRAP_MIN = 12
"""Below this many cells for the continued text, a long line is clipped instead (a tiny pane)."""


def wrapped(pieces: tuple[Piece, ...], width: int) -> list[tuple[Piece, ...]]:
    """The rows ``pieces`` take in ``width`` cells: one where it fits; otherwise its last piece (the text)
    goes on in rows of its own, indented by the pieces before it (the tag) or :data:`WRAP_INDENT`."""
    *head, (text, name) = pieces
    used = sum(cell_len(part) for part, _ in head)
    if used + cell_len(text) <= width:
        return [pieces]
    indent = used if head else WRAP_INDENT
    if width - indent < WRAP_MIN or width - used < 1:
        return [pieces]  # clipped where drawn
    first = _row_of(text, width - used)
    rows: list[tuple[Piece, ...]] = [(*head, (first, name))]
    rest = text[len(first) :]
    while rest:
        row = _row_of(rest, width - indent)
        rows.append(((" " * indent, name), (row, name)))
        rest = rest[len(row) :]
    return rows


def _row_of(text: str, width: int) -> str:
    """As much of ``text`` as one row of ``width`` cells takes: up to its last space where that is in the
    row's second half (words stay whole), else cut at the width (a path has no spaces to break at). Only
    the text's first ``2 * width`` characters are measured (a character takes at most two cells): a long
    line's rows cost what they show, not its whole length each."""
    head = text[: 2 * width]
    if len(head) == len(text) and cell_len(text) <= width:
        return text
    row = chop_cells(head, width)[0]
    space = row.rfind(" ")
    return row[: space + 1] if space >= len(row) // 2 else row


def status_lines(child: ChildStatus) -> list[str]:
    """What to say when the child exited or could not start: the code, the message, its last stderr."""
    if child.state not in CHILD_ENDED:
        return []
    if child.state == ChildState.FAILED:
        head = "child failed to start"
    elif child.exit_code is None:
        head = "child exited"
    else:
        head = f"child exited with code {child.exit_code}"
    if child.message:
        head += f": {child.message}"
    return [inert(head), *(f"  {inert(line)}" for line in child.last_stderr)]


def pieces_of(line: LogLine) -> tuple[Piece, ...]:
    """``[err] Traceback...``: the tag dim, the text coloured by its source."""
    tag = SOURCE_TAGS.get(line.source, str(line.source))
    body = {LogSource.STDERR: "log--stderr", LogSource.STDOUT: "log--stdout"}.get(line.source, "log--dim")
    return ((f"{tag:>5} ", "log--tag"), (inert(render.clip(line.text.rstrip("\n"), LOG_LINE_MAX)), body))


class LogPanel(Widget):
    """Fed from snapshots: appends only the lines it has not shown yet (by ``seq``), newest at the bottom."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "log--tag",
        "log--stdout",
        "log--stderr",
        "log--dim",
        "log--status",
    }

    DEFAULT_CSS = """
    LogPanel {
        & > .log--tag { color: $foreground-muted; }
        & > .log--stdout { color: $foreground; }
        & > .log--stderr { color: $text-error; }
        & > .log--dim { color: $foreground-muted; }
        & > .log--status { color: $error; text-style: bold; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.last_seq = -1
        """The ``seq`` of the newest line written."""
        self.scroll_back = 0
        """How many lines the view is scrolled up from the newest (0: following the tail)."""
        self._lines: deque[tuple[Piece, ...]] = deque(maxlen=MAX_LINES)
        self._reported: tuple[int | None, ChildState, int | None] | None = None
        self._styles: dict[str, Style] = {}
        self._appended = 0
        self._tail: tuple[tuple[Piece, ...], ...] = ()
        """Lines still being written (a progress bar's latest state), shown after the newest line."""
        self._stderr: deque[tuple[str, int]] = deque(maxlen=STDERR_SEEN)
        """The newest stderr lines appended: (text, :attr:`_appended` after it)."""
        self._app: deque[tuple[str, int]] = deque(maxlen=APP_SEEN)
        """The newest app lines appended, the same way."""
        self._version = 0
        """Counts changes to what is shown (lines, their styles, the tail, the scroll)."""
        self._rows: tuple[tuple[int, int, int], list[tuple[Piece, ...]]] = ((-1, -1, -1), [])
        """The rows on screen, wrapped, for (width, height, :attr:`_version`)."""

    def update_snapshot(self, snapshot: Snapshot) -> None:
        """Append new log lines, and the child's status once when it exits or fails."""
        version = self._version
        for line in snapshot.log:
            if line.seq > self.last_seq:
                self._append(pieces_of(line))
                self.last_seq = line.seq
                if line.source == LogSource.STDERR:
                    self._stderr.append((line.text, self._appended))
                elif line.source == LogSource.APP:
                    self._app.append((line.text, self._appended))
        child = snapshot.child
        key = (child.pid, child.state, child.exit_code)
        lines = status_lines(child)
        if lines and key != self._reported:
            self._reported = key
            if not self._restyle_said(child.message):
                self._append(((lines[0], "log--status"),))
            if not self._shown_last(child.last_stderr):
                for extra in lines[1:]:
                    self._append(((extra, "log--stderr"),))
        tail = tuple(pieces_of(line) for line in snapshot.log_partial)
        if tail != self._tail:
            self._tail = tail
            self._version += 1
        if self._version != version:  # lines appended or restyled (they count it), or the tail changed
            self.refresh()

    def _restyle_said(self, message: str) -> bool:
        """Where one of the newest app lines, still in the pane, says the child's exit (contains its status
        ``message``: the session's line, ``pid N: workload exited with status 1; ValueError: ...; press
        r...``), that line is shown in the status line's style and True is returned: the exit is said once,
        with the session's hint, not followed by a status line that repeats it."""
        if not message:
            return False
        for text, appended in reversed(self._app):
            at = self._kept(appended)
            if message in text and at is not None:
                tag, (body, _) = self._lines[at]
                self._lines[at] = (tag, (body, "log--status"))
                self._version += 1
                return True
        return False

    def _kept(self, appended: int) -> int | None:
        """Where the line that :attr:`_appended` counted as ``appended`` is in :attr:`_lines` (an index from
        the end), or None once the pane no longer keeps it (:data:`MAX_LINES` newer ones came)."""
        back = self._appended - appended  # lines appended after it
        return -1 - back if back < len(self._lines) else None

    def _shown_last(self, stderr: tuple[str, ...]) -> bool:
        """Whether ``stderr`` (a child's last stderr lines, said again when it exits) are the newest stderr
        lines in the pane, all still kept: then the exit's status line does not repeat them (a traceback
        read twice in a row). Lines the pane never had (more came in a frame than a snapshot's log holds)
        or no longer keeps are repeated."""
        if not stderr or len(stderr) > len(self._stderr):
            return False
        newest = list(self._stderr)[-len(stderr) :]
        kept = self._kept(newest[0][1]) is not None  # the oldest of them is still in the pane
        return kept and tuple(text for text, _ in newest) == stderr

    def plain_lines(self) -> list[str]:
        """Every line kept, as plain text, oldest first (lines still being written last)."""
        return ["".join(text for text, _ in pieces) for pieces in (*self._lines, *self._tail)]

    def _append(self, pieces: tuple[Piece, ...]) -> None:
        """Add a line; a view scrolled back stays on the lines it shows."""
        self._lines.append(pieces)
        self._appended += 1
        self._version += 1
        if self.scroll_back:
            self.scroll_back = min(self.scroll_back + 1, self._max_scroll())
            self._show_scroll()

    def render_line(self, y: int) -> Strip:
        """Row ``y``: the newest lines fill the pane from the bottom up (less what is scrolled back)."""
        width, height = self.size
        base = self.rich_style
        rows = self._rows_shown(width, height)
        if y >= len(rows):
            return Strip.blank(width, base)
        row = Row()
        for text, name in rows[y]:
            row.add(text, self._style(name))
        return row.strip(width, base)

    def _line(self, index: int) -> tuple[Piece, ...]:
        """Line ``index`` of the lines kept and then those still being written."""
        return self._lines[index] if index < len(self._lines) else self._tail[index - len(self._lines)]

    def _rows_shown(self, width: int, height: int) -> list[tuple[Piece, ...]]:
        """The rows the pane shows, top first: the lines up to the newest shown (less what is scrolled
        back), wrapped, as many as fit from the bottom up; fewer lines than rows fill it from the top."""
        key = (width, height, self._version)
        if self._rows[0] == key:
            return self._rows[1]
        rows: list[tuple[Piece, ...]] = []
        index = len(self._lines) + len(self._tail) - self.scroll_back - 1  # the newest line shown
        while index >= 0 and len(rows) < height:
            rows[:0] = wrapped(self._line(index), width)
            index -= 1
        rows = rows[max(0, len(rows) - height) :]
        self._rows = (key, rows)
        return rows

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        """Scroll back through older lines."""
        event.stop()
        self._scroll_back_to(self.scroll_back + 3)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        """Scroll towards the newest line (and follow it again at the bottom)."""
        event.stop()
        self._scroll_back_to(self.scroll_back - 3)

    def notify_style_update(self) -> None:
        """New colours after a theme or CSS change."""
        super().notify_style_update()
        self._styles = {}

    def _scroll_back_to(self, back: int) -> None:
        back = max(0, min(back, self._max_scroll()))
        if back != self.scroll_back:
            self.scroll_back = back
            self._version += 1
            self._show_scroll()
            self.refresh()

    def _max_scroll(self) -> int:
        """Lines back from the newest to where the oldest line is at the top: the lines that fit in the
        pane from the oldest on, wrapped, stay on screen."""
        width, height = self.size.width, max(1, self.size.height)
        total = len(self._lines) + len(self._tail)
        fit = rows = 0
        while fit < total:
            rows += len(wrapped(self._line(fit), width))
            if rows > height:
                break
            fit += 1
        return max(0, total - max(1, fit))

    def _show_scroll(self) -> None:
        """The border says when the view is not following the newest line."""
        self.border_subtitle = (
            f"↑ {self.scroll_back} lines back · scroll down to follow" if self.scroll_back else ""
        )

    def _style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(name)
        return style
