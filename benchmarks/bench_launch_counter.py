"""Per-op cost of launch counting, measured on CPU ops, side by side in one run.

    python benchmarks/bench_launch_counter.py [--ops 200000] [--repeats 7]

Runs the same small op (``torch.add(a, b, out=c)`` on 1-element tensors, about the cost of a CUDA
launch call from Python) plain, under the agent's ``LaunchCounter`` (``TorchFunctionMode``) as
deployed (CPU tensors: the device check says "not CUDA"), under the counter forced to count every op as
device 0 (the CUDA path: count + first-launch time); for comparison, under a function mode that only
calls through (the floor) and a minimal counting ``TorchDispatchMode``. Repeats are interleaved;
prints the median µs/op and the overhead over plain.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from torchpar_top.probes.agent.cuda_launch import LaunchCounter


class _BareFunctionMode(TorchFunctionMode):
    """Calls through and does nothing else: the floor of any TorchFunctionMode."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        return func(*args, **(kwargs or {}))


class _DispatchCounter(TorchDispatchMode):
    """Counts ATen ops (also sees backward ops); the alternative DESIGN.md mentions."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.n += 1
        return func(*args, **(kwargs or {}))


def _loop(n: int, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> float:
    add = torch.add
    t0 = time.perf_counter()
    for _ in range(n):
        add(a, b, out=c)
    return (time.perf_counter() - t0) / n * 1e6


def _under(mode_factory: Callable[[], Any] | None, n: int, *tensors: torch.Tensor) -> float:
    if mode_factory is None:
        return _loop(n, *tensors)
    with mode_factory():
        return _loop(n, *tensors)


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tensors = (torch.ones(1), torch.ones(1), torch.empty(1))
    variants: dict[str, Callable[[], Any] | None] = {
        "plain": None,
        "bare TorchFunctionMode (floor)": _BareFunctionMode,
        "LaunchCounter (CPU tensors)": LaunchCounter,
        "LaunchCounter (count as cuda:0)": lambda: LaunchCounter(device_of=lambda out, a: 0),
        "TorchDispatchMode counter": _DispatchCounter,
    }
    for factory in variants.values():  # warm-up
        _under(factory, 2000, *tensors)
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, factory in variants.items():
            runs[name].append(_under(factory, args.ops, *tensors))
    base = statistics.median(runs["plain"])
    print(f"torch {torch.__version__}, {args.ops} ops x {args.repeats} repeats, 1 intra-op thread")
    print(f"{'variant':34s} {'median µs/op':>12s} {'min µs/op':>10s} {'overhead µs/op':>15s}")
    for name, values in runs.items():
        med = statistics.median(values)
        print(f"{name:34s} {med:12.3f} {min(values):10.3f} {med - base:15.3f}")


if __name__ == "__main__":
    main()
