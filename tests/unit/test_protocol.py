"""The wire protocol: round trips, validation of every malformed shape, line splitting."""

import json

import pytest

from torchpar_top.session import protocol
from torchpar_top.session.protocol import ProtocolError, decode, encode


def _sample(**over):
    msg = {
        "t": 1.0, "window": 0.1, "mode": "async", "sync_scope": "op", "throughput": 12.5, "unit": "it/s",
        "items": 3, "num_threads": 2, "frontend": {"busy": 0.4, "wait": 0.6}, "overlap": 0.0,
        "executors": [{"name": "s0", "kind": "emulated-stream", "emulated": True, "quantity": "depth",
                       "value": 7, "capacity": 1024, "launched": 10, "started": 3, "completed": 2,
                       "busy": 1.0, "blocked": 0.5}],
        "roles": {"42": "frontend (main)"},
    }
    msg.update(over)
    return msg


def test_sample_round_trip():
    line = encode("sample", **_sample())
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    msg = decode(line)
    assert msg["v"] == protocol.VERSION and msg["type"] == "sample"
    assert msg["executors"][0]["value"] == 7


def test_every_message_type_round_trips():
    cases = {
        "hello": dict(pid=1, experiment="async", description="d", torch="2.13", device="cpu", num_threads=2,
                      interop_threads=2, executors=[{"name": "s", "kind": "eager", "quantity": "depth",
                                                     "capacity": None, "emulated": False}], roles={}),
        "result": dict(label="device 0 alone", value=0.3, unit="s"),
        "scaling": dict(threads=2, gflops=100.0, samples=5),
        "log": dict(text="hi"),
        "ack": dict(cmd="set_sync", ok=True, detail="SYNC"),
        "cmd": dict(cmd="set_threads", value=3),
        "exit": dict(status=1, reason="ValueError: bad value 42"),
    }
    for kind, fields in cases.items():
        assert decode(encode(kind, **fields))["type"] == kind


@pytest.mark.parametrize(
    "line, why",
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not an object"),
        (json.dumps({"v": 99, "type": "log", "text": "x"}).encode(), "version"),
        (json.dumps({"v": 1, "type": "nope"}).encode(), "unknown message type"),
        (json.dumps({"v": 1, "type": "log"}).encode(), "missing field 'text'"),
        (json.dumps({"v": 1, "type": "log", "text": 3}).encode(), "has type int"),
        (json.dumps({"v": 1, "type": "scaling", "threads": True, "gflops": 1, "samples": 1}).encode(), "bool"),
        (json.dumps({"v": 1, "type": "cmd", "cmd": "rm -rf"}).encode(), "unknown command"),
        (json.dumps({"v": 1, "type": "cmd", "cmd": "set_threads", "value": 0}).encode(), ">= 1"),
        (json.dumps({"v": 1, "type": "cmd", "cmd": "set_sync", "value": "yes"}).encode(), "bool value"),
        (json.dumps({"v": 1, "type": "cmd", "cmd": "profile", "seconds": 60}).encode(), "seconds in"),
    ],
)
def test_malformed_lines_are_rejected_with_a_reason(line, why):
    with pytest.raises(ProtocolError, match=why):
        decode(line)


@pytest.mark.parametrize(
    "over, why",
    [
        ({"mode": "fast"}, "mode"),
        ({"frontend": {"busy": 1}}, "missing field 'wait'"),
        ({"roles": {"main": "x"}}, "roles"),
        ({"executors": [{"name": "s"}]}, "missing field"),
    ],
)
def test_malformed_samples_are_rejected(over, why):
    with pytest.raises(ProtocolError, match=why):
        decode(json.dumps({"v": 1, "type": "sample", **_sample(**over)}))


def test_bad_executor_fields_are_rejected():
    bad = _sample()
    bad["executors"][0]["capacity"] = 0
    with pytest.raises(ProtocolError, match="capacity"):
        decode(json.dumps({"v": 1, "type": "sample", **bad}))
    bad["executors"][0].update(capacity=None, quantity="backlog")
    with pytest.raises(ProtocolError, match="quantity"):
        decode(json.dumps({"v": 1, "type": "sample", **bad}))


def test_encode_refuses_invalid_messages():
    with pytest.raises(ProtocolError):
        encode("log")
    with pytest.raises(ValueError):
        encode("result", label="x", value=float("nan"), unit="s")  # JSON has no NaN


def test_line_reader_keeps_partial_lines():
    reader = protocol.LineReader()
    assert reader.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert reader.feed(b":2}\n\n") == [b'{"b":2}']


def test_line_reader_drops_an_endless_line():
    reader = protocol.LineReader()
    with pytest.raises(ProtocolError, match="longer"):
        reader.feed(b"x" * (protocol.MAX_LINE + 1))
    assert reader.feed(b"ok\n") == [b"ok"]


def test_no_pickle_in_the_codebase():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    paths = [p for folder in ("cli", "tui", "probes", "session", "workloads") for p in (root / folder).rglob("*.py")]
    assert len(paths) > 20
    for path in paths:
        text = path.read_text()
        assert "import pickle" not in text and "pickle.loads" not in text, path
