"""The real app in a pseudo-terminal: however it exits, nothing it started is left running."""

import os
import pty
import signal
import sys
import time

import psutil
import pytest

from waiting import running, wait_for

pytestmark = pytest.mark.slow


class _App:
    """The app's process, forked onto a new pty that is its controlling terminal (as in a terminal tab)."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "36"}
        self.pid, self.master = pty.fork()
        if self.pid == 0:  # the child: becomes torchpar-top
            os.execve(sys.executable, [sys.executable, "-m", "torchpar_top", *args], env)
        self._status = None

    def poll(self):
        if self._status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._status = status
        return self._status

    def send_signal(self, sig):
        os.kill(self.pid, sig)


def _start_app(*args):
    """torchpar-top in a pty; returns (app, master fd)."""
    app = _App(*args)
    return app, app.master


def _drain(master, into=None):
    """Read what the app drew so far (kept in ``into`` when given)."""
    try:
        while data := os.read(master, 65536):
            if into is not None:
                into.extend(data)
    except OSError:
        pass


def _cmdline(process):
    """A process's command line, or "" if it ended or is a zombie by the time we read it.

    The app starts short-lived helpers (py-spy dumps twice a second), so any child may
    turn into a zombie or vanish between listing and reading it."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _workload_pids(proc, marker="bootstrap"):
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []
    return [k.pid for k in kids if marker in _cmdline(k)]




@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "key q", "key ctrl-c", "terminal closed", "SIGKILL"])
def test_nothing_is_left_running(how):
    proc, master = _start_app()
    os.set_blocking(master, False)
    try:
        pids = wait_for(lambda: (_drain(master), _workload_pids(proc))[1], timeout=60)
        time.sleep(1.0)  # let the app draw a few frames
        _drain(master)
        # Everything the app started (workload and helpers such as py-spy) must be gone afterwards.
        try:
            pids += [k.pid for k in psutil.Process(proc.pid).children(recursive=True)]
        except psutil.Error:
            pass
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        elif how == "SIGHUP":
            proc.send_signal(signal.SIGHUP)
        elif how == "SIGKILL":  # no chance to clean up: the child sees its socket close and ends itself
            proc.send_signal(signal.SIGKILL)
        elif how == "key q":
            os.write(master, b"q")
        elif how == "key ctrl-c":
            os.write(master, b"\x03")
        else:
            os.close(master)
            master = None
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if master is not None:
                _drain(master)
            time.sleep(0.05)
        assert proc.poll() is not None, f"the app did not exit after {how}"
        # as a shell expects: 128 + the signal that ended it, 0 for a key
        expected = {"SIGTERM": 128 + signal.SIGTERM, "SIGHUP": 128 + signal.SIGHUP, "key q": 0, "key ctrl-c": 0,
                    "terminal closed": 128 + signal.SIGHUP, "SIGKILL": -signal.SIGKILL}[how]
        assert os.waitstatus_to_exitcode(proc.poll()) == expected
        wait_for(lambda: not any(running(p) for p in pids),
                 timeout=15)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if master is not None:
            os.close(master)


STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopping it takes the whole grace, then SIGKILL
print("stubborn script ready", flush=True)
while True:
    try:
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass
"""


@pytest.mark.parametrize("first, second", [("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGTERM"), ("SIGINT", "SIGINT")])
def test_a_second_signal_while_stopping_neither_hangs_nor_prints_a_traceback(tmp_path, first, second):
    """Two termination signals 20 ms apart, while a script that ignores them is being stopped: the app
    still ends (status 128 + the first signal, as a shell expects), quietly, with nothing left running."""
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    proc, master = _start_app("run", str(script))
    os.set_blocking(master, False)
    screen = bytearray()
    try:
        pids = wait_for(lambda: (_drain(master, screen), _workload_pids(proc, "stubborn.py"))[1], timeout=60)
        wait_for(lambda: (_drain(master, screen), b"stubborn script ready" in screen)[1], timeout=60)
        proc.send_signal(getattr(signal, first))
        time.sleep(0.02)
        proc.send_signal(getattr(signal, second))
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            _drain(master, screen)
            time.sleep(0.05)
        assert proc.poll() is not None, f"the app hung after {first} then {second}"
        _drain(master, screen)
        assert os.waitstatus_to_exitcode(proc.poll()) == 128 + getattr(signal, first)
        assert b"Traceback" not in screen and b"KeyboardInterrupt" not in screen
        wait_for(lambda: not any(running(p) for p in pids), timeout=15)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        os.close(master)


@pytest.mark.parametrize("how", ["key q", "SIGKILL"])
def test_processes_that_left_the_workloads_group_end_with_the_app(how):
    """A setsid daemon and a grandchild in a group of its own, started by the user's script: gone after q,
    and even after SIGKILL of the app (the agent ends its tree when its socket closes)."""
    from waiting import processes_running, unique_tag

    tag = unique_tag()
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "leaves_processes.py")
    proc, master = _start_app("run", script, tag, "stay")
    os.set_blocking(master, False)
    try:
        wait_for(lambda: (_drain(master), len(processes_running(tag + "1", tag + "2")) == 2)[1], timeout=90)
        if how == "key q":
            os.write(master, b"q")
        else:
            proc.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            _drain(master)
            time.sleep(0.05)
        assert proc.poll() is not None, f"the app did not exit after {how}"
        # after SIGKILL the path is: socket EOF, the agent's stop grace (3 s), its tree walk and kill; on a
        # loaded machine that takes longer than on an idle one: a deadline, not a timing
        wait_for(lambda: not processes_running(tag + "1", tag + "2"), timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for leftover in processes_running(tag + "1", tag + "2"):
            leftover.kill()
        os.close(master)
