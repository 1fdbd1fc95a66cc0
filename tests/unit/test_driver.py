"""The screen's writer survives its terminal going away: Textual's writer thread dies on the first failed
write (EIO once the terminal is closed), and a full queue then blocks the app's exit forever."""

import errno
import io
import threading

from textual.drivers._writer_thread import MAX_QUEUED_WRITES, WriterThread
from textual.drivers.headless_driver import HeadlessDriver
from textual.drivers.linux_driver import LinuxDriver
from torchpar_top.tui.driver import DroppedWhenGone, HangUpSafeLinuxDriver, driver_class


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
