"""One command on a GPU machine: what no fake can settle, measured on the real hardware.

    cd torchpar-top && python benchmarks/gpu_check.py [--out gpu_check_report.json] [--budget 470]

Nothing needs installing beyond torch (with CUDA), nvidia-ml-py and psutil (plus cupti-python for the
CUPTI check, which reports it absent and skips without it): when ``torchpar_top`` is
not importable from this checkout (no ``pip install -e .``), the script links the checkout's folders into
a temporary ``torchpar_top`` package and puts it on ``PYTHONPATH`` for itself and every child. Neither
Textual nor py-spy nor HTA is needed (HTA is used if importable, else its check says "HTA not
installed"). This process never imports torch: all CUDA work runs in child processes, so the monitor
holds no CUDA context (one check verifies it with nvidia-smi).

Checks, each passed, failed or skipped with its reason (one that throws is a failure with its error; the
rest still run), each within its own time limit, all within ``--budget`` seconds (default 470; a check
that hangs is cut off at most 30 s past its limit, so the run stays under 9 minutes; on an H200 the
whole plan took 261 s before ``cupti_run`` gained its cost modes, 213 s on 2026-11-27 with ``cupti_run``
cut short):

1. ``cuda_labels``: ``cuda:N`` as torch numbers GPUs (UUIDs from ``get_device_properties``, in a child)
   against our NVML probe's labels, given the agent's UUIDs and from the environment alone.
2. ``nvml_vs_nvidia_smi``: our ``NvmlProbe``'s utilisation, memory and power next to ``nvidia-smi
   --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,power.draw``: idle, under a matmul
   loop on every GPU (a child each), idle again; and this process is not among nvidia-smi's compute apps.
3. ``async_session``: the async experiment under a real ``Session`` on cuda:0, a 0.5 s profiler window
   exported in ASYNC and one in SYNC (the agent's ``h`` window, ``Profile.export_path``); per window the
   live row (outstanding torch calls, sampled) against the trace's queue (kernels: HTA's depth) and the
   lane's busy share, side by side; and the experiment's claim on its scoreboard: ASYNC's throughput at
   least 1.1 times SYNC's (the item's size fitted to the GPU is in the report). Reported, not judged:
   the live throughput inside each profiler window and outside it (whether the loop runs faster while
   torch.profiler holds CUPTI); ``benchmarks/gpu_async_plain.py`` gives the same item without the agent.
4. ``analysis_vs_hta``: ``torchpar_top.analysis`` against HTA's queue summary on those traces.
5. ``multi_device`` (2 GPUs or more): the multi-device experiment's live lanes and overlap against a
   profiler trace of the same window.
6. ``cuda_graph_run``, 7. ``compile_run``: a ``torch.cuda.graph`` capture-and-replay loop and a
   ``torch.compile(mode="reduce-overhead")`` loop, plain and under ``torchpar-top run --headless``: both
   must finish with their own result correct and no error in the log (compile: the same graph breaks,
   unique graphs and cudagraph skips as plain); the report records what the queue rows showed.
8. ``cupti_run``: the CUPTI path (``probes/agent/cuda_cupti.py``): launches per stream from the real
   ``cupti`` binding against a torch.profiler trace of the same loop; what CUPTI itself leaves on a
   launch-bound loop without the agent, one mode per process (plain, its callback API armed as the
   monitor arms it, its activity API after one recording window, and that window then CUPTI detached
   with cuptiFinalize), reported, not judged; then the loop (``x.add_(1)``, 1,000,000 ops) plain, under
   ``torchpar-top run --headless``, under run with cupti-python hidden (the launch counter's path) and
   under ``run --no-queues``, alternating, two rounds: the steady speeds' (median tenth of each loop's
   second half) median ratio under run >= 0.97. Needs cupti-python; without it the check is skipped and
   says so.
9. ``nccl_flight_recorder``: an NCCL all-reduce loop under ``torchpar-top run --nproc-per-node 1`` with
   torch's flight recorder on (``TORCH_FR_BUFFER_SIZE``, ``TORCH_NCCL_ENABLE_TIMING=1``): the agent's log
   names ``nccl:all_reduce`` with its time per collective (``probes/agent/collectives.py``), above 0 and
   within the script's own CUDA events around each call (which hold the collective's span on NCCL's
   stream and the hand-over between the streams).
10. ``step_phases`` (before ``cupti_run`` in the plan): a training loop on cuda:0 under the agent's step
   clock (``children/step_phases_loop.py``): its phases must be GPU time from the agent's CUDA events,
   the forward within 15 % of the script's own events around it, the phases adding up to the step time,
   no synchronize by the agent, and cuda:0's allocator figures in the sample's memory.

Writes ``--out`` (JSON) and a Markdown summary beside it (``.md``); prints one line per check. Exit
status 0 when nothing failed, 1 otherwise. Without a CUDA device it prints one line saying so, writes a
report that says so, and exits 0: there is no fake mode.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = Path(__file__).resolve().parent
#: The checkout's folders and the subpackage each is installed as (pyproject's package-dir).
SUBPACKAGES = ("contract", "analysis", "model", "workloads", "probes", "sources", "sinks", "tui")
NO_CUDA = "no CUDA device: nothing to check; run this on a GPU machine"


def use_checkout() -> str:
    """Make ``torchpar_top`` importable from this checkout, here and in child processes; say how.

    An install that already points into this checkout (``pip install -e .``) is used as it is. Otherwise
    a temporary folder gets a ``torchpar_top`` package made of links to ``cli/*.py`` and the layer
    folders (the mapping ``pyproject.toml`` installs), and goes first on ``sys.path`` and ``PYTHONPATH``.
    """
    spec = importlib.util.find_spec("torchpar_top")
    if spec is not None and spec.origin and Path(spec.origin).resolve() == REPO / "cli" / "__init__.py":
        return f"this checkout, installed ({Path(spec.origin).parent})"
    shim = Path(tempfile.mkdtemp(prefix="tpt-gpu-check-"))
    package = shim / "torchpar_top"
    package.mkdir()
    for source in (REPO / "cli").glob("*.py"):
        (package / source.name).symlink_to(source)
    for folder in SUBPACKAGES:
        (package / folder).symlink_to(REPO / folder, target_is_directory=True)
    sys.path.insert(0, str(shim))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p)
    for name in [m for m in sys.modules if m == "torchpar_top" or m.startswith("torchpar_top.")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    import atexit

    atexit.register(shutil.rmtree, shim, ignore_errors=True)
    return f"this checkout, through links in {shim}"


def device_info(timeout: float = 120) -> dict[str, Any]:
    """What torch sees (``children/device_info.py`` in a child process: no CUDA context here)."""
    script = BENCHMARKS / "gpu_check_parts" / "children" / "device_info.py"
    try:
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the torch probe did not answer in {timeout:.0f} s", "device_count": 0}
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        return {
            "error": f"the torch probe exited {done.returncode}: {done.stderr.strip()[-500:]}",
            "device_count": 0,
        }


def nvml_header() -> dict[str, Any]:
    """Driver and NVML facts (NVML never creates a CUDA context)."""
    out: dict[str, Any] = {}
    try:
        from importlib.metadata import version

        out["nvml_binding"] = version("nvidia-ml-py")
    except Exception:  # no metadata: said as None
        out["nvml_binding"] = None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
            out["driver"] = driver.decode() if isinstance(driver, bytes) else driver
            cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            out["nvml_cuda"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # no driver here: said in the header
        out["nvml_error"] = f"{type(exc).__name__}: {exc}"
    return out


def header(info: dict[str, Any], how: str) -> dict[str, Any]:
    """The report's header: Python, torch, CUDA, driver, GPUs, and which torchpar-top was checked."""
    from torchpar_top import __version__

    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    try:
        from importlib.metadata import version

        hta = version("holistictraceanalysis") if importlib.util.find_spec("hta") else None
    except Exception:  # HTA absent or broken: not used
        hta = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": info.get("torch"),
        "cuda_build": info.get("cuda_build"),
        "cudnn": info.get("cudnn"),
        **nvml_header(),
        "gpus": info.get("devices", []),
        "device_count": info.get("device_count", 0),
        "torch_error": info.get("torch_error") or info.get("error"),
        "hta": hta,
        "torchpar_top": f"{__version__}" + (f" ({commit})" if commit else ""),
        "torchpar_top_from": how,
        "nvidia_smi": shutil.which("nvidia-smi"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def no_cuda_reason(head: dict[str, Any]) -> str:
    """Why there is nothing to check, from the header: torch's view, nvidia-smi, NVML."""
    if head.get("torch_error"):
        parts = [f"torch: {head['torch_error']}"]
    else:
        build = "a CPU-only build" if not head.get("cuda_build") else f"built for CUDA {head['cuda_build']}"
        parts = [f"torch {head.get('torch')} ({build}) sees no CUDA device"]
    parts.append(f"nvidia-smi at {head['nvidia_smi']}" if head.get("nvidia_smi") else "no nvidia-smi on PATH")
    parts.append(
        f"NVML: {head['nvml_error']}" if head.get("nvml_error") else f"NVIDIA driver {head.get('driver')}"
    )
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default="gpu_check_report.json",
        help="the JSON report; the Markdown summary goes beside it (.md)",
    )
    parser.add_argument(
        "--budget", type=float, default=470.0, help="seconds for all the checks (default 470)"
    )
    parser.add_argument("--only", default="", help="comma-separated check names (default: all)")
    parser.add_argument("--keep-traces", metavar="DIR", help="copy the profiler traces there")
    args = parser.parse_args(argv)

    started, t0 = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.monotonic()
    deadline = t0 + args.budget
    how = use_checkout()
    sys.path.insert(0, str(BENCHMARKS))
    from gpu_check_parts import checks
    from gpu_check_parts.report import counts, write_report

    info = device_info(timeout=min(120.0, args.budget / 2))
    report: dict[str, Any] = {
        "tool": "benchmarks/gpu_check.py",
        "started": started,
        "header": header(info, how),
        "cuda": bool(info.get("device_count")),
        "checks": [],
    }
    if not report["cuda"]:
        report.update(
            message=NO_CUDA,
            reason=no_cuda_reason(report["header"]),
            seconds=time.monotonic() - t0,
            counts=counts([]),
        )
        write_report(report, args.out)
        print(NO_CUDA)
        return 0

    plan = [p for p in checks.PLAN if not args.only or p.name in args.only.split(",")]
    names = ", ".join(g["name"] for g in info.get("devices", []))
    print(
        f"gpu check: {info['device_count']} GPU(s) ({names}), torch {info.get('torch')}, "
        f"CUDA {info.get('cuda_build')}; {len(plan)} checks within {args.budget:.0f} s",
        flush=True,
    )
    tmp = Path(tempfile.mkdtemp(prefix="tpt-gpu-check-traces-"))
    ctx = checks.Context(info=info, smi=checks.which_smi(), tmp=tmp)

    def progress(entry: dict[str, Any]) -> None:
        print(
            f"  {entry['name']}: {entry['status']} ({entry['seconds']:.0f} s) {entry['reason']}", flush=True
        )

    try:
        report["checks"] = checks.run_plan(ctx, plan, deadline, progress)
    finally:
        if args.keep_traces:
            Path(args.keep_traces).mkdir(parents=True, exist_ok=True)
            for path in ctx.traces.values():
                if os.path.exists(path):
                    shutil.copy(path, args.keep_traces)
        shutil.rmtree(tmp, ignore_errors=True)
        report.update(
            seconds=time.monotonic() - t0,
            counts=counts(report["checks"]),
            message=f"{info['device_count']} CUDA device(s)",
        )
        json_path, md_path = write_report(report, args.out)
        print(f"report: {json_path} and {md_path}", flush=True)
    return 1 if report["counts"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
