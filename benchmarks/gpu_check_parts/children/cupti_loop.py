"""The CUPTI path on a real GPU, for the GPU check: ``python cupti_loop.py speed|counts [OPS]``.

- ``speed OPS`` (default 1000000): a launch-bound loop, ``x.add_(1)`` on a 256-element CUDA tensor
  (one tiny kernel per op, a synchronize every 1000), timed on its own in tenths; run plain, under
  ``torchpar-top run`` and under ``run`` with cupti-python hidden (the launch counter's path) by the
  check, which compares the steady speeds (target >= 0.97).
- ``counts OPS`` (default 3000): the same loop split over the default stream and a side stream, run
  twice: once recorded by :class:`~torchpar_top.probes.agent.cuda_cupti.CuptiMonitor` (the real
  ``cupti`` binding), once under ``torch.profiler`` (Kineto) with the trace analysed by
  ``torchpar_top.analysis``; the launches per stream must be equal (stream ids are CUPTI's in both).
  ``records`` (what reached Python) near 2 x OPS and ``cbids_off`` > 0 say CUPTI's per-API switch held.

- ``cost MODE``: what CUPTI itself leaves on the loop, one mode per process (:func:`cost`): the check
  runs ``plain``, ``callbacks``, ``after-activity`` and ``after-detach`` alternately and reports them
  beside the speeds.

Ends with one line ``GPU-CHECK {json}``. Without cupti-python, ``counts`` says so (``skip``).
"""

import json
import os
import sys
import tempfile
import time

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "speed"
dev = torch.device("cuda", 0)


def loop(ops: int, side: "torch.cuda.Stream | None" = None) -> None:
    x = torch.zeros(256, device=dev)
    y = torch.zeros(256, device=dev)
    for i in range(ops):
        if side is not None and i % 2:
            with torch.cuda.stream(side):
                y.add_(1)
        else:
            x.add_(1)
        if i % 1000 == 999:
            torch.cuda.synchronize()
    torch.cuda.synchronize()


def speed(ops: int) -> dict:
    """``ops_per_s`` over the whole loop, and ``steady_ops_per_s``: the median rate of its second half's
    tenths (a process under ``run`` starts its agent in the first second or two: a short loop weighs that
    start more than a training run would)."""
    loop(2000)  # warm up: CUDA context, kernels loaded
    chunk = max(1000, ops // 10)
    rates = []
    t0 = time.perf_counter()
    for _ in range(max(1, ops // chunk)):
        t = time.perf_counter()
        loop(chunk)
        rates.append(chunk / (time.perf_counter() - t))
    seconds = time.perf_counter() - t0
    late = sorted(rates[len(rates) // 2 :])
    return {
        "ok": True,
        "ops": chunk * len(rates),
        "seconds": round(seconds, 4),
        "ops_per_s": round(chunk * len(rates) / seconds, 1),
        "steady_ops_per_s": round(late[len(late) // 2], 1),
    }


def counts(ops: int) -> dict:
    try:
        from torchpar_top.probes.agent.cuda_cupti import CuptiMonitor, CuptiUnavailable, load_cupti
    except ImportError as exc:
        return {"ok": False, "skip": f"torchpar_top not importable: {exc}"}
    try:
        cupti = load_cupti()
    except CuptiUnavailable as exc:
        return {"ok": False, "skip": str(exc)}
    from torchpar_top.analysis import events_from_chrome, queue_series

    side = torch.cuda.Stream()
    loop(2000, side)  # warm up
    rows: list = []
    logs: list = []

    def add(row: object) -> object:  # the agent's add returns the row it took: the monitor keeps it
        rows.append(row)
        return row

    monitor = CuptiMonitor(cupti, add=add, log=logs.append)
    try:
        monitor.start()
    except CuptiUnavailable as exc:
        return {"ok": False, "skip": str(exc)}
    monitor.refresh()  # whatever was before: settled, folded into the base counts
    before = {key: monitor.queues.launched(key) for key in monitor.queues.keys()}  # noqa: SIM118 RecordQueues is no dict: keys() is its own
    loop(ops, side)
    time.sleep(0.05)
    monitor.refresh()
    q = monitor.queues
    q.update(now=q.newest + q.orphan_us + 1)
    ours = {f"{d}:{s}": q.launched((d, s)) - before.get((d, s), 0) for d, s in q.keys()}  # noqa: SIM118 RecordQueues is no dict: keys() is its own
    pending, orphans = q.pending, q.orphans
    monitor.close()

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as prof:
            loop(ops, side)
        prof.export_chrome_trace(path)
        with open(path) as f:
            series = queue_series(list(events_from_chrome(json.load(f))))
    theirs = {f"{d}:{s}": v.launches for (d, s), v in series.items()}
    busy = {k: v for k, v in theirs.items() if v >= ops // 4}
    same = bool(busy) and all(ours.get(k) == v for k, v in busy.items())
    return {
        "ok": same,
        "cupti": ours,
        "profiler": theirs,
        "pending": pending,
        "orphans": orphans,
        "buffers": monitor.buffers,
        "records": monitor.records,
        "cbids_off": monitor.filtered,
        "ops": ops,
        "log": logs[-5:],
    }


#: ``cost`` modes: what CUPTI itself, without the agent, leaves on the loop in this process.
COST_MODES = ("plain", "callbacks", "after-activity", "after-detach")


def cost(kind: str, blocks: int = 6, ops: int = 30000) -> dict:
    """The loop's median speed over ``blocks`` blocks of ``ops``, in one of :data:`COST_MODES`: ``plain``;
    ``callbacks``: subscribed to CUPTI's callback API with the sync calls' cbids enabled, as
    ``CuptiMonitor`` arms them; ``after-activity``: the monitor's activity kinds enabled for 60,000 ops
    (buffers handed to a callback that only counts them), flushed, every kind disabled and flushed again
    before the blocks, as after a recording window; ``after-detach``: the same, then CUPTI detached from
    the process (``finalize()``, cuptiFinalize: here no other thread calls CUPTI, so it is called
    directly; the agent would have to call it from an API callback's exit, as Kineto does). On an H200
    ``after-activity`` read 0.52-0.67 of plain and the callbacks 0-2 % below
    (docs/hardware/h200-2026-11-26-diagnostics.txt); ``after-detach`` was not yet measured: if it reads
    near plain, detaching between recording windows is the way to the CUPTI path's budget."""
    if kind not in COST_MODES:
        return {"ok": False, "error": f"unknown cost mode {kind!r}: {', '.join(COST_MODES)}"}
    loop(20000)  # warm up
    buffers = [0]
    handle = None
    if kind != "plain":
        # Imported outside the try: were torchpar_top missing, naming CuptiUnavailable in the except
        # clause would raise UnboundLocalError and hide the ImportError (seen on an H200).
        from torchpar_top.probes.agent.cuda_cupti import (
            ESSENTIAL_KINDS,
            OPTIONAL_KINDS,
            SYNC_CALLS,
            CuptiUnavailable,
            load_cupti,
        )
        from torchpar_top.probes.agent.cupti_records import RecordConverter

        try:
            c = load_cupti()
        except CuptiUnavailable as exc:
            return {"ok": False, "skip": str(exc)}
        if kind == "callbacks":
            handle = c.subscribe(lambda *a: None, None)
            for cbid, name in RecordConverter(c).runtime_names.items():
                if name in SYNC_CALLS:
                    c.enable_callback(1, handle, c.CallbackDomain.RUNTIME_API, cbid)
        else:
            c.activity_register_callbacks(
                lambda: (8 << 20, 0), lambda acts: buffers.__setitem__(0, buffers[0] + 1)
            )
            kinds = []
            for name in ESSENTIAL_KINDS + OPTIONAL_KINDS:
                try:
                    c.activity_enable(int(getattr(c.ActivityKind, name)))
                    kinds.append(int(getattr(c.ActivityKind, name)))
                except Exception:
                    pass
            loop(60000)
            c.activity_flush_all(1)
            for k in kinds:
                c.activity_disable(k)
            c.activity_flush_all(1)
            if kind == "after-detach":
                c.finalize()
    rates = []
    for _ in range(blocks):
        t = time.perf_counter()
        loop(ops)
        rates.append(ops / (time.perf_counter() - t))
    if handle is not None:
        c.unsubscribe(handle)
    return {
        "ok": True,
        "mode": kind,
        "median": round(sorted(rates)[len(rates) // 2], 1),
        "buffers": buffers[0],
    }


if mode == "speed":
    result = speed(int(sys.argv[2]) if len(sys.argv) > 2 else 1000000)
elif mode == "counts":
    result = counts(int(sys.argv[2]) if len(sys.argv) > 2 else 3000)
elif mode == "cost":
    result = cost(sys.argv[2] if len(sys.argv) > 2 else "plain")
else:
    sys.exit(f"cupti_loop.py: unknown mode {mode!r} (speed, counts or cost)")
print("GPU-CHECK " + json.dumps(result), flush=True)
sys.exit(0 if result.get("ok") or result.get("skip") else 1)
