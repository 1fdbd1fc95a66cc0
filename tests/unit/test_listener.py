"""The torchrun listener's private directory: gone once every rank connected, and swept after a crash."""

import os
import socket
import subprocess
import sys
import tempfile
import time

from torchpar_top.contract.messages import Log
from torchpar_top.sources.live.listener import AgentListener


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_directory_goes_once_every_rank_connected_and_connections_live_on(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    got = []
    lis = AgentListener(lambda msg, n: got.append((n, msg)), lambda n: None, lambda line: None, expected=2)
    try:
        assert os.path.isdir(lis.directory) and os.stat(lis.directory).st_mode & 0o777 == 0o700
        clients = []
        for _ in range(2):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(lis.path)
            clients.append(c)
        deadline = time.monotonic() + 10
        while os.path.exists(lis.directory) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not os.path.exists(lis.directory)  # a SIGKILL from now on leaves nothing behind
        clients[1].sendall(Log(text="still heard").to_json())
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [(n, m.text) for n, m in got] == [(2, "still heard")]
    finally:
        for c in clients:
            c.close()
        lis.close()
    assert os.listdir(tmp_path) == []


def test_directories_of_a_dead_torchpar_top_are_swept_at_the_next_start(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / f"torchpar-top-{_dead_pid()}-abcd1234"
    live = tmp_path / f"torchpar-top-{os.getppid()}-abcd1234"  # a living process's
    other = tmp_path / "torchpar-top-notapid"
    for d in (dead, live, other):
        d.mkdir()
    lis = AgentListener(lambda msg, n: None, lambda n: None, lambda line: None)
    try:
        assert not dead.exists() and live.exists() and other.exists()
    finally:
        lis.close()
