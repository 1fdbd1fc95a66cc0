"""Child of the GPU check: keep one GPU busy with a matmul loop. ``python load.py DEVICE SECONDS``.

Prints ``ready`` once the first matmul completed (the GPU is loaded from then on), then loops
``torch.mm`` of 8192×8192 (about 1.1 TFLOP each) with a synchronize every 4, until SECONDS pass or it
is terminated.
"""

import sys
import time

import torch

device, seconds = int(sys.argv[1]), float(sys.argv[2])
torch.cuda.set_device(device)
x = torch.randn(8192, 8192, device=device)
y = torch.empty_like(x)
torch.mm(x, x, out=y)
torch.cuda.synchronize(device)
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(4):
        torch.mm(x, x, out=y)
    torch.cuda.synchronize(device)
