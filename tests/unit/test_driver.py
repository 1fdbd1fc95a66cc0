"""The screen's writer survives its terminal going away: Textual's writer thread dies on the first failed
write (EIO once the terminal is closed), and a full queue then blocks the app's exit forever."""

import asyncio
import contextlib
import errno
import io
import os
import select
import threading
import time
import tty
from pathlib import Path

from textual import events
from textual.drivers._writer_thread import MAX_QUEUED_WRITES, WriterThread
from textual.drivers.headless_driver import HeadlessDriver
from textual.drivers.linux_driver import LinuxDriver
from torchpar_top.tui.driver import DirectWhenIdle, DroppedWhenGone, HangUpSafeLinuxDriver, driver_class
from waiting import wait_for


class HungUpTerminal(io.StringIO):
    """A terminal that is closed after ``after`` writes: every later write raises EIO, as a pty's does."""

    def __init__(self, after):
        super().__init__()
        self.after = after

    def write(self, text):
        self.after -= 1
        if self.after < 0:
            raise OSError(errno.EIO, "Input/output error")
        return super().write(text)

    def fileno(self):
        return 99


def _frames_then_stop(writer, wait=10.0):
    """Write more frames than the queue holds, then stop the writer; whether that finished in ``wait`` s."""
    done = threading.Event()

    def draw_and_exit():
        for i in range(3 * MAX_QUEUED_WRITES):
            writer.write(f"frame {i}")
        writer.stop()
        done.set()

    threading.Thread(target=draw_and_exit, daemon=True).start()
    return done.wait(wait)


def test_the_writer_outlives_a_closed_terminal_and_the_exit_goes_on():
    stream = DroppedWhenGone(HungUpTerminal(after=3))
    writer = WriterThread(stream)
    writer.start()
    assert _frames_then_stop(writer)
    assert stream.gone and stream.getvalue() == "frame 0frame 1frame 2"
    assert stream.fileno() == 99  # termios still gets the terminal's descriptor


def test_textuals_own_writer_dies_and_blocks_the_exit(recwarn):
    """What the guard is for (Textual as pinned): the same terminal written to directly."""
    writer = WriterThread(HungUpTerminal(after=3))
    writer.start()
    assert not _frames_then_stop(writer, wait=2.0)  # the drawing thread is stuck on the full queue (a daemon)


def test_the_app_runs_the_guarded_driver_where_textual_would_run_its_linux_one():
    assert driver_class(LinuxDriver) is HangUpSafeLinuxDriver
    assert driver_class(HeadlessDriver) is HeadlessDriver


# -- a frame written in the drawing thread when it can be (DirectWhenIdle) ------------------------------


@contextlib.contextmanager
def _terminal():
    """A pty: (the terminal's side to read what was written, the app's side as a text stream)."""
    master, slave = os.openpty()
    stream = os.fdopen(slave, "w", encoding="utf-8")
    try:
        yield master, stream
    finally:
        for close in (stream.close, lambda: os.close(master)):
            with contextlib.suppress(OSError):
                close()


def _fill(stream):
    """Write to the terminal until it has no room left (nobody reads it), through a non-blocking
    descriptor of its own so that the app's stays blocking. The kernel moves what was written on to the
    terminal's side in the background, so room comes back for a while after the first refusal: write
    until ``poll`` on the app's side says there is none, after a pause."""
    fd = os.open(os.ttyname(stream.fileno()), os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    poll = select.poll()
    poll.register(stream.fileno(), select.POLLOUT)
    try:
        for _ in range(1000):
            with contextlib.suppress(BlockingIOError):
                while True:
                    os.write(fd, b"." * 4096)
            time.sleep(0.05)
            if not poll.poll(0):
                return
        raise AssertionError("the terminal never filled up")
    finally:
        os.close(fd)


def _read_until(master, end, wait=10.0):
    """What the terminal shows until it ends with ``end`` (or ``wait`` s passed)."""
    got = b""
    deadline = time.monotonic() + wait
    while not got.endswith(end) and time.monotonic() < deadline:
        if select.select([master], [], [], 0.1)[0]:
            got += os.read(master, 65536)
    return got


def test_a_frame_goes_to_a_terminal_with_room_at_once_without_the_writer_thread():
    with _terminal() as (master, stream):
        out = DirectWhenIdle(DroppedWhenGone(stream))
        queued = []
        assert out.send("frame 1", queued.append) is True
        assert out.send("frame 2", queued.append) is True
        assert queued == []  # the writer thread was never asked
        assert _read_until(master, b"frame 2") == b"frame 1frame 2"


def test_a_full_terminal_gets_its_frames_through_the_writer_thread_in_order():
    with _terminal() as (master, stream):
        out = DirectWhenIdle(DroppedWhenGone(stream))
        writer = WriterThread(out)
        writer.start()
        _fill(stream)
        assert out.send("<A>", writer.write) is False  # no room: queued (the writer waits on the terminal)
        assert out.send("<B>", writer.write) is False  # behind A, whatever the room
        assert _read_until(master, b"<A><B>").endswith(b"<A><B>")  # the terminal reads again
        out.send("<C>", writer.write)  # at once or behind what the writer still holds: after B either way
        assert _read_until(master, b"<C>").endswith(b"<C>")
        writer.stop()


def test_a_closed_terminal_drops_frames_written_directly_and_exit_goes_on():
    with _terminal() as (master, stream):
        dropped = DroppedWhenGone(stream)
        out = DirectWhenIdle(dropped)
        writer = WriterThread(out)
        writer.start()
        os.close(master)  # the terminal goes away: writes to its other side fail with EIO
        done = threading.Event()

        def draw_and_exit():
            for i in range(3 * MAX_QUEUED_WRITES):
                out.send(f"frame {i}", writer.write)
            writer.stop()
            done.set()

        threading.Thread(target=draw_and_exit, daemon=True).start()
        assert done.wait(10.0)
        assert dropped.gone


# -- the input thread asleep until there is something to do -------------------------------------------


class _Collecting(HangUpSafeLinuxDriver):
    """The driver reading a test's pty; the events it would send to the app are kept instead."""

    def __init__(self, fileno):
        super().__init__(None)
        self.fileno = fileno
        self.events = []

    def process_message(self, message):
        self.events.append(message)


def _keys(driver):
    return [e.key for e in driver.events if isinstance(e, events.Key)]


def _voluntary_switches(tid):
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches line")


def test_the_input_thread_sleeps_until_a_key_or_the_exit_and_still_tells_a_lone_escape():
    master, slave = os.openpty()
    tty.setraw(slave)
    driver = asyncio.run(_make(_Collecting, slave))
    thread = threading.Thread(target=driver.run_input_thread, daemon=True)
    thread.start()
    try:
        os.write(master, b"a")
        wait_for(lambda: _keys(driver) == ["a"], timeout=10)
        os.write(master, b"\x1b")  # a lone Escape: told once the parser's wait for a sequence is over
        wait_for(lambda: _keys(driver) == ["a", "escape"], timeout=10)
        before = _voluntary_switches(thread.native_id)
        time.sleep(1.0)  # nothing typed: Textual's loop would wake ten times
        assert _voluntary_switches(thread.native_id) - before <= 1
        driver.exit_event.set()
        thread.join(5.0)
        assert not thread.is_alive()
    finally:
        driver.close()
        os.close(master)
        os.close(slave)


async def _make(cls, *args):
    """A driver made in a running loop (Textual's takes the running loop when made)."""
    return cls(*args)
