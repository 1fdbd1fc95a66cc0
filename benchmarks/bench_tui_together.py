"""Two versions of the screen measured at the same time: their CPU side by side, by thread.

    python benchmarks/bench_tui_together.py --base DIR [--variant "app run steps"] [--rounds 6]
        [--seconds 20]

``bench_tui.py --footprint`` alternates its variants round by round; on this project's VM the app's CPU
moved 3.1-4.4 % between rounds of the same code, more than a cut of 10 % moves it. Here both versions
run at once, each in its own 120x36 tmux pane (this checkout's and ``--base``'s ``torchpar_top``, the
same command line, each with its own workload), so the machine's noise hits both in the same seconds:
the ratio of their CPU in each round is what is compared. Measured from outside: every thread's
on-CPU time (``/proc/PID/task/TID/schedstat``, nanoseconds) over the window after a warm-up, the pane
process's main thread apart, and its context switches a second. Both screens share the machine's two
cores with each other's workloads, so the absolute figures are above what one screen alone costs; use
``bench_tui.py --footprint`` for those, and this for the ratio.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tui import VARIANTS, _base_env, _tmux_session

WARMUP_S = 12.0  # the child imports torch and starts stepping


def _threads(pid: int) -> tuple[int, int, int]:
    """(main thread's on-CPU ns, every thread's, main thread's context switches) of ``pid`` now."""
    main = total = switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        total += ns
        if tid == str(pid):
            main = ns
            switches = sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line)
    return main, total, switches


def _pane_pid(server: str) -> int:
    out = subprocess.run(
        ["tmux", "-L", server, "display-message", "-p", "-t", "fp", "#{pane_pid}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="the other checkout, run beside this one")
    ap.add_argument(
        "--variant", default="app run steps", help=f"what runs in both panes: {', '.join(VARIANTS)}"
    )
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window per round")
    args = ap.parse_args()
    cmd = VARIANTS[args.variant]
    if cmd[0] != "torchpar-top":
        raise SystemExit(f"{args.variant}: only the torchpar-top variants have two versions")
    this = [str(Path(sys.executable).with_name("torchpar-top")), *cmd[1:]]
    base = [
        sys.executable,
        "-c",
        "import sys; from torchpar_top.main import main; sys.exit(main())",
        *cmd[1:],
    ]
    versions = {
        "this": (shlex.join(this), ["-e", "COLORTERM=truecolor"]),
        "base": (
            shlex.join(base),
            ["-e", "COLORTERM=truecolor", "-e", f"PYTHONPATH={_base_env(args.base)['PYTHONPATH']}"],
        ),
    }
    rows: dict[str, list[tuple[float, float, float]]] = {v: [] for v in versions}
    ratios = []
    for r in range(args.rounds):
        order = list(versions) if r % 2 == 0 else list(versions)[::-1]  # who starts first alternates
        servers = {v: f"torchpar-together-{os.getpid()}-{v}" for v in versions}
        try:
            for v in order:
                shell, env = versions[v]
                _tmux_session(servers[v], "fp", env, shell)
            time.sleep(WARMUP_S)
            pids = {v: _pane_pid(servers[v]) for v in versions}
            before = {v: _threads(p) for v, p in pids.items()}
            t0 = time.monotonic()
            time.sleep(args.seconds)
            after = {v: _threads(p) for v, p in pids.items()}
            dt = time.monotonic() - t0
            for v in versions:
                (m0, a0, c0), (m1, a1, c1) = before[v], after[v]
                rows[v].append(((m1 - m0) / dt / 1e7, (a1 - a0) / dt / 1e7, (c1 - c0) / dt))
            ratios.append(rows["this"][-1][1] / rows["base"][-1][1])
            print(
                f"round {r + 1}: "
                + "  ".join(
                    f"{v} {a:.2f} % (main {m:.2f} %, {c:.0f} switches/s)"
                    for v, (m, a, c) in ((v, rows[v][-1]) for v in versions)
                )
                + f"  this/base {ratios[-1]:.3f}",
                flush=True,
            )
        finally:
            for v in order:
                subprocess.run(
                    ["tmux", "-L", servers[v], "send-keys", "-t", "fp", "q"], check=False, capture_output=True
                )
            time.sleep(3)
            for v in order:
                subprocess.run(["tmux", "-L", servers[v], "kill-server"], check=False, capture_output=True)
    for v in versions:
        main_, all_, switches = (statistics.median(x[i] for x in rows[v]) for i in range(3))
        print(f"{v:5} median {all_:.2f} % of a core, main thread {main_:.2f} %, {switches:.0f} switches/s")
    spread = f"{min(ratios):.3f}-{max(ratios):.3f}"
    print(f"this/base median {statistics.median(ratios):.3f} ({spread}), {args.rounds} rounds")


if __name__ == "__main__":
    main()
