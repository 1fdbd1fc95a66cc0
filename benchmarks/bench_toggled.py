"""What the agent costs a training loop, measured inside one process: its work switched on and off by
turns, a second at a time.

    python benchmarks/bench_toggled.py [--loop transformer-long] [--blocks 6] [--pairs 20] [--slot 1]
        [--settle 0.3] [--warmup 5] [--cpu N] [--slots FILE]
        [--only sampler|phases|counter | --rotate | --rotate-alone]
        [--slower S] [--switch ON_US,OFF_US]

Why: :mod:`bench_interleaved` compares two processes, and one process runs a few per cent faster or
slower than another of the same code for its whole life (where its memory landed): its blocks' ratios
spread ~3 %, so ten blocks leave an interval of ±2.5 % around a cost of ~1 %, and issue 18's goals
(≥ 0.97, ≥ 0.99) could not be shown either way. Here the agent's work and its absence take turns in the
same process, so what the process's placement does hits both alike.

How: the loop (``bench_run_steps.py``'s, pinned to ``--cpu``) runs under the agent (its socket drained
by a thread here, no monitor process), with the agent patched (here, in the child, before it starts;
nothing in the package changes) to read a flag this script writes into a shared file. While the flag
says *off*:

- the sampler still wakes every 100 ms but builds and sends no sample (it drops the finished steps the
  frontend left, so a sample after an off slot carries only its own);
- every step is closed untimed: the phase hooks come off as between the timed steps of a fast loop
  (:attr:`StepClock.sampling <torchpar_top.probes.agent.usercode_steps.StepClock.sampling>`);
- the op counter never goes on (its switches are still scheduled, and skipped).

What stays on in an off slot is the agent's floor: the optimizer step hook that marks each step (an
untimed step's short path), the per-step switch check, the DataLoader wrapper, the flag's reads; so
*on / off* is the cost of the agent's work above that floor, not of the whole agent (what the floor
costs is ``bench_step_steady.py``'s). ``--only PART`` puts one of the three behind the flag and
leaves the other two on: what that part costs beside the others. ``--rotate``: the off state of each
pair is, in turn, all three off and each part alone off, in the same process, so that the whole and the
parts are compared at the same moments of the VM (runs of ``--only`` one after another cannot tell a
cost that is not additive from the VM's drift between them); each comparison is reported as its own.
``--rotate-alone``: the other way round, all off against all on and against each part alone on (the two
others off), pair by pair: a cost that shows while any one part is on shows in each of these.
``--slower S`` replaces *off* with the agent sampling every S seconds instead of 0.1, all else on: what
the sample rate costs.
``--switch ON_US,OFF_US``: both states all on, the GIL's switch interval while a sample is made
``ON_US`` microseconds in the first and ``OFF_US`` in the second (0: the interpreter's own, as the agent
did before ``SAMPLE_SWITCH_INTERVAL``): what the sampler's hand-off of the GIL saves. Each
slot starts with ``--settle`` seconds not counted (the sampler sees the flag within 100 ms, the phase
hooks within a few steps). A pair is one slot of each, ABBA; a block is one process (its pairs'
geometric mean); the figure is the blocks' geometric mean with a 95 % interval from their spread (as
:mod:`bench_interleaved`).

Printed also, per state: where a step of the loop thread went (on a core, waiting for one, neither:
blocked on the GIL) and the CPU the process's other threads took a second (the agent's own threads);
and the same figures as differences within pairs (on less off, a mean with its 95 % interval): the VM's
speed swings from one second to the next (the same process's slots ran 48-97 steps/s within a minute),
which the rate's interval carries in full (a step's time on a core too), while the time a step waited
for a core or for the GIL and the agent's own CPU are resolved to a few per cent of themselves.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import mmap
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_interleaved import STEPS, Tally, _drain, interval, mean_ci, process_schedstat

#: While off, a step closed on the full path leaves this many to close untimed (the flag is read on
#: the full path only: one read in this many steps; back on, the hooks return within as many steps).
UNTIMED_WHILE_OFF = 8
ON, OFF = "on", "off"
#: Set in the child's environment by ``--slower S``: the second state samples every S seconds.
SLOWER_ENV = "TPT_BENCH_SLOWER"
#: Set in the child's environment by ``--switch``: the two states' switch intervals, in microseconds.
SWITCH_ENV = "TPT_BENCH_SWITCH"
#: The parts ``--only`` can name: the sampler's samples, the phase timing of every step, the op counter.
PARTS = ("sampler", "phases", "counter")
#: The flag's bit of each part (the flag holds the parts that are off; all of them: :data:`OFF`).
BITS = {part: 1 << i for i, part in enumerate(PARTS)}
#: The pairs ``--rotate`` goes through, one after another: all on against all off, then against each
#: part alone off.
ROTATION = tuple((ON, off) for off in (OFF, *(f"{part} off" for part in PARTS)))
#: The pairs ``--rotate-alone`` goes through: all on, then each part alone on, against all off.
ROTATION_ALONE = tuple((on, OFF) for on in (ON, *(f"{part} alone" for part in PARTS)))
#: Two states compared: the first's rate over the second's.
Pair = tuple[str, str]


def mask(state: str) -> int:
    """The flag's value in ``state``: :data:`ON`, :data:`OFF` (every part), ``"PART off"`` or
    ``"PART alone"`` (that part on, the others off)."""
    if state == ON:
        return 0
    every = sum(BITS.values())
    if state == OFF:
        return every
    if state.endswith(" alone"):
        return every & ~BITS[state.removesuffix(" alone")]
    return BITS[state.removesuffix(" off")]


# -- in the child: the agent with its work behind the flag ---------------------------------------------


def _patch(
    flag: ctypes.c_uint64,
    slower: float | None = None,
    switch: tuple[float, float] | None = None,
) -> None:
    """Put the agent's sampling, phase timing and op counting behind ``flag``, each off while its bit
    (:data:`BITS`) is set; with ``slower``, only the sampler's interval (non-zero: every ``slower``
    seconds, all else as usual); with ``switch``, only the GIL's switch interval while a sample is made
    (seconds, zero: the interpreter's own; the first while the flag is zero, the second while not)."""
    from torchpar_top.probes.agent.agent import Agent
    from torchpar_top.probes.agent.usercode_sampling import SampledCounting
    from torchpar_top.probes.agent.usercode_steps import StepClock

    clocks: list[StepClock] = []
    clock_init, sample, send = StepClock.__init__, Agent.sample, Agent.send
    close, switch_on = StepClock._close, SampledCounting._switch_on

    if slower is not None:
        usual: list[float] = []

        def sample_every(self: Agent, t0: float, t1: float) -> Any:
            if not usual:
                usual.append(self.interval)
            self.interval = slower if flag.value else usual[0]  # the sampler's next sleep
            return sample(self, t0, t1)

        Agent.sample = sample_every  # type: ignore[method-assign]
        return

    if switch is not None:

        def sample_switching(self: Agent, t0: float, t1: float) -> Any:
            self.switch_interval = switch[1 if flag.value else 0] or None  # from the next sample on
            return sample(self, t0, t1)

        Agent.sample = sample_switching  # type: ignore[method-assign]
        return

    def init(self: StepClock, *args: Any, **kwargs: Any) -> None:
        clock_init(self, *args, **kwargs)
        clocks.append(self)

    sampler_bit, phases_bit, counter_bit = BITS["sampler"], BITS["phases"], BITS["counter"]

    def sample_or_not(self: Agent, t0: float, t1: float) -> Any:
        if flag.value & sampler_bit:
            for clock in clocks:
                with clock._lock:
                    clock._done.clear()
            return None
        return sample(self, t0, t1)

    def send_some(self: Agent, msg: Any) -> None:
        if msg is not None:
            send(self, msg)

    def close_untimed_while_off(self: StepClock, t: float) -> bool:
        if flag.value & phases_bit and self.sampling:
            self._untimed_left = max(self._untimed_left, UNTIMED_WHILE_OFF)
        return close(self, t)

    def switch_on_or_not(self: SampledCounting, now: float) -> None:
        if flag.value & counter_bit:
            self._next_on = now + self.slice / self.duty  # as when it stands aside: the schedule goes on
            return
        switch_on(self, now)

    StepClock.__init__ = init  # type: ignore[method-assign]
    Agent.sample = sample_or_not  # type: ignore[method-assign]
    Agent.send = send_some  # type: ignore[method-assign]
    StepClock._close = close_untimed_while_off  # type: ignore[method-assign]
    SampledCounting._switch_on = switch_on_or_not  # type: ignore[method-assign]


def inner(flag_path: str, argv: list[str]) -> int:
    """The child: map the flag, patch the agent, run it (``argv`` is the agent's command line)."""
    with open(flag_path, "r+b") as f:
        shared = mmap.mmap(f.fileno(), 8)
    slower, switch = os.environ.get(SLOWER_ENV), os.environ.get(SWITCH_ENV)
    _patch(
        ctypes.c_uint64.from_buffer(shared),
        float(slower) if slower else None,
        _intervals(switch) if switch else None,
    )
    from torchpar_top.probes.agent.run import main as run_main

    return run_main(argv)


def _intervals(text: str) -> tuple[float, float]:
    """``ON_US,OFF_US`` (``--switch``) as seconds."""
    on, off = (float(part) * 1e-6 for part in text.split(","))
    return on, off


# -- here: one process per block, its states by turns ---------------------------------------------------


class Loop:
    """One loop process under the patched agent, its flag and its step counter."""

    def __init__(
        self,
        loop: str,
        threads: int,
        folder: Path,
        cpu: int | None,
        slower: float | None,
        switch: str = "",
    ) -> None:
        self.flag_path, self.count_path = folder / "flag", folder / "counter"
        for path in (self.flag_path, self.count_path):
            path.write_bytes(bytes(8))
        with self.flag_path.open("r+b") as f:
            self._flag_map = mmap.mmap(f.fileno(), 8)
        with self.count_path.open("r+b") as f:
            self._count_map = mmap.mmap(f.fileno(), 8)
        self._flag: ctypes.c_uint64 | None = ctypes.c_uint64.from_buffer(self._flag_map)
        self._count: ctypes.c_uint64 | None = ctypes.c_uint64.from_buffer(self._count_map)
        ours, theirs = socket.socketpair()
        threading.Thread(target=_drain, args=(ours,), daemon=True).start()
        fd = theirs.fileno()
        child = [str(STEPS), "--loop", loop, "--threads", str(threads), "--counter", str(self.count_path)]
        child += [] if cpu is None else ["--cpu", str(cpu)]
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--inner", str(self.flag_path), "--fd", str(fd), *child],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=(fd,),
            env={**os.environ, SLOWER_ENV: str(slower) if slower else "", SWITCH_ENV: switch},
        )
        theirs.close()

    def set(self, state: str) -> None:
        if self._flag is not None:
            self._flag.value = mask(state)

    def count(self) -> int:
        return int(self._count.value) if self._count is not None else 0

    def schedstat(self) -> tuple[int, int, int]:
        """The loop thread's ``(on a core, waiting for a core)`` nanoseconds so far, and the process's
        other threads' on a core (the agent's threads, intra-op workers); zeros where unreadable."""
        return process_schedstat(self.proc.pid)

    def end(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self._flag = self._count = None  # the maps cannot close while ctypes views of them live
        self._flag_map.close()
        self._count_map.close()


def slot(loop: Loop, state: str, settle: float, seconds: float) -> tuple[int, float, tuple[int, int, int]]:
    """``state`` for ``settle`` + ``seconds``: the steps done in the counted part, its length, and the
    loop thread's nanoseconds on a core and waiting for one, and the other threads' on a core."""
    loop.set(state)
    time.sleep(settle)
    s0 = loop.schedstat()
    c0, t0 = loop.count(), time.perf_counter()
    time.sleep(seconds)
    t1 = time.perf_counter()
    c1, s1 = loop.count(), loop.schedstat()
    return c1 - c0, t1 - t0, (s1[0] - s0[0], s1[1] - s0[1], s1[2] - s0[2])


#: Per pair, on's figures less off's: µs a step on a core, waiting for a core, blocked; µs a second of
#: the other threads on a core.
Differences = tuple[float, float, float, float]


def differences(counted: dict[str, tuple[int, float, tuple[int, int, int]]], pair: Pair) -> Differences:
    """One pair's :data:`Differences` (its first state less its second)."""
    per: dict[str, tuple[float, float, float, float]] = {}
    for state, (n, seconds, (on, queued, others)) in counted.items():
        on_us, queued_us = on / 1e3 / n, queued / 1e3 / n
        per[state] = (on_us, queued_us, seconds * 1e6 / n - on_us - queued_us, others / 1e3 / seconds)
    a, b = per[pair[0]], per[pair[1]]
    return a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3]


def block(
    args: argparse.Namespace,
    folder: Path,
    totals: dict[str, Tally],
    number: int,
    log: TextIO | None,
    diffs: dict[Pair, list[Differences]],
) -> dict[Pair, list[float]]:
    """One process: warm-up, then ``args.pairs`` ABBA pairs of two states (:func:`compared`, in turn,
    pair by pair); each comparison's pairs' ratios (the first state's rate over the second's). Each
    counted pair's :func:`differences` go to ``diffs`` under its comparison."""
    cpu = None if args.cpu < 0 else args.cpu
    loop = Loop(args.loop, args.threads, folder, cpu, args.slower, args.switch or "")
    pairs = compared(args)
    ratios: dict[Pair, list[float]] = {pair: [] for pair in pairs}
    try:
        deadline = time.monotonic() + 120
        while loop.count() == 0 and time.monotonic() < deadline:
            if loop.proc.poll() is not None:
                raise SystemExit("the loop ended before its first step")
            time.sleep(0.1)
        if loop.count() == 0:
            raise SystemExit("no step in 120 s")
        warm_until = time.monotonic() + args.warmup
        while time.monotonic() < warm_until:
            slot(loop, ON, args.settle, args.slot)
            slot(loop, OFF, args.settle, args.slot)
        for k in range(args.pairs):
            pair = first, second = pairs[k % len(pairs)]
            counted = {}
            # ABBA, each comparison in both orders
            for state in pair if (k // len(pairs)) % 2 == 0 else (second, first):
                counted[state] = n, seconds, (on, queued, others) = slot(loop, state, args.settle, args.slot)
                if log is not None:
                    log.write(f"{number},{k},{state},{n},{seconds:.6f},{on},{queued},{others}\n")
            if min(n for n, _, _ in counted.values()) <= 0:
                continue
            for state, (n, seconds, times) in counted.items():
                totals.setdefault(state, Tally()).add(n, seconds, times)
            a, b = counted[first], counted[second]
            ratios[pair].append((a[0] / a[1]) / (b[0] / b[1]))
            diffs.setdefault(pair, []).append(differences(counted, pair))
    finally:
        loop.end()
    return ratios


def compared(args: argparse.Namespace) -> tuple[Pair, ...]:
    """The comparisons the pairs go through: :data:`ROTATION` (``--rotate``), :data:`ROTATION_ALONE`
    (``--rotate-alone``), all on against one part off (``--only``), or :data:`ON` against :data:`OFF`
    (which ``--slower`` and ``--switch`` read as their two states)."""
    if args.rotate:
        return ROTATION
    if args.rotate_alone:
        return ROTATION_ALONE
    return ((ON, f"{args.only} off"),) if args.only else ((ON, OFF),)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", default="transformer-long")
    parser.add_argument("--blocks", type=int, default=6, help="processes, one after another")
    parser.add_argument("--pairs", type=int, default=20, help="pairs of slots per block")
    parser.add_argument("--slot", type=float, default=1.0, help="seconds counted of each slot")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds not counted at a slot's start")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of each block not counted")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--slots", type=Path, help="write every slot to this CSV file")
    parser.add_argument(
        "--slower",
        type=float,
        help="instead of off, the second state samples every SLOWER seconds (all else on)",
    )
    parser.add_argument(
        "--switch",
        help="ON_US,OFF_US: both states all on, the GIL switch interval while a sample is made (µs; 0: the"
        " interpreter's own) in each",
    )
    parser.add_argument(
        "--only",
        choices=PARTS,
        help="only this part of the agent's work goes off in the off state (the others stay on)",
    )
    parser.add_argument(
        "--rotate",
        action="store_true",
        help="the off state goes through all off and each part alone off, pair by pair, in one process",
    )
    parser.add_argument(
        "--rotate-alone",
        action="store_true",
        help="against all off, the first state goes through all on and each part alone on, pair by pair",
    )
    parser.add_argument(
        "--cpu",
        type=int,
        default=max(os.sched_getaffinity(0)),
        help="the core the loop is pinned to; -1: not",
    )
    args = parser.parse_args()
    if args.blocks < 1 or args.pairs < 1 or not args.slot > 0 or args.settle < 0 or args.warmup < 0:
        raise SystemExit(
            "--blocks and --pairs need at least 1, --slot more than 0, --settle and --warmup 0 or more"
        )
    if args.slower is not None and not args.slower > 0:
        raise SystemExit("--slower needs a number of seconds above 0")
    if (
        sum(x is not None for x in (args.slower, args.only, args.switch)) + args.rotate + args.rotate_alone
        > 1
    ):
        raise SystemExit(
            "--only, --rotate, --rotate-alone, --slower and --switch are different comparisons: give one"
        )
    if args.switch is not None:
        try:
            switch = _intervals(args.switch)
        except ValueError:
            raise SystemExit("--switch needs two numbers of microseconds: ON_US,OFF_US") from None
        if min(switch) < 0:
            raise SystemExit("--switch needs microseconds of 0 or more")
    compares = compared(args)
    label = {state: state for pair in compares for state in pair}
    if args.slower is not None:
        label[OFF] = f"every {args.slower:g} s"
    if args.switch is not None:
        on_us, off_us = args.switch.split(",")
        label = {ON: f"switch {on_us} µs", OFF: f"switch {off_us} µs"}

    load = os.getloadavg()[0]
    totals: dict[str, Tally] = {}
    blocks: dict[Pair, list[float]] = {pair: [] for pair in compares}
    pairs: dict[Pair, list[float]] = {pair: [] for pair in compares}
    diffs: dict[Pair, list[Differences]] = {}
    with contextlib.ExitStack() as stack:
        log = None
        if args.slots is not None:
            log = stack.enter_context(args.slots.open("w", buffering=1))
            log.write("block,pair,state,steps,seconds,on_core_ns,queued_ns,others_ns\n")
        for i in range(args.blocks):
            with tempfile.TemporaryDirectory(prefix="tpt-bench-toggled-") as tmp:
                ratios = block(args, Path(tmp), totals, i + 1, log, diffs)
            for pair, some in ratios.items():
                name = f"{label[pair[0]]} / {label[pair[1]]}"
                if not some:
                    print(f"  block {i + 1}: no pair of {name} counted", file=sys.stderr, flush=True)
                    continue
                pairs[pair] += some
                blocks[pair].append(interval(some)[0])
                print(
                    f"  block {i + 1}: {name} {blocks[pair][-1]:.4f} over {len(some)} pairs",
                    file=sys.stderr,
                    flush=True,
                )
    if not any(blocks.values()):
        raise SystemExit("no pair was counted in any block")
    print(
        f"{args.loop}: {args.blocks} processes of {args.pairs} pairs of {args.slot:g} s slots (after "
        f"{args.settle:g} s each; {args.warmup:g} s of warm-up), {args.threads} intra-op thread(s), loop on "
        f"cpu {args.cpu}; load {load:.2f} at the start"
        + (f"; in turn: {', '.join(f'{a} / {b}' for a, b in compares)}" if len(compares) > 1 else "")
    )
    for state in label:
        if state in totals:
            print(totals[state].line(label[state]))
    for pair in compares:
        if blocks[pair]:
            a, b = pair
            report(label[a], label[b], blocks[pair], pairs[pair], diffs.get(pair, []))


def report(on: str, off: str, blocks: list[float], pairs: list[float], diffs: list[Differences]) -> None:
    """One comparison: the differences within pairs, the blocks' ratios and their interval."""
    if len(diffs) > 1:  # by pair: what the same process did a second apart, in each state
        names = ("a step on a core", "waiting for a core", "blocked", "the other threads' CPU")
        units = ("µs", "µs", "µs", "µs a second")
        print(f"  {on} - {off}, mean of the pairs (95 %):")
        for name, unit, column in zip(names, units, zip(*diffs, strict=True), strict=True):
            value, half = mean_ci(column)
            print(f"    {name}: {value:+.1f} ± {half:.1f} {unit}")
    mean, lo, hi = interval(blocks)
    print(f"  blocks: {' '.join(f'{r:.4f}' for r in blocks)}")
    print(
        f"  {on} / {off}: **{mean:.4f}** (95 % {lo:.4f}-{hi:.4f}, from the blocks' spread); "
        f"median of all pairs {statistics.median(pairs):.4f}"
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM as Ctrl-C: the block's finally clause ends its process


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--inner":
        sys.exit(inner(sys.argv[2], sys.argv[3:]))
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted")
