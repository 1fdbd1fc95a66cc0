"""Textual's Linux driver, made to survive its terminal going away.

Textual writes the screen from a writer thread fed by a queue of 30 writes. When the terminal is closed
(its window, an ssh connection, tmux's pane), a write raises ``OSError`` (EIO): the writer thread dies
with it, the queue fills with the frames drawn before the app hears of the hang-up, and the next write,
or the driver's own ``stop`` at exit, blocks forever on the full queue. The app then never exits
(measured: 2 of 16 runs of ``tests/functional/test_tui_process.py`` "terminal closed" with another
process busy on one core). Here the writer's stream drops writes once one has failed, so the thread
lives until it is stopped and exit goes on.
"""

from __future__ import annotations

from typing import IO, Any

from textual.app import App
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver


class DroppedWhenGone:
    """A text stream for Textual's writer thread: once a write or flush fails (the terminal is gone), the
    rest are dropped; everything else (``fileno`` for termios...) is the stream's own."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self.gone = False
        """Whether a write failed: the terminal is no longer there."""

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._stream.write(text)
            except (OSError, ValueError):  # EIO after a hang-up; ValueError: the stream was closed
                self.gone = True
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self.gone = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class HangUpSafeLinuxDriver(LinuxDriver):
    """:class:`LinuxDriver` writing through :class:`DroppedWhenGone`."""

    def __init__(
        self, app: App[Any], *, debug: bool = False, mouse: bool = True, size: tuple[int, int] | None = None
    ) -> None:
        super().__init__(app, debug=debug, mouse=mouse, size=size)
        self._file: Any = DroppedWhenGone(self._file)


def driver_class(chosen: type[Driver]) -> type[Driver]:
    """The driver to run with, given the one Textual chose (``App.get_driver_class``): its Linux driver
    made hang-up safe; any other (Windows, headless, one named in ``TEXTUAL_DRIVER``) as it is."""
    return HangUpSafeLinuxDriver if chosen is LinuxDriver else chosen
