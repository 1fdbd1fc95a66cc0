"""The sampler's /proc files read through kept descriptors (probes/agent/cputime.ProcFile): the same
readings as opening the file each time, out of the workload's way, and nothing left open or misread
when threads end, the workload closes descriptors, or the process forks."""

from __future__ import annotations

import os
import threading

import pytest
from torchpar_top.probes.agent import cputime, usercode_steps
from torchpar_top.probes.agent.cputime import ProcFile, Schedstats, ThreadClock
from torchpar_top.probes.agent.usercode_steps import rss_bytes
from waiting import wait_for

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="no /proc")


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def read_schedstat(tid: int) -> tuple[int, int] | None:
    """The file opened and read for this one reading (what the kept descriptor must agree with)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
            run, wait = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(run), int(wait)


def _statm_pages() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1])


def test_a_kept_file_reads_what_opening_it_reads_and_sits_far_from_the_low_numbers():
    f = ProcFile("/proc/self/statm")
    try:
        first = f.read()
        assert first is not None and len(first.split()) == 7
        assert int(first.split()[1]) == pytest.approx(_statm_pages(), rel=0.05)
        assert f._fd >= cputime._high_floor() and f._identity is None
        # read afresh each time, not the content of the first read
        block = bytearray(64 << 20)
        block[:: os.sysconf("SC_PAGE_SIZE")] = b"x" * len(block[:: os.sysconf("SC_PAGE_SIZE")])
        second = f.read()
        assert second is not None and int(second.split()[1]) > int(first.split()[1]) + 10_000
        del block
    finally:
        f.close()
    assert f._fd == -1


def test_schedstats_reads_a_live_thread_and_closes_an_ended_one():
    reader = Schedstats()
    tid = threading.get_native_id()
    mine = reader(tid)
    if mine is None:
        pytest.skip("this kernel keeps no schedstat")
    assert mine[0] > 0 and read_schedstat(tid)[0] >= mine[0]

    box: dict[str, int] = {}
    started, finish = threading.Event(), threading.Event()

    def worker() -> None:
        box["tid"] = threading.get_native_id()
        started.set()
        finish.wait(5)

    th = threading.Thread(target=worker)
    th.start()
    started.wait(5)
    assert reader(box["tid"]) is not None
    fd = reader._files[box["tid"]]._fd
    assert fd in _open_fds()  # its file, kept
    finish.set()
    th.join()  # the kernel may still hold the ended thread for a moment
    assert wait_for(lambda: not os.path.exists(f"/proc/self/task/{box['tid']}"), timeout=10)
    assert reader(box["tid"]) is None  # ended: nothing to read ...
    assert fd not in _open_fds() and box["tid"] not in reader._files  # ... and its descriptor closed
    reader.close()


def test_a_workload_that_closes_every_descriptor_costs_no_reading():
    reader = Schedstats()
    tid = threading.get_native_id()
    if reader(tid) is None:
        pytest.skip("this kernel keeps no schedstat")
    assert rss_bytes() is not None
    kept = {f._fd for f in reader._files.values()} | {usercode_steps._statm._fd}
    for fd in kept:
        os.close(fd)  # as os.closerange(3, ...) would
    assert reader(tid) is not None  # opened again at once
    assert rss_bytes() is not None
    reader.close()


def test_a_descriptor_left_low_is_checked_before_each_read(monkeypatch):
    monkeypatch.setattr(cputime, "_high_floor", lambda: 0)  # no higher number allowed
    f = ProcFile("/proc/self/statm")
    assert f.read() is not None and f._identity is not None
    low = f._fd
    os.close(low)  # the workload closes ours ...
    r, w = os.pipe()  # ... and its next descriptor takes the number
    try:
        other = r if r == low else w if w == low else None
        if other is None:
            pytest.skip("the number went elsewhere")
        data = f.read()  # not the pipe's: statm, from a descriptor of its own
        assert data is not None and len(data.split()) == 7 and f._fd != low
    finally:
        os.close(r)
        os.close(w)
        f.close()


def test_without_the_c_library_the_reading_is_the_same(monkeypatch):
    monkeypatch.setattr(cputime, "_PREAD", None)
    f = ProcFile("/proc/self/statm")
    data = f.read()
    f.close()
    assert data is not None and int(data.split()[1]) == pytest.approx(_statm_pages(), rel=0.05)


def test_a_forked_child_reads_its_own_memory_not_its_parents():
    assert rss_bytes() is not None  # the parent's descriptor is open before the fork
    parent = rss_bytes()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: grow well past the parent, then say what rss_bytes reads
        try:
            os.close(r)
            block = bytearray(256 << 20)
            block[:: os.sysconf("SC_PAGE_SIZE")] = b"x" * len(block[:: os.sysconf("SC_PAGE_SIZE")])
            kept = rss_bytes()
            own = _statm_pages() * os.sysconf("SC_PAGE_SIZE")
            os.write(w, f"{kept} {own}".encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        kept, own = (int(x) for x in (f.read() or "0 0").split())
    os.waitpid(pid, 0)
    # the child's own reading, 256 MB above what the parent reads now (not the parent's statm)
    assert kept == pytest.approx(own, rel=0.05)
    assert kept > rss_bytes() + (128 << 20) and kept > parent + (128 << 20)


def test_the_thread_clock_reads_through_kept_descriptors_by_default():
    clock = ThreadClock()
    tid = threading.get_native_id()
    if clock.take(tid) is None and read_schedstat(tid) is None:
        pytest.skip("this kernel keeps no schedstat")
    x = 0
    for i in range(200_000):
        x += i
    run, wait = clock.take(tid)
    assert run > 0 and wait >= 0


def test_a_reader_dropped_closes_its_descriptor():
    # agents made and dropped (tests make hundreds) must not use up the few numbers near the limit
    f = ProcFile("/proc/self/statm")
    assert f.read() is not None
    fd = f._fd
    assert fd in _open_fds()
    del f  # the last reference: CPython frees it here (no cycle holds a reader)
    assert fd not in _open_fds()
