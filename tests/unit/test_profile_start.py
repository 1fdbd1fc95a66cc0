"""A profiler window's start: without torch._inductor loaded, it loads nothing (torch.profiler's own start
imports inductor, ~820 modules, stopping a frontend thread for seconds); the trace keeps the rank.

Each case runs in a fresh process: whether inductor is loaded depends on what ran before."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, sys
    {before}
    from torchpar_top.probes.agent.cuda import profile_queue
    window = profile_queue(0.05, cuda=False, export_path={path!r})
    print(json.dumps({{"imported": window.imported, "inductor": "torch._inductor" in sys.modules,
                       "launches": window.launches, "in_process": window.in_process}}))
    """
)


def _window(tmp_path, name: str, before: str = "") -> tuple[dict, dict]:
    path = tmp_path / name
    code = CHILD.format(before=before, path=str(path))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    with gzip.open(path, "rt") if name.endswith(".gz") else open(path) as f:
        return result, json.load(f)


def test_the_first_window_loads_no_inductor_and_writes_the_trace_as_asked(tmp_path):
    for name in ("window.json", "window.json.gz"):
        result, trace = _window(tmp_path, name)
        assert result == {
            "imported": result["imported"],
            "inductor": False,
            "launches": 0,
            "in_process": None,
        }
        assert result["imported"] < 50  # torch.profiler's own start: ~820
        assert "traceEvents" in trace and "distributedInfo" not in trace


def test_in_a_process_group_the_trace_names_the_rank(tmp_path):
    store = tmp_path / "store"
    before = (
        "import torch.distributed as dist; "
        f"dist.init_process_group('gloo', init_method='file://{store}', rank=0, world_size=1)"
    )
    result, trace = _window(tmp_path, "window.json", before)
    assert not result["inductor"]
    info = trace["distributedInfo"]
    assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", 0, 1)


def test_where_inductor_is_loaded_torch_profilers_own_start_is_used(tmp_path):
    result, trace = _window(tmp_path, "window.json.gz", "import torch._inductor")
    assert result["inductor"] and result["imported"] < 50 and "traceEvents" in trace


def test_a_torch_whose_autograd_profiler_is_made_otherwise_gets_torch_profilers_start(monkeypatch):
    from torch.autograd import profiler as autograd_profiler
    from torchpar_top.probes.agent import cuda

    real = autograd_profiler.profile

    def other(*args, **kwargs):  # refuses the agent's call; torch.profiler's own (it passes more) goes on
        if "experimental_config" not in kwargs:
            raise TypeError("profile() got an unexpected keyword argument 'use_device'")
        return real(*args, **kwargs)

    monkeypatch.setattr(autograd_profiler, "profile", other)
    window = cuda._Window(cuda=False)
    window.start()
    window.stop()
    assert window._plain
