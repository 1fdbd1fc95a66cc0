"""Prints what python -m set up, then does a few torch ops with an optimizer step."""

import sys

import torch

print("argv", sys.argv)
print("name", __name__, "package", __package__)
print("path0", sys.path[0])
w = torch.ones(4, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
print("sum", round(float(w.detach().sum()), 4))
