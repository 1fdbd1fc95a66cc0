"""What ``run``'s agent costs a training step in the loop's steady state, phases timed or sampled.

    python benchmarks/bench_step_steady.py [--blocks 20] [--steps 500] [--warmup 2500]
        [--variants sampled,every,rare] [--counter] [--loop mlp|mlp-wide]

``bench_step_clock.py`` times its parts in fresh instrumentation, a few hundred steps at a time; a hook
inside a torch loop costs several times what it costs alone, and sampled phases only show their cost
over many steps. Here one process runs the MLP + Adam loop of ``bench_run_steps.py`` in blocks of
``--steps`` steps, alternating a plain block with an instrumented one (the agent started, its socket
drained by a thread, the instrumentation entered and warmed up for ``--warmup`` steps, then one block
timed). Each block is timed by the main thread's CPU time (``time.thread_time``: another process on
the machine does not inflate it). Variants:

- ``sampled``: as ``run`` has it: a fast loop's phases timed in one step per ``TIMED_EVERY_S``;
- ``every``: every step's phases timed (``TIMED_EVERY_S = 0``);
- ``rare``: one step in ``MAX_UNTIMED + 1`` timed (the floor of an untimed step).

The op counter is off unless ``--counter`` (its share is ``bench_step_clock.py``'s). Printed per variant:
µs a step more than the plain blocks of the same run, by minimum and by median.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time

import torch
from bench_run_steps import MLP_SHAPES  # this folder: sys.path[0] when run as a script
from torch import nn
from torchpar_top.probes.agent import usercode_steps
from torchpar_top.probes.agent.usercode import UserCode
from torchpar_top.probes.agent.usercode_install import Instrumentation

EVERY_S = {"sampled": usercode_steps.TIMED_EVERY_S, "every": 0.0, "rare": 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=2500)
    parser.add_argument("--variants", default="sampled,every,rare")
    parser.add_argument("--counter", action="store_true", help="leave the op counter on its duty")
    parser.add_argument(
        "--loop", choices=tuple(MLP_SHAPES), default="mlp", help="bench_run_steps.py's loop of that name"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    hidden, batch = MLP_SHAPES[args.loop]
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    x, y = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def loop(n: int) -> float:
        t0 = time.thread_time()
        for _ in range(n):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return (time.thread_time() - t0) / n * 1e6

    ours, theirs = socket.socketpair()

    def drain() -> None:
        while ours.recv(65536):
            pass

    threading.Thread(target=drain, daemon=True).start()
    user = UserCode(theirs, target="bench")
    user.start()
    loop(200)
    variants = args.variants.split(",")
    plain: list[float] = []
    timed: dict[str, list[float]] = {v: [] for v in variants}
    # each instrumented block less the plain block run just before it (the drift between blocks is then
    # mostly shared)
    paired: dict[str, list[float]] = {v: [] for v in variants}
    for b in range(args.blocks):
        for v in variants[b % len(variants) :] + variants[: b % len(variants)]:
            plain.append(loop(args.steps))
            usercode_steps.TIMED_EVERY_S = EVERY_S[v]
            try:
                with Instrumentation(user) as inst:
                    if not args.counter:
                        inst.counting.stop()
                        inst.counting.failed = "off for this benchmark"
                    loop(args.warmup)
                    timed[v].append(loop(args.steps))
                    paired[v].append(timed[v][-1] - plain[-1])
            finally:
                usercode_steps.TIMED_EVERY_S = EVERY_S["sampled"]
    base_min, base_med = min(plain), statistics.median(plain)
    print(f"plain: min {base_min:.1f} µs a step, median {base_med:.1f} ({len(plain)} blocks of {args.steps})")
    for v in variants:
        lo, med = min(timed[v]), statistics.median(timed[v])
        print(
            f"{v:8s} min {lo:7.1f} ({lo - base_min:+.2f})   "
            f"median {med:7.1f} ({med - base_med:+.2f}) µs a step   "
            f"paired median {statistics.median(paired[v]):+.2f}"
        )


if __name__ == "__main__":
    main()
