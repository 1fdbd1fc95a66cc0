"""A small input-bound training loop: a DataLoader with 2 workers whose items each sleep.

python train_dataloader.py [STEPS] [SLEEP_PER_ITEM_S]
"""

import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Random features and labels; each item takes ``sleep`` seconds to "load"."""

    def __init__(self, n: int, sleep: float) -> None:
        self.n, self.sleep = n, sleep

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.sleep)
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), torch.randint(0, 4, (), generator=g)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    sleep = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
    # One intra-op thread: a model this small gains nothing from more, and on a machine whose cores are
    # taken an OpenMP team's workers spin between ops and take the frontend's core (measured with a core
    # busy: frontend 47 % on a core and 50 % waiting for one, 2 intra-op workers the same; the loop turned
    # compute-bound). With one thread the workers' sleeps bound the loop on any machine.
    torch.set_num_threads(1)
    batch = 8
    loader = DataLoader(SlowDataset(steps * batch, sleep), batch_size=batch, num_workers=2, shuffle=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    for step, (x, y) in enumerate(loader, 1):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step}/{steps}", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
