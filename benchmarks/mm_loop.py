"""A workload that uses every core: 1024² float32 matmuls at 2 intra-op threads for SECONDS seconds.

    python benchmarks/mm_loop.py SECONDS OUT.json

Writes ``{"gflops": ..., "threads": ..., "seconds": ...}`` to OUT (stdout may be a monitor's log pane).
``bench_tui.py --footprint`` runs it alone and under ``torchpar-top run`` to measure what the monitor
costs a workload that needs every core.
"""

import json
import sys
import time

import torch


def main() -> None:
    seconds, out = float(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(2)
    n = 1024
    a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    for _ in range(3):  # warm-up: the OpenMP team starts
        torch.mm(a, b, out=c)
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        torch.mm(a, b, out=c)
        count += 1
    elapsed = time.perf_counter() - t0
    with open(out, "w") as f:
        json.dump(
            {
                "gflops": 2.0 * n**3 * count / elapsed / 1e9,
                "threads": torch.get_num_threads(),
                "seconds": elapsed,
            },
            f,
        )


if __name__ == "__main__":
    main()
