"""What a wake-up costs: one agent sample decoded right after the thread slept, for a range of sleeps.

    python benchmarks/bench_wakeups.py [--calls 60] [--rate 70]

The same decode (``messages.decode`` of a torchrun rank's sample: a DDP loop at ``--rate`` steps a
second, its step ends and recent steps, as the monitor reads ten a second per rank) is timed with
``time.thread_time`` after sleeping 0, 0.1, 1, 10, 50 and 100 ms, ``--calls`` times each, the sleeps
interleaved call by call so that the machine's noise hits all of them. Then the same after a 100 ms sleep
with two and four samples decoded back to back in the one wake-up (how a frame that reads every rank's
samples pays): the first pays for the wake-up, the rest ride it.

Why it matters (``sources/live/pacing.py``): a reader thread that wakes for every sample pays the
after-sleep figure per sample; samples read in the screen's frame share one wake-up with the frame.
Figures: median and minimum µs of CPU per sample.

Then what a wake-up of the screen's thread costs with nothing to do: an asyncio loop whose one task
sleeps 1/RATE s and does nothing, for ``--loop-seconds`` at 10 and at 50 wake-ups a second; its thread's
CPU time (``time.thread_time``: the kernel's part included) per wake-up and in % of a core. Every wake-up
a frame adds (a second timer, a writer thread woken, an input thread looking) costs about that.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes.steps import Rank
from torchpar_top.contract import messages as m

SLEEPS = (0.0, 0.0001, 0.001, 0.01, 0.05, 0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=60, help="decodes per sleep (default 60)")
    ap.add_argument("--rate", type=float, default=70, help="the rank's steps a second (default 70)")
    ap.add_argument("--loop-seconds", type=float, default=10, help="per rate, for the idle loop (default 10)")
    args = ap.parse_args()
    rank = Rank(step=1 / args.rate, forward=0.3 / args.rate, backward=0.3 / args.rate, comm=0.3 / args.rate)
    rank.sample()
    sample = rank.sample().to_json()
    for _ in range(50):  # warm: imports, converters
        m.decode(sample)
    after: dict[float, list[float]] = {s: [] for s in SLEEPS}
    batched: dict[int, list[float]] = {2: [], 4: []}
    for _ in range(args.calls):
        for nap in SLEEPS:
            if nap:
                time.sleep(nap)
            t = time.thread_time()
            m.decode(sample)
            after[nap].append(time.thread_time() - t)
        for n in batched:
            time.sleep(0.1)
            t = time.thread_time()
            for _ in range(n):
                m.decode(sample)
            batched[n].append((time.thread_time() - t) / n)
    print(f"one agent sample ({len(sample)} bytes), µs of CPU to decode it (median, min of {args.calls}):")
    print("| slept before | median | min |")
    print("|---|---|---|")
    for nap, ts in after.items():
        print(f"| {nap * 1000:g} ms | {statistics.median(ts) * 1e6:.1f} | {min(ts) * 1e6:.1f} |")
    for n, ts in batched.items():
        print(
            f"| 100 ms, {n} in a row (per sample) | {statistics.median(ts) * 1e6:.1f} | {min(ts) * 1e6:.1f} |"
        )
    print()
    print("an asyncio loop waking to do nothing (µs of CPU per wake-up, % of a core):")
    print("| wake-ups a second | per wake-up | % of a core |")
    print("|---|---|---|")
    for rate in (10, 50):
        per, share = asyncio.run(_idle_loop(rate, args.loop_seconds))
        print(f"| {rate} | {per * 1e6:.0f} | {share * 100:.3f} |")


async def _idle_loop(rate: float, seconds: float) -> tuple[float, float]:
    """(CPU s per wake-up, CPU share) of a loop whose task sleeps 1/``rate`` s ``seconds`` long."""
    end = time.monotonic() + seconds
    t0, c0, n = time.monotonic(), time.thread_time(), 0
    while time.monotonic() < end:
        await asyncio.sleep(1 / rate)
        n += 1
    cpu, wall = time.thread_time() - c0, time.monotonic() - t0
    return cpu / max(1, n), cpu / wall


if __name__ == "__main__":
    main()
