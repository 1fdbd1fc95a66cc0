"""Child of the GPU check: what torch sees, as one JSON line on stdout. Run in a subprocess so that the
monitor never creates a CUDA context (nor imports torch).

Prints ``{"python", "torch", "cuda_build", "cudnn", "device_count", "devices": [{index, name, uuid,
capability, memory_gib}], "agent_uuids"}``; ``agent_uuids`` is what the agent sends the monitor
(``CudaMonitor.uuids``, the same code, without starting a monitor), or an ``agent_uuids_error``.
"""

import json
import sys
from types import SimpleNamespace

out = {"python": sys.version.split()[0], "executable": sys.executable}
try:
    import torch
except Exception as exc:  # reported, not raised
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
    sys.exit(0)

out["torch"] = torch.__version__
out["cuda_build"] = torch.version.cuda
try:
    out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
except Exception:  # an odd build: no cuDNN version
    out["cudnn"] = None
out["device_count"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
devices = []
for i in range(out["device_count"]):
    p = torch.cuda.get_device_properties(i)
    devices.append(
        {
            "index": i,
            "name": p.name,
            "uuid": str(getattr(p, "uuid", "")),
            "capability": f"{p.major}.{p.minor}",
            "memory_gib": round(p.total_memory / 2**30, 1),
            "sms": p.multi_processor_count,
        }
    )
out["devices"] = devices
if devices:
    try:
        from torchpar_top.probes.agent.cuda import CudaMonitor

        out["agent_uuids"] = CudaMonitor.uuids(SimpleNamespace(_uuids=None, cuda=torch.cuda))
    except Exception as exc:  # reported, not raised
        out["agent_uuids_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
