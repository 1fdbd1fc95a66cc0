"""Memory of the session store over an hour at 10 Hz: bounded ring buffers stay flat.

    python benchmarks/bench_memory.py [--hours 1]

Feeds the store the messages an hour of the async experiment produces at 10 Hz (36,000 child samples,
36,000 host samples of 16 cores and 12 threads, a log line a second), takes a snapshot every 10
samples as the TUI does, and prints the traced Python memory after each simulated 10 minutes.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

from torchpar_top.contract.messages import ExecutorRow, Frontend, Sample, ThreadRole
from torchpar_top.contract.snapshot import HostSample, ThreadInfo
from torchpar_top.contract.vocab import ExecutorKind, Mode, Quantity, Role
from torchpar_top.model.store import SessionStore


def sample(i: int) -> Sample:
    """A realistic child sample."""
    return Sample(
        t=float(i),
        window=0.1,
        mode=Mode.ASYNC if i % 600 < 300 else Mode.SYNC,
        throughput=1500.0 + i % 7,
        unit="it/s",
        num_threads=2,
        frontend=Frontend(busy=0.1, wait=0.9),
        overlap=0.0,
        executors=(
            ExecutorRow(
                name="cpu-stream:0",
                kind=ExecutorKind.EMULATED_STREAM,
                emulated=True,
                quantity=Quantity.DEPTH,
                value=i % 1024,
                capacity=1024,
                launched=i + 1024,
                completed=i,
                busy=0.99,
                blocked=0.9,
            ),
        ),
        roles=(ThreadRole(100, Role.FRONTEND), ThreadRole(101, Role.STREAM_EXECUTOR, "cpu-stream:0")),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=1.0)
    args = parser.parse_args()
    store = SessionStore("async")
    threads = tuple(ThreadInfo(100 + k, "python", Role.INTRAOP, 50.0) for k in range(12))
    tracemalloc.start()
    print(f"{'simulated':>10}{'traced memory':>16}")
    for i in range(int(args.hours * 36000)):
        store.on_message(sample(i))
        store.on_host(HostSample(float(i), tuple(float(k) for k in range(16)), threads))
        if i % 10 == 0:
            store.add_log("stdout", f"step {i}")
            store.snapshot()
        if i % 6000 == 5999:
            gc.collect()
            current, _ = tracemalloc.get_traced_memory()
            print(f"{(i + 1) / 600:8.0f} min{current / 2**20:13.2f} MiB")


if __name__ == "__main__":
    main()
