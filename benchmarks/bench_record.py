"""What ``--record`` costs: time per snapshot (encode + write + flush) and bytes per line, deltas vs whole.

    python benchmarks/bench_record.py [--seconds 70] [--interval 0.1] [--json]

A real :class:`Session` runs the ``async`` experiment (the child, the host probes) for ``--seconds`` (70 s
at 0.1 s fills the 600-sample histories, the steady state of a long run) with the real
:class:`Recorder` writing to a file in a temporary folder; each ``Recorder.write`` is timed
(``time.perf_counter``: encode, write, flush, on the recorder's thread while the session runs).
Then the recording is read back (the snapshots exactly as recorded) and, per snapshot:

- **delta line** (what ``--record`` writes): bytes, and the encode time alone;
- **whole line** (``codec.dumps`` of the snapshot, every history in full): bytes and time, the
  alternative the delta format was chosen against;
- **decode** of a delta line back to the snapshot (what ``replay`` and ``export`` pay per line);
- **gzipped**: the same lines written to ``.jsonl.gz`` (``--record run.jsonl.gz``), flushed each: the
  write + flush time per line (on top of the encode) and the bytes per line on disk;
- **replay memory**: what the lines take in memory once read (compressed one by one, ``Lines``);
- **read**: ``read_recording`` (the header, then each line's time), per line: what ``replay`` pays before
  it shows anything.

Steady state = the lines written after the histories were full (the last 10 s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "p95": _pct(values, 0.95),
        "max": max(values),
        "n": len(values),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=70.0)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from torchpar_top.contract.codec import dumps
    from torchpar_top.contract.recording import Decoder, Encoder, read_recording
    from torchpar_top.sinks.recording import Recorder
    from torchpar_top.sources.live.session import Session

    tmp = tempfile.mkdtemp(prefix="tpt-bench-record-")
    path = os.path.join(tmp, "run.jsonl")
    session = Session("async", interval=args.interval, stacks=True)
    recorder = Recorder(session, open(path, "w", encoding="utf-8"), ["bench_record"])  # noqa: SIM115 the Recorder owns the file and closes it
    live: list[float] = []
    write = recorder.write

    def timed_write(snap):
        t = time.perf_counter()
        write(snap)
        live.append(time.perf_counter() - t)

    recorder.write = timed_write  # type: ignore[method-assign]
    session.start()
    recorder.start()
    try:
        time.sleep(args.seconds)
    finally:
        session.close()
        recorder.close()

    t = time.perf_counter()
    rec = read_recording(path)  # what replay does before it shows anything: the header, each line's time
    read_s = time.perf_counter() - t
    snaps = list(rec.snapshots())
    steady_from = max(0, len(snaps) - int(10 / args.interval))
    encoder = Encoder()
    delta_bytes, delta_s, whole_bytes, whole_s = [], [], [], []
    lines = []
    for s in snaps:
        t = time.perf_counter()
        line = encoder.line(s)
        delta_s.append(time.perf_counter() - t)
        delta_bytes.append(len(line.encode()))
        lines.append(line)
        t = time.perf_counter()
        whole = dumps(s)
        whole_s.append(time.perf_counter() - t)
        whole_bytes.append(len(whole.encode()) + 1)
    decoder = Decoder()
    decode_s = []
    for line in lines:
        t = time.perf_counter()
        decoder.decode(json.loads(line))
        decode_s.append(time.perf_counter() - t)
    gz_path = os.path.join(
        tmp, "run.jsonl.gz"
    )  # --record run.jsonl.gz: the same lines, gzipped, flushed each
    gz_s = []
    from torchpar_top.contract.recording import open_output

    with open_output(gz_path) as f:
        for line in lines:
            t = time.perf_counter()
            f.write(line)
            f.flush()
            gz_s.append(time.perf_counter() - t)
    gz_bytes = os.path.getsize(gz_path)
    os.remove(gz_path)
    hist = max((len(e.history) for e in snaps[-1].executors), default=0)

    def part(values, scale=1e6):
        return {k: (round(v * scale, 1) if k != "n" else v) for k, v in _stats(values).items()}

    result = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "seconds": args.seconds,
        "interval": args.interval,
        "snapshots": len(snaps),
        "history_length_at_end": hist,
        "file_bytes": os.path.getsize(path),
        "live_write_us": part(live),
        "read_recording_us_per_line": round(read_s / max(1, len(snaps)) * 1e6, 1),
        "replay_memory_bytes": rec.lines.stored_bytes(),
        "gz_write_flush_us": part(gz_s),
        "gz_bytes_per_line": round(gz_bytes / max(1, len(lines)), 1),
        "steady": {
            "delta_line_bytes": part([float(b) for b in delta_bytes[steady_from:]], 1),
            "whole_line_bytes": part([float(b) for b in whole_bytes[steady_from:]], 1),
            "delta_encode_us": part(delta_s[steady_from:]),
            "whole_encode_us": part(whole_s[steady_from:]),
            "decode_us": part(decode_s[steady_from:]),
        },
    }
    os.remove(path)
    os.rmdir(tmp)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    s = result["steady"]
    print(
        f"{len(snaps)} snapshots over {args.seconds:g} s at {args.interval:g} s; "
        f"histories {hist} long at the end"
    )
    print(
        f"live Recorder.write (encode + write + flush): median {result['live_write_us']['median']} µs, "
        f"p95 {result['live_write_us']['p95']} µs"
    )
    print(
        f"steady state, per line: delta {s['delta_line_bytes']['median']:.0f} B "
        f"(encode {s['delta_encode_us']['median']} µs), whole {s['whole_line_bytes']['median']:.0f} B "
        f"(encode {s['whole_encode_us']['median']} µs); decode {s['decode_us']['median']} µs"
    )
    print(
        f"file: {result['file_bytes']} bytes; read_recording {result['read_recording_us_per_line']} µs a line"
    )
    print(
        f"gzipped (.gz): {result['gz_bytes_per_line']} B a line, write + flush "
        f"{result['gz_write_flush_us']['median']} µs (on top of the encode)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
