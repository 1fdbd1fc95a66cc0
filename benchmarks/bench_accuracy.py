"""Accuracy of the host probes: a core and a thread held at known duty cycles, read by our samplers.

    python benchmarks/bench_accuracy.py [--seconds 3]

A child process pinned to core 0 spins for ``duty`` of every 10 ms and sleeps the rest. The core
sampler reads core 0 and the thread sampler reads the child's thread; both should read ``duty`` within
5 points (the budget in ARCHITECTURE.md). Other load on the machine adds to the core's reading, not to
the thread's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from torchpar_top.probes.host.cores import CoreSampler
from torchpar_top.probes.host.threads import ThreadSampler

SPIN = r"""
import os, sys, time
os.sched_setaffinity(0, {0})
duty, period = float(sys.argv[1]), 0.010
while True:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duty * period:
        pass
    time.sleep(max(0.0, period - (time.perf_counter() - t0)))
"""


def measure(duty: float, seconds: float) -> tuple[float, float]:
    """Mean reading of core 0 and of the spinning thread over ``seconds`` at 10 Hz."""
    child = subprocess.Popen([sys.executable, "-c", SPIN, str(duty)])
    try:
        cores, threads = CoreSampler(), ThreadSampler(child.pid)
        time.sleep(0.5)
        cores.sample()
        threads.sample()
        core_readings, thread_readings = [], []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.1)
            core_readings.append(cores.sample()[0])
            thread_readings.append(sum(t.cpu_percent for t in threads.sample()))
        return statistics.mean(core_readings), statistics.mean(thread_readings)
    finally:
        child.kill()
        child.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    print(f"{'duty':>6}{'core 0 reads':>14}{'thread reads':>14}")
    for duty in (0.25, 0.5, 0.75, 1.0):
        core, thread = measure(duty, args.seconds)
        print(f"{duty * 100:5.0f}%{core:13.1f}%{thread:13.1f}%")
    print(f"({os.cpu_count()} cores; sampled every 0.1 s for {args.seconds} s each)")


if __name__ == "__main__":
    main()
