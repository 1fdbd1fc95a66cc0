"""A training loop with no optimizer object: ``loss.backward()`` then ``p.data.add_(...)`` (the way
pytorch/examples' word_language_model updates its weights), for the step clock.

    python steps_manual_sgd.py [SECONDS]
"""

import sys
import time

import torch
from torch import nn


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    steps, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        model.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.01)
        steps += 1
    print(f"steps {steps}", flush=True)


if __name__ == "__main__":
    main()
