"""What the step anatomy costs the monitor: the store's per-sample bookkeeping and per-snapshot views,
and the steps panel's and ranks table's rows, per call.

    python benchmarks/bench_steps.py [--ranks 2,8] [--rate 500]

Synthetic agents (``tests/fakes/steps.py``) send 10 Hz samples of a loop at ``--rate`` steps/s (its step
ends and whole recent steps included, as the agent sends them); the figures are microseconds of one
core per call, the median of 5 rounds. At 10 Hz, a snapshot's figure times 10 is its share of a core in
millionths per second (100 µs per call = 0.1 % of a core).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes.fake_session import FakeSession, make_steps_snapshot
from fakes.steps import Rank, hello
from torchpar_top.model.store import SessionStore


def per_call(fn, n: int) -> float:
    """Median over 5 rounds of the CPU microseconds one call of ``fn`` takes."""
    rounds = []
    for _ in range(5):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        rounds.append((time.thread_time() - t0) / n * 1e6)
    return statistics.median(rounds)


def store_figures(ranks: int, rate: float) -> dict[str, float]:
    """The store with ``ranks`` stepping agents after 60 s: a sample's cost and a snapshot's, with steps
    and without (the same store fed samples that carry no steps)."""
    out = {}
    for steps in (True, False):
        st = SessionStore("run")
        agents = [
            Rank(step=1 / rate, offset=0.013 * r, forward=0.4 / rate, backward=0.6 / rate)
            for r in range(ranks)
        ]
        for r in range(ranks):
            st.on_message(hello(100 + r, r), source=r)
        msgs = []
        for _ in range(600):
            for r, a in enumerate(agents):
                m = a.sample()
                if not steps:
                    m = dataclasses.replace(m, steps=None, memory=None)
                msgs.append((m, r))
        for m, r in msgs[: -ranks * 50]:
            st.on_message(m, source=r)
        tail = msgs[-ranks * 50 :]
        key = "steps" if steps else "no steps"
        t0 = time.thread_time()
        for m, r in tail:
            st.on_message(m, source=r)
        out[f"sample ({key})"] = (time.thread_time() - t0) / len(tail) * 1e6
        # a snapshot after every rank's next sample (what a 10 Hz frame finds), timed alone
        fresh = []
        for _ in range(100):
            for r, a in enumerate(agents):
                m = a.sample()
                st.on_message(m if steps else dataclasses.replace(m, steps=None, memory=None), source=r)
            t0 = time.thread_time()
            st.snapshot()
            fresh.append((time.thread_time() - t0) * 1e6)
        out[f"snapshot ({key}), median"] = statistics.median(fresh)
        out[f"snapshot ({key}), mean"] = statistics.fmean(fresh)  # the straggler is judged once a second
    return out


async def panel_figures(ranks: int) -> dict[str, float]:
    """The steps panel's and the ranks table's rows for a snapshot of ``ranks`` stepping ranks."""
    from torchpar_top.tui.app import TorchparTopApp
    from torchpar_top.tui.widgets.ranks import RanksPanel
    from torchpar_top.tui.widgets.steps import StepsPanel

    snap = make_steps_snapshot(ranks=ranks)
    app = TorchparTopApp(FakeSession(snap), render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        app.refresh_from_session(force=True)
        await pilot.pause()
        steps, table = app.query_one(StepsPanel), app.query_one(RanksPanel)
        return {
            "steps panel rows": per_call(lambda: steps.build(snap, 116), 500),
            "ranks table rows": per_call(lambda: table.build(snap, 41), 500),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2,8")
    parser.add_argument("--rate", type=float, default=500.0, help="steps per second of each rank")
    args = parser.parse_args()
    for ranks in (int(x) for x in args.ranks.split(",")):
        figures = store_figures(ranks, args.rate)
        figures |= asyncio.run(panel_figures(ranks))
        for name, us in figures.items():
            print(f"{ranks} ranks, {args.rate:g} steps/s  {name:24} {us:8.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
