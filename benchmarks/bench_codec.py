"""What decoding costs, the way it is done now beside the way it was: an agent's sample (with a loop's
step ends and whole recent steps, as the monitor reads ~10 a second per rank) and a recording's line
(as replay, export and the summary read them).

    python benchmarks/bench_codec.py [--rate 5000] [--repeats 2000]

Both ways run in this process, alternated round by round, on the same bytes:

- ``stdlib + checking``: ``json.loads`` and the codec's checking converters (``codec._converter``), what
  ``messages.decode`` and the recording's decoder did before the fast path;
- ``orjson + fast``: what they do now (``codec.loads``, ``from_plain``'s generated converters, which
  hand anything but the plain valid case to the checking converters).

Figures: microseconds of one core per decode, the median of 7 rounds (``time.thread_time``).

Then what the agent pays to encode its sample, where a NaN must be refused before orjson writes it as
``null``: the exact check (``codec._finite_check``: a generated call per nested object) against the flat
one (``codec._flat_finite_check``: one sum of every float, the nested objects written inline), warm (back
to back) and cold (64 MB written between calls, as the sampler runs: once every 100 ms beside the loop).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes.recordings import stream_snapshots
from fakes.steps import Rank
from torchpar_top.contract import codec
from torchpar_top.contract import messages as m
from torchpar_top.contract.codec import to_plain
from torchpar_top.contract.recording import Encoder
from torchpar_top.contract.snapshot import Snapshot


def per_call(fn, line: bytes, repeats: int) -> float:
    t = time.thread_time()
    for _ in range(repeats):
        fn(line)
    return (time.thread_time() - t) / repeats * 1e6


def old_sample(line: bytes) -> object:
    obj = json.loads(line)
    return codec._converter(m.CHILD_MESSAGES[obj["type"]])(obj, obj["type"])


def new_sample(line: bytes) -> object:
    return m.decode(line)


def old_snapshot(line: bytes) -> object:
    return codec._converter(Snapshot)(json.loads(line), "line")


def new_snapshot(line: bytes) -> object:
    return codec.from_plain(Snapshot, codec.loads(line), "line")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=5000, help="the loop's steps a second (default 5000)")
    ap.add_argument("--repeats", type=int, default=2000)
    args = ap.parse_args()
    rank = Rank(
        step=1 / args.rate, forward=0.4 / args.rate, backward=0.4 / args.rate, optimizer=0.2 / args.rate
    )
    rank.sample()
    sample = rank.sample().to_json()
    snaps = list(stream_snapshots(700, ranks=1, streams=1))
    encoder = Encoder()
    for s in snaps[:-1]:
        encoder.line(s)
    line = encoder.line(snaps[-1]).encode()  # a delta line, as nearly all of a recording's are
    whole = json.dumps(to_plain(snaps[-1])).encode()  # a keyframe: every history whole
    cases = [
        (f"agent sample ({len(sample)} bytes)", sample, old_sample, new_sample),
        (f"recording line, delta ({len(line)} bytes)", line, old_snapshot, new_snapshot),
        (f"recording line, whole ({len(whole)} bytes)", whole, old_snapshot, new_snapshot),
    ]
    print("| what | stdlib + checking | orjson + fast | ratio |")
    print("|---|---|---|---|")
    for name, data, old, new in cases:
        assert repr(old(data)) == repr(new(data))  # the same object either way
        olds, news = [], []
        for _ in range(7):
            olds.append(per_call(old, data, args.repeats))
            news.append(per_call(new, data, args.repeats))
        a, b = statistics.median(olds), statistics.median(news)
        print(f"| {name} | {a:.1f} µs | {b:.1f} µs | {b / a:.2f}× |")
    print()
    checks(m.decode(sample), args.repeats)


def cold_call(fn, obj: object, calls: int = 40) -> float:
    """µs of one core per call of ``fn(obj)`` with the caches refilled from elsewhere before each."""
    junk, spent = bytearray(64 << 20), 0.0
    for i in range(calls):
        junk[::4096] = bytes([i & 255]) * len(range(0, len(junk), 4096))
        t = time.thread_time()
        fn(obj)
        spent += time.thread_time() - t
    return spent / calls * 1e6


def checks(sample: object, repeats: int) -> None:
    """The two NaN checks on ``sample``, warm and cold, alternated round by round (7 rounds, medians).
    Each way checks the nested objects its own way: the checks ``codec.finite`` keeps per type are made
    afresh by that way's maker before its round."""
    makers = {"exact": codec._finite_check, "flat": codec._flat_finite_check}

    def prepared(name: str) -> Callable[[object], bool]:
        codec._flat_finite_check = makers[name]  # type: ignore[assignment]  # what finite() makes for a type
        codec._FINITE_CHECKS.clear()
        assert codec.finite(sample)  # every nested type's check made now, outside the timed calls
        return codec._FINITE_CHECKS[type(sample)]

    print(f"| a {len(sample.to_json())}-byte sample's NaN check | exact | flat | ratio |")  # type: ignore[attr-defined]
    print("|---|---|---|---|")
    try:
        for temp in ("warm", "cold"):
            times: dict[str, list[float]] = {"exact": [], "flat": []}
            for _ in range(7):
                for name in times:
                    check = prepared(name)
                    times[name].append(
                        per_call(check, sample, repeats) if temp == "warm" else cold_call(check, sample)
                    )
            a, b = statistics.median(times["exact"]), statistics.median(times["flat"])
            print(f"| {temp} | {a:.1f} µs | {b:.1f} µs | {b / a:.2f}× |")
    finally:  # the codec as it was
        codec._flat_finite_check = makers["flat"]  # type: ignore[assignment]
        codec._FINITE_CHECKS.clear()


if __name__ == "__main__":
    main()
