"""Agent overhead on each built-in experiment's throughput: with the agent vs without, side by side.

    python benchmarks/bench_agent_overhead.py [--seconds 6] [--rounds 3] [--json]

"With" runs the experiment exactly as torchpar-top does (``python -m torchpar_top.probes.agent.bootstrap``
in a child, sampling at 10 Hz, messages read by this process) and takes the throughput from the
agent's own samples after a warm-up. "Without" runs the same experiment module in a child with a
bare stand-in agent: executors that only count completions (no L/S/C bookkeeping, no busy intervals,
no sampler thread, no socket). Rounds alternate with and without so drift on a noisy machine hits
both, and alternate which goes first (ABBA). The ratio is throughput(with) / throughput(without); the
median over rounds is reported with every round's ratio, because on a shared 2-core VM single rounds
scatter by ±10%.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

WARMUP = 2.0


# -- the bare stand-in agent (runs in the "without" child) ---------------------------------------------


class _BareStream:
    """A queue and a thread, nothing else: what a user would write without torchpar-top."""

    def __init__(self, capacity: int = 1024, threads: int | None = None) -> None:
        self._threads = threads
        self.completed = 0
        self.launched = 0
        self.name, self.capacity = "bare", capacity
        self._q: queue.Queue = queue.Queue(capacity)
        self._done = threading.Condition()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        if self._threads:
            import torch

            torch.set_num_threads(self._threads)  # per thread for OpenMP, as the real agent does
        while True:
            fn, args = self._q.get()
            fn(*args)
            with self._done:
                self.completed += 1
                self._done.notify_all()

    def launch(self, fn, *args) -> None:
        self._q.put((fn, args))
        self.launched += 1

    def synchronize(self) -> None:
        with self._done:
            while self.completed < self.launched:
                self._done.wait()


class _BareEager:
    def __init__(self) -> None:
        self.completed = 0

    @contextmanager
    def op(self):
        yield
        self.completed += 1


class _BarePool:
    def __init__(self) -> None:
        self.completed = self.launched = 0
        self._pending: list = []

    def track(self, futures) -> None:
        self._pending.extend(futures)
        self.launched += len(futures)

    def _reap(self) -> None:
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        self.completed += len(done)

    def outstanding(self) -> int:
        self._reap()
        return len(self._pending)

    def wait_oldest(self) -> None:
        if self._pending:
            self._pending[0].wait()
        self._reap()

    def synchronize(self) -> None:
        for f in self._pending:
            f.wait()
        self._reap()


class BareAgent:
    """Same calls as the real Agent; no measurement beyond a completion count."""

    def __init__(self, seconds: float) -> None:
        self._end = time.perf_counter() + seconds
        self.sync, self.sync_scope = False, "op"
        self._source = lambda: 0
        self._threads: int | None = None

    @property
    def running(self) -> bool:
        return time.perf_counter() < self._end

    def emulated_stream(self, name, capacity=1024):
        return _BareStream(capacity, self._threads)

    def eager_device(self, name=""):
        return _BareEager()

    def interop_pool(self, name=""):
        return _BarePool()

    def launch(self, stream, fn, *args):
        stream.launch(fn, *args)

    def throughput_from(self, source, unit="it/s"):
        self._source = source

    def set_threads(self, n):
        import torch

        self._threads = n
        torch.set_num_threads(n)

    def step(self, n=1):
        pass

    def log(self, text):
        pass

    def result(self, *a):
        pass

    def scaling(self, *a):
        pass

    def round_results(self, *a):
        pass

    @contextmanager
    def timing_round(self):
        """The async experiment's text rounds run in both children alike; nothing is recorded here."""
        yield


def bare_child(experiment: str, seconds: float) -> None:
    """Run ``experiment`` with the bare agent; print completions per second after the warm-up."""
    from torchpar_top import workloads

    agent = BareAgent(WARMUP + seconds)
    marks = {}

    def watch():
        time.sleep(WARMUP)
        marks["a"] = (time.perf_counter(), agent._source())
        time.sleep(seconds - 0.2)
        marks["b"] = (time.perf_counter(), agent._source())

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    workloads.get(experiment).run(agent)
    t.join()
    (t0, c0), (t1, c1) = marks["a"], marks["b"]
    print(json.dumps({"throughput": (c1 - c0) / (t1 - t0)}), flush=True)
    os._exit(0)  # daemon executor threads may be inside a torch op: skip interpreter teardown


# -- the parent ----------------------------------------------------------------------------------------


def with_agent(experiment: str, seconds: float) -> float:
    """Throughput the agent measures in a real child, averaged over samples after the warm-up."""
    from torchpar_top.contract.messages import Sample
    from torchpar_top.sources.live.child import ChildProcess
    from torchpar_top.sources.live.targets import ExperimentTarget

    samples: list[tuple[float, float]] = []
    start = time.time()
    child = ChildProcess(
        lambda fd: ExperimentTarget(experiment).command(fd, 0.1, False),
        on_message=lambda m: (
            isinstance(m, Sample) and samples.append((m.t, m.throughput * m.window, m.window))
        ),
        on_output=lambda *_: None,
        on_exit=lambda _: None,
    )
    child.start()
    first = None
    while first is None or time.time() < first + WARMUP + seconds:
        time.sleep(0.1)
        if first is None and samples:
            first = samples[0][0]
        if time.time() - start > 120:
            break
    child.stop()
    window = [(items, w) for t, items, w in samples if first + WARMUP <= t <= first + WARMUP + seconds]
    return sum(i for i, _ in window) / sum(w for _, w in window)


def without_agent(experiment: str, seconds: float) -> float:
    """Throughput of the same experiment with the bare agent, in a child."""
    out = subprocess.run(
        [sys.executable, __file__, "--bare-child", experiment, "--seconds", str(seconds)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["throughput"]


def agent_thread_share(experiment: str, seconds: float) -> tuple[float, float]:
    """CPU of the agent's own threads (sampler, control) in a real run, in % of one core, and the
    workload's throughput then, read through the session's own thread probe."""
    from torchpar_top.sources.live.session import Session

    session = Session(experiment)
    session.start()
    try:
        t_end = time.monotonic() + WARMUP + seconds
        shares, rates = [], []
        while time.monotonic() < t_end:
            time.sleep(0.1)
            snap = session.snapshot()
            if time.monotonic() < t_end - seconds or not snap.executors:
                continue
            shares.append(sum(g.cpu_percent for g in snap.thread_groups if g.role == "torchpar agent"))
            if snap.throughput:
                rates.append(snap.throughput)
    finally:
        session.close()
    return statistics.mean(shares), statistics.median(rates)


def per_item_cost(items: int = 20000) -> tuple[float, float]:
    """µs per launched no-op item through the agent's emulated stream vs the bare one (launch, run,
    complete; the frontend launching into a full queue as in the async experiment)."""
    from torchpar_top.probes.agent.agent import Agent

    def noop() -> None:
        pass

    def timed(launch, sync) -> float:
        t0 = time.perf_counter()
        for _ in range(items):
            launch(noop)
        sync()
        return (time.perf_counter() - t0) / items * 1e6

    results = {"agent": [], "bare": []}
    for _ in range(5):
        agent = Agent(None, experiment="bench", description="")
        stream = agent.emulated_stream("s", capacity=64)
        results["agent"].append(timed(functools.partial(agent.launch, stream), stream.synchronize))
        agent.close()
        bare = _BareStream(capacity=64)
        results["bare"].append(timed(bare.launch, bare.synchronize))
    return statistics.median(results["agent"]), statistics.median(results["bare"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--experiments", default="async,multi-device,intra-op,inter-op")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--bare-child", metavar="EXPERIMENT")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also measure the agent's own threads' CPU and the per-item bookkeeping cost",
    )
    args = parser.parse_args()
    if args.bare_child:
        bare_child(args.bare_child, args.seconds)
        return
    rows = []
    for name in args.experiments.split(",") if args.rounds else []:
        ratios, w_all, wo_all = [], [], []
        for i in range(args.rounds):
            # ABBA: alternate which variant goes first, so drift within a round hits both alike
            if i % 2 == 0:
                wo = without_agent(name, args.seconds)
                w = with_agent(name, args.seconds)
            else:
                w = with_agent(name, args.seconds)
                wo = without_agent(name, args.seconds)
            ratios.append(w / wo)
            w_all.append(w)
            wo_all.append(wo)
        rows.append(
            {
                "experiment": name,
                "without": statistics.median(wo_all),
                "with": statistics.median(w_all),
                "ratio_median": statistics.median(ratios),
                "ratios": ratios,
            }
        )
    breakdown = {}
    if args.breakdown:
        agent_us, bare_us = per_item_cost()
        breakdown["per_item_us"] = {"agent": agent_us, "bare": bare_us}
        for name in args.experiments.split(","):
            share, rate = agent_thread_share(name, args.seconds)
            breakdown[name] = {"agent_threads_percent_of_core": share, "throughput": rate}
    if args.json:
        print(json.dumps({"rows": rows, "breakdown": breakdown}, indent=1))
        return
    print(f"{'experiment':<14}{'without agent':>16}{'with agent':>14}{'ratio (median)':>16}  per round")
    for r in rows:
        print(
            f"{r['experiment']:<14}{r['without']:>16.1f}{r['with']:>14.1f}{r['ratio_median']:>16.3f}  "
            + " ".join(f"{x:.3f}" for x in r["ratios"])
        )
    if breakdown:
        per = breakdown["per_item_us"]
        print(
            f"\nper launched item through an emulated stream (no-op item, full queue): agent "
            f"{per['agent']:.1f} µs, bare {per['bare']:.1f} µs, "
            f"difference {per['agent'] - per['bare']:.1f} µs"
        )
        print("agent's own threads (sampler + control), measured by the thread probe in a real session:")
        for name in args.experiments.split(","):
            b = breakdown[name]
            print(
                f"  {name:<14}{b['agent_threads_percent_of_core']:6.2f} % of one core   "
                f"(throughput then {b['throughput']:.1f})"
            )


if __name__ == "__main__":
    main()
