"""intra-op: one large matmul at a time, split over the intra-op thread pool.

The frontend runs each matmul eagerly (a synchronous device: depth 0). ``+``/``-`` in torchpar-top change
``torch.set_num_threads`` here; the agent applies it between matmuls. Each second the measured GFLOP/s
at the current thread count is reported, and the scaling table fills in.
"""

from __future__ import annotations

import time

import torch

SIZE = 1024
REPORT_EVERY = 1.0


def run(agent, size: int = SIZE) -> None:
    """Multiply until stopped; report GFLOP/s per thread count."""
    cpu = agent.eager_device("cpu (eager)")
    agent.throughput_from(lambda: cpu.completed, "mm/s")
    a, b = torch.randn(size, size), torch.randn(size, size)
    out = torch.empty(size, size)
    flop = 2.0 * size**3
    # per thread count: (total seconds, matmuls)
    totals: dict[int, list[float]] = {}
    agent.log(
        f"experiment intra-op: mm {size}×{size} (2·n³ = {flop / 1e9:.2f} GFLOP each), "
        f"{torch.get_num_threads()} intra-op threads; press +/- to change"
    )
    last_report = time.perf_counter()
    while agent.running:
        threads = torch.get_num_threads()
        t0 = time.perf_counter()
        with cpu.op():
            torch.mm(a, b, out=out)
        t1 = time.perf_counter()
        acc = totals.setdefault(threads, [0.0, 0])
        acc[0] += t1 - t0
        acc[1] += 1
        agent.step()
        if t1 - last_report >= REPORT_EVERY:
            last_report = t1
            seconds, count = totals[threads]
            agent.scaling(threads, flop * count / seconds / 1e9, int(count))
