"""One agent's byte stream turned into validated messages: the reader loop's core, shared by the child's
inherited socket (:mod:`.child`) and the torchrun listener (:mod:`.listener`)."""

from __future__ import annotations

from collections.abc import Callable

from torchpar_top.contract.codec import LineReader, ProtocolError
from torchpar_top.contract.messages import Message, decode
from torchpar_top.contract.vocab import LOG_LINE_KEEP, LOG_LINE_MAX


class MessageStream:
    """Feeds bytes in, calls ``on_message`` per valid message and ``on_error`` per line it dropped."""

    def __init__(self, on_message: Callable[[Message], None], on_error: Callable[[str], None]) -> None:
        self._reader = LineReader()
        self._on_message, self._on_error = on_message, on_error

    def feed(self, data: bytes) -> None:
        """Decode every complete line in ``data`` (with what was left over from before)."""
        try:
            lines = self._reader.feed(data)
        except ProtocolError as exc:
            self._on_error(f"dropped: {exc}")
            return
        for line in lines:
            try:
                msg = decode(line)
            except ProtocolError as exc:
                self._on_error(f"malformed message dropped: {exc}")
                continue
            self._on_message(msg)

    def finish(self) -> None:
        """The stream ended: a message without its newline is incomplete, and is dropped."""


class TextStream:
    """Feeds a workload's stdout or stderr in, calls ``on_line(text)`` per line. A line of more than
    :data:`LOG_LINE_MAX` bytes is passed on as its first :data:`LOG_LINE_KEEP` and `` … [N more bytes left
    out]``; the rest of it is counted, never accumulated. Blank lines are skipped.

    A carriage return (``\\r``: a progress bar, tqdm's) starts the line over, as on a terminal: the line
    is its latest state, and while it has no newline yet ``on_partial(text)`` gets that state at the end of
    each chunk read (at most once per chunk, only when it changed), so the log shows it live."""

    def __init__(
        self, on_line: Callable[[str], None], on_partial: Callable[[str], None] | None = None
    ) -> None:
        self._on_line = on_line
        self._on_partial = on_partial
        self._limit = LOG_LINE_MAX
        self._buf = bytearray()
        self._over = 0
        """Bytes of the current line beyond the limit."""
        self._latest = ""
        """The line's last complete state before a ``\\r`` (blank: none)."""
        self._shown = ""
        """The state last passed to ``on_partial``."""
        self._cr = False
        """Whether the current line had a ``\\r``."""

    @property
    def buffered(self) -> int:
        """Bytes of the current (unfinished) line held."""
        return len(self._buf)

    def feed(self, data: bytes) -> None:
        """Pass on every line that ``data`` completes, then the state of a ``\\r`` line still open."""
        start = 0
        while True:
            newline, ret = data.find(b"\n", start), data.find(b"\r", start)
            end = min((i for i in (newline, ret) if i >= 0), default=-1)
            self._take(data, start, len(data) if end < 0 else end)
            if end < 0:
                break
            if end == ret:
                self._cr = True
                state = self._text()
                if state.strip():
                    self._latest = state
                self._buf, self._over = bytearray(), 0
            else:
                self._emit()
            start = end + 1
        if self._on_partial is not None and self._cr:
            state = self._state()
            if state.strip() and state != self._shown:
                self._shown = state
                self._on_partial(state)

    def finish(self) -> None:
        """The stream ended: pass on a last line that had no newline."""
        self._emit()

    def _take(self, data: bytes, start: int, end: int) -> None:
        """Keep ``data[start:end]`` up to the limit; count the rest."""
        room = max(0, self._limit - len(self._buf))
        keep = min(room, end - start)
        if keep:
            self._buf += data[start : start + keep]
        self._over += end - start - keep

    def _text(self) -> str:
        """The current line's bytes as text (cut, with the count of bytes left out, beyond the limit)."""
        if self._over:
            over = self._over + len(self._buf) - LOG_LINE_KEEP
            return f"{self._buf[:LOG_LINE_KEEP].decode('utf-8', 'replace')} … [{over} more bytes left out]"
        return self._buf.decode("utf-8", "replace")

    def _state(self) -> str:
        """The line as a terminal shows it: what came after the last ``\\r``, else the state before it."""
        text = self._text()
        return text if text.strip() else self._latest

    def _emit(self) -> None:
        """Pass the current line on (unless blank) and start the next."""
        text = self._state()
        self._buf, self._over, self._latest, self._shown, self._cr = bytearray(), 0, "", "", False
        if text.strip():
            self._on_line(text)
