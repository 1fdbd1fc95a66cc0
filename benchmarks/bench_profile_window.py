"""What a profiler window (the ``h`` key) costs the workload's frontend, outside the window itself.

    python benchmarks/bench_profile_window.py [--rounds 5] [--trace PATH]

Two parts, each with a frontend-like loop on a thread of the measuring process (small torch ops, the
GIL taken and released as a launching frontend does) whose progress is counted:

1. **Reading the window's trace**: the agent reads the exported Chrome trace and computes HTA's queue
   from it (``hta.analyse_file``); on an H200 a 0.5 s window of the async experiment wrote 21-27 MB of
   JSON, 62,000 events. Read in the workload's process, as before, that JSON and the analysis hold the
   GIL while the frontend wants it; read in a process of its own (``cuda.analyse_apart``), they do not.
   Alternated rounds, in the same process: the reading's wall time, and the loop's speed meanwhile as a
   share of its speed just before (1.0: not slowed). Default trace: the biggest shipped one (an A100's,
   108,936 events, 1.4 MB gzipped).
2. **The first window's start**: ``torch.profiler.profile().start()`` imports ``torch._inductor`` on
   its first call in a process (``prepare_trace`` reads inductor's cudagraphs setting through
   ``hasattr(torch, "_inductor")``, which imports it and with it sympy, dynamo and torch.distributed:
   800-odd modules), holding the GIL; the agent's window (``cuda._Window``) starts the autograd profiler
   that torch.profiler wraps where inductor is not loaded. In fresh processes, alternated: the first
   start's wall time and the loop's speed meanwhile; a second start in the same process for comparison.

Medians and ranges over ``--rounds``. Prints a table; no assertion (the machine is noisy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIGGEST = ROOT / "tests" / "data" / "hta" / "a100_sxm4_5_streams.json.gz"


class Loop:
    """A frontend-like loop on its own thread: rounds of small matmuls, counted."""

    def __init__(self) -> None:
        import torch

        torch.set_num_threads(1)
        self.count = 0
        self._stop = threading.Event()
        self._a = torch.randn(64, 64)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import torch

        a = self._a
        while not self._stop.is_set():
            for _ in range(10):
                a = torch.mm(a, a).tanh_()
            self.count += 1

    def __enter__(self) -> Loop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def speed_during(self, work: Callable[[], object], before: float = 1.0) -> tuple[float, float]:
        """``work()``'s wall time, and the loop's speed while it ran over its speed in the ``before`` s
        just ahead of it."""
        c0, t0 = self.count, time.perf_counter()
        time.sleep(before)
        c1, t1 = self.count, time.perf_counter()
        work()
        c2, t2 = self.count, time.perf_counter()
        base = (c1 - c0) / (t1 - t0)
        return t2 - t1, ((c2 - c1) / (t2 - t1)) / base if base else float("nan")


def _table(title: str, what: str, got: dict[str, list[tuple[float, float]]], digits: int) -> None:
    """Per row, the wall times' and the loop speeds' medians and ranges."""
    print(title)
    print(f"{what:38s} {'wall s (median, range)':>26s}   {'loop speed meanwhile':>22s}")
    for name, values in got.items():
        walls, speeds = [w for w, _ in values], [s for _, s in values]
        wall = f"{statistics.median(walls):8.{digits}f} ({min(walls):.{digits}f}-{max(walls):.{digits}f})"
        speed = f"{statistics.median(speeds):8.2f} ({min(speeds):.2f}-{max(speeds):.2f})"
        print(f"{name:38s} {wall}     {speed}")


def reading(rounds: int, trace: Path) -> None:
    from torchpar_top.probes.agent import cuda, hta

    ways = {
        "in the workload's process": lambda: hta.analyse_file(str(trace)),
        "in a process of its own": lambda: cuda.analyse_apart(str(trace)),
    }
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    with Loop() as loop:
        time.sleep(1.0)  # warm
        for _ in range(rounds):
            for name, work in ways.items():
                got[name].append(loop.speed_during(work))
    _table(f"reading a window's trace ({trace.name}), {rounds} alternated rounds", "where", got, 2)


START_CHILD = """
import json, sys, time
sys.path.insert(0, {bench!r})
from bench_profile_window import Loop

def window():
    if {which!r} == "torch.profiler":
        from torch.profiler import ProfilerActivity, profile

        return profile(activities=[ProfilerActivity.CPU])
    from torchpar_top.probes.agent.cuda import _Window

    return _Window(cuda=False)

out = {{}}
with Loop() as loop:
    time.sleep(1.0)
    for name in ("first start", "second start"):
        prof = window()
        out[name] = loop.speed_during(prof.start)
        prof.stop()
print(json.dumps(out))
"""


def first_start(rounds: int) -> None:
    got: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for which in ("torch.profiler", "the agent's window"):
            code = START_CHILD.format(bench=str(Path(__file__).resolve().parent), which=which)
            done = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
            )
            for name, value in json.loads(done.stdout.strip().splitlines()[-1]).items():
                got.setdefault(f"{which}: {name}", []).append(tuple(value))
    _table(f"\na profiler's start in a fresh process, {rounds} processes each, alternated", "which", got, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trace", type=Path, default=BIGGEST)
    parser.add_argument("--only", choices=("reading", "start"), default=None)
    args = parser.parse_args()
    if args.only in (None, "reading"):
        reading(args.rounds, args.trace)
    if args.only in (None, "start"):
        first_start(args.rounds)


if __name__ == "__main__":
    main()
