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
    out]``; the rest of it is counted, never accumulated. Blank lines are skipped."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line = on_line
        self._limit = LOG_LINE_MAX
        self._buf = bytearray()
        self._over = 0
        """Bytes of the current line beyond the limit."""

    @property
    def buffered(self) -> int:
        """Bytes of the current (unfinished) line held."""
        return len(self._buf)

    def feed(self, data: bytes) -> None:
        """Pass on every line that ``data`` completes."""
        start = 0
        while True:
            newline = data.find(b"\n", start)
            self._take(data, start, len(data) if newline < 0 else newline)
            if newline < 0:
                return
            self._emit()
            start = newline + 1

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

    def _emit(self) -> None:
        """Pass the current line on (unless blank) and start the next."""
        if self._over:
            over = self._over + len(self._buf) - LOG_LINE_KEEP
            text = f"{self._buf[:LOG_LINE_KEEP].decode('utf-8', 'replace')} … [{over} more bytes left out]"
        else:
            text = self._buf.decode("utf-8", "replace")
        self._buf, self._over = bytearray(), 0
        if text.strip():
            self._on_line(text)
