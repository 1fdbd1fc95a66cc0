"""DDP with Gloo on the CPU where one rank's forward is slower by a known sleep, for torchrun.

    torchrun --standalone --nproc-per-node=2 steps_ddp_slow.py [STEPS [SLOW_RANK [SLEEP_S]]]

SLOW_RANK (default 1; -1: none) sleeps SLEEP_S (default 0.02) in its forward; the other ranks then wait
for it in DDP's all-reduce inside ``backward`` (their ``comm``).
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from gloo_exit import leave_without_teardown
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self, sleep: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
        self.sleep = sleep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sleep:
            time.sleep(self.sleep)
        return self.body(x)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    slow = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    sleep = float(sys.argv[3]) if len(sys.argv) > 3 else 0.02
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(Net(sleep if rank == slow else 0.0))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x = torch.randn(64, 32)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    time.sleep(0.5)  # a last sample or two after the last step
    dist.destroy_process_group()
    leave_without_teardown()  # Gloo's threads may abort a rank at teardown (gloo_exit.py)


if __name__ == "__main__":
    main()
