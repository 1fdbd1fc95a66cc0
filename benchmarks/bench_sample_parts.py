"""Where one of the agent's samples goes, part by part, inside a training loop's process (cold, as
the sampler runs: once every 100 ms beside the loop).

    python benchmarks/bench_sample_parts.py [--loop transformer-long] [--seconds 25] [--cpu 1]
        [--switch-us 50]

The loop (``bench_run_steps.py``'s) runs under the agent in this process, its socket drained by a thread
here (no monitor process). The agent's sample-making methods are wrapped (here, before it starts;
nothing in the package changes) to add up each one's CPU time (``thread_time``) and wall time: the whole
sample (``sample``), its send (``send``: encoding and the socket), each of the user code's sample parts
and after-sample hooks, the thread clocks (``schedstat``), the frontend's stack (every 0.5 s) and the
thread roles. After ``--seconds`` it prints each per sample (a part called less often than every sample
is averaged over all samples), and exits. A sample's wall time above its CPU time is time the sampler
waited, mostly for the GIL. ``--switch-us`` sets the GIL switch interval while a sample is made
(``agent.SAMPLE_SWITCH_INTERVAL``; 0: the interpreter's own).

Read: the wrapped parts nest inside ``sample`` (``clock.take`` inside it, the parts inside it); the
whole cost of one sample is ``sample`` plus ``send``.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_interleaved import run_in_this_process

CPU: collections.Counter[str] = collections.Counter()
WALL: collections.Counter[str] = collections.Counter()
CALLS: collections.Counter[str] = collections.Counter()


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, its CPU and wall time added up under ``name``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            CPU[name] += time.thread_time_ns() - cpu
            WALL[name] += time.perf_counter_ns() - wall
            CALLS[name] += 1

    return wrapper


def _label(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", repr(fn)))


def wrap(switch: float | None) -> None:
    """The agent's sampling methods timed; the switch interval while a sample is made set to ``switch``."""
    from torchpar_top.probes.agent import agent
    from torchpar_top.probes.agent.cputime import ThreadClock

    sample = timed("sample", agent.Agent.sample)
    wrapped: set[int] = set()

    def timed_sample(self: agent.Agent, t0: float, t1: float) -> Any:
        if id(self) not in wrapped:  # the parts are added once the user's code is known: wrap at first use
            wrapped.add(id(self))
            self.sample_parts[:] = [timed("part " + _label(p), p) for p in self.sample_parts]
            self.on_sample[:] = [timed("after " + _label(p), p) for p in self.on_sample]
            self.switch_interval = switch
        return sample(self, t0, t1)

    agent.Agent.sample = timed_sample  # type: ignore[method-assign]
    agent.Agent.send = timed("send", agent.Agent.send)  # type: ignore[method-assign]
    agent.Agent.frontend_stack = timed("frontend stack", agent.Agent.frontend_stack)  # type: ignore[method-assign]
    agent.Agent._sample_roles = timed("thread roles", agent.Agent._sample_roles)  # type: ignore[method-assign]
    ThreadClock.take = timed("thread clocks (schedstat)", ThreadClock.take)  # type: ignore[method-assign]


def report(seconds: float, loop: str) -> None:
    """After ``seconds``: the table, then end the process (the loop with it)."""
    time.sleep(seconds)
    n = CALLS["sample"]
    print(f"{loop}: {n} samples in {seconds:g} s; µs a sample (CPU / wall):")
    for name in sorted(CPU, key=lambda k: -CPU[k]):
        print(f"  {name:48s} {CPU[name] / n / 1e3:7.1f} / {WALL[name] / n / 1e3:7.1f}  ({CALLS[name]} calls)")
    print(f"  {'a sample in all (sample + send)':48s} {(CPU['sample'] + CPU['send']) / n / 1e3:7.1f}")
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", default="transformer-long")
    parser.add_argument("--seconds", type=float, default=25.0, help="seconds of the loop timed")
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)), help="the loop's core")
    parser.add_argument(
        "--switch-us",
        type=float,
        help="the GIL switch interval while a sample is made, µs (0: the interpreter's own; default: the"
        " agent's)",
    )
    args = parser.parse_args()
    if not args.seconds > 0:
        raise SystemExit("--seconds needs a number above 0")
    from torchpar_top.probes.agent import agent

    switch = agent.SAMPLE_SWITCH_INTERVAL if args.switch_us is None else (args.switch_us * 1e-6 or None)
    wrap(switch)
    threading.Thread(target=report, args=(args.seconds, args.loop), daemon=True).start()
    run_in_this_process(args.loop, args.cpu, args.seconds + 60)


if __name__ == "__main__":
    main()
