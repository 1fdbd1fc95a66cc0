"""A loop with a known sleep in its dataset and a known matmul in its forward; it times them itself.

    python steps_phases.py [STEPS [SLEEP_S [WORKERS]]]

STEPS batches of two items; each item sleeps SLEEP_S (default 0.02) in the DataLoader
(``num_workers=WORKERS``, default 0: loading in this process); the model's forward multiplies 256x256
matrices eight times. At the end one JSON line:
``{"steps": N, "data": s, "forward": s}``, seconds per step this script measured around ``next()`` and
around ``model(x)``, over the steps after the first (the agent's first steps settle its step source).
"""

import json
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowItems(Dataset):
    def __init__(self, n: int, sleep: float) -> None:
        self.n, self.sleep = n, sleep

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.sleep)
        return torch.randn(256)


class MatmulNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(256, 256) / 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.sum() * self.w
        for _ in range(8):
            h = torch.tanh(h @ self.w)
        return h.sum()


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    sleep = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = MatmulNet()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    loader = DataLoader(SlowItems(2 * steps, sleep), batch_size=2, num_workers=workers)
    data = forward = 0.0
    it = iter(loader)
    for i in range(len(loader)):
        t0 = time.perf_counter()
        x = next(it)
        t1 = time.perf_counter()
        loss = model(x)
        t2 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i >= 1:
            data += t1 - t0
            forward += t2 - t1
    n = len(loader) - 1
    print(json.dumps({"steps": n, "data": data / n, "forward": forward / n}), flush=True)
    time.sleep(0.5)  # a last sample or two after the last step


if __name__ == "__main__":
    main()
