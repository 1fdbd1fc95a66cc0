"""Step phases on the GPU for the GPU check: ``python step_phases_loop.py [STEPS]`` (default 200).

A training loop on cuda:0 under the agent's step clock, in this process (``UserCode`` with no socket,
as ``tests/unit/test_usercode.py`` runs it): each step loads a batch from a DataLoader whose items sleep
2 ms, copies it to the GPU, runs a forward of known GPU work (8 matmuls of 2048², bracketed by the
script's own CUDA events), backward, and an Adam step. The agent's phases should be GPU time
(``steps.gpu``) from its CUDA events, the forward within 15 % of the script's own events over the same
steps, the phases adding up to the step time, and the agent must not have synchronized the device. The
agent's steps are taken after every step (its whole-step records, each step's own phases), so the
forward is compared on the steps after the first :data:`WARMUP` on both sides (the first steps pay for
cuBLAS's start and the kernels' loading: on an H200 the agent's mean over all 200 steps read 3.76 ms
against the script's 3.12 over steps 10 on); the mean over all steps is reported beside it. Also the memory of
cuda:0 (``torch.cuda.memory_stats``). Ends with one line ``GPU-CHECK {json}``; exit status 1 when a
condition fails.
"""

import json
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchpar_top.probes.agent.usercode import UserCode
from torchpar_top.probes.agent.usercode_install import Instrumentation

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
#: Steps left out of the forward's comparison (both sides).
WARMUP = 10
dev = torch.device("cuda", 0)


class Items(Dataset):
    def __len__(self):
        return 4 * steps

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(2048)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(2048, 2048) / 45)

    def forward(self, x):
        h = x.sum() * self.w
        for _ in range(8):
            h = torch.tanh(h @ self.w)
        return h.mean()


syncs = [0]
real_sync = torch.cuda.synchronize


def counted_sync(*a, **k):
    syncs[0] += 1
    return real_sync(*a, **k)


user = UserCode(None, target="step_phases_loop")
user.agent.send = lambda msg: None
model = Net().to(dev)
opt = torch.optim.Adam(model.parameters())
loader = DataLoader(Items(), batch_size=4)
pending = []
records = []  # the agent's whole-step records (end time, phases), as the sampler would take them
ends = []  # each step's end here (time.time(), just after the optimizer step the agent's record ends at)
with Instrumentation(user):
    user.time_steps_on_cuda()  # what the agent does at the frontend's next switch point once CUDA is in use
    torch.cuda.synchronize = counted_sync  # from here on, any synchronize is counted (the agent's included)
    t0 = time.perf_counter()
    for batch in loader:
        x = batch.to(dev, non_blocking=True)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = model(x)
        b.record()
        opt.zero_grad()
        loss.backward()
        opt.step()
        pending.append((a, b))
        ends.append(time.time())
        taken = user.steps.take()  # what the sampler would take: the steps resolved since, in order
        if taken is not None:
            records.extend(taken.recent)
    t1 = time.perf_counter()
    torch.cuda.synchronize = real_sync
    real_sync()
    sample = user.agent.sample(t0, t1)
    if sample.steps is not None:
        records.extend(sample.steps.recent)
agent_syncs = syncs[0]
own = [a.elapsed_time(b) / 1000.0 for a, b in pending]
# Each record is matched to the step that ended nearest after it (within 5 ms), then both sides are
# compared on the steps past the warm-up.
pairs = []
for r in records:
    i = min(range(len(ends)), key=lambda k: abs(ends[k] - r.end))
    if i >= WARMUP and 0 <= ends[i] - r.end < 0.005:
        pairs.append((r.phases.forward, own[i]))
s = sample.steps
phases = {p: getattr(s.phases, p) / max(1, s.count) for p in vars(s.phases)}
result = {
    "steps": s.count,
    "source": str(s.source),
    "gpu": s.gpu,
    "per_step": phases,
    "step_seconds": s.seconds / max(1, s.count),
    "own_forward": sum(o for _, o in pairs) / max(1, len(pairs)),
    "agent_forward": sum(f for f, _ in pairs) / max(1, len(pairs)),
    "compared_steps": len(pairs),
    "agent_records": len(records),
    "own_forward_all": sum(own) / max(1, len(own)),
    "agent_syncs": agent_syncs,
    "memory": [vars(d) for d in (sample.memory.devices if sample.memory else ())],
}
total = sum(phases.values())
ok = (
    s.gpu
    and agent_syncs == 0
    and len(pairs) >= (steps - WARMUP) // 2  # most steps compared one to one
    and abs(result["agent_forward"] - result["own_forward"]) <= 0.15 * result["own_forward"]
    and abs(total - result["step_seconds"]) <= 0.05 * result["step_seconds"]
    and any(d["device"] == "cuda:0" and d["allocated_bytes"] > 0 for d in result["memory"])
)
result["ok"] = bool(ok)
print("GPU-CHECK " + json.dumps(result), flush=True)
sys.exit(0 if ok else 1)
