"""Cost of the end-of-run tally and of one Prometheus scrape, on full-history snapshots.

    python benchmarks/bench_verdict.py [--cores 16] [--executors 4] [--gpus 8] [--repeats 2000]

The tally (``sinks/verdict.py``) is fed one snapshot per interval for the whole run; a scrape
(``sinks/metrics.py``) builds every family from one snapshot and renders the text. Both run on the
monitor's side, so their cost adds to the app's own CPU. The snapshot is the fake session's (600
samples of history per series, as after a minute at 10 Hz), sized by the options. Prints medians and
ranges over ``--repeats`` calls, in microseconds of CPU time.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fakes.fake_session import make_snapshot
from prometheus_client import CollectorRegistry, generate_latest
from torchpar_top.sinks.metrics import SnapshotCollector
from torchpar_top.sinks.verdict import RunTally


def cpu_us(fn, repeats: int) -> tuple[float, float, float]:
    times = []
    for _ in range(repeats):
        t0 = time.process_time_ns()
        fn()
        times.append((time.process_time_ns() - t0) / 1000)
    return statistics.median(times), min(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--executors", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    snap = make_snapshot(cores=args.cores, executors=args.executors, gpus=args.gpus)
    hist = 600
    snap = dataclasses.replace(
        snap,
        frontend_busy=(0.3,) * hist,
        frontend_wait=(0.6,) * hist,
        frontend_core_wait=(0.1,) * hist,
        executors=tuple(
            dataclasses.replace(e, history=(5.0,) * hist, busy=(0.5,) * hist) for e in snap.executors
        ),
    )
    tally = RunTally()
    clock = iter(range(10**9))
    feed = cpu_us(lambda: tally.feed(dataclasses.replace(snap, t=1000 + 0.1 * next(clock))), args.repeats)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap, hostname="bench"))
    size = len(generate_latest(registry))
    scrape = cpu_us(lambda: generate_latest(registry), max(1, args.repeats // 10))
    report = cpu_us(lambda: tally.report(snap), max(1, args.repeats // 10))
    print(
        f"snapshot: {args.cores} cores, {args.executors} executors, {args.gpus} GPUs, "
        f"{hist} samples of history"
    )
    print(f"tally feed (per interval): median {feed[0]:.1f} µs (range {feed[1]:.1f}-{feed[2]:.1f})")
    print(f"report at the end: median {report[0]:.1f} µs")
    print(
        f"one scrape ({size} bytes of text): median {scrape[0]:.0f} µs "
        f"(range {scrape[1]:.0f}-{scrape[2]:.0f})"
    )


if __name__ == "__main__":
    main()
