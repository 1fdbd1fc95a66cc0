"""Reading what the workload sent in the frame that draws it, with the reader thread behind as a fallback.

A thread that wakes up pays for it on the machines this was measured on: decoding one agent sample
costs ~22 µs of CPU back to back and ~170 µs right after a 100 ms sleep, the caches and the core's clock
gone cold in between (``benchmarks/bench_wakeups.py``, 2-vCPU VM). A reader thread that wakes for every
sample (two torchrun ranks at 10 Hz: 20 wake-ups a second, each paying that) cost more than decoding
does. Read by the screen's frame instead (``Session.snapshot`` pulls first), the samples ride the
frame's own wake-up, and they reach the screen no later: a sample waits for the next frame either way.

The reader threads stay: until the first pull they read as data arrives (tests, the recorder, anything
that never asks for a snapshot); once pulls come they sleep, and they read again by themselves when no
pull came for :data:`PULL_GRACE` seconds (a stalled screen, headless with a long interval), so an agent
never finds its socket full and a closed connection is still noticed.
"""

from __future__ import annotations

import selectors
import time
from collections.abc import Callable

PULL_GRACE = 0.5
"""Seconds without a pull after which a reader thread reads by itself again. Far below what fills a
socket's buffer (an agent's sample is a few KB, ten a second; a Unix socket holds ~200 KB)."""


class PullPace:
    """When a reader thread should read itself, and when it leaves the reading to the pulls."""

    def __init__(self, grace: float = PULL_GRACE, clock: Callable[[], float] = time.monotonic) -> None:
        self._grace = grace
        self._clock = clock
        self._last: float | None = None

    def pulled(self) -> None:
        """A consumer is about to read (the frame): the thread may sleep for the next ``grace`` seconds."""
        self._last = self._clock()

    def idle_for(self) -> float:
        """Seconds the thread may sleep before it asks again; 0: read now (nobody pulls, or not lately)."""
        last = self._last
        if last is None:
            return 0.0
        return max(0.0, last + self._grace - self._clock())


READ_AT_MOST = 1 << 18
"""Bytes one read takes from one stream before moving on (64 KB at a time): what waited since the last
frame goes in one pull (ten samples of a busy rank are ~100 KB), and a chatty stream does not hold up
the frame for long (the rest waits for the next pull)."""


def ready(sel: selectors.BaseSelector, timeout: float) -> list[tuple[selectors.SelectorKey, int]]:
    """``sel.select(timeout)``, or nothing once the selector was closed (by the reader thread, at its end,
    while a pull was about to look)."""
    try:
        return sel.select(timeout=timeout)
    except (OSError, ValueError, KeyError):
        return []


def read_ready(read: Callable[[int], bytes], feed: Callable[[bytes], None]) -> bool:
    """Feed what a non-blocking stream holds now (``read(n)``: ``recv`` or ``os.read``), up to
    :data:`READ_AT_MOST`; False once it reached its end (or failed: the same to a reader)."""
    taken = 0
    while taken < READ_AT_MOST:
        try:
            data = read(65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        feed(data)
        taken += len(data)
    return True


DRAIN_S = 0.5
"""Seconds a drain reads at most once a process ended (a grandchild may keep a pipe open, a rank on
another node may write on)."""
DRAIN_QUIET = 0.05
"""A drain ends when nothing was ready for this long."""

Events = list[tuple[selectors.SelectorKey, int]]


def drain(
    select: Callable[[float], Events],
    read: Callable[[Events], None],
    open_: Callable[[], bool],
    timeout: float = DRAIN_S,
) -> None:
    """Read what ``select(timeout)`` says is ready until ``open_()`` is false (every stream at its end),
    nothing was ready for :data:`DRAIN_QUIET`, or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while open_() and (left := deadline - time.monotonic()) > 0:
        events = select(min(DRAIN_QUIET, left))
        if not events:
            return
        read(events)
