"""The async experiment's item in plain torch, no agent: what asynchronous launch gives on this GPU.

    python benchmarks/gpu_async_plain.py items [--sizes 1000,1500,2000]
    python benchmarks/gpu_async_plain.py kernels TRACE.json [TRACE.json ...]

``items``: for each size n, the experiment's item (``torch.mm(torch.randn(n, n), w)`` on cuda:0) launched
back to back (3,000 items, one CUDA event pair around them all: items/s by the wall clock and the GPU's
µs per item) and synchronised after each item (1,000 items, an event pair around each: items/s and the
GPU's µs per item), with the SM clock, power and throttle reasons that NVML read every 50 ms meanwhile.
It answers what the experiment's scoreboard should show without the agent: on an H200 (2026-11-27)
n = 1000 ran 17,600 items/s back to back against 8,936 synchronised (1.97x), n = 1500 5,201 against
4,258 (1.22x), n = 2000 2,780 against 2,552 (1.09x), at 1,980 MHz without throttling.

``kernels``: the GPU ops of profiler traces (the GPU check's ``--keep-traces``) by name: count, mean µs.

Needs torch with CUDA and nvidia-ml-py; not run by the tests (there is no GPU where they run).
"""

from __future__ import annotations

import argparse
import gzip
import json
import threading
import time
from collections import defaultdict
from typing import Any


def items(sizes: list[int], back_to_back: int = 3000, synced: int = 1000) -> None:
    import pynvml
    import torch

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    readings: list[tuple[float, int, float, int]] = []
    stop = threading.Event()

    def read_nvml() -> None:
        while not stop.wait(0.05):
            readings.append(
                (
                    time.perf_counter(),
                    pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                    pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                    pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle),
                )
            )

    def nvml_between(t0: float, t1: float) -> str:
        got = [r for r in readings if t0 <= r[0] <= t1]
        if not got:
            return "no NVML reading"
        clocks = [r[1] for r in got]
        reasons = sorted({hex(r[3]) for r in got})
        return f"SM {min(clocks)}-{max(clocks)} MHz, {max(r[2] for r in got):.0f} W max, throttle {reasons}"

    def item(n: int, w: Any) -> None:
        torch.mm(torch.randn(n, n, device="cuda:0"), w)

    threading.Thread(target=read_nvml, daemon=True).start()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for n in sizes:
        w = torch.randn(n, n, device="cuda:0")
        for _ in range(50):  # kernels loaded, cuBLAS started, the allocator's blocks taken
            item(n, w)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        for _ in range(back_to_back):
            item(n, w)
        end.record()
        end.synchronize()
        wall = time.perf_counter() - t0
        gpu_us = start.elapsed_time(end) * 1000.0 / back_to_back
        print(
            f"n={n} back to back: {back_to_back / wall:,.0f} items/s, GPU {gpu_us:.1f} µs an item; "
            f"{nvml_between(t0, t0 + wall)}",
            flush=True,
        )
        t0, gpu_ms = time.perf_counter(), 0.0
        for _ in range(synced):
            start.record()
            item(n, w)
            end.record()
            end.synchronize()
            gpu_ms += start.elapsed_time(end)
        wall = time.perf_counter() - t0
        print(
            f"n={n} synchronised: {synced / wall:,.0f} items/s, GPU {gpu_ms * 1000.0 / synced:.1f} µs an "
            f"item; {nvml_between(t0, t0 + wall)}",
            flush=True,
        )
    stop.set()


def kernels(paths: list[str], top: int = 8) -> None:
    for path in paths:
        opener: Any = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            events = json.load(f)["traceEvents"]
        ops: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for e in events:
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                ops[e["name"][:90]][0] += 1
                ops[e["name"][:90]][1] += float(e.get("dur", 0.0))
        print(f"== {path}")
        for name, (count, dur) in sorted(ops.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"   {int(count):6d} x {dur / max(count, 1):8.1f} µs  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p_items = sub.add_parser("items", help="the item back to back and synchronised, per size")
    p_items.add_argument("--sizes", default="1000,1500,2000", help="comma-separated n")
    p_kernels = sub.add_parser("kernels", help="GPU ops of profiler traces by name")
    p_kernels.add_argument("traces", nargs="+")
    args = parser.parse_args()
    if args.what == "items":
        items([int(n) for n in args.sizes.split(",")])
    else:
        kernels(args.traces)


if __name__ == "__main__":
    main()
