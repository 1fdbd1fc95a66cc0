"""Recordings and traces are untrusted input (issue 20, items 1 to 4): what a line or a file may cost is
bounded, a bad line ends the recording there and says where, a run with thousands of arguments is
readable, histories are deltas, and times come from a monotonic clock. Bad files are made here, in tmp
dirs."""

import dataclasses
import gzip
import json
import zlib

import pytest
from fakes.recordings import FakeSession, store_snapshots, write_recording
from torchpar_top.analysis import TraceError, load_trace
from torchpar_top.contract import recording as rec_mod
from torchpar_top.contract.recording import (
    KEYFRAME,
    Encoder,
    RecordingError,
    RecordingReader,
    read_recording,
    sniff,
)
from torchpar_top.sinks.recording import Recorder
from torchpar_top.sources.recording import RecordingReplay


@pytest.fixture(scope="module")
def snaps():
    return store_snapshots(120)


def with_line(path, index, text):
    """The recording at ``path`` with its line ``index`` (0: the header) replaced by ``text``."""
    lines = path.read_text().split("\n")
    lines[index] = text
    path.write_text("\n".join(lines))
    return path


# -- 1. bounds -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, why",
    [
        ('{"t": 1000.3, "x": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested too deeply"),
        ('{"t": ' + "7" * 4000 + "}", "an integer of 4000 digits"),
        ('{"t": ' + "7" * 5000 + "}", "an integer of 5000 digits"),
        ('{"t": 1e999}', "time inf is not within a year"),
        ('{"t": 1e308}', "is not within a year of the first line's"),
        ('{"t": -1e308}', "is not within a year of the first line's"),
        ('{"t": 1000.3, "x": NaN}', "NaN is not a number"),
    ],
)
def test_a_line_over_a_bound_ends_the_recording_there_with_one_line_saying_why(snaps, tmp_path, line, why):
    path = with_line(
        write_recording(tmp_path / "run.jsonl", snaps[:6]), 4, line.replace("1000.3", repr(snaps[3].t))
    )
    rec = read_recording(str(path))
    assert list(rec.snapshots()) == snaps[:3]  # what comes before it is played
    assert (
        f"line 5: not a JSON object ({why}" in rec.note or (f"line 5: {why}" in rec.note) or why in rec.note
    )
    assert "line 5" in rec.note and "\n" not in rec.note
    reader = RecordingReader(str(path))
    assert len(list(reader.snapshots())) == 3 and reader.note == rec.note
    session = RecordingReplay(rec, clock=False)
    session.seek(1.0)
    assert session.finished and session.index == 2  # a headless replay ends


def test_a_float_past_its_range_in_a_snapshot_ends_the_replay_there(snaps, tmp_path):
    path = write_recording(tmp_path / "run.jsonl", snaps[:6])
    line = json.loads(path.read_text().split("\n")[5])
    text = json.dumps(line).replace('"cores": [', '"cores": [1e999, ', 1)
    with_line(path, 5, text)
    reader = RecordingReader(str(path))
    assert len(list(reader.snapshots())) == 4 and "line 6.cores[0]: not a finite number" in reader.note
    session = RecordingReplay(read_recording(str(path)), clock=False)
    session.seek(1.0)
    assert session.finished and session.index == 3
    assert any("not a finite number" in line.text for line in session.snapshot().log)


def test_a_line_past_its_length_bound_or_a_gzip_bomb_is_one_line(snaps, tmp_path, monkeypatch):
    monkeypatch.setattr(rec_mod, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(rec_mod, "GZIP_FREE", 4 << 20)
    header = write_recording(tmp_path / "run.jsonl", snaps[:1]).read_bytes().split(b"\n")[0] + b"\n"
    bomb = tmp_path / "bomb.jsonl.gz"  # blank space without a newline: one endless line
    c = zlib.compressobj(9, wbits=31)
    bomb.write_bytes(
        c.compress(header) + b"".join(c.compress(b" " * (1 << 20)) for _ in range(8)) + c.flush()
    )
    with pytest.raises(RecordingError, match=r"bomb.jsonl.gz line 2: longer than 1 MiB"):
        list(RecordingReader(str(bomb)).lines())
    lines = tmp_path / "lines.jsonl.gz"  # blank lines: each short, the whole a bomb
    c = zlib.compressobj(9, wbits=31)
    blank = (b" " * 1000 + b"\n") * 1000
    lines.write_bytes(c.compress(header) + b"".join(c.compress(blank) for _ in range(16)) + c.flush())
    with pytest.raises(
        RecordingError, match=r"inflates to more than 100 times its compressed size.*gzip bomb"
    ):
        read_recording(str(lines))


def test_a_trace_that_is_a_gzip_bomb_or_has_absurd_numbers_is_one_line(tmp_path, monkeypatch):
    from torchpar_top.analysis import loading

    monkeypatch.setattr(loading, "GZIP_FREE", 4 << 20)
    c = zlib.compressobj(9, wbits=31)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(b"".join(c.compress(b" " * (1 << 20)) for _ in range(16)) + c.flush())
    with pytest.raises(TraceError, match="gzip bomb"):
        load_trace(bomb)

    def kernel(ts, stream=7, dur=4):
        return {"ph": "X", "cat": "kernel", "name": "k", "ts": ts, "dur": dur, "pid": 0, "tid": stream,
                "args": {"stream": stream, "device": 0}}  # fmt: skip

    def trace(name, events, raw=None):
        path = tmp_path / name
        path.write_text(raw if raw is not None else json.dumps({"traceEvents": events}))
        return path

    many = trace("streams.json", [kernel(i, stream=i) for i in range(5000)])
    with pytest.raises(TraceError, match="5000 GPU streams in one trace, at most 256"):
        load_trace(many)
    far = trace("far.json", [kernel(10), kernel(20), kernel(1e15)])
    with pytest.raises(TraceError, match=r"its events span .* hours \(event 'k' at ts 1000000000000000"):
        load_trace(far)
    long = trace("long.json", [kernel(10), kernel(20, dur=1e300)])
    with pytest.raises(TraceError, match="its events span"):
        load_trace(long)
    digits = '{"traceEvents": [' + json.dumps(kernel(10)) + ', {"ph": "X", "cat": "kernel", "ts": '
    huge = trace("huge.json", [], digits + "9" * 4000 + ', "dur": 1, "args": {"stream": 7}}]}')
    assert len(load_trace(huge).ranks[0].events) == 1  # the event past a float's range is left out
    huger = trace("huger.json", [], digits + "9" * 5000 + ', "dur": 1, "args": {"stream": 7}}]}')
    with pytest.raises(TraceError, match="invalid JSON"):
        load_trace(huger)
    deep = trace("deep.json", [], '{"traceEvents": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(TraceError, match="nested too deeply"):
        load_trace(deep)


# -- 2. blank space first ----------------------------------------------------------------------------


def test_blank_space_before_the_first_line_is_not_an_empty_file(snaps, tmp_path):
    rec = write_recording(tmp_path / "run.jsonl", snaps[:3])
    spaced = tmp_path / "spaced.jsonl"
    spaced.write_bytes(b" \n" * 40 + b"\t" * 30 + rec.read_bytes())
    assert sniff(str(spaced)) == "recording"
    assert list(read_recording(str(spaced)).snapshots()) == snaps[:3]
    trace = tmp_path / "trace.json"
    event = {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "ts": 3,
        "dur": 4,
        "pid": 0,
        "tid": 7,
        "args": {"stream": 7},
    }
    trace.write_text(" " * 100 + "\n" * 10 + json.dumps({"traceEvents": [event]}))
    assert len(load_trace(trace).ranks[0].events) == 1
    blank = tmp_path / "blank.json"
    blank.write_text(" " * 100)
    with pytest.raises(TraceError, match="only blank space"):
        load_trace(blank)


# -- 3. many arguments, deltas -----------------------------------------------------------------------


def test_a_run_with_thousands_of_arguments_is_read_back_and_its_lines_do_not_repeat_them(snaps, tmp_path):
    args = [f"--arg{i}" for i in range(5007)]
    described = [dataclasses.replace(s, description="train.py " + " ".join(args)) for s in snaps[:30]]
    path = write_recording(tmp_path / "run.jsonl", described, command=["run", "train.py", *args])
    rec = read_recording(str(path))
    assert rec.header.command == ("run", "train.py", *args)
    assert list(rec.snapshots()) == described
    raw = path.read_bytes().split(b"\n")
    assert raw[1].count(b"--arg5006") == 1  # the first line has the description
    assert all(b"--arg5006" not in line for line in raw[2:])  # the lines after it name it unchanged
    assert all(len(line) < 20_000 for line in raw[2:])


def test_overlap_high_is_written_as_its_new_values_only(snaps):
    high = [
        dataclasses.replace(s, overlap_high=tuple(float(i + k) for k in range(600)))
        for i, s in enumerate(snaps)
    ]
    encoder = Encoder()
    lines = [encoder.encode(s) for s in high[:5]]
    assert len(lines[0]["overlap_high"]) == 600
    assert all(line["overlap_high"] == [float(i + 599)] for i, line in enumerate(lines[1:], 1))
    assert all(line["_keep"]["overlap_high"] == 599 for line in lines[1:])


def test_a_keyframe_is_written_whole_every_keyframe_lines_and_indexed(tmp_path):
    snaps = store_snapshots(KEYFRAME * 2 + 10)
    path = write_recording(tmp_path / "run.jsonl", snaps)
    rec = read_recording(str(path))
    assert rec.keyframes == (0, KEYFRAME, 2 * KEYFRAME)
    whole = json.loads(rec.lines[KEYFRAME])
    assert "_keep" not in whole and "_same" not in whole
    session = RecordingReplay(rec, clock=False)
    session.step(2 * KEYFRAME + 5)  # from the keyframe: the same snapshot as from the start
    assert session.index == 2 * KEYFRAME + 5
    bare = {"log": (), "notice": "", "replay": None, "paused": False, "child": None, "target": ""}
    shown = dataclasses.replace(session.snapshot(), **bare)
    assert shown == dataclasses.replace(snaps[2 * KEYFRAME + 5], **bare)


# -- 4. a monotonic clock ------------------------------------------------------------------------------


def test_a_wall_clock_stepped_back_during_a_run_loses_no_snapshot(snaps, tmp_path):
    path = tmp_path / "run.jsonl"
    session = FakeSession(snaps[:20])
    mono = iter([50.0 + 0.1 * i for i in range(21)])
    # the snapshots' own (wall) times step back 5 s after the 10th: the recorder's times do not
    stepped = [
        dataclasses.replace(s, t=1000.0 + 0.1 * i - (5.0 if i >= 10 else 0.0))
        for i, s in enumerate(snaps[:20])
    ]
    out = open(path, "w", encoding="utf-8")  # noqa: SIM115 (the recorder closes it)
    recorder = Recorder(session, out, [], clock=lambda: 1000.0, monotonic=lambda: next(mono))
    for s in stepped:
        recorder.write(s)
    recorder.close()
    rec = read_recording(str(path))
    assert rec.header.t == 1000.0
    assert list(rec.times) == pytest.approx([1000.1 + 0.1 * i for i in range(20)])
    replay = RecordingReplay(rec, clock=False)
    shown = {replay.index}
    while not replay.finished:
        replay.tick()
        shown.add(replay.index)
    assert shown == set(range(20))  # every snapshot shown once on the way


def test_a_recording_whose_times_step_back_still_plays_every_snapshot(snaps, tmp_path):
    stepped = [
        dataclasses.replace(s, t=1000.0 + 0.1 * i - (5.0 if i >= 10 else 0.0))
        for i, s in enumerate(snaps[:20])
    ]
    rec = read_recording(str(write_recording(tmp_path / "old.jsonl", stepped)))  # as an older writer did
    assert list(rec.times) == sorted(rec.times) and len(rec.times) == 20
    replay = RecordingReplay(rec, clock=False)
    replay.step(19)
    assert replay.index == 19


def test_gzip_recordings_read_by_the_streaming_reader_too(snaps, tmp_path):
    path = write_recording(tmp_path / "run.jsonl", snaps[:10])
    gz = tmp_path / "run.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert list(RecordingReader(str(gz)).snapshots()) == snaps[:10]
    assert list(read_recording(str(gz)).snapshots()) == snaps[:10]
