"""What the agent costs a training loop step by step, inside one process: the VM's speed drifts over
seconds, hardly from one step to the next, so a step is compared with its neighbours.

    python benchmarks/bench_per_step.py overlap [--seconds 60] [--loop transformer-long] [--switch-us A,B]
        [--pin-sampler CPU]
    python benchmarks/bench_per_step.py alternate phases|clock [--seconds 60] [--loop transformer-long]

The loop (``bench_run_steps.py``'s, pinned to ``--cpu``) runs under the agent in this process, its socket
drained by a thread here (no monitor process); the agent is patched here (nothing in the package
changes). Every step's end is recorded with the loop thread's CPU time (``thread_time``).

``overlap``: every sample is recorded too (from the start of its making to the end of its send). A step
during which a sample was made is compared with the steps two before and two after it (none of which
overlapped one): the excess is what one sample costs the loop, in wall time (mostly the GIL: the loop
waits for the sampler) and in CPU time (on its core). With ``--switch-us A,B`` the samples alternate
between two GIL switch intervals (``agent.SAMPLE_SWITCH_INTERVAL``; 0: the interpreter's own), each
reported apart. With ``--pin-sampler CPU`` the samples alternate between the sampler thread pinned to
that core and free to run on any (the agent's own switch interval). The per-step average is that
excess times the share of steps that overlap a sample (all samples' share: what a step pays on average
where every sample is made so).

``alternate PART``: the op counter and the sampler off, every other step has PART on: ``phases`` (the
phase hooks on and timed, against the hooks off and the step untimed, as between a fast loop's timed
steps) or ``clock`` (the hooks stay, only the clock's own bookkeeping on and off). Each pair of adjacent
steps gives a difference (on less off); the switch itself, done at a step's end, is in neither step: with
``phases`` its own CPU time is printed apart (what timing only some steps pays per switch, two for
each timed step).

Printed: the means with 95 % intervals (1.96 standard errors over the steps or pairs).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_interleaved import mean_ci, run_in_this_process

#: Steps left out at the start (warm-up, root discovery).
SKIP_STEPS = 200

STEP_ENDS: list[tuple[float, float]] = []
"""``(perf_counter, thread_time)`` at each step's end (the loop thread)."""
SAMPLES: list[tuple[float, float, int]] = []
"""``(start, end, which)`` of each sample: ``which`` is its kind (of ``--switch-us`` or ``--pin-sampler``)."""
STATE = {"on": True}
PAIRS: list[tuple[bool, float]] = []
"""``(on, CPU seconds)`` of each step for ``alternate``."""
SWITCHES: list[tuple[bool, float]] = []
"""``(on, CPU seconds)`` of each switch of the hooks for ``alternate phases`` (``StepClock._set_timing``:
the hooks put back, or taken off)."""


def _patch_overlap(switches: tuple[float | None, ...], pin: int | None = None) -> None:
    from torchpar_top.probes.agent import agent
    from torchpar_top.probes.agent.usercode_steps import StepClock

    close, sample, send = StepClock._close, agent.Agent.sample, agent.Agent.send
    started: dict[str, tuple[float, int]] = {}

    def timed_close(self: StepClock, t: float) -> bool:
        STEP_ENDS.append((time.perf_counter(), time.thread_time()))
        return close(self, t)

    anywhere = os.sched_getaffinity(0)

    def timed_sample(self: agent.Agent, t0: float, t1: float) -> Any:
        kinds = len(switches) if pin is None else 2
        which = len(SAMPLES) % kinds
        if pin is not None:  # this thread's own affinity (Linux: per thread), from this sample on
            os.sched_setaffinity(0, {pin} if which == 0 else anywhere)
        started["at"] = (time.perf_counter(), which)
        self.switch_interval = switches[(len(SAMPLES) + 1) % len(switches)]  # the next sample's
        return sample(self, t0, t1)

    def timed_send(self: agent.Agent, msg: Any) -> None:
        send(self, msg)
        if type(msg).__name__ == "Sample" and "at" in started:
            t0, which = started.pop("at")
            SAMPLES.append((t0, time.perf_counter(), which))

    StepClock._close = timed_close  # type: ignore[method-assign]
    agent.Agent.sample = timed_sample  # type: ignore[method-assign]
    agent.Agent.send = timed_send  # type: ignore[method-assign]
    agent.SAMPLE_SWITCH_INTERVAL = switches[0]  # the first sample's


def _report_overlap(labels: list[str]) -> None:
    ends = STEP_ENDS[SKIP_STEPS:]
    samples = [s for s in SAMPLES if ends and s[0] > ends[0][0]]
    rows: list[tuple[float, float, int | None]] = []  # a step's wall, CPU, and the sample it overlapped
    j = 0
    for (w0, c0), (w1, c1) in itertools.pairwise(ends):
        while j < len(samples) and samples[j][1] < w0:
            j += 1
        which = samples[j][2] if j < len(samples) and samples[j][0] < w1 else None
        rows.append((w1 - w0, c1 - c0, which))
    if len(rows) < 10:
        raise SystemExit("too few steps: give more --seconds")
    share = sum(r[2] is not None for r in rows) / len(rows)
    wall = statistics.fmean(r[0] for r in rows) * 1e6
    print(
        f"{len(rows)} steps ({wall:.0f} µs a step), {len(samples)} samples; {share:.3f} of the steps"
        " overlap one"
    )
    for which, label in enumerate(labels):
        excess: list[tuple[float, float]] = []
        for k in range(2, len(rows) - 2):
            if rows[k][2] == which and all(rows[i][2] is None for i in (k - 2, k - 1, k + 1, k + 2)):
                near = (rows[k - 2], rows[k + 2])
                excess.append(
                    (
                        (rows[k][0] - (near[0][0] + near[1][0]) / 2) * 1e6,
                        (rows[k][1] - (near[0][1] + near[1][1]) / 2) * 1e6,
                    )
                )
        if len(excess) < 2:
            print(f"  {label}: too few overlapped steps")
            continue
        (w, wh), (c, ch) = mean_ci([e[0] for e in excess]), mean_ci([e[1] for e in excess])
        print(
            f"  {label}: a step that overlaps a sample, against its neighbours: wall"
            f" {w:+.1f} ± {wh:.1f} µs, CPU {c:+.1f} ± {ch:.1f} µs ({len(excess)} steps); a step on average,"
            f" every sample so (× {share:.3f}): wall {w * share:+.1f}, CPU {c * share:+.1f} µs"
        )


def _patch_alternate(part: str) -> None:
    from torchpar_top.probes.agent import agent, usercode_sampling
    from torchpar_top.probes.agent.usercode_steps import OTHER, StepClock

    def no_sampler(self: agent.Agent) -> None:
        return None

    def never_on(self: usercode_sampling.SampledCounting, now: float) -> None:
        self._next_on = math.inf

    agent.Agent._sample_loop = no_sampler  # type: ignore[method-assign]
    usercode_sampling.SampledCounting._switch_on = never_on  # type: ignore[method-assign]
    close = StepClock._close
    last: list[float] = []

    def alternating_close(self: StepClock, t: float) -> bool:
        now = time.thread_time()
        if last and len(STEP_ENDS) > SKIP_STEPS:
            PAIRS.append((STATE["on"], now - last[0]))
        STEP_ENDS.append((time.perf_counter(), now))
        closed = close(self, t)
        on = STATE["on"] = not STATE["on"]
        self.sampling = False  # the clock's own choice of timed steps stays out of it
        if part == "phases":
            if self.timing != on:
                before = time.thread_time()
                self._set_timing(on, t)
                if len(STEP_ENDS) > SKIP_STEPS:
                    SWITCHES.append((on, time.thread_time() - before))
        else:  # the hooks stay installed and called: the clock does its bookkeeping or returns at once
            self.timing = on
            if on:
                self._stack.clear()
                self.phase, self._since = OTHER, t
        last[:] = [time.thread_time()]
        return closed

    StepClock._close = alternating_close  # type: ignore[method-assign]


def _report_alternate(part: str) -> None:
    diffs = [
        (a[1] - b[1]) * 1e6 if a[0] else (b[1] - a[1]) * 1e6
        for a, b in zip(PAIRS[::2], PAIRS[1::2], strict=False)
        if a[0] != b[0]
    ]
    if len(diffs) < 2:
        raise SystemExit("too few steps: give more --seconds")
    on = [c * 1e6 for o, c in PAIRS if o]
    off = [c * 1e6 for o, c in PAIRS if not o]
    d, half = mean_ci(diffs)
    print(
        f"{part}: {len(on)} steps on, {len(off)} off; CPU a step {statistics.fmean(on):.1f} on,"
        f" {statistics.fmean(off):.1f} off; on less off, adjacent pairs: {d:+.1f} ± {half:.1f} µs"
    )
    for on, what in ((True, "put back"), (False, "taken off")):
        cpu = [c * 1e6 for o, c in SWITCHES if o == on]
        if len(cpu) >= 2:
            mean, half = mean_ci(cpu)
            print(
                f"  the hooks {what} (a switch, at a step's end): {mean:.1f} ± {half:.1f} µs CPU ({len(cpu)})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("overlap", "alternate"))
    parser.add_argument("part", nargs="?", choices=("phases", "clock"), help="for alternate")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--loop", default="transformer-long")
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    parser.add_argument("--switch-us", default="", help="overlap: A,B (µs, 0: the interpreter's own)")
    parser.add_argument(
        "--pin-sampler", type=int, help="overlap: every other sample, the sampler on this core"
    )
    args = parser.parse_args()
    if args.what == "alternate" and args.part is None:
        raise SystemExit("alternate needs a part: phases or clock")
    if not args.seconds > 0:
        raise SystemExit("--seconds needs a number above 0")
    from torchpar_top.probes.agent import agent

    switches: tuple[float | None, ...] = (agent.SAMPLE_SWITCH_INTERVAL,)
    if args.switch_us:
        try:
            switches = tuple(float(x) * 1e-6 or None for x in args.switch_us.split(","))
        except ValueError:
            raise SystemExit("--switch-us needs numbers of microseconds: A,B") from None
    if args.pin_sampler is not None and args.switch_us:
        raise SystemExit("--switch-us and --pin-sampler are two ways to alternate the samples: give one")
    if args.pin_sampler is not None:
        labels = [f"the sampler on cpu {args.pin_sampler}", "the sampler on any core"]
    else:
        labels = [
            "switch interval " + ("the interpreter's" if sw is None else f"{sw * 1e6:g} µs")
            for sw in switches
        ]
    if args.what == "overlap":
        _patch_overlap(switches, args.pin_sampler)
    else:
        _patch_alternate(args.part)

    def report() -> None:
        time.sleep(args.seconds)
        print(f"{args.loop}, loop on cpu {args.cpu}, {args.seconds:g} s:")
        if args.what == "overlap":
            _report_overlap(labels)
        else:
            _report_alternate(args.part)
        sys.stdout.flush()
        os._exit(0)

    threading.Thread(target=report, daemon=True).start()
    run_in_this_process(args.loop, args.cpu, args.seconds + 60)


if __name__ == "__main__":
    main()
