"""What the TUI costs and how late it draws: app CPU at 10 Hz, and child sample -> drawn latency.

    python benchmarks/bench_tui.py [--seconds 20] [--cores 16,64,256] [--no-latency] [--headless] [--json]

1. **App CPU.** The real :class:`TorchparTopApp` at ``render_interval`` 0.1 s on a synthetic session
   (N cores, 2 emulated streams, a new snapshot every frame: loads, histories and queue values move),
   rendered for real in a 120x36 tmux pane. The app process reports its own ``time.process_time()``
   delta over the measured window (after a warm-up): CPU time / wall time, in % of one core. Budget
   (ARCHITECTURE.md): at most 10% of one core with 16 cores and 2 executors.
2. **Latency.** The app on the real session (``Session("async")``: the child runs the async experiment,
   the host probes sample every 0.1 s), in a tmux pane. For every drawn frame that shows a new child
   sample, ``time.time() - snapshot.sample_t`` (the child stamps ``sample_t`` when it makes the sample;
   same host, same clock), taken by the app's ``on_frame`` hook after the screen refresh that shows
   it. Budget: at most 150 ms at the 95th percentile.

Each measurement runs in its own process (``--inner``) inside a private tmux server (``tmux -L``), which
is removed afterwards. Without tmux (or with ``--headless``) the app runs under Textual's headless
driver instead, which composes frames but writes nothing to a terminal: the figures are then a lower
bound, and the output says which driver was used.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
SIZE = (120, 36)
RENDER_INTERVAL = 0.1
WARMUP_CPU_S = 3.0
WARMUP_LATENCY_S = 6.0  # the child imports torch and starts sending samples


# -- the synthetic session (inner process) ---------------------------------------------------------


class SyntheticSession:
    """A SessionLike whose every ``snapshot()`` is new: rotated histories, moving loads and depths.

    Built from the tests' deterministic :func:`make_snapshot` (``tests/fakes``), so the screen looks like
    the async experiment on an emulated CPU stream; the per-call work is a few tuple rotations, about
    what the real store's ``snapshot()`` does.
    """

    def __init__(self, cores: int, executors: int = 2) -> None:
        sys.path.insert(0, str(ROOT / "tests"))
        from fakes.fake_session import EXPERIMENTS, make_snapshot  # noqa: PLC0415

        self._base = make_snapshot(cores=cores, executors=executors)
        self._experiments = EXPERIMENTS
        self._frame = 0
        self._log = list(self._base.log)

    def start(self) -> None:
        """Nothing to start."""

    def close(self) -> None:
        """Nothing to stop."""

    def experiments(self) -> Any:
        """The fake's experiments."""
        return self._experiments

    def toggle_sync(self) -> None:
        """Not used."""

    def change_threads(self, delta: int) -> None:
        """Not used."""

    def switch_experiment(self, name: str) -> None:
        """Not used."""

    def set_paused(self, paused: bool) -> None:
        """Not used."""

    def restart(self) -> None:
        """Not used."""

    def snapshot(self) -> Any:
        """A new snapshot on every call (the render timer calls it once per frame)."""
        from torchpar_top.contract.snapshot import LogLine  # noqa: PLC0415

        self._frame += 1
        k, base = self._frame, self._base

        def rot(values: tuple, by: int = k) -> tuple:
            by %= max(1, len(values))
            return values[by:] + values[:by]

        cores = tuple((load + 7 * k + 13 * i) % 100.0 for i, load in enumerate(base.cores))
        executors = tuple(
            dataclasses.replace(e, value=(e.value + 37 * k) % ((e.capacity or 64) + 1), history=rot(e.history),
                                busy=rot(e.busy), launched=e.launched + 40 * k, completed=e.completed + 40 * k)
            for e in base.executors
        )
        if k % 10 == 0:  # a line of output per second, as a training loop prints
            self._log.append(LogLine(len(self._log) + 1, "stdout", f"step {k}: {12 + k % 3}.4 it/s"))
            self._log = self._log[-200:]
        return dataclasses.replace(
            base,
            t=base.t + k * RENDER_INTERVAL,
            cores=cores,
            core_history=tuple(rot(h) for h in base.core_history),
            executors=executors,
            frontend_busy=rot(base.frontend_busy),
            frontend_wait=rot(base.frontend_wait),
            overlap=rot(base.overlap),
            throughput=12.0 + (k % 7) / 10,
            throughput_history=rot(base.throughput_history),
            log=tuple(self._log),
            sample_t=time.time(),
        )


# -- the inner process: run the app, measure, write a JSON file ---------------------------------------


def run_inner(kind: str, cores: int, seconds: float, out: Path, headless: bool) -> None:
    """Run the app (real terminal, or headless) for warm-up + ``seconds`` and write the figures to ``out``."""
    from torchpar_top.tui.app import TorchparTopApp  # noqa: PLC0415

    warmup = WARMUP_LATENCY_S if kind == "latency" else WARMUP_CPU_S
    if kind == "latency":
        from torchpar_top.session.session import Session  # noqa: PLC0415

        session: Any = Session("async")
    else:
        session = SyntheticSession(cores)

    state: dict[str, Any] = {"scheduled": False, "measuring": False, "frames": 0, "latencies": [],
                             "last_sample_t": None}

    def on_frame(snapshot: Any) -> None:
        if not state["scheduled"]:  # the first frame: the app runs, its timers can be set
            state["scheduled"] = True
            app.set_timer(warmup, begin)
            app.set_timer(warmup + seconds, end)
        if not state["measuring"]:
            return
        state["frames"] += 1
        if snapshot.sample_t is not None and snapshot.sample_t != state["last_sample_t"]:
            state["last_sample_t"] = snapshot.sample_t
            state["latencies"].append(time.time() - snapshot.sample_t)

    app = TorchparTopApp(session, render_interval=RENDER_INTERVAL, on_frame=on_frame)
    marks: dict[str, float] = {}

    def begin() -> None:
        marks["wall0"], marks["cpu0"] = time.perf_counter(), time.process_time()
        state["measuring"] = True

    def end() -> None:
        state["measuring"] = False
        wall, cpu = time.perf_counter() - marks["wall0"], time.process_time() - marks["cpu0"]
        result: dict[str, Any] = {
            "kind": kind,
            "cores": len(app.last_snapshot.cores) if app.last_snapshot else cores,
            "executors": len(app.last_snapshot.executors) if app.last_snapshot else 0,
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "cpu_percent": round(100.0 * cpu / wall, 2),
            "frames": state["frames"],
            "fps": round(state["frames"] / wall, 2),
            "size": f"{app.size.width}x{app.size.height}",
        }
        if kind == "latency":
            result.update(latency_figures(state["latencies"]))
        out.write_text(json.dumps(result))
        app.exit()

    if headless:
        import asyncio  # noqa: PLC0415

        async def go() -> None:
            async with app.run_test(size=SIZE) as pilot:
                while not out.exists():
                    await pilot.pause(0.2)

        asyncio.run(go())
    else:
        app.run()


def latency_figures(latencies: list[float]) -> dict[str, Any]:
    """p50, p95 and max in milliseconds (``None`` when no sample arrived)."""
    if not latencies:
        return {"samples": 0, "p50_ms": None, "p95_ms": None, "max_ms": None}
    ms = sorted(1000.0 * x for x in latencies)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return {
        "samples": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p95_ms": round(p95, 1),
        "max_ms": round(ms[-1], 1),
    }


# -- the outer process: one tmux pane per measurement ---------------------------------------------


def measure(kind: str, cores: int, seconds: float, driver: str, workdir: Path) -> dict[str, Any]:
    """Run one inner measurement with ``driver`` (``tmux`` or ``headless``); returns its figures."""
    out = workdir / f"{kind}-{cores}.json"
    err = out.with_suffix(".stderr")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--inner", kind, "--cores", str(cores),
           "--seconds", str(seconds), "--out", str(out)]
    warmup = WARMUP_LATENCY_S if kind == "latency" else WARMUP_CPU_S
    deadline = time.monotonic() + warmup + seconds + 60
    if driver == "headless":
        with out.with_suffix(".log").open("w") as log:
            subprocess.run([*cmd, "--headless"], stderr=log, timeout=warmup + seconds + 60, check=False)
    else:
        server = f"torchpar-bench-{os.getpid()}"
        # Textual draws on stderr: it must stay the pane's terminal (errors go to a file, see --inner)
        shell = f"cd {shlex.quote(str(ROOT))} && {shlex.join(cmd)}"
        subprocess.run(
            ["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", "bench",
             "-x", str(SIZE[0]), "-y", str(SIZE[1]), "-e", "COLORTERM=truecolor", shell],
            check=True,
        )
        try:
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(1.0)  # let the app exit and the session close the child
        finally:
            subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, check=False)
            socket_dir = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
            (socket_dir / server).unlink(missing_ok=True)  # a server that ended by itself leaves it
    if not out.exists():
        detail = err.read_text()[-2000:] if err.exists() else "(no traceback)"
        raise RuntimeError(f"{kind} ({cores} cores) produced no result:\n{detail}")
    return json.loads(out.read_text())


def table(results: dict[str, Any]) -> str:
    """The figures as a small text table."""
    lines = [
        f"driver: {results['driver']} ({results['size']}), render interval {results['render_interval']} s, "
        f"{results['seconds']:g} s measured, {results['machine']['cpus']} CPUs, textual {results['machine']['textual']}",
        "",
        f"{'app CPU (synthetic session)':30s} {'% of one core':>14s} {'frames/s':>9s}",
    ]
    for row in results["cpu"]:
        label = f"{row['cores']} cores, {row['executors']} executors"
        lines.append(f"{label:30s} {row['cpu_percent']:14.1f} {row['fps']:9.1f}")
    lat = results.get("latency")
    if lat:
        lines += [
            "",
            f"{'latency, sample -> drawn (real session, async)':46s} {'p50':>7s} {'p95':>7s} {'max':>7s} {'n':>5s}",
            f"{'ms':46s} {fmt(lat['p50_ms'])} {fmt(lat['p95_ms'])} {fmt(lat['max_ms'])} {lat['samples']:5d}",
            f"app CPU with the real session: {lat['cpu_percent']:.1f}% of one core at {lat['fps']:.1f} frames/s",
        ]
    return "\n".join(lines)


def fmt(x: float | None) -> str:
    """A right-aligned figure or a dash."""
    return f"{x:7.1f}" if x is not None else f"{'—':>7s}"


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments; run the inner measurement, or all of them and report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window per run (default 20)")
    parser.add_argument("--cores", default="16,64,256", help="core counts of the synthetic session")
    parser.add_argument("--no-latency", action="store_true", help="skip the real-session latency run")
    parser.add_argument("--headless", action="store_true", help="Textual's headless driver, not tmux")
    parser.add_argument("--json", action="store_true", help="write the figures as JSON to stdout")
    parser.add_argument("--inner", choices=("cpu", "latency"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.inner:
        try:
            run_inner(args.inner, int(args.cores), args.seconds, args.out, args.headless)
        except BaseException:
            args.out.with_suffix(".stderr").write_text(traceback.format_exc())
            raise
        return 0

    import textual  # noqa: PLC0415

    driver = "headless" if args.headless or shutil.which("tmux") is None else "tmux"
    log: Callable[[str], None] = (lambda s: print(s, file=sys.stderr)) if args.json else print
    results: dict[str, Any] = {
        "driver": driver,
        "size": f"{SIZE[0]}x{SIZE[1]}",
        "render_interval": RENDER_INTERVAL,
        "seconds": args.seconds,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "textual": textual.__version__},
        "cpu": [],
    }
    with tempfile.TemporaryDirectory(prefix="bench-tui-") as tmp:
        for cores in (int(c) for c in args.cores.split(",")):
            log(f"app CPU, {cores} cores ({driver}, {args.seconds:g} s)...")
            results["cpu"].append(measure("cpu", cores, args.seconds, driver, Path(tmp)))
        if not args.no_latency:
            log(f"latency, real session ({driver}, {args.seconds:g} s)...")
            results["latency"] = measure("latency", 0, args.seconds, driver, Path(tmp))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print()
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
