"""Reading in the frame: the reader threads leave the reading to the pulls while they come, and read
again by themselves when they stop."""

import sys
import threading
import time

from torchpar_top.model.store import SessionStore
from torchpar_top.sources.live.child import ChildProcess
from torchpar_top.sources.live.pacing import PullPace
from torchpar_top.sources.live.session import Session
from waiting import wait_for


def test_pull_pace_sleeps_the_thread_only_while_pulls_keep_coming():
    now = [100.0]
    pace = PullPace(grace=0.5, clock=lambda: now[0])
    assert pace.idle_for() == 0.0  # never pulled: read now
    pace.pulled()
    assert pace.idle_for() == 0.5
    now[0] += 0.3
    assert abs(pace.idle_for() - 0.2) < 1e-9
    now[0] += 0.3
    assert pace.idle_for() == 0.0  # no pull for longer than the grace: the thread reads itself


def test_a_child_s_output_is_read_by_the_pulls_once_they_come():
    texts = []
    exits = []

    def output(source, text, partial=False):
        texts.append((text, threading.current_thread().name))

    # the child prints a line, another 3 s later, and ends 2 s after that (its end is the thread's to see,
    # and the thread drains what is left when it does: not before the pulls had time to read "late")
    child = ChildProcess(
        lambda fd: [
            sys.executable,
            "-c",
            "import time\nprint('hello', flush=True)\ntime.sleep(3)\n"
            "print('late', flush=True)\ntime.sleep(2)",
        ],
        on_message=SessionStore("custom").on_message,
        on_output=output,
        on_exit=exits.append,
    )
    child.pace = PullPace(grace=10.0)
    child.start()
    try:
        wait_for(lambda: texts, timeout=30)
        assert texts[0] == ("hello", "tpt-child-reader")  # nobody pulls: the thread reads
        child.pull()
        time.sleep(0.3)  # the thread's wait that began before the pull ends (0.2 s); then it sleeps
        child.pull()

        def pull_then_look():
            child.pull()
            return len(texts) > 1

        wait_for(pull_then_look, timeout=30)
        assert texts[1] == ("late", threading.current_thread().name)  # read by a pull
        wait_for(lambda: exits, timeout=30)  # the thread still sees the child end
    finally:
        child.stop()
    child.pull()  # after the end: nothing happens


def test_host_readings_ride_the_pulls_and_the_thread_takes_over_when_they_stop():
    s = Session("async", interval=0.05)  # never started: no child, only the host probes' loop
    s._host_pace = PullPace(grace=1.0)
    readers: list[str] = []
    tick = s._host_tick

    def counted(gpus, early=0.0):
        before = s.host_samples
        tick(gpus, early)
        if s.host_samples > before:
            readers.append(threading.current_thread().name)

    s._host_tick = counted
    loop = threading.Thread(target=s._host_loop, name="tpt-host-probes")
    loop.start()
    try:
        wait_for(lambda: readers, timeout=10)
        assert readers[0] == "tpt-host-probes"  # nobody pulls: the thread reads every interval
        s.pull()
        time.sleep(0.1)  # the thread's wait that began before the pull ends (one interval)
        del readers[:]
        for _ in range(10):
            s.pull()
            time.sleep(0.05)
        assert set(readers) == {threading.current_thread().name}  # the pulls read; the thread sleeps
        assert 5 <= len(readers) <= 11  # one reading per interval, not one per pull
        del readers[:]
        wait_for(lambda: readers, timeout=10)  # no pull for longer than the grace: the thread again
        assert readers[0] == "tpt-host-probes"
    finally:
        s._stop.set()
        loop.join(timeout=5)


class _Probe:
    """A GPU probe that counts its samples; ``readable``: whether it has a GPU to read (NvmlProbe's)."""

    def __init__(self, readable):
        self.readable = readable
        self.pid = None
        self.samples = 0

    def sample(self):
        self.samples += 1
        return (), "" if self.readable else "no GPU: NVML library not found"

    def close(self):
        pass


def _pulled_for(s, seconds, interval):
    """Pull like the screen's frames for ``seconds``, with the host loop running."""
    loop = threading.Thread(target=s._host_loop, name="tpt-host-probes")
    loop.start()
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            s.pull()
            time.sleep(interval)
    finally:
        s._stop.set()
        loop.join(timeout=5)


def test_a_probe_without_a_gpu_gives_its_status_once_and_is_not_polled():
    probe = _Probe(readable=False)
    s = Session("async", interval=0.05, gpu_probe=probe)
    _pulled_for(s, 1.0, 0.05)
    assert probe.samples == 1
    assert s.store.snapshot().gpu_status == "no GPU: NVML library not found"  # the screen says why


def test_a_probe_with_a_gpu_is_read_every_interval_by_the_host_thread():
    probe = _Probe(readable=True)
    s = Session("async", interval=0.05, gpu_probe=probe)
    _pulled_for(s, 1.0, 0.05)
    assert probe.samples >= 5  # ~20 in a second, however busy the machine
