"""torchpar-top on a pseudo-terminal of its own, as in a terminal tab: the tests that drive the real app
through a terminal (keys, signals, hanging up) and read what it drew."""

import contextlib
import os
import pty
import signal
import sys

import psutil


class Screen:
    """``python -m torchpar_top ARGS`` forked onto a new pty that is its controlling terminal (120×36)."""

    def __init__(self, *args, cwd=None):
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "36"}
        self.pid, self.master = pty.fork()
        if self.pid == 0:  # the child: becomes torchpar-top
            if cwd is not None:
                os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "torchpar_top", *map(str, args)], env)
        os.set_blocking(self.master, False)
        self.seen = bytearray()
        """Everything the app wrote to its terminal so far (what :meth:`read` collected)."""
        self.status = None
        """The exit status once it has ended, as a shell reports it (``-N`` for signal N)."""

    def read(self):
        """Collect what the app drew since the last read; returns everything seen."""
        try:
            while self.master is not None and (chunk := os.read(self.master, 65536)):
                self.seen.extend(chunk)
        except OSError:
            pass
        return self.seen

    def ended(self):
        """Whether the app has exited (reading its output meanwhile, so it never blocks on a full pty)."""
        self.read()
        if self.status is None:
            got, status = os.waitpid(self.pid, os.WNOHANG)
            if got:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status is not None

    def press(self, keys):
        """Type ``keys`` (bytes) into the terminal."""
        os.write(self.master, keys)

    def signal(self, sig):
        """Send the app a signal."""
        os.kill(self.pid, sig)

    def hang_up(self):
        """Close the terminal (the app gets SIGHUP, as when its window is closed)."""
        os.close(self.master)
        self.master = None

    def children(self):
        """Pids of every process below the app now."""
        try:
            return [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.Error:
            return []

    def close(self):
        """Kill the app if it still runs (and its group), and close the terminal."""
        if not self.ended():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.status = -signal.SIGKILL
        if self.master is not None:
            os.close(self.master)
            self.master = None
