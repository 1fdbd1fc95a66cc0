"""Per-core CPU load of the host, via psutil."""

from __future__ import annotations

import psutil


class CoreSampler:
    """Per-core CPU load in percent since the previous :meth:`sample`.

    ``psutil.cpu_percent(interval=None)`` keeps its reference reading per calling thread, so create
    the sampler in the thread that will call :meth:`sample` and sample only from that thread.
    Any other ``psutil.cpu_percent(percpu=True)`` call made in that thread moves the reference too.
    """

    def __init__(self) -> None:
        """Prime psutil: its first non-blocking call returns a meaningless 0.0 per core."""
        primed = psutil.cpu_percent(percpu=True, interval=None)
        self.count: int = len(primed)
        """Number of logical cores (the length of every sample)."""

    def sample(self) -> tuple[float, ...]:
        """Load of each core since the previous call (or construction), 0..100, in core order."""
        return tuple(psutil.cpu_percent(percpu=True, interval=None))
