"""A ``torch.compile(mode="reduce-overhead")`` loop for the GPU check: ``python compile_loop.py [CALLS]``.

Compiles ``gelu(x @ w + b).sum(1)`` with Inductor in "reduce-overhead" mode (CUDA graphs, recorded by
cudagraph trees after warm-up), calls it CALLS times (default 400) on fresh inputs and compares every
25th result with the eager function. Ends with one line ``GPU-CHECK {json}``: ``ok`` (every comparison
within 1e-3 relative, 1e-3 absolute), the calls, the largest absolute difference, the compile time
(first call) and the loop's, and torch.compile's own counters where this torch has them: graph breaks,
unique graphs (a recompile adds one), cudagraph skips. Exit status 1 when not ok.
"""

import json
import sys
import time

import torch

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 400
torch.manual_seed(0)
dev = torch.device("cuda", 0)
w = torch.randn(1024, 1024, device=dev) / 32
b = torch.randn(1024, device=dev)


def f(x, w, b):
    return torch.nn.functional.gelu(x @ w + b).sum(dim=1)


cf = torch.compile(f, mode="reduce-overhead")
t0 = time.perf_counter()
cf(torch.randn(256, 1024, device=dev), w, b)
torch.cuda.synchronize()
compile_s = time.perf_counter() - t0

worst, compared, ok = 0.0, 0, True
t0 = time.perf_counter()
for i in range(calls):
    x = torch.randn(256, 1024, device=dev)
    y = cf(x, w, b)
    if i % 25 == 0:
        ref = f(x, w, b)
        worst = max(worst, (y - ref).abs().max().item())
        ok = ok and torch.allclose(y, ref, rtol=1e-3, atol=1e-3)
        compared += 1
torch.cuda.synchronize()
loop_s = time.perf_counter() - t0

result = {
    "ok": bool(ok and compared),
    "calls": calls,
    "compared": compared,
    "max_abs_diff": worst,
    "compile_seconds": round(compile_s, 2),
    "loop_seconds": round(loop_s, 3),
}
try:
    from torch._dynamo.utils import counters

    result["graph_breaks"] = sum(counters["graph_break"].values())
    result["unique_graphs"] = counters["stats"]["unique_graphs"]
    result["cudagraph_skips"] = counters["inductor"]["cudagraph_skips"]
except Exception as exc:  # private counters: report what is there
    result["counters_unavailable"] = f"{type(exc).__name__}: {exc}"
print("GPU-CHECK " + json.dumps(result), flush=True)
sys.exit(0 if result["ok"] else 1)
