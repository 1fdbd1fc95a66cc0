"""The Python cost per CUPTI record of the CUDA path's conversion and analysis, on the CPU.

    python benchmarks/bench_cupti_records.py [--repeats 5]

On a GPU the CUPTI path runs Python once per buffer of records (the completed-buffer callback) and once
per sample; what that Python costs grows with the records: two per launch (the runtime call and its
kernel). This times, over the real A100 records of ``tests/data/hta/a100_sxm4_5_streams.json.gz``
(42k records, 6k kernels: the fake binding's record objects, ``SimpleNamespace``; the real binding's are
Cython objects whose attribute reads may cost differently), ``RecordConverter.events`` and
``RecordQueues.add`` per buffer of 4096 records, and ``RecordQueues.update`` at every 10th buffer (a
sample), and prints µs per record (the fastest and the median of the repeats: on a loaded machine the
fastest is the cost, the median includes waiting for a core). That time holds the GIL on CUPTI's or the
sampler's thread: at 100k launches/s it is 200k records/s times this figure of a core's time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes.fake_cupti import FakeCupti, records_from_trace  # noqa: E402

from torchpar_top.probes.agent.cupti_records import RecordConverter, RecordQueues  # noqa: E402

TRACE = ROOT / "tests" / "data" / "hta" / "a100_sxm4_5_streams.json.gz"
BUFFER = 4096


def launches(records: list, converter: RecordConverter) -> int:
    """Launch calls among the records (what a loop of tiny ops makes one of per op)."""
    return sum(1 for e in converter.events(records) if e.stream is None)


def once(records: list, converter: RecordConverter) -> tuple[float, float]:
    """Seconds converting + adding, and seconds updating, for all ``records``."""
    queues = RecordQueues()
    add = update = 0.0
    for n, i in enumerate(range(0, len(records), BUFFER)):
        t0 = time.perf_counter()
        queues.add(converter.events(records[i:i + BUFFER]))
        t1 = time.perf_counter()
        add += t1 - t0
        if n % 10 == 9:
            queues.update(records[min(i + BUFFER, len(records)) - 1].end / 1000)
            update += time.perf_counter() - t1
    t1 = time.perf_counter()
    queues.update(records[-1].end / 1000)
    update += time.perf_counter() - t1
    return add, update


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    converter = RecordConverter(FakeCupti())
    every = records_from_trace(str(TRACE))
    wanted = {e.correlation for e in converter.events(every)}
    # as the trace recorded it; then only the launch calls and GPU ops (a loop of tiny ops: two records
    # per op, no other API call in between)
    for label, records in (("all records", every),
                           ("launches and GPU ops only", [r for r in every if r.correlation_id in wanted
                                                           and (r.kind != 5 or r.cbid in (211, 41, 51))])):
        print(label + ":")
        measure(records, converter, args.repeats)


def measure(records: list, converter: RecordConverter, repeats: int) -> None:
    runs = [once(records, converter) for _ in range(repeats)]
    n_launch = launches(records, converter)
    print(f"  {len(records)} records ({n_launch} launches), {repeats} repeats")
    for how, pick in (("min", min), ("median", statistics.median)):
        add, update = pick(r[0] for r in runs), pick(r[1] for r in runs)
        total = add + update
        print(f"    {how}: convert + pair {add / len(records) * 1e6:.2f} µs/record, analyse (queue_series per "
              f"sample) {update / len(records) * 1e6:.2f} µs/record; total {total / len(records) * 1e6:.2f} "
              f"µs/record = {total / n_launch * 1e6:.2f} µs per launch")


if __name__ == "__main__":
    main()
