"""DDP on a tiny model with the Gloo backend on the CPU, for torchrun.

    torchrun --standalone --nproc-per-node=2 ddp_gloo.py [STEPS [FAILING_RANK]]

With FAILING_RANK, that rank raises a RuntimeError at step 20 (torchrun then stops the others).

Reads RANK / WORLD_SIZE (and MASTER_ADDR / MASTER_PORT) from the environment torchrun sets.
"""

import os
import sys

import torch
import torch.distributed as dist
from gloo_exit import leave_without_teardown
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    failing = int(sys.argv[2]) if len(sys.argv) > 2 else None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        train(rank, world, steps, failing)
    finally:
        dist.destroy_process_group()
    leave_without_teardown()  # Gloo's threads may abort a rank at teardown (gloo_exit.py)


def train(rank: int, world: int, steps: int, failing: int | None) -> None:
    torch.manual_seed(rank)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, steps + 1):
        x = torch.randn(64, 32)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients over Gloo here
        opt.step()
        if step == 20 and rank == failing:
            raise RuntimeError(f"rank {rank} gives up at step {step}")
        if step % 50 == 0 and rank == 0:
            print(f"step {step}/{steps}", flush=True)
    dist.barrier()
    if rank == 0:
        print(f"done on {world} ranks", flush=True)


if __name__ == "__main__":
    main()
