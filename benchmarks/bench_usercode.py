"""Cost of the instrumentation ``torchpar-top run`` installs around user code, side by side in one run.

    python benchmarks/bench_usercode.py [--ops 200000] [--steps 300] [--repeats 7]

1. Per op: the same small op (``torch.add(a, b, out=c)`` on 1-element tensors, about the cost of a
   CUDA launch call from Python) plain, under a function mode that only calls through (the floor of any
   ``TorchFunctionMode``), under ``run``'s ``OpCounter`` (count + busy interval + sync-point check), in
   SYNC scope ``op`` on the CPU (one more call per op), under the CUDA agent's ``LaunchCounter`` (on CPU
   tensors, and forced to count every op as ``cuda:0``: its CUDA path), under a minimal counting
   ``TorchDispatchMode`` for comparison, and for a sync-point call (``.item()``: attribution walks the
   stack).
2. Per step: user-style loops plain, under the bare mode, under ``torchpar-top run`` as it runs by
   default (the op counter on for 5 % slices: :mod:`torchpar_top.probes.agent.usercode_sampling`, with a
   sampler thread at 10 Hz as in the child) and under ``run --every-op`` (the counter always on): a tiny
   MLP training step (about 40 torch calls in 0.2-0.4 ms: a function mode's fixed cost per call at its
   worst), a larger one (~5 ms), a loop of tiny ops with no optimizer and no DataLoader (its slices are
   switched by the fallback signal), and the tiny MLP under ``torch.compile``. Steps/s and the ratio to
   plain.

Repeats are interleaved; medians are printed.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torchpar_top.probes.agent.cuda_launch import LaunchCounter
from torchpar_top.probes.agent.usercode import UserCode
from torchpar_top.probes.agent.usercode_install import Instrumentation


class _Bare(TorchFunctionMode):
    """Calls through and does nothing else."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Call through."""
        return func(*args, **(kwargs or {}))


def _ops(n: int, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> float:
    """µs per small op."""
    add = torch.add
    t0 = time.perf_counter()
    for _ in range(n):
        add(a, b, out=c)
    return (time.perf_counter() - t0) / n * 1e6


def _items(n: int, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> float:
    """µs per ``.item()``."""
    t0 = time.perf_counter()
    for _ in range(n):
        a.item()
    return (time.perf_counter() - t0) / n * 1e6


def _train(
    steps: int, features: int = 64, hidden: int = 128, batch: int = 32, compiled: bool = False
) -> float:
    """Steps/s of an MLP training loop (its forward compiled with ``torch.compile`` when asked)."""
    torch.manual_seed(0)
    model: Any = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if compiled:
        model = _COMPILED.setdefault((features, hidden), torch.compile(model))
    x, y = torch.randn(batch, features), torch.randint(0, 10, (batch,))
    for _ in range(3 if compiled else 0):  # compiled once, outside the timing
        nn.functional.cross_entropy(model(x), y).backward()
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return steps / (time.perf_counter() - t0)


_COMPILED: dict[tuple[int, int], Any] = {}


def _tiny_ops(rounds: int, *_: Any) -> float:
    """Rounds/s of a loop with no optimizer and no DataLoader: 8 small ops and an ``.item()`` a round."""
    x = torch.ones(8)
    t0 = time.perf_counter()
    for _ in range(rounds):
        for _ in range(8):
            x = x * 1.0001
        x.sum().item()
    return rounds / (time.perf_counter() - t0)


#: The loops: a function and its arguments (after the number of steps), and how many steps per repeat
#: relative to ``--steps``.
LOOPS: dict[str, tuple[Callable[..., float], tuple, float]] = {
    "MLP 64-128-10, batch 32 (~0.3 ms steps)": (_train, (64, 128, 32), 3.0),
    "MLP 512-1024-10, batch 256 (~5 ms steps)": (_train, (512, 1024, 256), 0.1),
    "tiny ops, no optimizer, no DataLoader": (_tiny_ops, (), 100.0),
    "MLP 64-128-10 under torch.compile": (_train, (64, 128, 32, True), 3.0),
}


class _DispatchCounter(TorchDispatchMode):
    """Counts ATen ops (also sees backward ops): the heavier alternative to a function mode, for
    comparison."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.n += 1
        return func(*args, **(kwargs or {}))


#: Modes measured per op besides the agent's own instrumentation.
MODES: dict[str, Callable[[], Any]] = {
    "bare": _Bare,
    "launch-cpu": LaunchCounter,  # the CUDA agent's launch counter as deployed, on CPU tensors
    "launch-cuda0": lambda: LaunchCounter(device_of=lambda out, a: 0),  # its CUDA path: count + time
    "dispatch": _DispatchCounter,
}


def _under(setup: str, fn: Callable[..., float], *args: Any) -> float:
    """Run ``fn`` plain, under one of :data:`MODES`, or under the agent's instrumentation."""
    if setup == "plain":
        return fn(*args)
    if setup in MODES:
        with MODES[setup]():
            return fn(*args)
    user = UserCode(None, target="bench", every_op=setup == "every")
    if setup == "sync-op":
        user.agent.sync.set(True)
    stop = threading.Event()

    def sampler() -> None:  # the child's sampler thread: 10 Hz, sends sync points, pokes the switch
        while not stop.wait(0.1):
            user._after_sample()

    thread = threading.Thread(target=sampler, daemon=True)
    with Instrumentation(user):
        thread.start()
        try:
            return fn(*args)
        finally:
            stop.set()
            thread.join()


def main() -> None:
    """Measure and print both tables."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tensors = (torch.ones(1), torch.ones(1), torch.empty(1))
    per_op = {
        "plain": ("plain", _ops),
        "bare TorchFunctionMode (floor)": ("bare", _ops),
        "OpCounter (ASYNC)": ("every", _ops),
        "OpCounter (SYNC scope op, CPU)": ("sync-op", _ops),
        "CUDA LaunchCounter (CPU tensors)": ("launch-cpu", _ops),
        "CUDA LaunchCounter (as cuda:0)": ("launch-cuda0", _ops),
        "TorchDispatchMode counter": ("dispatch", _ops),
        "item() plain": ("plain", _items),
        "item() as a sync point": ("every", _items),
    }
    for setup, fn in per_op.values():
        _under(setup, fn, 2000, *tensors)
    runs: dict[str, list[float]] = {k: [] for k in per_op}
    loop = {name: {"plain": [], "bare": [], "agent": [], "every": []} for name in LOOPS}
    for _ in range(args.repeats):
        for name, (setup, fn) in per_op.items():
            runs[name].append(_under(setup, fn, args.ops // (10 if fn is _items else 1), *tensors))
        for name, (fn, extra, share) in LOOPS.items():
            steps = max(20, int(args.steps * share))
            for setup in loop[name]:
                loop[name][setup].append(_under(setup, fn, steps, *extra))
    print(f"torch {torch.__version__}, {args.ops} ops x {args.repeats} repeats, 1 intra-op thread")
    print(f"{'per op':34s} {'median µs/op':>12s} {'min µs/op':>10s} {'overhead µs/op':>15s}")
    for name, values in runs.items():
        base = statistics.median(runs["item() plain" if "item()" in name else "plain"])
        med = statistics.median(values)
        print(f"{name:34s} {med:12.3f} {min(values):10.3f} {med - base:15.3f}")
    labels = {
        "plain": "plain",
        "bare": "bare TorchFunctionMode (floor)",
        "agent": "torchpar-top run (sampled)",
        "every": "torchpar-top run --every-op",
    }
    for name, rates in loop.items():
        print(f"\n{name}, {args.repeats} repeats (ratio: median of the per-repeat ratios to plain)")
        for setup, label in labels.items():
            ratios = [r / p for r, p in zip(rates[setup], rates["plain"], strict=True)]
            print(
                f"{label:34s} {statistics.median(rates[setup]):12.1f} steps/s   ratio "
                f"{statistics.median(ratios):.3f}  ({min(ratios):.2f}-{max(ratios):.2f})"
            )


if __name__ == "__main__":
    main()
