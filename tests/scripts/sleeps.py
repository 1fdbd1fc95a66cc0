"""A script that mostly sleeps: one tiny op, then 50 ms of ``time.sleep``, forever (or STEPS times).

python sleeps.py [STEPS]
"""

import sys
import time

import torch


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10**9
    x = torch.ones(3)
    for _ in range(steps):
        x = x + 1
        time.sleep(0.05)


if __name__ == "__main__":
    main()
