"""Recordings for tests: snapshots of a real store fed irregularly, and files written by the real recorder."""

import json

from torchpar_top.contract import messages as m
from torchpar_top.contract.snapshot import ChildStatus, HostSample
from torchpar_top.contract.vocab import ChildState, LogSource
from torchpar_top.model.store import HISTORY, SessionStore
from torchpar_top.sinks.recording import Recorder


def sample(mode="async", depth=10, throughput=100.0, window=0.1, wait=0.5, streams=1):
    """A sample message as the agent sends it, read back by the real codec (``streams`` emulated streams)."""
    return m.decode(
        json.dumps(
            {
                "v": m.VERSION,
                "type": "sample",
                "t": 1.0,
                "window": window,
                "mode": mode,
                "throughput": throughput,
                "unit": "it/s",
                "num_threads": 2,
                "frontend": {"busy": 1 - wait, "wait": wait},
                "overlap": 0.25,
                "executors": [
                    {
                        "name": f"s{k}",
                        "kind": "emulated-stream",
                        "emulated": True,
                        "quantity": "depth",
                        "value": depth,
                        "capacity": 1024,
                        "launched": 5 + depth,
                        "completed": 3,
                        "busy": 0.9,
                        "blocked": 0.4,
                    }
                    for k in range(streams)
                ],
                "roles": [{"tid": 7, "role": "frontend (main)"}],
            }
        )
    )


def hello(pid, rank):
    """A rank's hello, read back by the real codec."""
    return m.decode(
        json.dumps(
            {
                "v": m.VERSION,
                "type": "hello",
                "pid": pid,
                "experiment": "run",
                "device": "cpu",
                "torch": "2.13.0",
                "num_threads": 2,
                "interop_threads": 2,
                "rank": rank,
                "world_size": 8,
            }
        )
    )


def stream_snapshots(n, ranks=1, streams=1, cores=8, interval=0.1, t0=1000.0, seed=7):
    """``n`` snapshots of a real store, made one at a time (none held): a host sample and one child sample
    per rank every ``interval``, with ``streams`` emulated streams per rank, ``cores`` cores, a mode switch
    every 500, a log line now and then: what a long ``--record`` of a run writes."""
    st = SessionStore("async")
    st.on_child(ChildStatus(42, ChildState.RUNNING))
    if ranks > 1:
        for r in range(ranks):
            st.on_message(hello(100 + r, r), r)
    t, state = t0, seed
    for i in range(n):
        state = (state * 1103515245 + 12345) % 2**31
        mode = "sync" if (i // 500) % 2 else "async"
        for r in range(ranks):
            st.on_message(
                sample(mode, (i * 7 + r) % 1025, 50.0 + i % 13, interval, (i % 10) / 10, streams),
                r if ranks > 1 else 0,
            )
        t += interval
        st.on_host(HostSample(t, tuple(float((i * (k + 1)) % 100) for k in range(cores)), ()))
        if state % 7 == 0:
            st.add_log(LogSource.STDOUT, f"step {i}: loss {1.0 / (i + 1):.4f}")
        yield st.snapshot()


def store_snapshots(n=HISTORY + 80, seed=7):
    """``n`` snapshots of a real store fed irregularly: 0 to 3 child samples and 0 to 2 host samples between
    two snapshots, a mode switch, log lines, a restart (histories emptied) and histories past their caps."""
    st = SessionStore("async")
    st.on_child(ChildStatus(42, ChildState.RUNNING))
    snaps, t, state = [], 1000.0, seed
    for i in range(n):
        state = (state * 1103515245 + 12345) % 2**31
        for k in range(state % 4):
            mode = "sync" if 300 < i < 400 else "async"
            st.on_message(
                sample(mode, depth=(i * 7 + k) % 1025, throughput=50.0 + i % 13, wait=(i % 10) / 10)
            )
        for _ in range((state >> 3) % 3):
            t += 0.05
            st.on_host(HostSample(t, (float(i % 100), float((3 * i) % 100)), ()))
        if state % 5 == 0:
            st.add_log(LogSource.STDOUT, f"line {i}")
        if i == 500:
            st.reset("async", "again")
        snaps.append(st.snapshot())
    return snaps


class FakeSession:
    """Serves snapshots one host sample at a time (a test moves it on)."""

    interval = 0.02

    def __init__(self, snaps):
        self.snaps = snaps
        self.host_samples = 0

    def snapshot(self):
        return self.snaps[min(self.host_samples, len(self.snaps)) - 1]


def recorder_for(session, out, command, written=None):
    """A real :class:`Recorder` whose clocks are the snapshots' own: the wall clock at the start reads 0 and
    the monotonic clock the shown snapshot's ``t`` (or, given ``written``, the next one's of those), so
    each line keeps its snapshot's time exactly."""
    if written is not None:
        times = iter([0.0, *(s.t for s in written)])
        return Recorder(session, out, command, clock=lambda: 0.0, monotonic=lambda: next(times))
    return Recorder(
        session,
        out,
        command,
        clock=lambda: 0.0,
        monotonic=lambda: session.snapshot().t if session.host_samples else 0.0,
    )


def write_recording(path, snaps, command=("--headless",), interval=0.1):
    session = FakeSession(snaps)
    session.interval = interval
    out = open(path, "w", encoding="utf-8")  # noqa: SIM115 the Recorder owns the file and closes it
    recorder = recorder_for(session, out, list(command))
    for i, s in enumerate(snaps):
        session.host_samples = i + 1
        recorder.write(s)
    session.host_samples = 0  # nothing new for close() to take
    recorder.close()
    return path


def long_recording(path, n, interval=0.02, cycle=600):
    """A recording of ``n`` snapshots made fast: ``cycle`` snapshots of a real store written by the real
    recorder, then their lines again and again with later times. ``cycle`` is a multiple of the keyframe
    period, so each repeat begins with a line written whole and decodes on its own."""
    import re

    from torchpar_top.contract.recording import KEYFRAME

    assert cycle % KEYFRAME == 0
    write_recording(path, list(stream_snapshots(cycle, interval=interval)), interval=interval)
    header, *body = path.read_bytes().split(b"\n")[:-1]
    t_prefix = re.compile(rb'^\{"t":[^,]*,')
    with open(path, "wb") as f:
        f.write(header + b"\n")
        for i in range(n):
            line = body[i % cycle]
            f.write(t_prefix.sub(b'{"t":%r,' % (1000.0 + i * interval), line, count=1) + b"\n")
    return path
