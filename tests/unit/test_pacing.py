"""Reading in the frame: the reader threads leave the reading to the pulls while they come, and read
again by themselves when they stop."""

import sys
import threading
import time

from torchpar_top.model.store import SessionStore
from torchpar_top.sources.live.child import ChildProcess
from torchpar_top.sources.live.pacing import PullPace
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

    # the child prints a line, and another 3 s later
    child = ChildProcess(
        lambda fd: [
            sys.executable,
            "-c",
            "import sys, time\nprint('hello', flush=True)\ntime.sleep(3)\nprint('late', flush=True)",
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
