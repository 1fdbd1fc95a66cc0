"""A launch-bound loop of tiny ops with no optimizer and no DataLoader, and an ``.item()`` each round.

    python tiny_ops_loop.py [SECONDS]

Prints how many rounds it made (each round: 8 small torch calls and one ``.item()``).
"""

import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
x = torch.ones(8)
rounds, end = 0, time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(8):
        x = x * 1.0001
    total = x.sum().item()  # the sync point (LOOP_ITEM)
    rounds += 1
print(f"rounds {rounds}", flush=True)
