"""Loading traces: files, folders, ranks, and one clear TraceError for every way a trace can be unreadable."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from torchpar_top.analysis import NO_GPU_NOTE, TraceError, analyse_path, load_trace, queue_series, summary

DATA = Path(__file__).resolve().parents[1] / "data" / "hta"


def _write(path: Path, document, compress: bool = False) -> Path:
    text = json.dumps(document)
    path.write_bytes(gzip.compress(text.encode()) if compress else text.encode())
    return path


def _events(stream: int = 7) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "ts": 0,
            "dur": 2,
            "pid": 1,
            "tid": 1,
            "args": {"correlation": 5},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "ts": 3,
            "dur": 4,
            "pid": 0,
            "tid": stream,
            "args": {"correlation": 5, "stream": stream, "device": 0},
        },
    ]


def test_a_single_file_gzipped_or_not(tmp_path):
    plain = load_trace(_write(tmp_path / "t.json", {"traceEvents": _events()}))
    zipped = load_trace(_write(tmp_path / "t.json.gz", {"traceEvents": _events()}, compress=True))
    assert [r.rank for r in plain.ranks] == [r.rank for r in zipped.ranks] == [0]
    assert plain.ranks[0].events == zipped.ranks[0].events
    assert len(plain.ranks[0].events) == 2
    # a bare list of events is a Chrome trace too
    assert load_trace(_write(tmp_path / "list.json", _events())).ranks[0].events == plain.ranks[0].events


def test_a_folder_of_ranks_takes_the_rank_from_the_trace_then_the_name(tmp_path):
    _write(tmp_path / "rank-1.json.gz", {"traceEvents": _events(7)}, compress=True)
    _write(tmp_path / "trainer_rank_3.pt.trace.json", {"traceEvents": _events(9)})
    _write(tmp_path / "rank-9.json", {"distributedInfo": {"rank": 2}, "traceEvents": _events(11)})
    (tmp_path / "notes.txt").write_text("not a trace")
    trace = load_trace(tmp_path)
    assert [r.rank for r in trace.ranks] == [1, 2, 3]
    assert [r.events[1].stream for r in trace.ranks] == [7, 11, 9]
    assert trace.ranks[1].metadata == {"distributedInfo": {"rank": 2}}


def test_the_shipped_two_rank_folder():
    trace = load_trace(DATA / "gpu_2_ranks")
    names = [(r.rank, Path(r.path).name) for r in trace.ranks]
    assert names == [(0, "rank-0.json.gz"), (1, "rank-1.json.gz")]
    assert [len(r.events) for r in trace.ranks] == [4810, 4675]  # the complete (ph X) events


def test_two_files_with_one_rank_is_an_error(tmp_path):
    _write(tmp_path / "a.json", {"traceEvents": _events()})
    _write(tmp_path / "b.json", {"traceEvents": _events()})
    with pytest.raises(TraceError, match=r"two traces claim rank 0: a\.json and b\.json"):
        load_trace(tmp_path)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("t.json.gz", b"\x1f\x8b\x08\x00garbage-not-deflate", "corrupt gzip file"),
        ("t.json.gz", b'{"traceEvents": []}', "not a gzip file, though its name ends in .gz"),
        ("t.pt", b"PK\x03\x04\x14\x00\x00\x00binary zip", "unknown format, not JSON"),
        ("t.json", b"", "the file is empty"),
        ("t.json", b'{"traceEvents": [{"ph": "X", "ts": 1', "truncated JSON"),
        ("t.json", b'{"traceEvents": nope}', "invalid JSON (line 1, column 17"),
        ("t.json", b'{"schemaVersion": 1}', "not a Chrome trace (no traceEvents list)"),
        ("t.json", b'{"traceEvents": {"ph": "X"}}', "not a Chrome trace"),
        ("t.json", b'{"traceEvents": []}', "the trace has no events"),
        ("t.json", b'{"traceEvents": [{"ph": "M", "name": "process_name"}]}', "the trace has no events"),
        ("t.json", b'{"traceEvents": [1, "x", null]}', "the trace has no events"),
        ("t.json", b'{"traceEvents": [{"ph": "X", "ts": NaN}, {"ph": "X", "ts": "x"}]}', "has no events"),
    ],
)
def test_unreadable_traces_are_one_clear_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    text = str(info.value)
    assert message in text and text.startswith(str(path)) and "\n" not in text


def test_a_truncated_real_trace(tmp_path):
    data = (DATA / "a100_alexnet_2_streams.json.gz").read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated gzip file"):
        load_trace(path)


def test_unlistable_folders_and_unreadable_files(tmp_path, monkeypatch):
    def refuse(*_):
        raise PermissionError(13, "Permission denied")

    _write(tmp_path / "rank-0.json", {"traceEvents": _events()})
    monkeypatch.setattr("os.listdir", refuse)
    with pytest.raises(TraceError, match=r": Permission denied$"):
        load_trace(tmp_path)
    monkeypatch.undo()
    monkeypatch.setattr("builtins.open", refuse)
    with pytest.raises(TraceError, match=r"rank-0.json: Permission denied$"):
        load_trace(tmp_path / "rank-0.json")


def test_missing_paths_and_empty_folders(tmp_path):
    with pytest.raises(TraceError, match="no such file or folder"):
        load_trace(tmp_path / "nope.json.gz")
    with pytest.raises(TraceError, match=r"no trace files \(\*.json, \*.json.gz\) in this folder"):
        load_trace(tmp_path)


def test_the_cpu_only_trace_has_no_gpu_activity_and_is_not_an_error():
    a = analyse_path(DATA / "cpu_only.json.gz")
    assert not a.has_gpu
    assert [r.rank for r in a.ranks] == [34]  # distributedInfo.rank
    s = summary(a)
    assert s["gpu_activity"] is False and s["note"] == NO_GPU_NOTE and s["streams"] == []
    assert s["ranks"][0]["devices"] == [] and s["ranks"][0]["duration"] > 0
    assert all(r.has_gpu for r in analyse_path(DATA / "gpu_2_ranks").ranks)


def test_missing_or_odd_correlation_ids_pair_with_nothing(tmp_path):
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 1, "pid": 1, "tid": 1},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "ts": 1,
            "dur": 1,
            "pid": 1,
            "tid": 1,
            "args": {"correlation": "x9"},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "ts": 2,
            "dur": 1,
            "pid": 1,
            "tid": 1,
            "args": {"correlation": -1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "ts": 20,
            "dur": 3,
            "pid": 0,
            "tid": 7,
            "args": {"stream": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "ts": 24,
            "dur": 3,
            "pid": 0,
            "tid": 7,
            "args": {"stream": 7, "correlation": -1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "ts": 28,
            "dur": 3,
            "pid": 0,
            "tid": 7,
            "args": {"stream": 7, "correlation": "x9"},
        },
        *_events(7),  # one launch/kernel pair that does match
    ]
    path = _write(tmp_path / "t.json", {"traceEvents": events})
    (rank,) = load_trace(path).ranks
    assert [e.correlation for e in rank.events][:6] == [None] * 6
    (series,) = queue_series(rank.events).values()
    assert series.launches == 1 and series.points == ((0, 1), (3, 0))
    a = analyse_path(path)
    (lane,) = a.streams()
    assert lane.busy.total == 3 * 3 + 4  # the unpaired kernels still ran on the stream
