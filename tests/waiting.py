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
