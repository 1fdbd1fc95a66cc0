"""A training loop that stops stepping for a while, inside its forward: a hang, seen from the steps.

    python steps_stall.py [SECONDS_BEFORE] [STALL_SECONDS] [SECONDS_AFTER]

Steps (an SGD optimizer, a small model) for SECONDS_BEFORE, then one forward sleeps STALL_SECONDS (the
line below that says ``time.sleep``), then steps for SECONDS_AFTER. Prints ``stalled at STEP`` as the
sleep begins and ``steps N`` at the end.
"""

import sys
import time

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
        self.stall = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stall:
            time.sleep(self.stall)  # the stall
            self.stall = 0.0
        return self.body(x)


def main() -> None:
    before = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    stall = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
    after = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    steps, start, stalled = 0, time.monotonic(), False
    while time.monotonic() < start + before + stall + after:
        if not stalled and time.monotonic() >= start + before:
            stalled, model.stall = True, stall
            print(f"stalled at {steps}", flush=True)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        steps += 1
    print(f"steps {steps}", flush=True)


if __name__ == "__main__":
    main()
