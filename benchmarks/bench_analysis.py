"""Cost of ``torchpar_top.analysis`` on the biggest shipped trace: loading, analysing, replay windows.

    python benchmarks/bench_analysis.py [--trace PATH] [--windows 100] [--repeats 5]

Prints the time to load (read, gunzip, parse JSON, build events), to analyse (queues, lanes, overlap,
frontend), and the cost of one replay window when the whole trace is stepped through in ``--windows``
equal windows, and of a window spanning the whole trace. Medians of ``--repeats`` runs, with the range.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from pathlib import Path

from torchpar_top.analysis import analyse, load_trace

BIGGEST = Path(__file__).resolve().parents[1] / "tests" / "data" / "hta" / "a100_sxm4_5_streams.json.gz"


def timed(fn, repeats: int) -> tuple[float, float, float, object]:
    """(median, min, max) seconds of ``repeats`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=BIGGEST)
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    med, lo, hi, trace = timed(lambda: load_trace(args.trace), args.repeats)
    events = sum(len(r.events) for r in trace.ranks)
    print(f"trace: {args.trace.name}, {events} complete events, {len(trace.ranks)} rank(s)")
    print(f"load (gunzip + JSON + events): {med * 1e3:.0f} ms (min {lo * 1e3:.0f}, max {hi * 1e3:.0f})")
    med, lo, hi, a = timed(lambda: analyse(trace), args.repeats)
    print(f"analyse:                       {med * 1e3:.0f} ms (min {lo * 1e3:.0f}, max {hi * 1e3:.0f})")
    streams = len(a.streams())
    lanes = sum(len(r.frontend) for r in a.ranks)
    print(f"  {streams} streams, {sum(len(r.devices) for r in a.ranks)} device(s), {lanes} frontend lane(s)")

    n = args.windows
    edges = [a.start + (a.end - a.start) * i / n for i in range(n + 1)]
    a.window(a.start, a.end)  # first use builds each queue's range-max table: timed apart below

    def step() -> None:
        for t0, t1 in itertools.pairwise(edges):
            a.window(t0, t1)

    med, lo, hi, _ = timed(step, args.repeats)
    print(
        f"{n} consecutive windows:         {med * 1e3:.1f} ms, {med / n * 1e6:.0f} µs per window "
        f"(min {lo / n * 1e6:.0f}, max {hi / n * 1e6:.0f})"
    )
    med, lo, hi, _ = timed(lambda: a.window(a.start, a.end), args.repeats * 20)
    print(f"one whole-trace window:        {med * 1e6:.0f} µs (min {lo * 1e6:.0f}, max {hi * 1e6:.0f})")
    fresh = analyse(trace)
    med, lo, hi, _ = timed(lambda: fresh.window(fresh.start, fresh.end), 1)
    print(f"first window of a fresh analysis (builds the range-max tables): {med * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
