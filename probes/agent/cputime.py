"""CPU time of the workload's own threads, as the kernel counts it: on a core, or runnable and waiting.

``/proc/self/task/<tid>/schedstat`` holds three numbers per thread: nanoseconds on a CPU, nanoseconds
runnable but waiting on a run queue (every core was taken), and time slices run. The agent reads it for
the threads it knows (the frontend, each emulated stream's executor thread) once per sample: a read of
a small in-memory file, about 10-20 µs, from the sampler thread. Where the kernel keeps no schedstat
(``CONFIG_SCHED_INFO`` off, not Linux) a reading is ``None`` and the agent falls back to what its
intervals alone can say (ARCHITECTURE.md, "Running, waiting for a core, blocked").
"""

from __future__ import annotations

from collections.abc import Callable

Reading = tuple[int, int]
"""``(run_ns, wait_ns)``: cumulative nanoseconds on a core and waiting for one."""


def read_schedstat(tid: int) -> Reading | None:
    """The first two fields of ``/proc/self/task/<tid>/schedstat``; None when unreadable."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
            fields = f.read().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


class ThreadClock:
    """Per-thread run and wait time since the previous reading of the same thread.

    :meth:`take` returns seconds, not shares: the caller divides by its own window (readings are taken
    at the end of each window, so consecutive readings span one window).
    """

    def __init__(self, reader: Callable[[int], Reading | None] = read_schedstat) -> None:
        self._read = reader
        self._last: dict[int, Reading] = {}

    def take(self, tid: int) -> tuple[float, float] | None:
        """``(run_s, wait_s)`` of ``tid`` since the previous call for it; None on the first call for a
        thread (no span yet) or when the kernel does not say."""
        now = self._read(tid)
        if now is None:
            self._last.pop(tid, None)
            return None
        before = self._last.get(tid)
        self._last[tid] = now
        if before is None:
            return None
        return max(0, now[0] - before[0]) / 1e9, max(0, now[1] - before[1]) / 1e9
