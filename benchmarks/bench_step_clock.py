"""Where ``torchpar-top run``'s cost per training step goes, part by part, in this process.

    python benchmarks/bench_step_clock.py [--repeats 40] [--steps 200] [--loops mlp,transformer]

The same loops as ``bench_run_steps.py`` (an MLP with Adam, ~0.3 ms steps; a 2-layer transformer with
Adam, ~5-10 ms), timed in short repeats of ``--steps`` steps, the variants interleaved repeat by repeat:

- ``plain``: no instrumentation;
- ``hooks``: ``run``'s instrumentation with the step clock's phase hooks left out and the op counter
  kept off (the optimizer step hook, the DataLoader wrapper, the switch signal: what ``run`` installed
  before the step clock);
- ``timed``: the same plus the step clock and its phase hooks (optimizer pre hook, backward wrapper,
  the roots' ``__call__`` wrapper) timing every step's phases;
- ``clock``: the same as ``run`` has it: a fast loop's phases timed in one step per
  ``TIMED_EVERY_S`` of steps, the per-step hooks off in between (``usercode_steps.py``, "Sampled
  phases"); ``--steps`` should cover several timed steps (the default does);
- ``counter``: ``clock`` with the op counter on for every op (``--every-op``): ``run`` keeps it on
  ``STEPS_DUTY`` of the time once steps are found, so its share of a step is ``STEPS_DUTY`` times
  this difference;
- ``sample``: the time one sample takes to build and encode (the sampler thread, holding the GIL, ten
  times a second), from a clock that has seen the loop's steps.

The machine this project runs on is shared: a repeat that another process pre-empted is slow, never
fast, so the figure per variant is the **minimum** over repeats (with the median beside it), and the
cost of a part is the difference of minima. The sum of the parts is an estimate of the in-process cost
per step; ``bench_run_steps.py`` measures the whole, end to end, monitor process included.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from torch import nn
from torchpar_top.probes.agent import usercode_steps
from torchpar_top.probes.agent.usercode import UserCode
from torchpar_top.probes.agent.usercode_install import Instrumentation
from torchpar_top.probes.agent.usercode_sampling import STEPS_DUTY


def make_loop(name: str) -> Any:
    torch.manual_seed(0)
    if name == "mlp":
        model: nn.Module = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

        def loss_fn() -> torch.Tensor:
            return nn.functional.cross_entropy(model(x), y)

    else:
        layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
        model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        x = torch.randn(8, 16, 128)

        def loss_fn() -> torch.Tensor:
            return model(x).pow(2).mean()

    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def loop(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            opt.zero_grad()
            loss_fn().backward()
            opt.step()
        return (time.perf_counter() - t0) / n * 1e6

    return loop


def timed(variant: str, loop: Any, steps: int, user: UserCode) -> float:
    """µs per step of ``steps`` steps in one variant (the instrumentation entered around them)."""
    if variant == "plain":
        return loop(steps)
    if variant == "hooks":
        user.phases.install = lambda: None  # type: ignore[method-assign]
        user.data.steps = None
    every = usercode_steps.TIMED_EVERY_S
    if variant == "timed":
        usercode_steps.TIMED_EVERY_S = 0.0
    try:
        return _instrumented(variant, loop, steps, user)
    finally:
        usercode_steps.TIMED_EVERY_S = every


def _instrumented(variant: str, loop: Any, steps: int, user: UserCode) -> float:
    with Instrumentation(user) as inst:
        if variant == "counter":
            inst.counting.pin(True)
            inst.counting.tick()
        else:
            inst.counting.stop()
            inst.counting.failed = "off for this benchmark"
        loop(10)  # past the root discovery
        loop(steps // 4)  # into the steady state (timed steps and untimed ones)
        return loop(steps)


def sample_cost(user: UserCode, loop: Any, steps: int) -> float:
    """µs to build and encode one sample after ``steps`` steps of the loop (the sampler's share)."""
    with Instrumentation(user) as inst:
        inst.counting.stop()
        inst.counting.failed = "off"
        t0 = time.perf_counter()
        user.agent.sample(t0, time.perf_counter()).to_json()  # the first one pays for first uses
        loop(steps)
        t1 = time.perf_counter()
        start = time.perf_counter()
        user.agent.sample(t0, t1).to_json()
        return (time.perf_counter() - start) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--loops", default="mlp,transformer")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = ("plain", "hooks", "timed", "clock", "counter")
    for name in args.loops.split(","):
        loop = make_loop(name)
        steps = args.steps if name == "mlp" else max(10, args.steps // 20)
        loop(steps)
        times: dict[str, list[float]] = {v: [] for v in variants}
        samples: list[float] = []
        for r in range(args.repeats):
            k = r % len(variants)
            order = variants[k:] + variants[:k]
            for v in order:
                times[v].append(timed(v, loop, steps, UserCode(None, target="bench")))
            if r % 4 == 0:
                user = UserCode(None, target="bench")
                user.agent.send = lambda msg: None  # type: ignore[method-assign]
                samples.append(sample_cost(user, loop, steps))
        best = {v: min(t) for v, t in times.items()}
        print(f"\n{name}: {steps} steps a repeat, {args.repeats} repeats interleaved, µs per step")
        for v in variants:
            print(f"  {v:8s} min {best[v]:9.2f}   median {statistics.median(times[v]):9.2f}")
        plain = best["plain"]
        hooks, every_step, clock, counter = (
            best["hooks"] - plain,
            best["timed"] - best["hooks"],
            best["clock"] - best["hooks"],
            best["counter"] - best["clock"],
        )
        sample = min(samples)
        per_step_sampler = sample / (1e5 / plain)  # 10 samples a second: one per 100 ms of steps
        print(
            f"  parts: instrumentation before the clock {hooks:+.2f} µs/step, step clock {clock:+.2f} "
            f"(every step timed: {every_step:+.2f}),"
        )
        share = counter * STEPS_DUTY
        print(
            f"         op counter when on {counter:+.2f} (x{STEPS_DUTY:g} duty = {share:+.2f}), "
            f"one sample {sample:.0f} µs (= {per_step_sampler:+.2f} µs/step at 10 Hz)"
        )
        total = hooks + clock + counter * STEPS_DUTY + per_step_sampler
        print(f"  estimated in-process cost {total:+.2f} µs/step = {total / plain:.1%} of a plain step")


if __name__ == "__main__":
    main()
