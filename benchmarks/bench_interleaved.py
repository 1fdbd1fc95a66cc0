"""The cost of ``torchpar-top run`` on a training loop, in interleaved slots: both variants run at
once, and only one of them at a time is let run.

    python benchmarks/bench_interleaved.py [--loop mlp-wide] [--a plain] [--b run|agent|plain2]
        [--blocks 10] [--pairs 20] [--slot 1] [--warmup 5] [--cpu N] [--slots FILE]
        [--base DIR]

Why: on this project's shared VM the speed of the machine itself drifts by 10-30 % over minutes (the
same plain loop ran 884 and 2,808 steps/s on two days, and its 8-second rounds within one run spread
0.75-1.27 of each other), so :mod:`bench_run_steps`' alternated rounds of several seconds cannot resolve
the 1-3 % that issue 18's goals are about.

How: in a block, both variants are started and kept side by side; every ``--slot`` seconds one
variant's processes are all stopped (``SIGSTOP``: the loop, and for ``run`` the monitor process and
every process under it) and the other's continued (``SIGCONT``), so the two take turns on the same
machine a second apart. A slot's rate is the steps the loop did in it (a counter the loop keeps in a
shared file) over the slot's time; a pair is one slot of each, in ABBA order. Both loops are pinned to
one core (``--cpu``, the last by default; the monitor is not pinned).

Blocks: one process runs a few per cent faster or slower than another of the same code for its whole
life (where its memory landed), so pairs within one block are not independent samples: plain against
a second plain read 0.96 and 1.02 in two runs of 40-200 pairs, each with a 95 % interval of ±2 % that
left out 1. So both variants start afresh ``--blocks`` times; a block's ratio is the geometric mean of
its pairs' ratios (B's rate over A's), and the run's figure is the geometric mean of the blocks' with a
95 % interval (Student's t) from the blocks' spread. Printed also: per variant, where its loop thread's
step went (``/proc/PID/task/TID/schedstat``: on a core, waiting for one, neither: blocked on the GIL or
a lock), and the CPU its process's other threads took a second (the agent's sampler and control
threads: what the agent's own work costs, resolved far better than its effect on the rate).
``--slots FILE`` writes every counted slot (block, pair, variant, steps, seconds, the loop thread's
nanoseconds on a core and waiting for one, the other threads' on a core) as CSV, to look at a run's
slots one by one.

Variants: ``plain`` (``python bench_run_steps.py --loop NAME``), ``plain2`` (the same: ``--a plain
--b plain2`` measures the method's own noise, its ratio should be 1 within its interval), ``run`` (the
same under ``python -m torchpar_top run --headless``: the monitor with its probes, the agent in the
loop's process), ``agent`` (the agent alone in the loop's process, its socket drained by a thread of
this script: the child's share of the cost without the monitor process) and ``agent-no-PART[+PART]``
(the agent with those parts switched off, ``agent_without.py``: ``sampler``, ``ops``, ``phases``,
``steps``, ``signal`` or ``all``; ``--a agent-no-sampler --b agent`` is what the sampler costs) and
``agent-base`` (the agent of another checkout, ``--base DIR``: ``--a agent-base --b agent`` is a change's
effect).

What stopping adds: when a variant is let run again, what fell due while it was stopped runs at once
(the agent's sampler wakes from its sleep and samples, the monitor reads), in its own slot: one sample
more per slot than the agent's 10 a second, so slots of a second or more. The op counter's slices are
scheduled on the wall clock, so a variant stopped half the time has its counter on twice its share of
its running time (2 % instead of 1 % once steps are found: ~0.1 % of an MLP step's cost). The loops
are the ones :mod:`bench_run_steps` defines (``mlp``, ``mlp-wide``, ``transformer``, ``transformer-long``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import math
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_without import parts_of  # this folder's modules (run as a script)
from bench_run_steps import base_env
from torchpar_top.probes.agent.cputime import parse_schedstat

STEPS = Path(__file__).resolve().with_name("bench_run_steps.py")
WITHOUT = STEPS.with_name("agent_without.py")
VARIANTS = ("plain", "plain2", "run", "agent", "agent-base")
#: ``agent-no-PART[+PART]``: the agent with parts off (``agent_without.py``'s parts).
AGENT_WITHOUT = "agent-no-"


def is_agent(name: str) -> bool:
    return name in ("agent", "agent-base") or name.startswith(AGENT_WITHOUT)


def _drain(sock: socket.socket) -> None:
    """Read and drop what an agent sends until it closes."""
    with contextlib.suppress(OSError):
        while sock.recv(1 << 16):
            pass
    sock.close()


def run_in_this_process(loop: str, cpu: int, seconds: float) -> None:
    """``loop`` (``bench_run_steps.py``'s) under the agent in this process for ``seconds``, its socket
    drained by a thread (no monitor process): for scripts that patch the agent first and report from a
    thread of their own before the loop ends (they then end the process)."""
    ours, theirs = socket.socketpair()
    threading.Thread(target=_drain, args=(ours,), daemon=True).start()
    from torchpar_top.probes.agent.run import main as run_main

    run_main(
        [
            "--fd",
            str(theirs.fileno()),
            str(STEPS),
            "--loop",
            loop,
            "--cpu",
            str(cpu),
            "--seconds",
            str(seconds),
        ]
    )
    raise SystemExit("the loop ended before the report")


class Variant:
    """One variant's processes and its step counter."""

    def __init__(
        self,
        name: str,
        loop: str,
        threads: int,
        folder: Path,
        tag: str,
        cpu: int | None,
        base: Path | None = None,
    ) -> None:
        self.name = name
        self.path = folder / f"counter-{tag}"
        self.path.write_bytes(bytes(8))
        with self.path.open("r+b") as f:
            self.counter = mmap.mmap(f.fileno(), 8)
        self._word: ctypes.c_uint64 | None = ctypes.c_uint64.from_buffer(self.counter)
        """The loop's count, read in one aligned 8-byte load (as the loop stores it)."""
        child = [str(STEPS), "--loop", loop, "--threads", str(threads), "--counter", str(self.path)]
        child += [] if cpu is None else ["--cpu", str(cpu)]
        if name in ("plain", "plain2"):
            cmd = [sys.executable, *child]
        elif name == "run":
            cmd = [sys.executable, "-m", "torchpar_top", "run", "--headless", "--duration", "100000", *child]
        elif is_agent(name):
            # the agent in the loop's process, its socket drained by a thread here: no monitor process
            ours, theirs = socket.socketpair()
            threading.Thread(target=_drain, args=(ours,), daemon=True).start()
            fd = theirs.fileno()
            entry = ["-m", "torchpar_top.probes.agent.run"]
            if name.startswith(AGENT_WITHOUT):  # agent-no-PART[+PART]: the agent with those parts off
                entry = [str(WITHOUT), name.removeprefix(AGENT_WITHOUT)]
            cmd = [sys.executable, *entry, "--fd", str(fd), *child]
        else:
            raise SystemExit(f"unknown variant {name!r}")
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=(fd,) if is_agent(name) else (),
            env=base_env(base) if name == "agent-base" and base is not None else None,
        )
        if is_agent(name):
            theirs.close()
        self.stopped: list[psutil.Process] = []
        self._loop_pid: int | None = None

    def count(self) -> int:
        return int(self._word.value) if self._word is not None else 0

    def tree(self) -> list[psutil.Process]:
        """The variant's processes, the loop's first: the deepest whose command line names the counter
        (``run``'s monitor names it too, among its child's arguments)."""
        try:
            top = psutil.Process(self.proc.pid)
            procs = [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

        def is_loop(p: psutil.Process) -> bool:
            try:
                return str(self.path) in p.cmdline()
            except psutil.Error:
                return False

        loops = [p for p in procs if is_loop(p)]
        loop = loops[-1] if loops else top
        return [loop, *(p for p in procs if p is not loop)]

    def schedstat(self) -> tuple[int, int, int]:
        """The loop thread's ``(on a core, waiting for a core)`` nanoseconds so far, and the loop
        process's other threads' on a core (the agent's sampler and control threads, intra-op
        workers); zeros where unreadable. An other thread that ended between two readings takes its
        time with it (the agent's threads live as long as the process)."""
        if self._loop_pid is None:
            procs = self.tree()
            self._loop_pid = procs[0].pid if procs else -1
        return process_schedstat(self._loop_pid)

    def stop(self) -> None:
        self.stopped = self.tree()
        for p in self.stopped:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGSTOP)

    def cont(self) -> None:
        for p in reversed(self.stopped):
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGCONT)
        self.stopped = []

    def end(self) -> None:
        self.cont()
        procs = self.tree()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGCONT)
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=5)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        self._word = None  # the mmap cannot close while a ctypes view of it lives
        self.counter.close()


def process_schedstat(pid: int) -> tuple[int, int, int]:
    """Process ``pid``'s main thread's ``(on a core, waiting for a core)`` nanoseconds so far, and its
    other threads' on a core (``/proc/PID/task/TID/schedstat``); zeros where unreadable."""
    run = wait = others = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0, 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                reading = parse_schedstat(f.read())
        except OSError:
            continue  # ended meanwhile
        if reading is None:
            continue
        if tid == str(pid):
            run, wait = reading
        else:
            others += reading[0]
    return run, wait, others


def slot(v: Variant, seconds: float) -> tuple[int, float, tuple[int, int, int]]:
    """Let ``v`` run alone for ``seconds``: the steps it did, the time it had, and its loop thread's
    nanoseconds on a core and waiting for one, and its process's other threads' on a core."""
    v.cont()
    s0 = v.schedstat()
    c0, t0 = v.count(), time.perf_counter()
    time.sleep(seconds)
    t1 = time.perf_counter()
    v.stop()
    s1 = v.schedstat()
    return v.count() - c0, t1 - t0, (s1[0] - s0[0], s1[1] - s0[1], s1[2] - s0[2])


#: Student's t at 97.5 % by degrees of freedom (a 95 % interval from a few blocks).
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}
T975 |= {11: 2.20, 12: 2.18, 13: 2.16, 14: 2.14, 15: 2.13, 16: 2.12, 17: 2.11, 18: 2.10, 19: 2.09, 20: 2.09}


def t975(df: int) -> float:
    """:data:`T975`, and beyond 20 degrees of freedom ``1.96 + 2.4 / df`` (within 0.01 of the exact
    values: 2.04 at 30, 2.02 at 40; the normal's 1.96 alone would narrow the interval)."""
    return T975.get(df, 1.96 + 2.4 / df)


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """The mean of ``values`` and its 95 % half-interval (1.96 standard errors; NaN for one value)."""
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return statistics.fmean(values), half


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """The geometric mean of ``ratios`` and its 95 % interval (Student's t from their spread)."""
    logs = [math.log(r) for r in ratios if r > 0]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


@dataclass
class Tally:
    """A variant's counted slots, over every block: steps, seconds, and its loop thread's nanoseconds on
    a core and waiting for one, and its process's other threads' on a core."""

    steps: int = 0
    seconds: float = 0.0
    on_core: int = 0
    queued: int = 0
    others: int = 0

    def add(self, steps: int, seconds: float, times: tuple[int, int, int]) -> None:
        """One counted slot: its steps, its seconds, and ``slot``'s nanoseconds (on a core, waiting,
        the other threads on a core)."""
        self.steps += steps
        self.seconds += seconds
        self.on_core += times[0]
        self.queued += times[1]
        self.others += times[2]

    def line(self, name: str) -> str:
        """Where a step of the loop's thread went, and the other threads' CPU a second, as one line."""
        steps = self.steps or 1
        wall, on, queued = self.seconds / steps, self.on_core / 1e9 / steps, self.queued / 1e9 / steps
        return (
            f"  {name}: {1 / wall:.1f} steps/s; a step {wall * 1e6:.1f} µs: on a core {on * 1e6:.1f}, "
            f"waiting for a core {queued * 1e6:.1f}, neither (blocked: the GIL, a lock) "
            f"{(wall - on - queued) * 1e6:.1f}; the process's other threads on a core "
            f"{self.others / 1e3 / self.seconds:.0f} µs a second"
        )


def block(
    args: argparse.Namespace,
    folder: Path,
    totals: dict[str, Tally],
    number: int = 0,
    log: TextIO | None = None,
) -> tuple[list[float], int]:
    """Start both variants afresh, warm them up, run ``args.pairs`` pairs of slots; the pairs' ratios
    (B's rate over A's) and how many pairs were left out. What each variant did is added to its
    ``totals`` entry."""
    cpu = None if args.cpu < 0 else args.cpu
    a = Variant(args.a, args.loop, args.threads, folder, "a", cpu, args.base)
    try:
        b = Variant(args.b, args.loop, args.threads, folder, "b", cpu, args.base)
    except BaseException:
        a.end()  # nothing left running
        raise
    ratios: list[float] = []
    dropped = 0
    try:
        deadline = time.monotonic() + 120
        while (a.count() == 0 or b.count() == 0) and time.monotonic() < deadline:
            if a.proc.poll() is not None or b.proc.poll() is not None:
                raise SystemExit("a variant ended before its first step")
            time.sleep(0.1)
        if a.count() == 0 or b.count() == 0:
            raise SystemExit("no step in 120 s")
        a.stop()
        b.stop()
        warm_until = time.monotonic() + args.warmup
        while time.monotonic() < warm_until:
            slot(a, args.slot)
            slot(b, args.slot)
        for k in range(args.pairs):
            counted = {}
            for v in (a, b) if k % 2 == 0 else (b, a):  # ABBA
                counted[v.name] = n, seconds, (on, queued, others) = slot(v, args.slot)
                if log is not None:
                    log.write(f"{number},{k},{v.name},{n},{seconds:.6f},{on},{queued},{others}\n")
            if min(n for n, _, _ in counted.values()) <= 0:
                # a slot that counted no step, or fewer than none (until session 18 the loop wrote its
                # count with struct.pack_into, which zeroes the 8 bytes before writing them one by one:
                # a SIGSTOP in between left a count of ~0 to read, 4 slots in ~4,000; the count is now
                # one aligned store): the pair is left out of the ratios and of the totals, and counted
                dropped += 1
                continue
            for name, (n, seconds, times) in counted.items():
                totals.setdefault(name, Tally()).add(n, seconds, times)
            ratios.append(
                (counted[b.name][0] / counted[b.name][1]) / (counted[a.name][0] / counted[a.name][1])
            )
    finally:
        a.end()
        b.end()
    return ratios, dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", default="mlp-wide")
    parser.add_argument("--a", default="plain")
    parser.add_argument("--b", default="run")
    parser.add_argument("--blocks", type=int, default=10, help="times both variants start afresh")
    parser.add_argument("--pairs", type=int, default=20, help="pairs of slots per block")
    parser.add_argument("--slot", type=float, default=1.0, help="seconds a variant runs alone")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of each block not counted")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--base", type=Path, help="a checkout whose agent the variant agent-base runs")
    parser.add_argument("--slots", type=Path, help="write every counted slot to this CSV file")
    parser.add_argument(
        "--cpu",
        type=int,
        default=max(os.sched_getaffinity(0)),
        help="the core both loops are pinned to (the monitor is not pinned); -1: not pinned",
    )
    args = parser.parse_args()
    if args.blocks < 1 or args.pairs < 1 or not args.slot > 0 or not args.warmup >= 0:
        raise SystemExit("--blocks and --pairs need at least 1, --slot more than 0, --warmup 0 or more")
    for name in (args.a, args.b):
        if name.startswith(AGENT_WITHOUT):
            parts_of(name.removeprefix(AGENT_WITHOUT))  # an unknown part: one line, before anything starts
        elif name not in VARIANTS:
            raise SystemExit(
                f"unknown variant {name!r}: --a and --b are among {', '.join(VARIANTS)}, {AGENT_WITHOUT}PART"
            )
    if "agent-base" in (args.a, args.b) and (args.base is None or not (args.base / "probes").is_dir()):
        raise SystemExit(
            "agent-base needs --base DIR, a checkout of this repository (git worktree add DIR REV)"
        )
    if args.a == args.b:  # two of one kind: their totals apart
        raise SystemExit("--a and --b name the same variant; for the method's noise use --b plain2")

    load = os.getloadavg()[0]
    totals: dict[str, Tally] = {}
    blocks: list[float] = []
    pairs: list[float] = []
    dropped = 0
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="tpt-bench-il-"))
        log = None
        if args.slots is not None:
            log = stack.enter_context(args.slots.open("w", buffering=1))
            log.write("block,pair,variant,steps,seconds,on_core_ns,queued_ns,others_ns\n")
        for i in range(args.blocks):
            ratios, left_out = block(args, Path(tmp), totals, i + 1, log)
            dropped += left_out
            if not ratios:
                print(f"  block {i + 1}: no pair counted", file=sys.stderr, flush=True)
                continue
            pairs += ratios
            blocks.append(interval(ratios)[0])
            print(
                f"  block {i + 1}: {args.b} / {args.a} {blocks[-1]:.3f} over {len(ratios)} pairs",
                file=sys.stderr,
                flush=True,
            )

    if not blocks:
        raise SystemExit("no pair was counted in any block")
    print(
        f"{args.loop}: {args.blocks} blocks of {args.pairs} pairs of {args.slot:g} s slots (after "
        f"{args.warmup:g} s each), {args.threads} intra-op thread(s), loops on cpu {args.cpu}; "
        f"load {load:.2f} at the start"
    )
    for name in (args.a, args.b):  # where a step's wall time went, on the loop's thread
        print(totals[name].line(name))
    if dropped:
        print(f"  pairs left out: {dropped} (a slot counted no step, or its counter went back)")
    mean, lo, hi = interval(blocks)
    print(f"  blocks: {' '.join(f'{r:.3f}' for r in blocks)}")
    print(
        f"  {args.b} / {args.a}: **{mean:.3f}** (95 % {lo:.3f}-{hi:.3f}, from the blocks' spread); "
        f"median of all pairs {statistics.median(pairs):.3f}"
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM as Ctrl-C: the blocks' finally clauses end their variants


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        main()
    except KeyboardInterrupt:  # each block's variants were ended on the way out
        sys.exit("interrupted")
