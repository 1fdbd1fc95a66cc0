"""Per-core CPU load of the host: ``/proc/stat`` read directly on Linux, psutil elsewhere."""

from __future__ import annotations

import psutil

#: Where Linux keeps the per-core tick counters.
PROC_STAT = "/proc/stat"


def _read_ticks(stat: str) -> list[tuple[int, int]]:
    """(busy, total) ticks per core from ``/proc/stat``'s text, in core order, as psutil counts them:
    total is user..steal (guest time is inside user and nice already), busy is total less idle and
    iowait."""
    ticks = []
    for line in stat.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        fields = [int(v) for v in line.split()[1:9]]
        total = sum(fields)
        ticks.append((total - fields[3] - (fields[4] if len(fields) > 4 else 0), total))
    return ticks


class CoreSampler:
    """Per-core CPU load in percent since the previous :meth:`sample`.

    On Linux the tick counters of ``/proc/stat`` are read from a file kept open (about a tenth of the
    CPU of ``psutil.cpu_percent(percpu=True)``, which builds a named tuple per core and opens the file
    each time: see docs/benchmarks.md, "The monitor's own CPU under run"). Elsewhere, psutil:
    ``psutil.cpu_percent(interval=None)`` keeps its reference reading per calling thread, so create
    the sampler in the thread that will call :meth:`sample` and sample only from that thread.
    """

    def __init__(self) -> None:
        """Take the first reading (psutil's first non-blocking call returns a meaningless 0.0 per core)."""
        self._file = None
        self._last: list[tuple[int, int]] = []
        try:
            self._file = open(PROC_STAT)  # noqa: SIM115 (kept open, closed in close())
            self._last = _read_ticks(self._file.read())
        except (OSError, ValueError):
            self._close_file()
        if not self._last:
            self._close_file()
            self._last = []
            primed = psutil.cpu_percent(percpu=True, interval=None)
            self.count: int = len(primed)
        else:
            self.count = len(self._last)
        """Number of logical cores (the length of every sample)."""

    @property
    def any_thread(self) -> bool:
        """Whether :meth:`sample` may be called from any thread, one call at a time (``/proc/stat``
        read here); False under psutil, whose reference reading belongs to the calling thread."""
        return self._file is not None

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        """Close ``/proc/stat`` (kept open between samples)."""
        self._close_file()

    def __del__(self) -> None:
        self._close_file()

    def sample(self) -> tuple[float, ...]:
        """Load of each core since the previous call (or construction), 0..100, in core order."""
        if self._file is None:
            return tuple(psutil.cpu_percent(percpu=True, interval=None))
        self._file.seek(0)
        now = _read_ticks(self._file.read())
        if len(now) != len(self._last):  # a core went on- or offline: start over from this reading
            self._last = now
            self.count = len(now)
            return tuple(0.0 for _ in now)
        loads = []
        for (busy, total), (busy0, total0) in zip(now, self._last, strict=True):
            span = total - total0
            loads.append(min(100.0, max(0.0, 100.0 * (busy - busy0) / span)) if span > 0 else 0.0)
        self._last = now
        return tuple(loads)
