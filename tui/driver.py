"""Textual's Linux driver, made to survive its terminal going away and to write a frame without waking
a thread.

Textual writes the screen from a writer thread fed by a queue of 30 writes. When the terminal is closed
(its window, an ssh connection, tmux's pane), a write raises ``OSError`` (EIO): the writer thread dies
with it, the queue fills with the frames drawn before the app hears of the hang-up, and the next write,
or the driver's own ``stop`` at exit, blocks forever on the full queue. The app then never exits
(measured: 2 of 16 runs of ``tests/functional/test_tui_process.py`` "terminal closed" with another
process busy on one core). Here the writer's stream drops writes once one has failed, so the thread
lives until it is stopped and exit goes on.

The writer thread also woke for every frame (``strace``: one ``write`` a frame, each after the thread
woke on the queue and then waited for the GIL that the drawing thread held): ~26 context switches a
second at 10 Hz, and the drawing thread's own GIL hand-backs with them, on a VM where a wake-up costs
~0.2 ms of CPU (``benchmarks/bench_wakeups.py``). :class:`DirectWhenIdle` writes a frame in the drawing
thread when the terminal has room and nothing waits in the writer's queue; the thread still takes the
frames a slow terminal cannot take at once, in order. And Textual's input thread woke ten times a second
(``select(0.1)``) to look whether the app is exiting or an Escape waits to be told from an escape
sequence: :meth:`HangUpSafeLinuxDriver.run_input_thread` sleeps until a key comes, the exit is asked
for (:class:`WakingEvent`) or the Escape's wait is over.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import selectors
import threading
from codecs import getincrementaldecoder
from collections.abc import Callable
from typing import IO, Any

from textual._loop import loop_last
from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.app import App
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from torchpar_top.tui.compositor import TESTED_TEXTUAL, textual_version


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


class DirectWhenIdle:
    """The writer thread's stream, and the drawing thread's way past it.

    :meth:`send` writes ``text`` to the terminal at once, in the calling thread, when nothing handed to
    the writer thread is still unwritten and the terminal has room (``poll`` says it can be written;
    a frame longer than the room waits for the terminal to read the rest, as a write does); otherwise
    it hands ``text`` to the writer thread's queue, behind what is there, so the terminal gets every
    write in the order it was sent. The writer thread writes through :meth:`write`, which counts what it
    has written. A stream whose descriptor cannot be polled always goes through the queue."""

    def __init__(self, stream: DroppedWhenGone) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._queued = 0
        """Writes handed to the writer thread and not yet written by it."""

    # the writer thread's side

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        finally:
            with self._lock:
                self._queued -= 1

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    # the drawing side

    def send(self, text: str, queue: Callable[[str], None]) -> bool:
        """Write ``text`` now, or through ``queue`` (the writer thread's ``write``); whether it was
        written now."""
        with self._lock:
            if self._queued == 0 and self._has_room():
                self._stream.write(text)
                self._stream.flush()
                return True
            self._queued += 1
        queue(text)  # may wait for room in the queue: outside the lock, which the writer thread takes
        return False

    @functools.cached_property
    def _poll(self) -> select.poll | None:
        """A poll for room to write on the stream's descriptor, made on first use; None where none can be
        made (no descriptor: a test's stream; or a closed one)."""
        try:
            poll = select.poll()
            poll.register(self._stream.fileno(), select.POLLOUT)
        except (OSError, ValueError, AttributeError):
            return None
        return poll

    def _has_room(self) -> bool:
        if self._stream.gone:
            return True  # dropped either way
        poll = self._poll
        if poll is None:
            return False
        try:
            return any(mask & select.POLLOUT for _, mask in poll.poll(0))
        except OSError:
            return False


class WakingEvent(threading.Event):
    """The driver's ``exit_event``: setting it also writes a byte to a pipe, which the input thread's
    ``select`` watches, so that the thread wakes for the exit instead of looking every 0.1 s."""

    def __init__(self) -> None:
        super().__init__()
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self._write_fd, False)

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # full (a byte is there already) or closed: it wakes either way
            os.write(self._write_fd, b"x")

    def drain(self) -> None:
        """Take the bytes written so far (the event is cleared and the thread may run again)."""
        try:
            while os.read(self.read_fd, 64):
                pass
        except OSError:
            pass

    def close(self) -> None:
        for fd in (self.read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class HangUpSafeLinuxDriver(LinuxDriver):
    """:class:`LinuxDriver` writing through :class:`DroppedWhenGone`, a frame at once when it can
    (:class:`DirectWhenIdle`), its input thread asleep until there is something to do."""

    def __init__(
        self, app: App[Any], *, debug: bool = False, mouse: bool = True, size: tuple[int, int] | None = None
    ) -> None:
        super().__init__(app, debug=debug, mouse=mouse, size=size)
        self._out = DirectWhenIdle(DroppedWhenGone(self._file))
        self._file: Any = self._out  # the writer thread, made in start_application_mode, writes through it
        self.exit_event: WakingEvent = WakingEvent()

    def close(self) -> None:
        super().close()
        self.exit_event.close()

    def run_input_thread(self) -> None:
        """Textual's input loop (``LinuxDriver.run_input_thread``, Textual 8.2.8), except that ``select``
        waits until a key comes, the exit is asked for, or the parser's wait for the rest of an escape
        sequence is over (a lone Escape is told then), where Textual's looks every 0.1 s; and no 0.1 s
        pause at the end. Under another Textual version, Textual's own loop."""
        if textual_version() != TESTED_TEXTUAL:
            super().run_input_thread()
            return
        fileno = self.fileno
        wake = self.exit_event
        selector = selectors.SelectSelector()
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(wake.read_fd, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        feed, tick = parser.feed, parser.tick
        decode = getincrementaldecoder("utf-8")().decode

        def process(keys: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
            for last, (_key, mask) in loop_last(keys):
                if mask & selectors.EVENT_READ:
                    data = decode(os.read(fileno, 1024 * 4), final=final and last)
                    if not data:  # stdin piped and at its end
                        break
                    for event in feed(data):
                        self.process_message(event)
            for event in tick():
                self.process_message(event)

        def timeout() -> float | None:
            due = parser._timeout_time  # an Escape waiting to be told from a sequence, or None
            return None if due is None else max(0.0, due - get_time())

        try:
            while not wake.is_set():
                ready = selector.select(timeout())
                process([k for k in ready if k[0].fd == fileno])
            wake.drain()
            process([], final=True)
        finally:
            selector.close()
            try:
                for _event in feed(""):
                    pass
            except (EOFError, ParseError):
                pass

    def write(self, data: str) -> None:
        """As Textual's (which asserts that the writer thread runs), through :meth:`DirectWhenIdle.send`."""
        writer = self._writer_thread
        if writer is None:
            super().write(data)
            return
        self._out.send(data, writer.write)


def driver_class(chosen: type[Driver]) -> type[Driver]:
    """The driver to run with, given the one Textual chose (``App.get_driver_class``): its Linux driver
    made hang-up safe; any other (Windows, headless, one named in ``TEXTUAL_DRIVER``) as it is."""
    return HangUpSafeLinuxDriver if chosen is LinuxDriver else chosen
