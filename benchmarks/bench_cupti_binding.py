"""What NVIDIA's CUPTI binding costs per record in Python, measured with the binding itself, no GPU needed.

    pip install cupti-python nvidia-cuda-cupti   # the binding imports and builds records without a GPU
    python benchmarks/bench_cupti_binding.py [--repeats 5]

On an H100 the CUPTI path's Python was the cost of ``run`` on a launch-bound loop (docs/benchmarks.md, "On
an H100"): cupti-python 13 keeps each record in a one-element numpy record array and reads every field
through it. This measures, on this machine's CPU, with the real binding's classes:

1. building a record object as the binding does for each record of a buffer (``from_ptr``), per type;
2. reading the fields the queue needs: the binding's properties, against one ``_data.item(0)``;
3. ``RecordQueues.add_records`` over the A100 records of ``tests/data/hta/a100_alexnet_2_streams.json.gz``
   turned into the binding's objects, by position (the package's path, ``cupti_records.layout``) and by
   attribute (the path before), with a check that both give the same queues.

Each figure is the fastest of ``--repeats`` (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import timeit
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes.fake_cupti import records_from_trace  # noqa: E402
from torchpar_top.probes.agent.cupti_records import FIELDS, RecordConverter, RecordQueues, layout  # noqa: E402

TRACE = ROOT / "tests" / "data" / "hta" / "a100_alexnet_2_streams.json.gz"
#: The binding's record classes for the records a launch makes, and their dtypes' names.
CLASSES = {
    "ActivityAPI": "activity_api_dtype",
    "ActivityKernel10": "activity_kernel10_dtype",
    "ActivityMemcpy6": "activity_memcpy6_dtype",
    "ActivityMemset4": "activity_memset4_dtype",
}


def best(fn: Any, number: int, repeats: int) -> float:
    """Microseconds per call, the fastest of ``repeats`` runs of ``number`` calls."""
    return min(timeit.repeat(fn, number=number, repeat=repeats)) / number * 1e6


class ByAttribute:
    """A binding record read field by field through its own properties (no ``_data`` to read at once)."""

    __slots__ = ("_r",)

    def __init__(self, record: Any) -> None:
        self._r = record

    kind = property(lambda self: self._r.kind)
    cbid = property(lambda self: self._r.cbid)
    correlation_id = property(lambda self: self._r.correlation_id)
    start = property(lambda self: self._r.start)
    end = property(lambda self: self._r.end)
    device_id = property(lambda self: self._r.device_id)
    stream_id = property(lambda self: self._r.stream_id)


def to_binding(cupti: Any, fake: Any, keep: list) -> Any:
    """The fake record ``fake`` as the binding's own object over a numpy copy of its fields."""
    for cls_name, dtype_name in CLASSES.items():
        dtype = getattr(cupti, dtype_name)
        if dtype.itemsize == fake._data.dtype.itemsize:
            data = np.zeros(1, dtype)
            for f in fake._data.dtype.names:
                if dtype[f].names is None and not dtype[f].str.startswith("|V"):
                    data[f] = fake._data[f][0]
            keep.append(data)  # the object points into it
            return getattr(cupti, cls_name).from_ptr(data.ctypes.data, True)
    raise ValueError(f"no binding class for {type(fake).__name__}")


def queues(records: list, converter: RecordConverter) -> tuple[RecordQueues, float]:
    q = RecordQueues(converter)
    t0 = time.perf_counter()
    for i in range(0, len(records), 300):
        q.add_records(records[i : i + 300])
    spent = time.perf_counter() - t0
    q.update(q.newest + 1)
    return q, spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    try:
        from cupti import cupti  # type: ignore[import-not-found]
    except Exception as exc:
        print(f"cupti-python not importable ({type(exc).__name__}: {exc}): pip install cupti-python")
        sys.exit(1)
    from importlib.metadata import version

    load0 = os.getloadavg()[0]
    print(f"cupti-python {version('cupti-python')}, numpy {np.__version__}; fastest of {args.repeats}")
    print("1. the binding building one record object (from_ptr), µs:")
    for cls_name, dtype_name in CLASSES.items():
        data = np.zeros(1, getattr(cupti, dtype_name))
        cls = getattr(cupti, cls_name)
        made: list = []
        us = best(
            lambda cls=cls, data=data, made=made: made.append(cls.from_ptr(data.ctypes.data, True)),
            2000,
            args.repeats,
        )
        print(f"   {cls_name:18} {us:7.2f}")
    print("2. reading the queue's fields, µs a record: properties / _data.item(0)")
    for cls_name, dtype_name in CLASSES.items():
        data = np.zeros(1, getattr(cupti, dtype_name))
        r = getattr(cupti, cls_name).from_ptr(data.ctypes.data, True)
        names = [f for f in FIELDS if f in data.dtype.names]
        props = best(lambda r=r, names=names: [getattr(r, f) for f in names], 2000, args.repeats)
        item = best(lambda r=r: r._data.item(0), 2000, args.repeats)
        print(f"   {cls_name:18} {len(names)} fields {props:7.2f} / {item:5.2f}")

    converter = RecordConverter(cupti)
    keep: list = []
    real = [to_binding(cupti, r, keep) for r in records_from_trace(str(TRACE))]
    assert all(layout(r) for r in real), "the binding's records are read by position"
    plain = [SimpleNamespace(**{f: getattr(r, f) for f in FIELDS if f in r._data.dtype.names}) for r in real]
    by_attr = [ByAttribute(r) for r in real]
    fast, slow, ref = queues(real, converter)[0], queues(by_attr, converter)[0], queues(plain, converter)[0]
    same = all(
        sorted(q.keys()) == sorted(ref.keys())
        and all(
            (q.launched(k), q.started(k), q.depth(k)) == (ref.launched(k), ref.started(k), ref.depth(k))
            for k in ref.keys()  # noqa: SIM118 RecordQueues is no dict: keys() is its own
        )
        for q in (fast, slow)
    )
    n_launch = ref.launch_records
    pos = min(queues(real, converter)[1] for _ in range(args.repeats))
    att = min(queues(by_attr, converter)[1] for _ in range(args.repeats))
    print(
        f"3. RecordQueues.add_records, {TRACE.name} ({len(real)} records, {n_launch} launches) as the "
        f"binding's objects, µs a launch: by position {pos / n_launch * 1e6:.2f}, by attribute "
        f"{att / n_launch * 1e6:.2f}; the same queues both ways: {same}"
    )
    print(f"load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    sys.stdout.flush()
    os._exit(0 if same else 1)  # the binding's objects made outside its buffers complain when freed


if __name__ == "__main__":
    main()
