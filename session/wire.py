"""One agent's byte stream turned into validated messages: the reader loop's core, shared by the child's
inherited socket (:mod:`.child`) and the torchrun listener (:mod:`.listener`)."""

from __future__ import annotations

from typing import Callable

from torchpar_top.contract.codec import MAX_LINE, LineReader, ProtocolError
from torchpar_top.contract.messages import Message, decode


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


class TextStream:
    """Feeds a workload's stdout or stderr in, calls ``on_line(text)`` per line; a line longer than the
    limit is reported as such, not as a protocol failure."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._reader = LineReader()
        self._on_line = on_line

    def feed(self, data: bytes) -> None:
        """Pass on every complete line in ``data``."""
        try:
            lines = self._reader.feed(data)
        except ProtocolError:
            self._on_line(f"[a line longer than {MAX_LINE // 2**20} MiB was left out]")
            return
        for line in lines:
            self._on_line(line.decode("utf-8", "replace"))
