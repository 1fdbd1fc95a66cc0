"""Finishes its work, then aborts at interpreter exit (as a Gloo rank can when its threads outlive the
interpreter: "terminate called without an active exception").

    python aborts_at_exit.py                              # the process aborts
    torchrun --nproc-per-node 2 aborts_at_exit.py [DONE]  # rank 1 aborts, rank 0 ends cleanly

With DONE (a file path), rank 0 creates it when its work is done and rank 1 waits for it before it ends:
torchrun stops every rank once one fails, so on a busy machine rank 0 could otherwise be stopped before
it even started.
"""

import atexit
import os
import sys
import time

import torch


def main() -> None:
    x = torch.ones(3)
    for _ in range(100):
        x = x + 1
    print(f"work done on rank {os.environ.get('RANK', '-')}", flush=True)
    done = sys.argv[1] if len(sys.argv) > 1 else None
    if os.environ.get("RANK") == "0" and done:
        with open(done, "w"):
            pass
    if os.environ.get("RANK", "1") == "1":
        deadline = time.monotonic() + 200
        while done and not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.05)
        atexit.register(os.abort)  # runs after the script returned, as the interpreter ends


if __name__ == "__main__":
    main()
