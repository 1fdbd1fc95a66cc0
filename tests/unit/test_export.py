"""Export: the Perfetto file keeps the Trace Event Format's rules (fields per phase, µs timestamps, one
track per counter name, slices nested per thread), the CSV has a row per sample, and replay reads an
export back."""

import csv
import dataclasses
import io
import itertools
import json
from collections import defaultdict

import pytest
from fakes.recordings import store_snapshots, write_recording
from torchpar_top.contract.recording import RecordingError, sniff
from torchpar_top.contract.snapshot import GpuView, SyncSite
from torchpar_top.contract.vocab import Mode
from torchpar_top.sinks.export import (
    EXPORT_FORMAT,
    load_source,
    perfetto,
    read_export,
    write_csv,
    write_perfetto,
)
from torchpar_top.sources.recording import RecordingReplay

TRACE = "tests/data/hta/a100_event_sync_3_streams.json.gz"


def gpu(i):
    return GpuView(
        0, "cuda:0", "Fake A100", float(i % 100), (float(i % 100),), 1000 * i, 80_000_000, None, None, None
    )


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """200 snapshots 0.1 s apart: an ASYNC, SYNC, ASYNC run, a GPU, and a sync point counted up."""
    snaps = store_snapshots(450)[250:]
    timed = []
    for i, s in enumerate(snaps):
        sites = (SyncSite("train.py:12", "item", i // 20, 2.0, None, True),) if i >= 20 else ()
        timed.append(dataclasses.replace(s, t=50.0 + 0.1 * i, interval=0.1, gpus=(gpu(i),), syncpoints=sites))
    path = tmp_path_factory.mktemp("rec") / "run.jsonl"
    write_recording(path, timed)
    return str(path), timed


def check_trace_event_rules(obj):
    """The Trace Event Format's rules that Perfetto and chrome://tracing rely on; the events by phase."""
    json.loads(json.dumps(obj, allow_nan=False))  # valid JSON, no NaN
    assert isinstance(obj["traceEvents"], list) and obj["displayTimeUnit"] in ("ms", "ns")
    by_phase = defaultdict(list)
    counter_keys, counter_last = {}, {}
    for e in obj["traceEvents"]:
        ph = e["ph"]
        by_phase[ph].append(e)
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int)
        assert isinstance(e["ts"], int) and e["ts"] >= 0  # whole microseconds
        if ph == "X":
            assert isinstance(e["tid"], int) and isinstance(e["dur"], int) and e["dur"] > 0
        elif ph == "C":
            assert isinstance(e["args"], dict) and e["args"]
            assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in e["args"].values())
            key = (e["pid"], e["name"])
            keys = tuple(sorted(e["args"]))
            assert counter_keys.setdefault(key, keys) == keys  # one track per name, the same series
            assert e["ts"] >= counter_last.get(key, 0)  # monotone per track
            counter_last[key] = e["ts"]
        elif ph == "i":
            assert e["s"] in ("g", "p", "t")
            if e["s"] == "t":
                assert isinstance(e["tid"], int)
        elif ph == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            assert isinstance(e["args"], dict)
            if e["name"].endswith("_name"):
                assert isinstance(e["args"]["name"], str)
        else:
            pytest.fail(f"unexpected phase {ph}")
    # slices of one thread nest properly: each one inside the open one, or after it ended
    slices = defaultdict(list)
    for e in by_phase["X"]:
        slices[(e["pid"], e["tid"])].append((e["ts"], -e["dur"], e["ts"] + e["dur"]))
    for spans in slices.values():
        stack = []
        for start, _, end in sorted(spans):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], "slices overlap partially on one thread"
            stack.append(end)
    names = {(e["pid"], e.get("tid")) for e in by_phase["M"] if e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in by_phase["X"] + by_phase["i"]} <= names  # every thread named
    return by_phase


def test_a_recording_exports_under_the_trace_event_rules(recording):
    path, timed = recording
    obj = perfetto(load_source(path))
    assert next(iter(obj)) == "otherData" and obj["otherData"]["format"] == EXPORT_FORMAT
    by_phase = check_trace_event_rules(obj)
    counters = {e["name"] for e in by_phase["C"]}
    assert {"core 0 load %", "core 1 load %", "cuda:0 util %", "cuda:0 memory", "s0 depth"} <= counters
    # every sample's per-core load is there, at its time in µs from the first sample
    core0 = [(e["ts"], e["args"]["load"]) for e in by_phase["C"] if e["name"] == "core 0 load %"]
    expected = [(round(0.1 * i * 1e6), s.cores[0]) for i, s in enumerate(timed) if s.cores]
    assert core0 == expected
    depth = [e["args"]["depth"] for e in by_phase["C"] if e["name"] == "s0 depth"]
    assert depth == [s.executors[0].value for s in timed if s.executors]
    # ASYNC, SYNC, ASYNC periods as slices on the mode thread, tiling the run
    modes = [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in by_phase["X"] if e["cat"] == "mode"]
    assert [m[0] for m in modes] == ["ASYNC", "SYNC", "ASYNC"]
    assert all(a[2] == b[1] for a, b in itertools.pairwise(modes))
    # busy windows carry their measured share
    lane = [e for e in by_phase["X"] if e["cat"] == "lane"]
    assert lane and all(0 < e["args"]["share"] <= 1 for e in lane)
    # a sync-point instant each time the count went up, with how many
    syncs = [e for e in by_phase["i"] if e["cat"] == "sync"]
    assert sum(e["args"]["count"] for e in syncs) == timed[-1].syncpoints[0].count
    assert all(e["name"] == "item" and e["args"]["where"] == "train.py:12" for e in syncs)


def test_a_profiler_trace_exports_its_exact_busy_intervals_and_sync_points():
    source = load_source(TRACE)
    obj = perfetto(source)
    by_phase = check_trace_event_rules(obj)
    from torchpar_top.analysis import analyse_path

    a = analyse_path(TRACE)
    lanes = [e for e in by_phase["X"] if e["cat"] == "lane"]
    assert len(lanes) == sum(len(s.busy.starts) for s in a.streams())
    first = a.streams()[0]
    assert lanes[0]["ts"] == round(first.busy.starts[0] - a.start)
    syncs = [e for e in by_phase["i"] if e["cat"] == "sync"]
    assert len(syncs) == sum(len(lane.sync_points) for r in a.ranks for lane in r.frontend) > 0
    assert any(e["name"].endswith("depth") for e in by_phase["C"])
    assert not [e for e in by_phase["X"] if e["cat"] == "mode"]  # a trace has no ASYNC/SYNC switch


def test_the_csv_has_a_header_and_one_row_per_sample(recording):
    path, timed = recording
    out = io.StringIO()
    assert write_csv(load_source(path), out) == len(timed)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert len(rows) == len(timed)
    assert {"t_s", "mode", "throughput", "core0_load_percent", "s0 depth", "cuda:0 util_percent"} <= set(
        rows[0]
    )
    for row, snap in zip(rows, timed, strict=True):
        assert float(row["t_s"]) == pytest.approx(snap.t - timed[0].t)
        assert row["mode"] == snap.mode.value
        assert row["core0_load_percent"] == (str(snap.cores[0]) if snap.cores else "")
        assert row["s0 depth"] == (str(snap.executors[0].value) if snap.executors else "")
        assert float(row["cuda:0 util_percent"]) == snap.gpus[0].util_percent


def test_replay_reads_an_export_back(recording, tmp_path):
    path, timed = recording
    out = tmp_path / "run.perfetto.json"
    with open(out, "w") as f:
        write_perfetto(load_source(path), f)
    assert sniff(str(out)) == "export"
    rec, snaps = read_export(str(out))
    with_samples = [s for s in timed if s.cores or s.executors]
    assert len(snaps) == len(with_samples)
    for back, snap in zip(snaps, with_samples, strict=True):
        assert back.t == pytest.approx(snap.t)
        assert back.cores == snap.cores
        assert [e.value for e in back.executors] == [e.value for e in snap.executors]
        assert back.gpus[0].util_percent == snap.gpus[0].util_percent
        if snap.executors:
            assert back.mode == snap.mode
    session = RecordingReplay(rec, clock=False, snapshots=snaps)
    session.seek(1.0)
    last = session.snapshot()
    assert last.replay.finished and last.cores == with_samples[-1].cores
    assert len(last.executors[0].history) > 1 and last.core_history  # histories rebuilt from the samples
    assert Mode.SYNC in {s.mode for s in snaps}


def test_an_export_is_not_exported_again_and_other_json_is_not_an_export(recording, tmp_path):
    path, _ = recording
    out = tmp_path / "e.json"
    with open(out, "w") as f:
        write_perfetto(load_source(path), f)
    with pytest.raises(RecordingError, match="an export already"):
        load_source(str(out))
    other = tmp_path / "o.json"
    other.write_text('{"traceEvents": []}')
    with pytest.raises(RecordingError, match="not a torchpar-top export"):
        read_export(str(other))


def _full_decode_outputs(path):
    """The summary, CSV and Perfetto export of ``path`` made from every snapshot decoded whole (derived
    figures included) and rebuilt (every DERIVED figure computed again): what the commands did before
    they read only what they output."""
    from torchpar_top.contract.recording import read_recording
    from torchpar_top.model import figures
    from torchpar_top.model.snapshot import rebuild
    from torchpar_top.sinks.export import CSV_FIXED, Source, TimedSnapshot, csv_row, export_summary

    rec = read_recording(path)
    snaps = [rebuild(s) for s in rec.snapshots()]
    assert any(s.lanes is not None for s in rec.snapshots())  # the lines carry derived figures
    t0 = snaps[0].t
    source = Source(path, "recording", lambda *_: iter([(s.t - t0, s) for s in snaps]), t0=t0)
    source.header = load_source(path).header
    rows = [csv_row("recording", TimedSnapshot(t, s, {})) for t, s in source.frames(None, True)]
    columns = list(dict.fromkeys([*CSV_FIXED, *(k for row in rows for k in row)]))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    trace = io.StringIO()
    write_perfetto(source, trace)
    loads = [figures.core_load(s.cores) for s in snaps]
    assert [s.core_load for s in snaps] == loads
    summary = export_summary(rec)  # Recording.snapshots, also without derived figures now
    return summary, buf.getvalue(), trace.getvalue(), snaps


@pytest.mark.parametrize("ranks", [1, 2])
def test_the_commands_read_only_what_they_output_and_give_what_the_full_decode_gives(tmp_path, ranks):
    from fakes.recordings import stream_snapshots
    from torchpar_top.contract.recording import RecordingReader
    from torchpar_top.sinks.export import export_summary

    snaps = [
        dataclasses.replace(
            s,
            gpus=(gpu(i),),
            # two sites in the opposite of build's order (the export puts them in its order)
            syncpoints=(
                SyncSite("a.py:1", "item", i, 1.0, None, True),
                SyncSite("b.py:2", "item", i, 3.0, None, True),
            ),
        )
        for i, s in enumerate(stream_snapshots(700, ranks=ranks, streams=2, interval=0.05))
    ]
    path = str(tmp_path / "run.jsonl")
    write_recording(path, snaps, interval=0.05)
    summary, csv_text, trace_text, full = _full_decode_outputs(path)
    assert summary["ratio"] == full[-1].ratio and summary["mean_core_load"] is not None
    # the streaming commands, each on its own pass over the file
    assert export_summary(RecordingReader(path)) == summary
    out = io.StringIO()
    write_csv(load_source(path), out)
    same_csv = out.getvalue() == csv_text  # compared outside assert: pytest's diff of MBs takes minutes
    assert same_csv
    out = io.StringIO()
    write_perfetto(load_source(path), out)
    same_trace = out.getvalue() == trace_text
    assert same_trace


def test_stepping_ranks_export_from_their_read_fields_what_the_full_decode_gives(tmp_path):
    """Two stepping ranks (steps, phases, memory, a straggler): the exports, decoding only the fields they
    read, give what they give from every snapshot decoded whole."""
    from fakes.steps import Rank, hello
    from torchpar_top.model.store import SessionStore

    store = SessionStore("run")
    fast = {"forward": 0.002, "backward": 0.003, "comm": 0.010, "optimizer": 0.001}
    slow = {"forward": 0.010, "backward": 0.003, "comm": 0.002, "optimizer": 0.001}
    ranks = [Rank(step=0.016, jitter=0.2, seed=1, **fast), Rank(step=0.016, jitter=0.2, seed=2, **slow)]
    for i in range(2):
        store.on_message(hello(100 + i, i), source=i)
    snaps = []
    for _ in range(150):
        for i, r in enumerate(ranks):
            store.on_message(r.sample(), source=i)
        snaps.append(store.snapshot())
    assert snaps[-1].straggler is not None and all(r.steps is not None for r in snaps[-1].ranks)
    path = str(tmp_path / "steps.jsonl")
    write_recording(path, snaps)
    _, csv_text, trace_text, _ = _full_decode_outputs(path)
    assert '"cat":"phase"' in trace_text  # the steps' phases are drawn: the ranks were read
    out = io.StringIO()
    write_perfetto(load_source(path), out)
    assert out.getvalue() == trace_text
    out = io.StringIO()
    write_csv(load_source(path), out)
    assert out.getvalue() == csv_text
