"""StackSampler / StackPoller / process description, fed with REAL py-spy 0.4.3 output captured here.

The JSON dumps below are verbatim ``py-spy dump --json --nonblocking --pid P`` output (one frame per
line), taken from small scripts: ``time.sleep`` in a function, ``(a @ a).sum().item()`` in a loop, an
emulated stream whose queue is full, one being synchronised, a DataLoader waiting for a worker, and a
``queue.Queue.get``. The stderr texts are what py-spy printed (RUST_BACKTRACE=0) for a dead pid, a
``sleep`` process, a process of another user (as ``nobody``), root without CAP_SYS_PTRACE, and a torn
nonblocking read of a process creating threads.
"""
# ruff: noqa: E501

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from torchpar_top.contract.snapshot import StackFrame, StackView
from torchpar_top.contract.vocab import WaitKind
from torchpar_top.model.stacks import classify_wait, waits_for_peers, where
from torchpar_top.probes.host import stacks as st
from torchpar_top.probes.host.process import (
    ProcessInfo,
    check_attach,
    describe_pid,
    is_python_exe,
    maps_libpython,
)
from torchpar_top.probes.host.stacks import (
    StackPoller,
    StackSampler,
    explain_error,
    parse_dump,
)

SLEEP = r"""[
 {"pid": 29702, "thread_id": 139789512442560, "thread_name": null, "os_thread_id": 29702, "active": false, "owns_gil": false, "frames": [
  {"name": "wait_a_bit", "filename": "/tmp/cap/sleeper.py", "module": null, "short_filename": "sleeper.py", "line": 4, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "<module>", "filename": "/tmp/cap/sleeper.py", "module": null, "short_filename": "sleeper.py", "line": 6, "locals": null, "is_entry": true, "is_shim_entry": true}
 ], "process_info": null}
]"""

ITEM = r"""[
 {"pid": 20997, "thread_id": 139628184886144, "thread_name": "MainThread", "os_thread_id": 20997, "active": true, "owns_gil": false, "frames": [
  {"name": "step", "filename": "/tmp/cap/item.py", "module": null, "short_filename": "item.py", "line": 5, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "<module>", "filename": "/tmp/cap/item.py", "module": null, "short_filename": "item.py", "line": 7, "locals": null, "is_entry": true, "is_shim_entry": true}
 ], "process_info": null}
]"""

EMU_FULL = r"""[
 {"pid": 21169, "thread_id": 139918371448512, "thread_name": "tpt-cpu-stream:0", "os_thread_id": 21212, "active": true, "owns_gil": false, "frames": [
  {"name": "EmulatedStream._run", "filename": "/work/main/probes/agent/stream.py", "module": null, "short_filename": "probes/agent/stream.py", "line": 111, "locals": null, "is_entry": true, "is_shim_entry": false},
  {"name": "Thread.run", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 982, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Thread._bootstrap_inner", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 1045, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Thread._bootstrap", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 1002, "locals": null, "is_entry": true, "is_shim_entry": true}
 ], "process_info": null},
 {"pid": 21169, "thread_id": 139918943095680, "thread_name": "MainThread", "os_thread_id": 21169, "active": false, "owns_gil": false, "frames": [
  {"name": "Condition.wait", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 327, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Queue.put", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/queue.py", "module": null, "short_filename": "queue.py", "line": 140, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "EmulatedStream.launch", "filename": "/work/main/probes/agent/stream.py", "module": null, "short_filename": "probes/agent/stream.py", "line": 67, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "launch_loop", "filename": "/tmp/cap/emu_full.py", "module": null, "short_filename": "emu_full.py", "line": 8, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "<module>", "filename": "/tmp/cap/emu_full.py", "module": null, "short_filename": "emu_full.py", "line": 9, "locals": null, "is_entry": true, "is_shim_entry": true}
 ], "process_info": null}
]"""

EMU_SYNC = r"""[
 {"pid": 21324, "thread_id": 140128163194560, "thread_name": "tpt-cpu-stream:0", "os_thread_id": 21379, "active": true, "owns_gil": false, "frames": [
  {"name": "EmulatedStream._run", "filename": "/work/main/probes/agent/stream.py", "module": null, "short_filename": "probes/agent/stream.py", "line": 111, "locals": null, "is_entry": true, "is_shim_entry": false},
  {"name": "Thread.run", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 982, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Thread._bootstrap_inner", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 1045, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Thread._bootstrap", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 1002, "locals": null, "is_entry": true, "is_shim_entry": true}
 ], "process_info": null},
 {"pid": 21324, "thread_id": 140128733956992, "thread_name": "MainThread", "os_thread_id": 21324, "active": false, "owns_gil": false, "frames": [
  {"name": "Condition.wait", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 331, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "EmulatedStream.synchronize", "filename": "/work/main/probes/agent/stream.py", "module": null, "short_filename": "probes/agent/stream.py", "line": 81, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "step", "filename": "/tmp/cap/emu_sync.py", "module": null, "short_filename": "emu_sync.py", "line": 9, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "<module>", "filename": "/tmp/cap/emu_sync.py", "module": null, "short_filename": "emu_sync.py", "line": 11, "locals": null, "is_entry": true, "is_shim_entry": true}
 ], "process_info": null}
]"""

DATALOADER = r"""[
 {"pid": 21099, "thread_id": 139716892554944, "thread_name": "QueueFeederThread", "os_thread_id": 21152, "active": false, "owns_gil": false, "frames": [
  {"name": "Condition.wait", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 327, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Queue._feed", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py", "module": null, "short_filename": "multiprocessing/queues.py", "line": 231, "locals": null, "is_entry": true, "is_shim_entry": false},
  {"name": "Thread.run", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 982, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Thread._bootstrap_inner", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 1045, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Thread._bootstrap", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 1002, "locals": null, "is_entry": true, "is_shim_entry": true}
 ], "process_info": null},
 {"pid": 21099, "thread_id": 139717402012544, "thread_name": "MainThread", "os_thread_id": 21099, "active": false, "owns_gil": false, "frames": [
  {"name": "_PollLikeSelector.select", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/selectors.py", "module": null, "short_filename": "selectors.py", "line": 415, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "wait", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", "module": null, "short_filename": "multiprocessing/connection.py", "line": 947, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Connection._poll", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", "module": null, "short_filename": "multiprocessing/connection.py", "line": 440, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "_ConnectionBase.poll", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", "module": null, "short_filename": "multiprocessing/connection.py", "line": 257, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Queue.get", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py", "module": null, "short_filename": "multiprocessing/queues.py", "line": 113, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "_MultiProcessingDataLoaderIter._try_get_data", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", "module": null, "short_filename": "torch/utils/data/dataloader.py", "line": 1291, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "_MultiProcessingDataLoaderIter._get_data", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", "module": null, "short_filename": "torch/utils/data/dataloader.py", "line": 1464, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "_MultiProcessingDataLoaderIter._next_data", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", "module": null, "short_filename": "torch/utils/data/dataloader.py", "line": 1505, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "_BaseDataLoaderIter.__next__", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", "module": null, "short_filename": "torch/utils/data/dataloader.py", "line": 725, "locals": null, "is_entry": true, "is_shim_entry": false},
  {"name": "train", "filename": "/tmp/cap/dl.py", "module": null, "short_filename": "dl.py", "line": 8, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "<module>", "filename": "/tmp/cap/dl.py", "module": null, "short_filename": "dl.py", "line": 11, "locals": null, "is_entry": true, "is_shim_entry": true}
 ], "process_info": null}
]"""

QUEUE_GET = r"""[
 {"pid": 21050, "thread_id": 139666632096640, "thread_name": "MainThread", "os_thread_id": 21050, "active": false, "owns_gil": false, "frames": [
  {"name": "Condition.wait", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 327, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "Queue.get", "filename": "/root/.pyenv/versions/3.11.7/lib/python3.11/queue.py", "module": null, "short_filename": "queue.py", "line": 171, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "consume", "filename": "/tmp/cap/qget.py", "module": null, "short_filename": "qget.py", "line": 4, "locals": null, "is_entry": false, "is_shim_entry": false},
  {"name": "<module>", "filename": "/tmp/cap/qget.py", "module": null, "short_filename": "qget.py", "line": 6, "locals": null, "is_entry": true, "is_shim_entry": true}
 ], "process_info": null}
]"""


SOURCES = {  # the scripts' source lines, as linecache would read them on the machine that ran them
    ("/tmp/cap/sleeper.py", 4): "time.sleep(100)",
    ("/tmp/cap/item.py", 5): "return (a @ a).sum().item()",
    ("/tmp/cap/emu_full.py", 8): "s.launch(torch.mm, a, a)",
    ("/tmp/cap/qget.py", 4): "return q.get()",
    ("/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", 327): "waiter.acquire()",
    (
        "/root/.pyenv/versions/3.11.7/lib/python3.11/selectors.py",
        415,
    ): "fd_event_list = self._selector.poll(timeout)",
}

ERR_DEAD = "Error: Failed to get process executable name. Check that the process is running.\n\nCaused by:\n    0: No such file or directory (os error 2)\n    1: No such file or directory (os error 2)\n"
ERR_NOT_PYTHON = "Error: Failed to find python version from target process\n"
ERR_PERM_USER = (
    "Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'\n"
)
ERR_PERM_NOCAP = "Error: Failed to get process executable name. Check that the process is running.\n\nCaused by:\n    0: Permission denied (os error 13)\n    1: Permission denied (os error 13)\n"
ERR_RACE = "Error: Failed to get stack traces\n\nCaused by:\n    0: Failed to call get_stack_trace for thread 140071807108800\n    1: Failed to copy PyFrameObject\n    2: Bad address (os error 14)\n    3: Bad address (os error 14)\n"
ERR_RACE_INTERP = "Error: Failed to find a python interpreter in the .data section\n"
ERR_DOCKER = "Permission Denied\n\nIt looks like you are running in a docker container. Please make sure you started your container with the SYS_PTRACE capability. See https://github.com/benfred/py-spy#how-do-i-run-py-spy-in-docker for more details\n"


def source(filename: str, line: int) -> str:
    """A fake linecache: the captured scripts are not on the test machine."""
    return SOURCES.get((filename, line), "")


def pid_of(dump: str) -> int:
    """The pid py-spy reported in a captured dump."""
    return json.loads(dump)[0]["pid"]


class FakeRunner:
    """Stands in for ``subprocess.run``: returns (or raises) the queued results, records the calls."""

    def __init__(self, *results: tuple[int, str, str] | BaseException) -> None:
        self.results = list(results)
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        self.calls.append((cmd, kw))
        r = self.results.pop(0) if len(self.results) > 1 else self.results[0]
        if isinstance(r, BaseException):
            raise r
        return subprocess.CompletedProcess(cmd, r[0], r[1], r[2])


def sampler(runner: FakeRunner, pid: int) -> StackSampler:
    """A sampler with a fixed py-spy path, the fake runner and the fake source."""
    return StackSampler(pid, py_spy="/opt/py-spy", runner=runner, source=source)


def dead_pid() -> int:
    """A pid that just exited and was reaped."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# --- parsing real dumps --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dump, waiting_in, idle, innermost",
    [
        (SLEEP, WaitKind.SLEEP, True, "wait_a_bit"),
        (ITEM, WaitKind.ITEM, False, "step"),
        (EMU_FULL, WaitKind.EMU_FULL, True, "Condition.wait"),
        (EMU_SYNC, WaitKind.EMU_SYNC, True, "Condition.wait"),
        (DATALOADER, WaitKind.DATA, True, "_PollLikeSelector.select"),
        (QUEUE_GET, WaitKind.QUEUE, True, "Condition.wait"),
    ],
)
def test_real_dumps_give_the_main_thread_and_what_it_waits_in(dump, waiting_in, idle, innermost):
    view = parse_dump(dump, pid_of(dump), 12.5, source)
    assert isinstance(view, StackView)
    assert view.pid == pid_of(dump) and view.t == 12.5
    assert view.thread == "MainThread"  # also when py-spy gives no name (SLEEP: threading not imported)
    assert view.frames[0].function == "<module>"  # outermost first
    assert view.frames[-1].function == innermost
    assert view.idle is idle
    assert view.waiting_in == waiting_in


def test_frames_keep_name_file_and_line_in_order():
    view = parse_dump(EMU_FULL, 21169, 0.0, source)
    assert view.frames == (
        StackFrame("<module>", "/tmp/cap/emu_full.py", 9),
        StackFrame("launch_loop", "/tmp/cap/emu_full.py", 8),
        StackFrame("EmulatedStream.launch", "/work/main/probes/agent/stream.py", 67),
        StackFrame("Queue.put", "/root/.pyenv/versions/3.11.7/lib/python3.11/queue.py", 140),
        StackFrame("Condition.wait", "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", 327),
    )


def test_main_thread_found_by_name_or_position_when_tid_differs():
    threads = json.loads(EMU_FULL)
    for t in threads:
        t["os_thread_id"] = None  # older Pythons on some platforms: no native id
    assert parse_dump(json.dumps(threads), 21169, 0.0, source).waiting_in == WaitKind.EMU_FULL
    for t in threads:
        t["thread_name"] = None
    view = parse_dump(json.dumps(threads), 21169, 0.0, source)
    assert view.frames[-1].function == "Condition.wait"  # the last listed thread is the oldest: main


def test_the_dump_lists_every_python_thread_by_native_id():
    threads = json.loads(EMU_FULL)
    tids = {t["os_thread_id"] for t in threads}
    assert len(tids) >= 2 and 21169 in tids
    assert parse_dump(EMU_FULL, 21169, 0.0, source).python_tids == tuple(sorted(tids))
    for t in threads:
        t["os_thread_id"] = None  # no native ids: nothing to name
    assert parse_dump(json.dumps(threads), 21169, 0.0, source).python_tids == ()


def test_running_python_and_empty_dump():
    spin = ITEM.replace('"line": 5', '"line": 6')  # same process, a line that only does torch.mm
    assert parse_dump(spin, 20997, 0.0, lambda f, n: "torch.mm(a, a)").waiting_in == ""
    assert parse_dump("[]", 1234, 0.0, source) is None


def f(name: str, filename: str, line: int = 1) -> StackFrame:
    """A frame for the rule tests (bare names, as py-spy gives them for Python < 3.11)."""
    return StackFrame(name, filename, line)


TORCH = "/venv/lib/python3.10/site-packages/torch"
USER = f("train", "/home/u/train.py", 10)


@pytest.mark.parametrize(
    "inner, text, expected",
    [
        ([f("synchronize", f"{TORCH}/cuda/__init__.py")], "", WaitKind.SYNC),
        ([f("Event.synchronize", f"{TORCH}/cuda/streams.py")], "", WaitKind.SYNC),
        ([f("Stream.synchronize", f"{TORCH}/cuda/streams.py")], "", WaitKind.SYNC),
        ([], "loss.cpu()", WaitKind.ITEM),
        ([], "xs = out.tolist()", WaitKind.ITEM),
        (
            [f("_tensor_str", f"{TORCH}/_tensor_str.py"), f("_str", f"{TORCH}/_tensor_str.py")],
            "",
            WaitKind.ITEM,
        ),
        ([f("all_reduce", f"{TORCH}/distributed/distributed_c10d.py")], "", WaitKind.COLLECTIVE),
        ([f("barrier", f"{TORCH}/distributed/distributed_c10d.py")], "", WaitKind.COLLECTIVE),
        ([], "work.wait()", WaitKind.COLLECTIVE),
        ([f("Future.wait", f"{TORCH}/futures/__init__.py")], "return super().wait()", ""),
        ([f("synchronize", "/x/site-packages/torchpar_top/probes/agent/stream.py")], "", WaitKind.EMU_SYNC),
        ([f("launch", "/x/probes/agent/stream.py"), f("put_nowait", "/py/queue.py")], "", ""),
        ([], "time.sleep(0.1)", WaitKind.SLEEP),
        ([], "y = model(x)", ""),
    ],
)
def test_wait_rules(inner, text, expected):
    frames = (USER, *inner)
    assert classify_wait(frames, lambda fn, n: text) == expected


def test_where_names_the_wait_and_the_users_innermost_line():
    frames = (
        f("<module>", "/home/u/train.py", 110),
        f("Module._call_impl", f"{TORCH}/nn/modules/module.py", 1789),
        f("Net.forward", "/home/u/train.py", 66),
    )
    assert where(frames, WaitKind.SLEEP) == "sleep at train.py:66 (forward)"
    deep = (*frames[:2], f("all_reduce", f"{TORCH}/distributed/distributed_c10d.py", 2800))
    assert where(deep, WaitKind.COLLECTIVE) == "collective at train.py:110 (<module>)"  # the user's line
    # DDP's all-reduce waits in C++ under backward: nothing known to wait in, but the thread is idle
    backward = (*frames[:1], f("_engine_run_backward", f"{TORCH}/autograd/graph.py", 979))
    assert where(backward, WaitKind.NONE, idle=True) == "waits at train.py:110 (<module>)"
    ours = (
        f("main", "/x/site-packages/torchpar_top/probes/agent/run.py", 9),
        f("loop", "/usr/lib/python3.11/q.py"),
    )
    assert where(ours, WaitKind.NONE) == "running at q.py:1 (loop)"  # nobody's own: the innermost
    assert where((), WaitKind.NONE) == ""
    # a hung job's ranks that wait for their peers: in a collective, or idle in such a wait
    peers = [where(deep, WaitKind.COLLECTIVE), where(backward, WaitKind.NONE, idle=True)]
    own = [where(frames, WaitKind.SLEEP), where(ours, WaitKind.NONE), where(frames, WaitKind.SYNC)]
    assert [waits_for_peers(a) for a in peers + own] == [True, True, False, False, False]


def test_dataloader_wins_over_sleep_in_the_users_dataset():
    frames = (USER, f("__next__", f"{TORCH}/utils/data/dataloader.py"), f("__getitem__", "/home/u/ds.py"))
    assert classify_wait(frames, lambda fn, n: "time.sleep(0.5)") == WaitKind.DATA


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stderr, alive, python, expected",
    [
        (ERR_DEAD, False, True, "process 42 has exited"),
        (ERR_NOT_PYTHON, True, False, "process 42 is not running Python (py-spy found no interpreter)"),
        (ERR_DEAD, True, False, "process 42 is not running Python (py-spy found no interpreter)"),
        (ERR_PERM_USER, True, True, st.MSG_PTRACE),
        (ERR_PERM_NOCAP, True, True, st.MSG_PTRACE),
        (ERR_DOCKER, True, True, st.MSG_PTRACE),
        (ERR_RACE, True, True, st.MSG_RACE),
        (ERR_RACE_INTERP, True, True, st.MSG_RACE),  # a Python process: py-spy missed it this time
        ("Error: something new\nCaused by: x\n", True, True, "py-spy failed: Error: something new"),
    ],
)
def test_real_stderr_texts_become_one_clear_line(stderr, alive, python, expected):
    assert explain_error(stderr, 42, alive=alive, python=python) == expected


def test_ptrace_message_says_why_and_how():
    for word in ("ptrace", "ptrace_scope", "sudo", "CAP_SYS_PTRACE", "--cap-add SYS_PTRACE"):
        assert word in st.MSG_PTRACE


def test_sample_runs_nonblocking_json_dump_with_a_timeout():
    runner = FakeRunner((0, SLEEP, ""))
    view, status = sampler(runner, 29702).sample()
    assert status == "" and view is not None and view.waiting_in == WaitKind.SLEEP
    ((cmd, kw),) = runner.calls
    assert cmd == ["/opt/py-spy", "dump", "--json", "--nonblocking", "--pid", "29702"]
    assert 0 < kw["timeout"] <= 5 and kw["capture_output"] is True
    assert kw["env"]["RUST_BACKTRACE"] == "0"


def test_sample_errors_never_raise():
    me = os.getpid()  # alive, and a Python process
    assert sampler(FakeRunner((1, "", ERR_PERM_USER)), me).sample() == (None, st.MSG_PTRACE)
    assert sampler(FakeRunner((1, "", ERR_DEAD)), dead_pid()).sample()[1].endswith("has exited")
    assert sampler(FakeRunner(subprocess.TimeoutExpired("py-spy", 2)), me).sample() == (None, st.MSG_TIMEOUT)
    assert sampler(FakeRunner(FileNotFoundError(2, "nope")), me).sample() == (None, st.MSG_NO_PYSPY)
    assert (
        sampler(FakeRunner(PermissionError(13, "Permission denied")), me).sample()[1].startswith("cannot run")
    )
    assert (
        sampler(FakeRunner((0, "Error", "")), me)
        .sample()[1]
        .startswith("py-spy printed something unexpected")
    )
    assert sampler(FakeRunner((0, "[]", "")), me).sample() == (None, f"process {me} has no Python thread")


def test_not_python_process(tmp_path):
    p = subprocess.Popen(["sleep", "30"])
    try:
        assert sampler(FakeRunner((1, "", ERR_NOT_PYTHON)), p.pid).sample() == (
            None, f"process {p.pid} is not running Python (py-spy found no interpreter)")  # fmt: skip
    finally:
        p.kill()
        p.wait()


def test_a_torn_read_is_retried_once():
    runner = FakeRunner((1, "", ERR_RACE), (0, ITEM, ""))
    view, status = sampler(runner, os.getpid()).sample()
    assert status == "" and view is not None and len(runner.calls) == 2
    runner = FakeRunner((1, "", ERR_RACE))
    assert sampler(runner, os.getpid()).sample() == (None, st.MSG_RACE) and len(runner.calls) == 2


def test_py_spy_missing(monkeypatch):
    monkeypatch.setattr(st, "find_py_spy", lambda: None)
    runner = FakeRunner((0, SLEEP, ""))
    assert StackSampler(1234, runner=runner).sample() == (None, st.MSG_NO_PYSPY)
    assert runner.calls == []


def test_find_py_spy_prefers_the_one_next_to_python(tmp_path, monkeypatch):
    exe = tmp_path / "py-spy"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert st.find_py_spy() == str(exe)
    exe.unlink()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert st.find_py_spy() is None


# --- poller ---------------------------------------------------------------------------------------


class ListSampler:
    """Returns queued results, then repeats the last; counts calls."""

    def __init__(self, *results):
        self.results, self.calls = list(results), 0

    def sample(self):
        self.calls += 1
        r = self.results.pop(0) if len(self.results) > 1 else self.results[0]
        if isinstance(r, BaseException):
            raise r
        return r


def wait_for(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.005)


def test_poller_keeps_the_latest_and_stops():
    view = parse_dump(ITEM, 20997, 1.0, source)
    s = ListSampler((None, "starting"), (view, ""))
    poller = StackPoller(s, interval=0.01)
    assert poller.latest[0] is None
    poller.start()
    wait_for(lambda: poller.latest == (view, ""))
    poller.stop()
    assert not poller._thread.is_alive() and poller._thread.daemon
    calls = s.calls
    time.sleep(0.05)
    assert s.calls == calls


def test_poller_survives_exceptions_and_keeps_a_stack_through_torn_reads():
    view = parse_dump(ITEM, 20997, 1.0, source)
    s = ListSampler(RuntimeError("boom"), (view, ""), (None, st.MSG_RACE))
    poller = StackPoller(s, interval=0.01)
    poller.start()
    wait_for(lambda: s.calls >= 4)
    poller.stop()
    assert poller.latest == (view, st.MSG_RACE)


def test_poller_does_not_keep_the_process_alive():
    code = (
        "import time\n"
        "from torchpar_top.probes.host.stacks import StackPoller\n"
        "class Slow:\n"
        "    def sample(self):\n"
        "        time.sleep(60)\n"
        "StackPoller(Slow(), 0.1).start()\n"
        "time.sleep(0.2)\n"
    )
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    assert time.monotonic() - t0 < 20


# --- process description --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exe, expected",
    [
        ("/usr/bin/python3.11", True), ("/venv/bin/python", True), ("/usr/bin/python3", True),
        ("/usr/bin/python3.12d", True), ("/usr/bin/python3.11 (deleted)", True),
        ("/usr/bin/sleep", False), ("/usr/bin/pythonista-helper", False), ("/opt/ipython", False),
    ],
)  # fmt: skip
def test_python_exe_names(exe, expected):
    assert is_python_exe(exe) is expected


def test_libpython_in_maps():
    line = "7f0c2a000000-7f0c2a1b0000 r-xp 00000000 08:01 123 /opt/py/lib/libpython3.11.so.1.0\n"
    assert maps_libpython(line)
    assert not maps_libpython(line.replace("libpython3.11", "libtorch_python"))


def test_describe_self_and_errors():
    me = describe_pid(os.getpid())
    assert isinstance(me, ProcessInfo) and me.is_python and me.pid == os.getpid()
    assert me.cmdline and os.path.basename(me.exe).startswith("python")
    gone = dead_pid()
    assert describe_pid(gone) == f"no process with pid {gone}"
    assert check_attach(gone) == f"no process with pid {gone}"
    assert check_attach(0) == "no process with pid 0"
    assert check_attach(os.getpid()) is None


def test_describe_a_non_python_process_and_require_python():
    p = subprocess.Popen(["sleep", "30"])
    try:
        # Mid-exec the kernel has the new name before the new argv (``/proc/PID/cmdline`` reads empty
        # for a moment; seen on a loaded CI machine): wait for both.
        wait_for(
            lambda: (
                isinstance(info := describe_pid(p.pid), ProcessInfo)
                and info.name == "sleep"
                and bool(info.cmdline)
            )
        )
        info = describe_pid(p.pid)
        assert not info.is_python and info.cmdline == ("sleep", "30")
        assert check_attach(p.pid) is None
        assert check_attach(p.pid, require_python=True) == f"process {p.pid} (sleep) is not running Python"
    finally:
        p.kill()
        p.wait()


def test_permission_denied_reading_proc(monkeypatch):
    import torchpar_top.probes.host.process as pr

    def deny(path: str) -> str:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(pr.os, "readlink", deny)
    assert check_attach(os.getpid()) == f"cannot read process {os.getpid()}: permission denied"


def test_a_dump_of_a_process_under_run_starts_at_the_users_code():
    """py-spy (attach) of a process that `torchpar-top run` started: the agent's frames are left out too."""
    from torchpar_top.probes.agent import usercode_exec

    agent = usercode_exec.AGENT_DIR
    frames = [  # py-spy lists the innermost frame first
        {"name": "nap", "filename": "/home/u/train.py", "line": 4},
        {"name": "<module>", "filename": "/home/u/train.py", "line": 9},
        {"name": "run_script", "filename": agent + "usercode_exec.py", "line": 58},
        {"name": "main", "filename": agent + "run.py", "line": 179},
        {"name": "<module>", "filename": agent + "run.py", "line": 253},
        {"name": "_run_code", "filename": "<frozen runpy>", "line": 88},
    ]
    dump = json.dumps([{"thread_id": 1, "os_thread_id": 7, "thread_name": "MainThread", "frames": frames}])
    view = parse_dump(dump, 7, 0.0, source)
    assert [(f.function, f.filename) for f in view.frames] == [
        ("<module>", "/home/u/train.py"),
        ("nap", "/home/u/train.py"),
    ]
