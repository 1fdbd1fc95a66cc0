"""What building a snapshot costs: ``SessionStore.snapshot()`` on a full store, and the share of it that
``model.snapshot.build`` spends deriving the figures (lanes' means, queues summed, core load, primary
rank, the scoreboard's modes together and their ratio).

A full store: 16 cores, 4 emulated streams with running/core-wait splits, 600 samples of history (an
hour at 10 Hz keeps the same), 500 log lines. Prints microseconds per call (median of ``--repeat`` runs
of ``--number`` calls each).

    python benchmarks/bench_snapshot_build.py
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import timeit

from torchpar_top.contract import messages as m
from torchpar_top.contract.snapshot import HostSample
from torchpar_top.contract.vocab import LogSource
from torchpar_top.model import snapshot as builder
from torchpar_top.model.store import HISTORY, SessionStore


def full_store() -> SessionStore:
    store = SessionStore("async", interval=0.1)
    rows = tuple(
        m.ExecutorRow(
            name=f"cpu-stream:{k}",
            kind="emulated-stream",
            quantity="depth",
            value=100 + k,
            capacity=1024,
            launched=10_000,
            completed=9_900,
            emulated=True,
            busy=0.5,
            blocked=0.1,
            running=0.4,
            core_wait=0.1,
        )
        for k in range(4)
    )
    for i in range(HISTORY):
        store.on_message(
            m.Sample(
                t=float(i),
                window=0.1,
                mode="async",
                throughput=100.0,
                unit="it/s",
                num_threads=4,
                frontend=m.Frontend(busy=0.5, wait=0.3, core_wait=0.1),
                overlap=0.2,
                executors=rows,
            )
        )
        store.on_host(HostSample(float(i), tuple(50.0 for _ in range(16)), None))
    for i in range(500):
        store.add_log(LogSource.STDOUT, f"line {i}")
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    store = full_store()
    snap = store.snapshot()

    def per_call(fn) -> float:
        runs = timeit.repeat(fn, number=args.number, repeat=args.repeat)
        return statistics.median(runs) / args.number * 1e6

    whole = per_call(store.snapshot)
    fields = {f.name: getattr(snap, f.name) for f in dataclasses.fields(snap)}
    derive = per_call(lambda: builder._derived(fields, snap.interval))
    print(f"SessionStore.snapshot(): {whole:.1f} µs per call")
    print(
        f"  of which deriving the figures (model.snapshot._derived): {derive:.1f} µs ({derive / whole:.0%})"
    )


if __name__ == "__main__":
    main()
