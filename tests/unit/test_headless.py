"""Headless records: what the JSON lines carry, built from a real store's snapshots."""

import io
import threading

from torchpar_top.contract.snapshot import ChildStatus
from torchpar_top.contract.vocab import ChildState, LogSource
from torchpar_top.model.store import SessionStore
from torchpar_top.sinks import headless


def _store_with_lines(n):
    store = SessionStore("custom")
    for i in range(n):
        store.add_log(LogSource.STDOUT, f"line {i}")
    return store


def test_lines_that_no_record_carried_are_counted_and_marked():
    snap = _store_with_lines(1000).snapshot()
    log = headless.to_record(snap, log_after=0)["log"]
    assert log[0] == {
        "source": "app",
        "text": "[800 log lines left out: more came between two records than the log keeps]",
        "dropped": 800,
    }
    assert [line["text"] for line in log[1:]] == [f"line {i}" for i in range(800, 1000)]


def test_no_marker_when_nothing_was_left_out():
    snap = _store_with_lines(1000).snapshot()
    assert [line["text"] for line in headless.to_record(snap, log_after=990)["log"]] == [
        f"line {i}" for i in range(990, 1000)
    ]
    assert all("dropped" not in line for line in headless.to_record(_store_with_lines(5).snapshot())["log"])


class _FakeSession:
    """Serves a store's snapshots; 300 lines per host sample, and the workload 'ends' at the third."""

    interval = 0.02

    def __init__(self):
        self.store = SessionStore("custom")
        self.host_samples = 0
        self.closed = False
        self._ticker = None

    def start(self):
        def tick():
            for i in range(1, 1000):
                if self.closed:
                    return
                for j in range(300):
                    self.store.add_log(LogSource.STDOUT, f"{i}.{j}")
                if i == 3:
                    self.store.on_child(ChildStatus(42, ChildState.EXITED, 3))
                self.host_samples = i
                if i == 3:
                    return
                threading.Event().wait(0.01)

        self._ticker = threading.Thread(target=tick, daemon=True)
        self._ticker.start()

    def snapshot(self):
        return self.store.snapshot()

    def close(self):
        self.closed = True


def test_every_line_is_carried_or_counted():
    """Lines emitted plus lines counted as dropped add up to every line the store took."""
    import json

    session, out = _FakeSession(), io.StringIO()
    status = headless.run(session, 60, out)
    assert status == 3
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    carried = sum(1 for r in records for line in r["log"] if "dropped" not in line)
    dropped = sum(line["dropped"] for r in records for line in r["log"] if "dropped" in line)
    assert carried + dropped == session.store.snapshot().log[-1].seq == 900
