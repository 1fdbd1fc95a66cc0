"""A CUDA-graph loop for the GPU check: ``python cuda_graph_loop.py [REPLAYS]`` (default 3000).

Captures ``relu(x @ w + b)`` with ``torch.cuda.graph`` (the default "global" capture mode, in which
any other thread's event query would invalidate the capture), then replays it in a loop, copying a
fresh input into the static one before each replay. Every 100th replay is compared with the same ops
run eagerly. Ends with one line ``GPU-CHECK {json}``: ``ok`` (every comparison within 1e-3), the
replays, the largest absolute difference, the seconds the loop took. Exit status 1 when not ok.
"""

import json
import sys
import time

import torch

replays = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
torch.manual_seed(0)
dev = torch.device("cuda", 0)
w = torch.randn(1024, 1024, device=dev) / 32
b = torch.randn(1024, device=dev)
static_x = torch.randn(256, 1024, device=dev)

side = torch.cuda.Stream()  # warm up on a side stream before capture (as torch's CUDA-graph notes do)
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        static_y = torch.relu(static_x @ w + b)
torch.cuda.current_stream().wait_stream(side)

graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_y = torch.relu(static_x @ w + b)

worst, compared = 0.0, 0
t0 = time.perf_counter()
for i in range(replays):
    x = torch.randn(256, 1024, device=dev)
    static_x.copy_(x)
    graph.replay()
    if i % 100 == 0:
        ref = torch.relu(x @ w + b)
        worst = max(worst, (static_y - ref).abs().max().item())
        compared += 1
torch.cuda.synchronize()
seconds = time.perf_counter() - t0
ok = compared > 0 and worst <= 1e-3
print(
    "GPU-CHECK "
    + json.dumps(
        {
            "ok": ok,
            "replays": replays,
            "compared": compared,
            "max_abs_diff": worst,
            "seconds": round(seconds, 3),
        }
    ),
    flush=True,
)
sys.exit(0 if ok else 1)
