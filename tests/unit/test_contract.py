"""The contract: every message round-trips through the real codec; every malformed shape is refused."""

import json
import pathlib

import pytest
from torchpar_top.contract import messages as m
from torchpar_top.contract.codec import MAX_LINE, LineReader, ProtocolError
from torchpar_top.contract.vocab import Counted, ExecutorKind, Mode, Quantity, Role, SyncScope


def _row(**over):
    fields = dict(
        name="s0",
        kind=ExecutorKind.EMULATED_STREAM,
        quantity=Quantity.DEPTH,
        value=7,
        capacity=1024,
        launched=10,
        completed=2,
        busy=1.0,
        blocked=0.5,
        emulated=True,
    )
    fields.update(over)
    return m.ExecutorRow(**fields)


def _sample(**over):
    fields = dict(
        t=1.0,
        window=0.1,
        mode=Mode.ASYNC,
        throughput=12.5,
        unit="it/s",
        num_threads=2,
        frontend=m.Frontend(busy=0.4, wait=0.6),
        overlap=0.0,
        executors=(_row(),),
        roles=(m.ThreadRole(42, Role.FRONTEND), m.ThreadRole(43, Role.STREAM_EXECUTOR, "s0")),
    )
    fields.update(over)
    return m.Sample(**fields)


def _plain(msg):
    return json.loads(msg.to_json())


def test_a_sample_round_trips_to_an_equal_message():
    sample = _sample(data_wait=0.25, cuda_uuids=("GPU-1",), draining=True)
    line = sample.to_json()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = m.decode(line)
    assert back == sample
    assert back.executors[0].kind is ExecutorKind.EMULATED_STREAM and back.mode is Mode.ASYNC
    assert back.roles[1].executor == "s0"


@pytest.mark.parametrize(
    "msg",
    [
        m.Hello(
            pid=1,
            experiment="async",
            device="cpu",
            torch="2.13",
            num_threads=2,
            interop_threads=2,
            roles=(m.ThreadRole(7, Role.AGENT),),
            rank=1,
            world_size=2,
        ),
        m.Result(label="device 0 alone", value=0.3, unit="s"),
        m.Scaling(threads=2, gflops=100.0, samples=5),
        m.Log(text="hi ✓"),
        m.Ack(cmd="set_sync", ok=True, detail="SYNC"),
        m.SyncPoints(sites=(m.SyncCount("train.py:12", ".item()", 40),)),
        m.Exit(status=1, reason="ValueError: bad value 42"),
        _sample(executors=(_row(blocked=None, counts=Counted.TORCH_CALLS, ready=3),)),
    ],
)
def test_every_child_message_round_trips(msg):
    assert m.decode(msg.to_json()) == msg


@pytest.mark.parametrize(
    "cmd",
    [
        m.SetSync(value=True, scope=SyncScope.STEP),
        m.SetSync(value=False),
        m.SetThreads(value=3),
        m.Profile(seconds=0.5),
        m.Stop(),
    ],
)
def test_every_command_round_trips(cmd):
    assert m.decode_command(cmd.to_json()) == cmd


def test_commands_and_child_messages_are_not_interchangeable():
    with pytest.raises(ProtocolError, match="unknown message type 'stop'"):
        m.decode(m.Stop().to_json())
    with pytest.raises(ProtocolError, match="unknown message type 'log'"):
        m.decode_command(m.Log(text="x").to_json())


def _line(**obj):
    return json.dumps({"v": m.VERSION, **obj}).encode()


@pytest.mark.parametrize(
    "line, why",
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not an object"),
        (json.dumps({"v": 1, "type": "log", "text": "x"}).encode(), "version 1, expected"),
        (_line(type="nope"), "unknown message type"),
        (_line(type="log"), "missing field 'text'"),
        (_line(type="log", text=3), "log.text: expected a string"),
        (_line(type="scaling", threads=True, gflops=1, samples=1), "threads: expected an integer"),
        (_line(type="scaling", threads=2, gflops=-1, samples=1), "gflops: -1.0 must be >= 0"),
        (
            _line(
                type="hello",
                pid=-5,
                experiment="x",
                device="cpu",
                torch="2",
                num_threads=1,
                interop_threads=1,
            ),
            "hello.pid: -5 must be >= 1",
        ),
        (
            _line(
                type="hello", pid=1, experiment="x", device="cpu", torch="2", num_threads=0, interop_threads=1
            ),
            "num_threads: 0 must be >= 1",
        ),
        (_line(type="exit", status=9999, reason=""), "exit.status"),
        (_line(type="result", label="x", value=1e400, unit="s"), "not a finite number"),
    ],
)
def test_malformed_child_lines_are_refused_with_a_reason(line, why):
    with pytest.raises(ProtocolError, match=why):
        m.decode(line)


@pytest.mark.parametrize(
    "line, why",
    [
        (_line(type="rm -rf"), "unknown message type"),
        (_line(type="set_threads", value=0), r"value: 0 must be in \[1, 4096\]"),
        (_line(type="set_sync", value="yes"), "expected true or false"),
        (_line(type="set_sync", value=True, scope="epoch"), "not one of op, step"),
        (_line(type="profile", seconds=60), r"seconds: 60.0 must be"),
        (_line(type="profile", seconds=0), r"seconds: 0.0 must be > 0.0"),
    ],
)
def test_malformed_commands_are_refused_with_a_reason(line, why):
    with pytest.raises(ProtocolError, match=why):
        m.decode_command(line)


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda s: s.update(mode="fast"), "mode: 'fast' is not one of async, sync"),
        (lambda s: s["frontend"].pop("wait"), "missing field 'wait'"),
        (lambda s: s.update(roles=[{"tid": "main", "role": "frontend (main)"}]), r"roles\[0\].tid"),
        (lambda s: s.update(roles=[{"tid": 3, "role": "chef"}]), "is not one of"),
        (lambda s: s.update(executors=[{"name": "s"}]), "missing field"),
        (lambda s: s["executors"][0].update(capacity=0), "capacity: 0 must be >= 1"),
        (lambda s: s["executors"][0].update(quantity="backlog"), "quantity: 'backlog'"),
        (lambda s: s["executors"][0].update(busy=1.5), r"busy: 1.5 must be in \[0.0, 1.0\]"),
        (lambda s: s["executors"][0].update(value=-3), "value: -3 must be >= 0"),
        # the row without its null optional fields, so that 4097 of them stay under the 1 MiB line limit
        (
            lambda s: s.update(
                executors=[{k: v for k, v in s["executors"][0].items() if v is not None}] * 4097
            ),
            "4097 items, at most",
        ),
        (lambda s: s.update(window=0), "window: 0.0 must be > 0.0"),
    ],
)
def test_malformed_samples_are_refused(change, why):
    plain = _plain(_sample())
    change(plain)
    with pytest.raises(ProtocolError, match=why):
        m.decode(json.dumps(plain))


def test_unknown_fields_are_ignored_within_a_version():
    plain = _plain(m.Log(text="x")) | {"colour": "red"}
    assert m.decode(json.dumps(plain)) == m.Log(text="x")


def test_nan_cannot_be_sent():
    with pytest.raises(ValueError):
        m.Result(label="x", value=float("nan"), unit="s").to_json()


def test_an_overlong_line_is_refused_before_parsing():
    with pytest.raises(ProtocolError, match="exceeds"):
        m.decode(b"x" * (MAX_LINE + 1))


def test_line_reader_keeps_partial_lines():
    reader = LineReader()
    assert reader.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert reader.feed(b":2}\n\n") == [b'{"b":2}']


def test_line_reader_drops_an_endless_line():
    reader = LineReader()
    with pytest.raises(ProtocolError, match="longer"):
        reader.feed(b"x" * (MAX_LINE + 1))
    assert reader.feed(b"ok\n") == [b"ok"]


def test_no_pickle_in_the_codebase():
    root = pathlib.Path(__file__).resolve().parents[2]
    folders = ("contract", "analysis", "model", "workloads", "probes", "sources", "sinks", "tui", "cli")
    paths = [p for folder in folders for p in (root / folder).rglob("*.py")]
    assert len(paths) > 20
    for path in paths:
        text = path.read_text()
        assert "import pickle" not in text and "pickle.loads" not in text, path
