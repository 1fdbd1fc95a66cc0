"""Gradient accumulation whose first optimizer step comes late: ``ACC`` micro-batches (each
``backward()`` after a short sleep) before each ``optimizer.step()``, so backward calls are counted as
steps until the first optimizer step (after the agent's first samples went out).

    python steps_accumulate.py [SECONDS] [ACC]
"""

import sys
import time

import torch
from torch import nn


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    acc = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    steps, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(acc):
            time.sleep(0.02)
            nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        steps += 1
    print(f"optimizer steps {steps}", flush=True)


if __name__ == "__main__":
    main()
