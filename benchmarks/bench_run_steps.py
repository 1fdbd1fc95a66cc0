"""The cost of ``torchpar-top run`` on a training loop, end to end: plain ``python`` vs under ``run``.

    python benchmarks/bench_run_steps.py [--rounds 7] [--seconds 12] [--loops mlp,transformer]
        [--variants plain,run] [--threads 1]

Each loop is this file run as a child (``--loop NAME --seconds S``): it trains for ``S`` seconds and
prints ``BENCH-STEPS {"steps_per_s": ...}``, its own rate over the time after a warm-up of
:data:`WARMUP` s (so both variants measure the same thing, the same way: the agent's figures are not
used). Variants:

- ``plain``: ``python THIS --loop NAME``;
- ``run``: ``python -m torchpar_top run --headless --duration D THIS --loop NAME`` (the monitor process,
  its probes and the agent in the child: what a user pays);
- ``run-10hz``: the same with ``--interval 0.1`` (``run`` samples at 5 Hz by default since session 34; 10 Hz
  before);
- ``run-no-stacks``: ``run`` with ``--no-stacks``;
- ``run-base``: ``run`` from another checkout of torchpar-top (``--base DIR``, e.g. the commit before a
  change: ``git archive COMMIT | tar -x -C DIR``), imported through links as ``benchmarks/gpu_check.py``
  does, in the same rounds: before and after side by side;
- ``agent``: the agent alone (``python -m torchpar_top.probes.agent.run``) with nobody reading its
  socket but a thread of this process: the child's share without the monitor's CPU.

Loops:

- ``mlp``: an MLP 64-128-10, batch 32, Adam (a launch-bound loop: ~0.2 ms steps on one thread of this
  project's quiet VM in 2026-11, 0.4 ms when the loops were first written);
- ``transformer``: a 2-layer ``nn.TransformerEncoder`` (d_model 128, 4 heads, feed-forward 256), batch
  8 × 16 tokens, Adam (~3.8 ms steps on the same VM, ~5-10 ms when first written);
- ``mlp-wide``: the MLP 64-512-10, batch 64 (~0.36 ms: the "~0.3-1 ms" launch-bound loop issue 18's
  goal names, on today's VM);
- ``transformer-long``: the transformer on 8 × 32 tokens (~7.6 ms: the goal's "5-10 ms" step).

Rounds alternate the variants, and the order within a round rotates, so the drift of a shared machine
hits every variant alike. Printed: each variant's median steps/s, and per round the ratio to ``plain``
of the same round, with the median and range of those ratios; then the same for the loop thread's CPU
time per step (``cpu``: plain's over the variant's, so below 1 is a cost as for the rate), which a
pre-empted round does not inflate but which leaves out the loop's waits (for the GIL the agent's
sampler holds).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

THIS = Path(__file__).resolve()
MARK = "BENCH-STEPS "
#: Seconds each loop runs before its rate is measured.
WARMUP = 3.0
#: The MLP loops' hidden width and batch (64 inputs, 10 classes), by name; bench_step_steady.py runs the same.
MLP_SHAPES = {"mlp": (128, 32), "mlp-wide": (512, 64)}


# -- the loops (in the child) ----------------------------------------------------------------------------


def _loop(name: str, seconds: float, threads: int, counter: Path | None = None) -> None:
    """Train ``name`` for ``seconds`` and print its figures; with ``counter`` (a file), train until killed
    and keep the count of steps done in its first 8 bytes (``bench_interleaved.py`` reads it)."""
    import ctypes
    import mmap

    import torch
    from torch import nn

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    if name in MLP_SHAPES:
        hidden, batch = MLP_SHAPES[name]
        model: nn.Module = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
        x, y = torch.randn(batch, 64), torch.randint(0, 10, (batch,))

        def loss_fn() -> torch.Tensor:
            return nn.functional.cross_entropy(model(x), y)

    elif name in ("transformer", "transformer-long"):
        layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
        model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        x = torch.randn(8, 16 if name == "transformer" else 32, 128)

        def loss_fn() -> torch.Tensor:
            return model(x).pow(2).mean()

    else:
        raise SystemExit(f"unknown loop {name!r}")
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    if counter is not None:
        with counter.open("r+b") as f:
            shared = mmap.mmap(f.fileno(), 8)
        # one aligned 8-byte store a step: a reader in another process never sees half of one
        # (struct.pack_into zeroes the 8 bytes, then writes them one by one: a SIGSTOP from
        # bench_interleaved.py landing in between left it a count of ~0 to read)
        word = ctypes.c_uint64.from_buffer(shared)
        done = 0
        while True:
            opt.zero_grad()
            loss_fn().backward()
            opt.step()
            done += 1
            word.value = done
    start = time.perf_counter()
    measured_from, steps, cpu0, proc0 = None, 0, 0.0, 0.0
    while True:
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
        now = time.perf_counter()
        if measured_from is None:
            if now - start >= WARMUP:
                measured_from, steps, cpu0, proc0 = now, 0, time.thread_time(), time.process_time()
        else:
            steps += 1
            if now - start >= seconds:
                break
    rate = steps / (now - measured_from)
    cpu = (time.thread_time() - cpu0) / steps * 1e6
    proc = (time.process_time() - proc0) / steps * 1e6
    print(
        MARK + json.dumps({"steps_per_s": rate, "steps": steps, "cpu_us": cpu, "process_cpu_us": proc}),
        flush=True,
    )


# -- the variants (in this process) ---------------------------------------------------------------------


def _figures(text: str) -> dict[str, float] | None:
    """The loop's own ``BENCH-STEPS`` figures (``steps_per_s``, ``cpu_us``...), printed plainly or
    carried in a headless object's log."""
    for line in reversed(text.splitlines()):
        texts = [line]
        if line.startswith("{"):
            try:
                texts = [str(x.get("text", "")) for x in json.loads(line).get("log") or []]
            except (ValueError, AttributeError):
                texts = [line]
        for t in reversed(texts):
            at = t.find(MARK)
            if at >= 0:
                return {k: float(v) for k, v in json.loads(t[at + len(MARK) :]).items()}
    return None


#: The layer folders a checkout installs as ``torchpar_top.<folder>`` (``cli/*.py`` are the top level).
SUBPACKAGES = ("contract", "analysis", "model", "workloads", "probes", "sources", "sinks", "tui")
_BASE_ENV: dict[str, str] = {}


def base_env(checkout: Path) -> dict[str, str]:
    """An environment whose ``torchpar_top`` is ``checkout``'s (a folder of links, made once)."""
    if not _BASE_ENV:
        shim = Path(tempfile.mkdtemp(prefix="tpt-bench-base-"))
        package = shim / "torchpar_top"
        package.mkdir()
        for source in (checkout / "cli").glob("*.py"):
            (package / source.name).symlink_to(source)
        for folder in SUBPACKAGES:
            if (checkout / folder).is_dir():
                (package / folder).symlink_to(checkout / folder, target_is_directory=True)
        atexit.register(shutil.rmtree, shim, ignore_errors=True)
        _BASE_ENV.update(
            os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")]))
        )
    return _BASE_ENV


def run_variant(
    variant: str, loop: str, seconds: float, threads: int, base: Path | None = None
) -> dict[str, float] | None:
    """One run of one loop in one variant; its figures (None when it printed none)."""
    child = [str(THIS), "--loop", loop, "--seconds", str(seconds), "--threads", str(threads)]
    limit = seconds + 60
    if variant == "plain":
        out = subprocess.run(
            [sys.executable, *child], check=False, capture_output=True, text=True, timeout=limit
        )
        return _figures(out.stdout)
    if variant in ("run", "run-10hz", "run-no-stacks", "run-base"):
        cmd = [
            sys.executable,
            "-m",
            "torchpar_top",
            "run",
            "--headless",
            "--duration",
            str(int(seconds + 15)),
        ]
        cmd += ["--no-stacks"] if variant == "run-no-stacks" else []
        cmd += ["--interval", "0.1"] if variant == "run-10hz" else []
        if variant == "run-base" and base is None:
            raise SystemExit("run-base needs --base DIR")
        env = base_env(base) if variant == "run-base" and base is not None else None
        out = subprocess.run(
            [*cmd, *child], check=False, capture_output=True, text=True, timeout=limit, env=env
        )
        return _figures(out.stdout)
    if variant == "agent":
        return _agent_alone(child, limit)
    raise SystemExit(f"unknown variant {variant!r}")


def _agent_alone(child: list[str], limit: float) -> dict[str, float] | None:
    """The agent in the child, its socket drained by a thread here (no monitor process)."""
    ours, theirs = socket.socketpair()
    drained = threading.Event()

    def drain() -> None:
        while ours.recv(65536):
            pass
        drained.set()

    threading.Thread(target=drain, daemon=True).start()
    fd = theirs.fileno()
    cmd = [sys.executable, "-m", "torchpar_top.probes.agent.run", "--fd", str(fd), *child]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=limit, pass_fds=(fd,))
    theirs.close()
    drained.wait(5)
    ours.close()
    return _figures(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--loops", default="mlp,transformer")
    parser.add_argument("--variants", default="plain,run")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--base", type=Path, help="another checkout, for the run-base variant")
    parser.add_argument("--loop", help=argparse.SUPPRESS)
    parser.add_argument("--counter", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.loop:
        _loop(args.loop, args.seconds, args.threads, args.counter)
        return
    variants = args.variants.split(",")
    if "plain" not in variants:
        variants.insert(0, "plain")
    results: dict[str, dict[str, list[float | None]]] = {}
    cpus: dict[str, dict[str, list[float | None]]] = {}
    for loop in args.loops.split(","):
        rates: dict[str, list[float | None]] = {v: [] for v in variants}
        cpu: dict[str, list[float | None]] = {v: [] for v in variants}
        for r in range(args.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for v in order:
                figures = run_variant(v, loop, args.seconds, args.threads, args.base) or {}
                rates[v].append(figures.get("steps_per_s"))
                cpu[v].append(figures.get("cpu_us"))
            line = ", ".join(f"{v} {rates[v][-1] or 0:.1f}" for v in variants)
            print(f"{loop} round {r + 1}: {line}", file=sys.stderr, flush=True)
        results[loop], cpus[loop] = rates, cpu
    if args.json:
        print(json.dumps({"steps_per_s": results, "cpu_us": cpus}))
        return
    load = os.getloadavg()
    print(
        f"{args.rounds} rounds of {args.seconds:g} s, {args.threads} intra-op thread(s); load {load[0]:.2f}"
    )
    for loop, rates in results.items():
        plain = rates["plain"]
        ok_plain = [p for p in plain if p]
        print(
            f"\n{loop}: plain median {statistics.median(ok_plain):.1f} steps/s" if ok_plain else f"\n{loop}"
        )
        for v in variants:
            if v != "plain":
                _print_ratios(v, "steps/s", rates[v], plain, "{:9.1f} steps/s")
        # the loop thread's CPU time per step, plain's over the variant's (a cost reads below 1, as for
        # the rate): a pre-empted round inflates wall time, not thread CPU time; they leave out what the
        # loop waited for (the GIL held by the agent's sampler)
        cpu = cpus[loop]
        for v in variants:
            if v != "plain":
                _print_ratios(v, "cpu", cpu["plain"], cpu[v], "{:7.1f} µs/step", cpu[v])


def _print_ratios(
    v: str,
    what: str,
    over: list[float | None],
    under: list[float | None],
    unit: str,
    shown: list[float | None] | None = None,
) -> None:
    """Per round ``over / under`` (the variant's figure over plain's for a rate), their median and range,
    and the median of ``shown`` (default ``over``) in ``unit``."""
    ratios = [x / p for x, p in zip(over, under, strict=True) if x and p]
    if not ratios:
        print(f"  {v:14s} {what:8s} no result")
        return
    med = statistics.median(ratios)
    values = [x for x in (over if shown is None else shown) if x]
    print(
        f"  {v:14s} {what:8s} median {unit.format(statistics.median(values))}   ratio {med:.3f} "
        f"({min(ratios):.3f}-{max(ratios):.3f})   rounds: {' '.join(f'{q:.3f}' for q in ratios)}"
    )


if __name__ == "__main__":
    main()
