"""A loop whose backward spends most of the step in Python inside a custom autograd Function (as FSDP's
hooks, activation checkpointing and custom ops do): the agent's switch signal lands there.

    python custom_backward.py [SECONDS]

Trains for SECONDS (default 6) with Adam; each backward waits 0.3 s in the Function's Python ``backward``
(the op counter's switches fall overdue there, and the agent's signal lands in it). At the end one JSON
line: ``{"steps": N, "step": s}``, its mean step in seconds.
"""

import json
import sys
import time

import torch
from torch import nn


class PythonHeavyBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        time.sleep(0.3)
        return grad * 1.0


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
    model = nn.Linear(32, 32)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(8, 32)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        loss = PythonHeavyBackward.apply(model(x)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        steps += 1
    print(json.dumps({"steps": steps, "step": (time.perf_counter() - t0) / steps}), flush=True)


if __name__ == "__main__":
    main()
