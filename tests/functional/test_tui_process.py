"""The real app in a pseudo-terminal: however it exits, nothing it started is left running."""

import os
import signal
import time

import psutil
import pytest
from terminal import Screen
from waiting import running, wait_for

SCRIPTS = os.path.join(os.path.dirname(__file__), os.pardir, "scripts")

pytestmark = pytest.mark.slow


def _cmdline(process):
    """A process's command line, or "" if it ended or is a zombie by the time we read it.

    The app starts short-lived helpers (py-spy dumps twice a second), so any child may
    turn into a zombie or vanish between listing and reading it."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _workload_pids(screen, marker="bootstrap"):
    try:
        kids = psutil.Process(screen.pid).children(recursive=True)
    except psutil.Error:
        return []
    return [k.pid for k in kids if marker in _cmdline(k)]


def _ends(screen, after):
    """Wait (30 s at most) for the app to exit, reading what it draws meanwhile."""
    deadline = time.monotonic() + 30
    while not screen.ended() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert screen.ended(), f"the app did not exit after {after}"


@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "key q", "key ctrl-c", "terminal closed", "SIGKILL"])
def test_nothing_is_left_running(how):
    screen = Screen()
    try:
        pids = wait_for(lambda: (screen.read(), _workload_pids(screen))[1], timeout=60)
        time.sleep(1.0)  # let the app draw a few frames
        screen.read()
        # Everything the app started (workload and helpers such as py-spy) must be gone afterwards.
        pids += screen.children()
        if how == "SIGTERM":
            screen.signal(signal.SIGTERM)
        elif how == "SIGHUP":
            screen.signal(signal.SIGHUP)
        elif how == "SIGKILL":  # no chance to clean up: the child sees its socket close and ends itself
            screen.signal(signal.SIGKILL)
        elif how == "key q":
            screen.press(b"q")
        elif how == "key ctrl-c":
            screen.press(b"\x03")
        else:
            screen.hang_up()
        _ends(screen, how)
        # as a shell expects: 128 + the signal that ended it, 0 for a key
        expected = {
            "SIGTERM": 128 + signal.SIGTERM,
            "SIGHUP": 128 + signal.SIGHUP,
            "key q": 0,
            "key ctrl-c": 0,
            "terminal closed": 128 + signal.SIGHUP,
            "SIGKILL": -signal.SIGKILL,
        }[how]
        assert screen.status == expected
        wait_for(lambda: not any(running(p) for p in pids), timeout=15)
    finally:
        screen.close()


@pytest.mark.parametrize(
    "first, second", [("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGTERM"), ("SIGINT", "SIGINT")]
)
def test_a_second_signal_while_stopping_neither_hangs_nor_prints_a_traceback(first, second):
    """Two termination signals 20 ms apart, while a script that ignores them is being stopped: the app
    still ends (status 128 + the first signal, as a shell expects), quietly, with nothing left running."""
    screen = Screen("run", os.path.join(SCRIPTS, "stubborn.py"))
    try:
        pids = wait_for(lambda: (screen.read(), _workload_pids(screen, "stubborn.py"))[1], timeout=60)
        wait_for(lambda: b"stubborn script ready" in screen.read(), timeout=60)
        screen.signal(getattr(signal, first))
        time.sleep(0.02)
        screen.signal(getattr(signal, second))
        _ends(screen, f"{first} then {second}")
        assert screen.status == 128 + getattr(signal, first)
        assert b"Traceback" not in screen.seen and b"KeyboardInterrupt" not in screen.seen
        wait_for(lambda: not any(running(p) for p in pids), timeout=15)
    finally:
        screen.close()


@pytest.mark.parametrize("how", ["key q", "SIGKILL"])
def test_processes_that_left_the_workloads_group_end_with_the_app(how):
    """A setsid daemon and a grandchild in a group of its own, started by the user's script: gone after q,
    and even after SIGKILL of the app (the agent ends its tree when its socket closes)."""
    from waiting import processes_running, unique_tag

    tag = unique_tag()
    screen = Screen("run", os.path.join(SCRIPTS, "leaves_processes.py"), tag, "stay")
    try:
        wait_for(lambda: (screen.read(), len(processes_running(tag + "1", tag + "2")) == 2)[1], timeout=90)
        if how == "key q":
            screen.press(b"q")
        else:
            screen.signal(signal.SIGKILL)
        _ends(screen, how)
        # after SIGKILL the path is: socket EOF, the agent's stop grace (3 s), its tree walk and kill; on a
        # loaded machine that takes longer than on an idle one: a deadline, not a timing
        wait_for(lambda: not processes_running(tag + "1", tag + "2"), timeout=60)
    finally:
        screen.close()
        for leftover in processes_running(tag + "1", tag + "2"):
            leftover.kill()
