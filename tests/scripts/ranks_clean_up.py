"""Each torchrun rank loops until it is stopped, then writes ``OUT/rank<RANK>`` in its ``finally`` block:
the file exists only if the rank was interrupted as Ctrl-C would (not killed by a signal). Each rank says
``rank N in its loop`` once its ``try`` block runs: a stop before that (the rank still starting) has no
``finally`` to run, with or without torchpar-top.

    torchrun --nproc-per-node 2 ranks_clean_up.py OUT
"""

import os
import pathlib
import sys
import time

import torch


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    x = torch.ones(3)
    try:
        print(f"rank {os.environ.get('RANK', '?')} in its loop", flush=True)
        while True:
            x = x + 1
            time.sleep(0.02)
    finally:
        (out / f"rank{os.environ.get('RANK', '?')}").write_text("cleaned up\n")


if __name__ == "__main__":
    main()
