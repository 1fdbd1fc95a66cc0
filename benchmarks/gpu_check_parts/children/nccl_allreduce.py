"""NCCL all-reduces for the GPU check's flight-recorder check, under torchrun (any world size).

    torchpar-top run --nproc-per-node 1 nccl_allreduce.py [SECONDS]

All-reduces a 16 MB float tensor on ``cuda:LOCAL_RANK`` for SECONDS (default 15), timing each with CUDA
events of its own on the current stream (which waits for NCCL's stream at the end of a synchronous
collective), and ends with one line ``GPU-CHECK {json}``: ``ok``, ``collectives``, ``event_ms_mean`` (the
events' mean), ``rank``. torchpar-top's agent meanwhile reads the flight recorder
(TORCH_FR_BUFFER_SIZE, TORCH_NCCL_ENABLE_TIMING=1 set by the check) and logs per-collective time.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 15.0
local = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(local)
dist.init_process_group("nccl")
x = torch.ones(4 * 1024 * 1024, device="cuda")
times = []
end = time.monotonic() + seconds
while time.monotonic() < end:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    dist.all_reduce(x)
    stop.record()
    stop.synchronize()
    times.append(start.elapsed_time(stop))
    x.fill_(1.0)
dist.barrier()
ok = bool(times)
print(
    "GPU-CHECK "
    + json.dumps(
        {
            "ok": ok,
            "collectives": len(times),
            "event_ms_mean": sum(times) / len(times) if times else None,
            "rank": dist.get_rank(),
        }
    ),
    flush=True,
)
dist.destroy_process_group()
sys.exit(0 if ok else 1)
