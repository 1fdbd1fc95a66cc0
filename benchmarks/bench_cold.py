"""What one piece of the agent's sampler work costs hot (run back to back) and cold (after a pause).

    python benchmarks/bench_cold.py [--repeats 40] [--pauses 0,0.0001,0.001,0.01,0.1]

Why: the agent's sampler wakes ten times a second, and its per-sample work, timed part by part inside a
loop's process, costs several times what the same parts cost in a micro-benchmark that runs them back to
back. This script shows how much of that is the pause itself: the same work (a sample like an agent's
for a 1 ms training step, encoded by :meth:`~torchpar_top.contract.messages.Message.to_json`: orjson
and the finiteness check) timed right after another run of it, and after a pause of each length, the
pause spent asleep (``time.sleep``) or spinning on the clock (the thread on its core all along).
Printed per pause: the median wall time of the work (µs) over ``--repeats`` runs.

Read: where the asleep and the spinning figures grow alike with the pause, the pause's length is what
makes the work slow (what the thread had in the core's caches, and its branch history, is gone by the
time it runs again), not waking from sleep; the sampler's work then costs what the cold figure says,
whatever it costs back to back.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes.recordings import sample
from torchpar_top.contract import messages as m
from torchpar_top.contract.vocab import Role, StepSource


def a_sample() -> m.Sample:
    """A sample like an agent's in a launch-bound loop: the tests' two-stream sample with ~100 step
    ends, five whole steps, a dozen thread roles and the memory."""
    steps = m.Steps(
        source=StepSource.OPTIMIZER,
        count=12_000,
        seconds=14.2,
        phases=m.StepPhases(forward=4.0, backward=6.0, optimizer=3.0, other=1.2),
        ends=tuple(1_700_000_000.0 + i * 0.001 for i in range(100)),
        recent=tuple(
            m.StepRecord(end=1_700_000_000.0 + i * 0.02, phases=m.StepPhases(forward=0.0004, backward=0.0005))
            for i in range(5)
        ),
        timed=600,
    )
    return dataclasses.replace(
        sample(streams=2),
        t=time.time(),
        roles=tuple(m.ThreadRole(tid=1000 + i, role=Role.PYTHON) for i in range(12)),
        steps=steps,
        memory=m.Memory(rss_bytes=1 << 30, devices=()),
    )


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def median_us(work: m.Sample, pause: float, how: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if pause:
            time.sleep(pause) if how == "asleep" else spin(pause)
        else:
            work.to_json()  # back to back: the run before warms this one
        t = time.perf_counter_ns()
        work.to_json()
        times.append(time.perf_counter_ns() - t)
    return statistics.median(times) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--pauses", default="0,0.0001,0.001,0.01,0.1")
    args = parser.parse_args()
    work = a_sample()
    work.to_json()
    print(f"a sample's to_json ({len(work.to_json())} bytes), median of {args.repeats} runs:")
    for pause in (float(p) for p in args.pauses.split(",")):
        if not pause:
            print(f"  back to back: {median_us(work, 0.0, '', args.repeats):7.1f} µs")
            continue
        asleep = median_us(work, pause, "asleep", args.repeats)
        spun = median_us(work, pause, "spinning", args.repeats)
        print(f"  after {pause * 1e3:g} ms asleep: {asleep:7.1f} µs; spinning: {spun:7.1f} µs")


if __name__ == "__main__":
    main()
