"""Host probes: /proc parsing, thread roles and groups, real per-thread and per-core CPU readings."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from torchpar_top.contract.messages import ThreadRole
from torchpar_top.contract.snapshot import ThreadInfo
from torchpar_top.contract.vocab import Role
from torchpar_top.model.threads import group
from torchpar_top.probes.host import threads as th
from torchpar_top.probes.host.cores import CoreSampler
from torchpar_top.probes.host.threads import ThreadSampler, classify, parse_stat
from waiting import wait_for


def _independent_ticks(pid: int, tid: int) -> tuple[str, int]:
    """The test's own reading of comm and utime+stime (greedy regex: comm runs to the last ')')."""
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        m = re.fullmatch(r"\d+ \((.*)\) (.*)", f.read().strip(), re.S)
    assert m is not None
    fields = m.group(2).split()  # fields[0] is stat field 3
    return m.group(1), int(fields[14 - 3]) + int(fields[15 - 3])


def _stat_line(comm: str, utime: int, stime: int, started: int = 0) -> str:
    """A synthetic stat line with 52 fields."""
    fields = ["S", "1", "42", "42", "0", "-1", "4194560", "10", "0", "0", "0", str(utime), str(stime)]
    fields += ["0", "0", "20", "0", "1", "0", str(started)]  # fields 16-22: ..., starttime
    fields += ["0"] * (52 - 2 - len(fields))
    return f"4242 ({comm}) " + " ".join(fields) + "\n"


@pytest.mark.parametrize("comm", ["python", "a b c", "x) S 1 2 (y", ") )", "("])
def test_parse_stat_comm_with_spaces_and_parens(comm: str) -> None:
    assert parse_stat(_stat_line(comm, 123, 45, 98765)) == (comm, "S", 168, 98765)


@pytest.mark.parametrize(
    ("tid", "comm", "roles", "expected"),
    [
        (100, "python", None, Role.FRONTEND),  # tid == pid
        (101, "pt_main_thread", None, Role.FRONTEND),
        (102, "PTThreadPool", None, Role.INTEROP),
        (103, "pt_autograd_0", None, Role.AUTOGRAD),
        (104, "pt_data_pin", None, Role.DATA),
        (105, "pt_data_worker", None, Role.DATA),
        (106, "my_DataLoader_1", None, Role.DATA),
        (107, "pin_memory", None, Role.DATA),
        (108, "python", None, Role.INTRAOP),  # OpenMP worker: inherits the creator's name
        (109, "pt_tcpstore", None, Role.OTHER),
        (
            108,
            "python",
            {108: ThreadRole(108, Role.STREAM_EXECUTOR, "cpu-stream:0")},
            (Role.STREAM_EXECUTOR, "cpu-stream:0"),
        ),
        (100, "python", {100: ThreadRole(100, Role.AGENT)}, Role.AGENT),  # agent wins even over tid == pid
        (102, "PTThreadPool", {999: ThreadRole(999, Role.AGENT)}, Role.INTEROP),
    ],
)
def test_classify(tid: int, comm: str, roles: dict[int, ThreadRole] | None, expected: Role) -> None:
    assert classify(tid, comm, 100, roles) == (expected if isinstance(expected, tuple) else (expected, ""))


def test_group_sums_and_order() -> None:
    infos = [
        ThreadInfo(7, "x", Role.OTHER, 1.0),
        ThreadInfo(5, "python", Role.INTRAOP, 95.0),
        ThreadInfo(3, "python", Role.INTRAOP, 5.0),
        ThreadInfo(4, "python", Role.INTRAOP, 80.0),
        ThreadInfo(9, "python", Role.AGENT, 2.0),
        ThreadInfo(8, "python", Role.STREAM_EXECUTOR, 50.0, executor="s:1"),
        ThreadInfo(6, "python", Role.STREAM_EXECUTOR, 0.0, executor="s:0"),
        ThreadInfo(2, "PTThreadPool", Role.INTEROP, 11.0),
        ThreadInfo(1, "python", Role.FRONTEND, 100.0),
        ThreadInfo(10, "pt_data_pin", Role.DATA, 0.0),
        ThreadInfo(11, "pt_autograd_0", Role.AUTOGRAD, 0.0),
        ThreadInfo(12, "pt_data_worker", Role.DATA_WORKERS, 30.0, 12.5, pid=40),
        ThreadInfo(13, "pt_data_worker", Role.DATA_WORKERS, 20.0, 7.5, pid=41),
        ThreadInfo(14, "cc1plus", Role.SUBPROCESS, 5.0, pid=42),
    ]
    groups = group(infos)
    assert [(g.role, g.executor) for g in groups][:3] == [
        (Role.FRONTEND, ""),
        (Role.STREAM_EXECUTOR, "s:0"),
        (Role.STREAM_EXECUTOR, "s:1"),
    ]
    assert [g.role for g in groups] == [
        Role.FRONTEND,
        Role.STREAM_EXECUTOR,
        Role.STREAM_EXECUTOR,
        Role.INTRAOP,
        Role.INTEROP,
        Role.AUTOGRAD,
        Role.DATA,
        Role.DATA_WORKERS,
        Role.SUBPROCESS,
        Role.AGENT,
        Role.OTHER,
    ]
    intra = groups[3]
    assert (intra.count, intra.busy, intra.cpu_percent, intra.tids) == (3, 2, 180.0, (3, 4, 5))
    assert groups[4].busy == 1 and groups[1].busy == 0
    workers = groups[7]
    assert (workers.count, workers.busy, workers.cpu_percent, workers.wait_percent) == (2, 2, 50.0, 20.0)
    assert sum(g.count for g in groups) == len(infos)
    assert group([]) == ()


def _spin(stop: threading.Event, release: threading.Event) -> None:
    """Burn CPU until ``stop``, then idle until ``release``; renames its own comm with parentheses.

    It burns in ``hashlib`` over a 1 MiB buffer, which releases the GIL: a Python loop would sleep
    whenever another thread of the test process held the GIL (neither on a core nor waiting for one: in
    the whole suite it read 79 % on a core, 0.2 % waiting)."""
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write("busy (spin) x")
    block = bytes(1 << 20)
    while not stop.is_set():
        hashlib.sha256(block)
    release.wait()


def test_busy_and_idle_threads_read_from_proc() -> None:
    pid = os.getpid()
    stop, release = threading.Event(), threading.Event()
    busy = threading.Thread(target=_spin, args=(stop, release), name="busy-spinner", daemon=True)
    idle = threading.Thread(target=release.wait, name="idle-sleeper", daemon=True)
    newcomer = threading.Thread(target=release.wait, name="newcomer", daemon=True)
    busy.start()
    idle.start()
    try:
        time.sleep(0.05)
        sampler = ThreadSampler(pid)
        first = {t.tid: t for t in sampler.sample()}
        assert sampler.error is None
        assert busy.native_id in first and idle.native_id in first
        assert all(t.cpu_percent == 0.0 for t in first.values())
        time.sleep(0.5)
        second = {t.tid: t for t in sampler.sample()}
        b, i = second[busy.native_id], second[idle.native_id]
        # a spinning thread is on a core or waiting for one all the time: how the two split depends on
        # what else runs on this machine, their sum does not
        assert b.cpu_percent > 5 and b.cpu_percent + b.wait_percent > 80, b
        assert i.cpu_percent < 10 and i.wait_percent < 10, i
        assert b.name == "busy (spin) x"
        assert second[pid].role == Role.FRONTEND
        assert b.role == Role.INTRAOP
        roles = {busy.native_id: ThreadRole(busy.native_id, Role.STREAM_EXECUTOR, "test")}
        mine = {t.tid: t for t in sampler.sample(roles)}[busy.native_id]
        assert (mine.role, mine.executor) == (Role.STREAM_EXECUTOR, "test")

        # Stop spinning, then compare the ticks the sampler reads with an independent reading.
        stop.set()
        time.sleep(0.05)
        read = sampler.read_ticks()
        for tid in (busy.native_id, idle.native_id):
            assert read[tid] == _independent_ticks(pid, tid)
        assert read[busy.native_id][1] > 0

        # A thread that appears reads 0.0 on its first sample; one that ended is dropped.
        newcomer.start()
        seen = {t.tid: t for t in sampler.sample()}
        assert seen[newcomer.native_id].cpu_percent == 0.0
        # its start time is the kernel's (stat field 22), and not before the process's own
        with open(f"/proc/{pid}/task/{newcomer.native_id}/stat") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[22 - 3])
        assert sampler.started[newcomer.native_id] == started >= sampler.started[pid] > 0
    finally:
        release.set()
        stop.set()
    for t in (busy, idle, newcomer):
        if t.ident is not None:
            t.join(5)
    # join() returns just before the OS thread is gone from /proc: give it a moment.
    gone = wait_for(
        lambda: (
            (tids := {t.tid for t in sampler.sample()})
            and busy.native_id not in tids
            and newcomer.native_id not in tids
            and tids
        ),
        timeout=10,
    )
    assert pid in gone


@pytest.mark.parametrize(
    "comm, expected",
    [
        ("pt_data_worker", Role.DATA_WORKERS),
        ("python", Role.SUBPROCESS),
        ("cc1plus", Role.SUBPROCESS),
    ],
)
def test_classify_descendant(comm: str, expected: str) -> None:
    assert th.classify_descendant(comm) == expected


# Two processes spinning on the same core: each is runnable all the time and gets about half of it,
# so each waits on the run queue about half the time. Their parent sleeps.
_PINNED_PAIR = r"""
import os, subprocess, sys, time
core = sorted(os.sched_getaffinity(0))[0]
spin = "import os, sys; os.sched_setaffinity(0, {%d}); print('spinning', flush=True)\nwhile True: pass" % core
kids = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE) for _ in range(2)]
for k in kids:
    k.stdout.readline()
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(60)
"""


def _schedstat(pid: int, tid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        run, wait, _ = f.read().split()
    return int(run), int(wait)


def test_descendants_are_sampled_with_their_run_queue_wait() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PINNED_PAIR], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        kids = [int(p) for p in parent.stdout.readline().split()]
        assert len(kids) == 2
        sampler = ThreadSampler(parent.pid)
        sampler.sample()
        time.sleep(1.0)
        infos = sampler.sample()
        by_tid = {t.tid: t for t in infos}
        assert by_tid[parent.pid].role == Role.FRONTEND and by_tid[parent.pid].pid == parent.pid
        assert by_tid[parent.pid].cpu_percent < 20
        for kid in kids:
            info = by_tid[kid]
            assert (info.pid, info.role) == (kid, Role.SUBPROCESS)
            # Sharing one core: neither has it all, and each waited for it a good part of the second
            # (how they split it depends on what else this core runs; on a core or waiting, it always
            # wanted one).
            assert 0 < info.cpu_percent < 90, info
            assert info.wait_percent > 10 and info.cpu_percent + info.wait_percent > 80, info
        # The run-queue wait comes from schedstat's second field, read independently here.
        before = _schedstat(kids[0], kids[0])
        time.sleep(0.3)
        after = _schedstat(kids[0], kids[0])
        assert after[1] > before[1] and after[0] > before[0]
        assert ThreadSampler(parent.pid, descendants=False).sample() and all(
            t.pid == parent.pid for t in ThreadSampler(parent.pid, descendants=False).sample()
        )
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_a_descendant_that_ended_is_left_out() -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, time\n"
            "pid = os.fork()\n"
            "os._exit(0) if pid == 0 else print(pid, flush=True)\n"
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        zombie = int(parent.stdout.readline())  # forked, exited at once, never waited for
        wait_for(lambda: psutil.Process(zombie).status() == psutil.STATUS_ZOMBIE, timeout=10)
        sampler = ThreadSampler(parent.pid)
        assert zombie in sampler.children()
        assert {t.pid for t in sampler.sample()} == {parent.pid}
        assert sampler.error is None
    finally:
        parent.kill()
        parent.wait()


def test_dead_pid_gives_empty_and_message() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # exited and reaped: /proc/<pid> is gone
    pid = proc.pid
    sampler = ThreadSampler(pid)
    assert sampler.sample() == ()
    assert sampler.error == f"process {pid} has exited"


def test_zombie_counts_as_exited() -> None:
    proc = subprocess.Popen(["true"])
    try:
        for _ in range(200):  # wait until it has exited, without reaping it
            with open(f"/proc/{proc.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        sampler = ThreadSampler(proc.pid)
        assert sampler.sample() == ()
        assert sampler.error == f"process {proc.pid} has exited"
    finally:
        proc.wait()


def test_permission_error_gives_message(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(path: str) -> list[str]:
        raise PermissionError(13, "Permission denied", path)

    sampler = ThreadSampler(os.getpid())
    assert sampler.sample()
    monkeypatch.setattr(th.os, "listdir", denied)
    assert sampler.sample() == ()
    assert sampler.error is not None and "permission denied" in sampler.error
    monkeypatch.undo()
    assert sampler.sample() and sampler.error is None


def test_core_sampler_shape_and_range() -> None:
    sampler = CoreSampler()
    assert sampler.count == os.cpu_count()
    time.sleep(0.1)
    values = sampler.sample()
    assert len(values) == os.cpu_count()
    assert all(0.0 <= v <= 100.0 for v in values)


def test_core_sampler_sees_a_pinned_spinning_process() -> None:
    core = 0 if 0 in os.sched_getaffinity(0) else min(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(child.pid, {core})
        time.sleep(0.2)
        sampler = CoreSampler()
        time.sleep(1.0)
        load = sampler.sample()
        assert load[core] > 80, load
    finally:
        child.kill()
        child.wait()


def test_descendants_are_read_from_each_threads_children_file_as_psutil_walks_them() -> None:
    """A child started from a second thread (since ended): /proc's per-thread ``children`` lists find
    it, as psutil's walk of every process does; a process without children has none."""
    from torchpar_top.probes.host.threads import descendants

    script = (
        "import subprocess, sys, threading, time\n"
        "def grand():\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "t = threading.Thread(target=grand); t.start(); t.join()\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert parent.stdout.readline().strip() == "ready"
        walked = [c.pid for c in psutil.Process(parent.pid).children(recursive=True)]
        assert len(walked) == 1
        assert sorted(descendants(parent.pid)) == sorted(walked)
        assert descendants(walked[0]) == []
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
