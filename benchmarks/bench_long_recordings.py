"""Long recordings in bounded memory and time: ``replay --summary``, ``export --perfetto`` and
``export --csv`` against the recording's length, and a seek in the replay.

    python benchmarks/bench_long_recordings.py [--minutes 1 5 10 30] [--interval 0.02]
        [--ranks-minutes 1 5] [--json]

Each recording is written by the real :class:`~torchpar_top.sinks.recording.Recorder` (the real encoder,
deltas, keyframes) from snapshots of a real ``SessionStore`` fed as a run feeds it (a host sample and a
child sample per interval, 8 cores, a mode switch every 500 samples, log lines now and then:
``tests/fakes/recordings.py: stream_snapshots``), made one at a time, so the writer holds none: ``--minutes``
long at ``--interval`` (the issue's case: 0.02 s), one rank and one stream; and ``--ranks-minutes`` long at
0.1 s with 8 ranks x 5 streams (40 executors).

Each command runs in a child process (``python -m torchpar_top ...``), timed by wall clock and by its CPU
time (user + system: what a loaded machine does not inflate), its peak memory the child's ``ru_maxrss``
(``os.wait4``). The seek: the recording indexed (``read_recording``), then 20
seeks of +5 % in a ``RecordingReplay`` (what ``->`` does on the screen), each timed (wall and CPU); the
worst and the mean are printed.

Before/after: run the script with ``PYTHONPATH`` set to a folder holding an older ``torchpar_top`` laid
out as installed (``git archive REV`` into ``src/``, then ``pkg/torchpar_top`` = a copy of ``src/cli`` with
a link to each other top-level folder of ``src/``): the recordings are then written by that code's
``Recorder`` and every command and seek runs that code.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))


def write(path: str, minutes: float, interval: float, ranks: int, streams: int) -> int:
    """A recording of ``minutes`` at ``interval``; returns its snapshots."""
    from fakes.recordings import FakeSession, recorder_for, stream_snapshots

    n = round(minutes * 60 / interval)
    session = FakeSession([])
    session.interval = interval
    current = {"t": 0.0}
    out = open(path, "w", encoding="utf-8")  # noqa: SIM115 (the recorder closes it)
    try:
        recorder = recorder_for(session, out, ["run", "train.py"])
        recorder._monotonic = lambda: current["t"]  # the snapshot's own time: `minutes` long, not now
    except TypeError:  # older code (PYTHONPATH): its Recorder, in contract/, writes the snapshots' own times
        from torchpar_top.contract.recording import Recorder  # type: ignore[attr-defined]

        recorder = Recorder(session, out, ["run", "train.py"])
    for snap in stream_snapshots(n, ranks=ranks, streams=streams, interval=interval):
        current["t"] = snap.t
        recorder.write(snap)
    session.host_samples = 0  # nothing new for close() to take
    recorder.close()
    if recorder.error:
        raise SystemExit(recorder.error)
    return n


def child(args: list[str]) -> tuple[float, float, float]:
    """``(wall seconds, peak MiB, CPU seconds)`` of ``python -m torchpar_top ARGS``."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchpar_top", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"torchpar-top {' '.join(args)}: status {proc.returncode}: {err}")
    return seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def seek(path: str) -> dict[str, float]:
    from torchpar_top.contract.recording import read_recording
    from torchpar_top.sources.recording import RecordingReplay

    t, c = time.perf_counter(), time.process_time()
    rec = read_recording(path)
    index_s, index_cpu_s = time.perf_counter() - t, time.process_time() - c
    replay = RecordingReplay(rec, clock=False)
    worst = worst_cpu = total_cpu = 0.0
    for _ in range(20):
        t, c = time.perf_counter(), time.process_time()
        replay.seek(0.05)
        replay.snapshot()
        worst = max(worst, time.perf_counter() - t)
        worst_cpu = max(worst_cpu, time.process_time() - c)
        total_cpu += time.process_time() - c
    return {
        "index_s": round(index_s, 3),
        "index_cpu_s": round(index_cpu_s, 3),
        "worst_seek_ms": round(worst * 1e3, 1),
        "worst_seek_cpu_ms": round(worst_cpu * 1e3, 1),
        "mean_seek_cpu_ms": round(total_cpu / 20 * 1e3, 1),
    }


def measure(tmp: str, label: str, minutes: float, interval: float, ranks: int, streams: int) -> dict:
    path = os.path.join(tmp, f"{label}.jsonl")
    t = time.perf_counter()
    n = write(path, minutes, interval, ranks, streams)
    row: dict = {
        "case": label,
        "minutes": minutes,
        "interval": interval,
        "ranks": ranks,
        "streams": streams,
        "snapshots": n,
        "file_mib": round(os.path.getsize(path) / 2**20, 1),
        "write_s": round(time.perf_counter() - t, 1),
    }
    for name, args in (
        ("summary", ["replay", path, "--summary"]),
        ("perfetto", ["export", path, "--perfetto", os.path.join(tmp, "out.json")]),
        ("csv", ["export", path, "--csv", os.path.join(tmp, "out.csv")]),
    ):
        seconds, mib, cpu = child(args)
        row[f"{name}_s"] = round(seconds, 2)
        row[f"{name}_cpu_s"] = round(cpu, 2)
        row[f"{name}_mib"] = round(mib, 1)
    row.update(seek(path))
    os.remove(path)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, nargs="*", default=[1, 5, 10, 30])
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--ranks-minutes", type=float, nargs="*", default=[1, 5])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tpt-bench-long-") as tmp:
        for minutes in args.minutes:
            rows.append(measure(tmp, f"1x1-{minutes:g}min", minutes, args.interval, 1, 1))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        for minutes in args.ranks_minutes:
            rows.append(measure(tmp, f"8x5-{minutes:g}min", minutes, 0.1, 8, 5))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(), "rows": rows}, indent=1))
        return 0
    cols = ["case", "snapshots", "file_mib"]
    cols += [f"{c}_{k}" for c in ("summary", "perfetto", "csv") for k in ("s", "cpu_s", "mib")]
    cols += ["index_s", "worst_seek_ms"]
    print(" | ".join(cols))
    for row in rows:
        print(" | ".join(str(row[c]) for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
