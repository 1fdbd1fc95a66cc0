"""Calls ``loss.item()`` every step (an implicit sync point on CUDA).

python item_every_step.py [STEPS]
"""

import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
w = torch.zeros(64, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
x = torch.randn(256, 64)
total = 0.0
for step in range(steps):
    opt.zero_grad()
    loss = ((x @ w - 1.0) ** 2).mean()
    loss.backward()
    opt.step()
    total += loss.item()  # the sync point the tests look for (ITEM_LINE)
    if step % 50 == 0:
        print(f"step {step} mean loss {total / (step + 1):.4f}", flush=True)
print("done", flush=True)
