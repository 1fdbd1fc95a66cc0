"""DDP (Gloo, CPU) with a DataLoader, for torchrun: one rank can be made slow in its forward or its data.

    torchrun --standalone --nproc-per-node=2 ddp_steps.py SECONDS [forward|data|crowd|hang RANK|all [N]]

Every step: a batch from a DataLoader (main process), the model's forward, backward (DDP all-reduces the
gradients), an optimizer step. ``forward RANK MS``: that rank's forward sleeps MS ms more (default 12);
``data RANK MS``: its batches take MS ms more to load; ``crowd RANK N``: that rank is pinned to one core
with N processes that spin there (default 2), so it waits for the core: slower in all its work, for a
reason outside its code (``crowd RANK N WORK``: every rank's forward also computes WORK 128x128
products, ~50 us each, so that compute, not the all-reduce, is most of the step); ``hang RANK N``: after
N seconds (default 3) that rank's forward sleeps for an hour (a hang: the others wait in the all-reduce;
stop the job from outside); ``all`` for RANK: every rank does. Runs for SECONDS, then every rank
stops together.
"""

import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
from gloo_exit import leave_without_teardown
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

#: A process that spins on core argv[1] while its parent (argv[2]) lives: it ends by itself when the
#: rank does, however the rank ends.
SPIN = """
import os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
while os.getppid() == int(sys.argv[2]):
    for _ in range(100_000):
        pass
"""


def crowd(spinners: int) -> list[subprocess.Popen]:
    """Pin this process to its last allowed core and start ``spinners`` processes spinning there."""
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})  # before Gloo starts its threads: they inherit it
    return [
        subprocess.Popen([sys.executable, "-c", SPIN, str(core), str(os.getpid())]) for _ in range(spinners)
    ]


class Items(Dataset):
    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.delay:
            time.sleep(self.delay)
        return torch.randn(32)


class Net(nn.Module):
    def __init__(self, delay: float, hang_after: float | None = None, work: int = 0) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 1))
        self.delay = delay
        self.work = work
        self.square = torch.randn(128, 128)
        self.hang_at = None if hang_after is None else time.monotonic() + hang_after

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay:
            time.sleep(self.delay)
        if self.hang_at is not None and time.monotonic() >= self.hang_at:
            time.sleep(3600)  # the hang
        with torch.no_grad():
            for _ in range(self.work):  # compute that needs a core (128x128 products, ~50 us each)
                torch.mm(self.square, self.square)
        return self.body(x)


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    what = sys.argv[2] if len(sys.argv) > 2 else ""
    slow = sys.argv[3] if len(sys.argv) > 3 else ""
    ms = float(sys.argv[4]) if len(sys.argv) > 4 else 12.0
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    mine = slow in ("all", str(rank))
    spinning = crowd(round(ms) if len(sys.argv) > 4 else 2) if mine and what == "crowd" else []
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    batch = 4
    data = DataLoader(Items(ms / 1000 / batch if mine and what == "data" else 0.0), batch_size=batch)
    hang = (float(sys.argv[4]) if len(sys.argv) > 4 else 3.0) if mine and what == "hang" else None
    work = int(sys.argv[5]) if what == "crowd" and len(sys.argv) > 5 else 0  # every rank's, the same
    model = DDP(Net(ms / 1000 if mine and what == "forward" else 0.0, hang, work))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    end = time.monotonic() + seconds
    going = torch.ones(1)
    step = 0
    for x in data:
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 20 == 0:  # stop together: every rank runs the same number of steps
            going.fill_(1.0 if time.monotonic() < end else 0.0)
            dist.all_reduce(going, op=dist.ReduceOp.MIN)
            if going.item() == 0:
                break
    dist.barrier()
    if rank == 0:
        print(f"done: {step} steps on {world} ranks", flush=True)
    dist.destroy_process_group()
    for p in spinning:
        p.kill()
        p.wait()
    leave_without_teardown()  # Gloo's threads may abort a rank at teardown (gloo_exit.py)


if __name__ == "__main__":
    main()
