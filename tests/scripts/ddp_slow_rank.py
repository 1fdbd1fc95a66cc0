"""DDP over Gloo on the CPU where one rank is slower in its forward pass, for torchrun.

    torchrun ... ddp_slow_rank.py STEPS SLOW_RANK SECONDS

Rank SLOW_RANK sleeps SECONDS inside its model's forward each step; the others wait for it in DDP's
all-reduce (their ``comm`` phase), so it is the straggler, slow in ``forward``.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from gloo_exit import leave_without_teardown
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Model(nn.Module):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x):
        if self.delay:
            time.sleep(self.delay)
        return self.net(x)


def main() -> None:
    steps, slow, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = DDP(Model(delay if rank == slow else 0.0))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = model(torch.randn(64, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()
    leave_without_teardown()  # Gloo's threads may abort a rank at teardown (gloo_exit.py)


if __name__ == "__main__":
    main()
