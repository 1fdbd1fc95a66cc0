"""Waiting for conditions with a deadline (tests never assert on timings)."""

import os
import time

import psutil
import pytest


def wait_for(predicate, timeout=60.0, every=0.05):
    """Poll until predicate() is truthy; return its value or fail after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"condition not met within {timeout} s")


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is alive."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has ended; only its exit status is left to collect)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def processes_running(*argv_tails: str) -> list[psutil.Process]:
    """The living processes whose command line ends with one of ``argv_tails`` (e.g. ``"300.42"``)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline and cmdline[-1] in argv_tails and running(proc.pid):
            found.append(proc)
    return found


def unique_tag() -> str:
    """A number no other process has on its command line: ``300.<pid><random>``."""
    import random

    return f"300.{os.getpid()}{random.randrange(10**6):06d}"


def samplers_stopped() -> None:
    """Wait for every agent's sampler thread in this process to end (a closed agent's ends within its
    interval; ``Agent.close()`` does not wait for it): the GIL's switch interval is the process's, and
    a sampler still making a sample lowers it."""
    import threading

    for thread in threading.enumerate():
        if thread.name == "tpt-sampler":
            thread.join(5)
            assert not thread.is_alive(), "an agent's sampler still runs (an agent left unclosed)"
