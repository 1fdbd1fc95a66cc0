"""Finishes its work, then aborts at interpreter exit (as a Gloo rank can when its threads outlive the
interpreter: "terminate called without an active exception").

    python aborts_at_exit.py                        # the process aborts
    torchrun --nproc-per-node 2 aborts_at_exit.py   # rank 1 aborts, rank 0 ends cleanly
"""

import atexit
import os

import torch


def main() -> None:
    x = torch.ones(3)
    for _ in range(100):
        x = x + 1
    print(f"work done on rank {os.environ.get('RANK', '-')}", flush=True)
    if os.environ.get("RANK", "1") == "1":
        atexit.register(os.abort)  # runs after the script returned, as the interpreter ends


if __name__ == "__main__":
    main()
