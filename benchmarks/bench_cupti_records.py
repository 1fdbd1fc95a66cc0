"""The Python cost per CUDA launch of the CUPTI path's record handling, on the CPU.

    python benchmarks/bench_cupti_records.py [--repeats 15]

On a GPU the CUPTI path runs Python once per buffer of records and once per sample; that Python holds
the GIL (on the sampler thread) and grows with the records: per launch, its API record and its GPU op's
record, plus every other API call CUPTI records unless told not to. This times, over the real A100
records of ``tests/data/hta/a100_sxm4_5_streams.json.gz`` (42k records, 6.5k launches, as the fake
binding makes them: objects holding the record in a one-element numpy record array with the binding's
own dtypes, as cupti-python 13 does), buffers of 4096 records with the queue settled at every 10th (a
sample), through ``RecordQueues.add_records`` + ``update`` (the package's path).

On three record sets: every record (what CUPTI delivers when every runtime call is recorded: a binding
without ``activity_enable_runtime_api``), only the launch calls and GPU ops (what CUPTI delivers with the
other calls switched off, as the package asks for), both read by position (``_data.item(0)``); and the
second set read by attribute, each field through numpy as the binding's properties read it (the path
before ``cupti_records.layout``). The sets alternate within each repeat; the fastest repeat is the cost,
the median includes waiting for a core (the load average is printed). The figures of the path before the
incremental queue (an ``analysis.Event`` per record) are kept as history in docs/benchmarks.md.

Then the average with recording windows (``--cupti-duty``): the whole ``CuptiMonitor`` on the fake
binding (with the per-API switch), the trace played in stretches of 20 ms of its own time with a sample
(``refresh``) after each (5x the live 10 Hz, so per-sample costs weigh 5x more than live), the CPU time
of the samples divided by every launch of the trace, for a duty of 1 (always recording) and the default.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes.fake_cupti import ByAttribute, FakeCupti, records_from_trace  # noqa: E402
from torchpar_top.probes.agent.cuda_cupti import DEFAULT_DUTY, CuptiMonitor  # noqa: E402
from torchpar_top.probes.agent.cupti_records import RecordConverter, RecordQueues  # noqa: E402

TRACE = ROOT / "tests" / "data" / "hta" / "a100_sxm4_5_streams.json.gz"
BUFFER = 4096
SAMPLE_NS = 20_000_000


def run_after(records: list, converter: RecordConverter) -> tuple[float, float]:
    """Seconds reading records, and seconds settling, for all ``records`` (the package's path)."""
    queues = RecordQueues(converter)
    ends = [r.end / 1000 for r in records]  # read before timing: the settling times are the sample's
    add = update = 0.0
    for n, i in enumerate(range(0, len(records), BUFFER)):
        t0 = time.perf_counter()
        queues.add_records(records[i : i + BUFFER])
        t1 = time.perf_counter()
        add += t1 - t0
        if n % 10 == 9:
            queues.update(ends[min(i + BUFFER, len(records)) - 1])
            update += time.perf_counter() - t1
    t1 = time.perf_counter()
    queues.update(ends[-1])
    return add, update + time.perf_counter() - t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    fake = FakeCupti()
    new_conv = RecordConverter(fake)
    every = records_from_trace(str(TRACE))
    launch_cbids = {c for cbids in new_conv.launch_cbids.values() for c in cbids}
    launches_only = [r for r in every if r.kind in new_conv.gpu_cats or r.cbid in launch_cbids]
    n_launch = sum(1 for r in every if r.kind not in new_conv.gpu_cats and r.cbid in launch_cbids)
    sets = {
        "every record": every,
        "launches and GPU ops only": launches_only,
        "the same, by attribute": [ByAttribute(r) for r in launches_only],
    }
    runs: dict[str, list[tuple[float, float]]] = {}
    load0 = os.getloadavg()[0]
    for _ in range(args.repeats):
        for label, records in sets.items():  # the two sets alternate
            runs.setdefault(label, []).append(run_after(records, new_conv))
    load1 = os.getloadavg()[0]
    print(
        f"{TRACE.name}: {n_launch} launches; {args.repeats} repeats, the record sets alternating; "
        f"load average {load0:.1f} -> {load1:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'records':36} {'µs/record min/med':>18} {'µs/launch min/med':>18}  "
        f"{'share: read+pair / settle (min)':>32}"
    )
    for label, rs in runs.items():
        n = len(sets[label])
        totals = [a + u for a, u in rs]
        best = min(range(len(rs)), key=lambda k: totals[k])
        lo, med = totals[best], statistics.median(totals)
        add, upd = rs[best]
        print(
            f"{label + f' ({n})':36} {lo / n * 1e6:8.2f} / {med / n * 1e6:5.2f}    "
            f"{lo / n_launch * 1e6:8.2f} / {med / n_launch * 1e6:5.2f}   "
            f"{add / lo * 100:5.0f} % / {upd / lo * 100:3.0f} %"
        )
    windows(every, n_launch, args.repeats)


def run_monitor(records: list, duty: float) -> float:
    """CPU seconds of the monitor's samples over the whole trace, records played in stretches."""
    fake = FakeCupti()
    monitor = CuptiMonitor(
        fake,
        add=lambda ex: ex,
        log=lambda line: None,
        duty=duty,
        drain_s=0.0,
        profiler_enabled=lambda: False,
        cpu_clock=lambda: 0.0,  # the trace plays faster than real time: keep the governor at `duty`
    )
    monitor.start()
    spent, i, n, tick = 0.0, 0, len(records), records[0].end + SAMPLE_NS
    try:
        while i < n:
            j = i
            while j < n and records[j].end < tick:
                j += 1
            fake.play(records[i:j])
            i, tick = j, tick + SAMPLE_NS
            t0 = time.thread_time()
            monitor.refresh()
            spent += time.thread_time() - t0
    finally:
        monitor.close()
    return spent


def windows(every: list, n_launch: int, repeats: int) -> None:
    runs: dict[float, list[float]] = {}
    for _ in range(repeats):
        for duty in (1.0, DEFAULT_DUTY):
            runs.setdefault(duty, []).append(run_monitor(every, duty))
    print(
        f"monitor, a sample every {SAMPLE_NS / 1e6:g} ms of the trace, CPU time per launch of the trace "
        f"({repeats} repeats):"
    )
    for duty, rs in runs.items():
        print(
            f"  duty {duty:<4}: min {min(rs) / n_launch * 1e6:.2f} µs, median "
            f"{statistics.median(rs) / n_launch * 1e6:.2f} µs"
        )


if __name__ == "__main__":
    main()
