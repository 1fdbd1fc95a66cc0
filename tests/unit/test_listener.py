"""The torchrun listener's private directory: gone once every rank connected, and swept after a crash."""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from torchpar_top.contract.messages import Log
from torchpar_top.sources.live import pacing
from torchpar_top.sources.live.listener import AgentListener
from torchpar_top.sources.live.pacing import PullPace
from waiting import wait_for


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
        assert os.path.isdir(lis.log_dir) and os.stat(lis.log_dir).st_mode & 0o777 == 0o700
        (Path(lis.log_dir) / "attempt_0").mkdir()  # what torchrun writes there goes with it
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
    dead_logs = tmp_path / f"torchpar-top-{_dead_pid()}-torchrun-abcd1234"  # torchrun's, of a dead one
    for d in (dead, live, other, dead_logs):
        d.mkdir()
    lis = AgentListener(lambda msg, n: None, lambda n: None, lambda line: None)
    try:
        assert not dead.exists() and live.exists() and other.exists()
        assert not dead_logs.exists()
    finally:
        lis.close()


def test_once_pulled_the_messages_are_read_by_the_pulls_and_by_the_thread_when_they_stop(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    got = []
    lis = AgentListener(
        lambda msg, n: got.append((msg.text, threading.current_thread().name)),
        lambda n: None,
        lambda line: None,
    )
    lis.pace = PullPace(grace=1.0)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        c.connect(lis.path)
        c.sendall(Log(text="before any pull").to_json())
        wait_for(lambda: got, timeout=10)
        assert got == [("before any pull", "tpt-listener")]  # nobody pulls: the thread reads as data comes
        lis.pull()
        time.sleep(0.3)  # the thread's wait that began before the pull ends (0.2 s); then it sleeps
        lis.pull()
        c.sendall(Log(text="pulled").to_json())
        time.sleep(0.2)  # within the grace: the thread leaves it in the socket
        assert len(got) == 1
        lis.pull()
        assert got[1] == ("pulled", threading.current_thread().name)  # read in the caller's thread
        c.sendall(Log(text="nobody pulls any more").to_json())
        wait_for(lambda: len(got) == 3, timeout=10)  # the grace ran out: the thread reads again
        assert got[2] == ("nobody pulls any more", "tpt-listener")
    finally:
        c.close()
        lis.close()
    lis.pull()  # after close: nothing happens


def test_a_drain_reads_every_connection_to_its_end_past_what_a_pull_takes(monkeypatch, tmp_path):
    # torchrun ended: every rank's last messages and its closed connection are read before the end is said
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(pacing, "READ_AT_MOST", 4096)  # a pull's share of a connection, made small
    got, closed = [], []
    lis = AgentListener(lambda msg, n: got.append(msg.text), closed.append, lambda line: None)
    lis.pace = PullPace(grace=60.0)  # the thread leaves the reading to the caller
    lis.pull()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        c.connect(lis.path)
        lis.pull()  # accepted
        # ~150 KB, then the end: more than one pull takes (one recv of 64 KB, READ_AT_MOST being smaller)
        sender = threading.Thread(target=lambda: (c.sendall(Log(text="x" * 1000).to_json() * 150), c.close()))
        sender.start()
        sender.join(timeout=5)  # the socket's buffer holds it all (else the drain lets the rest through)
        lis.pull()
        assert closed == [] and len(got) < 150
        lis.drain()
        sender.join(timeout=10)
        assert len(got) == 150 and closed == [1]
    finally:
        c.close()
        lis.close()


def test_a_drain_waits_for_the_read_the_thread_has_in_progress(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    closed = []
    lis = AgentListener(lambda msg, n: None, closed.append, lambda line: None)
    lis.pace = PullPace(grace=60.0)
    lis.pull()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        c.connect(lis.path)
        lis.pull()
        c.close()
        with lis._read_lock:  # the thread reads: the connection's end is taken, its close not yet said
            conn, _ = lis._conns.pop(1)
            lis._sel.unregister(conn)
            conn.close()
            drained = threading.Thread(target=lis.drain)
            drained.start()
            time.sleep(0.2)
            assert drained.is_alive()  # a pull here would have found nothing ready and gone on
            closed.append(1)
        drained.join(timeout=10)
        assert not drained.is_alive() and closed == [1]
    finally:
        lis.close()
