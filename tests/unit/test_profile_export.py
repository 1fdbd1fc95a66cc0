"""``Profile.export_path``: the agent's profiler window also written to a file (benchmarks/gpu_check.py)."""

import gzip
import json
import socket

import pytest
from torchpar_top.contract import messages as m
from torchpar_top.contract.codec import LineReader, ProtocolError
from torchpar_top.probes.agent.agent import Agent
from torchpar_top.probes.agent.cuda import profile_queue


def test_the_export_path_round_trips_and_is_optional():
    cmd = m.Profile(seconds=0.5, export_path="/tmp/window.json")
    assert m.decode_command(cmd.to_json()) == cmd
    assert m.decode_command(b'{"v": 2, "type": "profile", "seconds": 1.0}\n') == m.Profile(seconds=1.0)
    assert m.Profile(seconds=1.0).export_path is None
    with pytest.raises(ProtocolError, match="export_path"):
        m.decode_command(b'{"v": 2, "type": "profile", "seconds": 1.0, "export_path": 7}\n')


@pytest.mark.parametrize("name", ["window.json", "window.json.gz"])
def test_profile_queue_keeps_the_trace_where_asked(tmp_path, name):
    path = tmp_path / name
    assert profile_queue(0.05, cuda=False, export_path=str(path))[:3] == ([], 0, None)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt") as f:
        assert "traceEvents" in json.load(f)


def _answers(parent, until, timeout=30):
    reader, got = LineReader(), []
    parent.settimeout(timeout)
    while not until(got):
        for line in reader.feed(parent.recv(65536)):
            got.append(m.decode(line))
    return got


def test_the_agent_writes_the_window_where_asked_and_refuses_a_relative_path(tmp_path):
    parent, child = socket.socketpair()
    agent = Agent(child, experiment="test", description="t", interval=0.05)
    agent.hard_exit = lambda: None
    agent.start()
    try:
        parent.sendall(m.Profile(seconds=0.1, export_path="relative.json").to_json())
        acks = [
            a
            for a in _answers(parent, lambda got: any(isinstance(x, m.Ack) for x in got))
            if isinstance(a, m.Ack)
        ]
        assert not acks[0].ok and "path not absolute: relative.json" in acks[0].detail

        path = tmp_path / "window.json"
        parent.sendall(m.Profile(seconds=0.1, export_path=str(path)).to_json())
        got = _answers(
            parent, lambda got: any(isinstance(x, m.Log) and "no launch queue" in x.text for x in got)
        )
        logs = [x.text for x in got if isinstance(x, m.Log)]
        assert f"profiler window (0.1 s): trace written to {path}" in logs
        assert not any("read in the workload's process" in x for x in logs)  # read in its own process
        assert "traceEvents" in json.loads(path.read_text())
    finally:
        parent.close()
        agent.close()
