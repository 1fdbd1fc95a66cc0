"""The agent's executors and control, in this process (no child): counters are exact."""

import os
import socket
import sys
import threading
import time

import pytest
from pytest import approx
from torchpar_top.contract import messages as m
from torchpar_top.contract.codec import LineReader
from torchpar_top.contract.vocab import SyncScope
from torchpar_top.probes.agent import agent as agent_module
from torchpar_top.probes.agent.activity import ActivityRecorder
from torchpar_top.probes.agent.agent import Agent
from torchpar_top.probes.agent.cputime import Schedstats, ThreadClock
from torchpar_top.probes.agent.stream import EmulatedStream
from waiting import samplers_stopped


@pytest.fixture
def gated_stream():
    gate = threading.Event()
    stream = EmulatedStream("s0", capacity=4)
    yield stream, gate
    gate.set()
    stream.close()


def test_known_backlog_reads_exactly(gated_stream):
    stream, gate = gated_stream
    for _ in range(4):
        stream.launch(gate.wait)
    deadline = time.monotonic() + 5
    while stream.started < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    # one item running (started), three waiting in the queue
    assert (stream.launched, stream.started, stream.completed) == (4, 1, 0)
    assert stream.value() == 3  # depth Q = L - S
    gate.set()
    stream.synchronize()
    assert stream.completed == stream.launched == 4
    assert stream.value() == 0


def test_launch_blocks_at_capacity_and_the_wait_is_recorded(gated_stream):
    stream, gate = gated_stream
    waits = ActivityRecorder()
    stream._wait = waits
    stream.launch(gate.wait)
    while stream.started < 1:
        time.sleep(0.001)
    for _ in range(4):  # 1 running + 4 queued: the queue is full
        stream.launch(gate.wait)
    blocked = threading.Thread(target=stream.launch, args=(gate.wait,))
    blocked.start()
    time.sleep(0.2)
    assert blocked.is_alive() and stream.launched == 5  # the sixth launch has not returned
    gate.set()
    blocked.join(5)
    assert stream.launched == 6
    now = time.perf_counter()
    ((start, end),) = waits.intervals(now - 10, now)
    assert end - start >= 0.15
    now = time.perf_counter()
    assert stream.blocked.intervals(now - 10, now)


def test_a_failing_op_does_not_kill_the_stream():
    stream = EmulatedStream("s1")
    try:
        stream.launch(lambda: 1 / 0)
        stream.launch(lambda: None)
        stream.synchronize()
        assert stream.completed == 2 and "ZeroDivisionError" in stream.last_error
    finally:
        stream.close()


def _agent(sock=None, interval=0.05, **kw):
    agent = Agent(sock, experiment="test", description="t", interval=interval, **kw)
    agent.hard_exit = lambda: None
    return agent


def test_sync_mode_waits_after_every_launch():
    agent = _agent(sync=True)
    stream = agent.emulated_stream("s")
    try:
        for _ in range(20):
            agent.launch(stream, time.sleep, 0.001)
            assert stream.completed == stream.launched
    finally:
        agent.close()


def test_async_mode_runs_ahead():
    agent = _agent()
    stream = agent.emulated_stream("s")
    try:
        for _ in range(20):
            agent.launch(stream, time.sleep, 0.01)
        assert stream.launched - stream.completed >= 10
    finally:
        agent.close()


def test_sample_message_is_valid_and_measures_busy_time():
    agent = _agent()
    stream = agent.emulated_stream("s")
    agent.throughput_from(lambda: stream.completed)
    try:
        t0 = time.perf_counter()
        for _ in range(10):
            agent.launch(stream, time.sleep, 0.01)
        stream.synchronize()
        t1 = time.perf_counter()
        decoded = m.decode(agent.sample(t0, t1).to_json())
        row = decoded.executors[0]
        assert row.completed == 10 and row.value == 0 and row.blocked == 0.0
        assert 0.7 < row.busy <= 1.0  # 100 ms of sleeps in a window of a little more
        assert decoded.throughput == pytest.approx(10 / (t1 - t0))
        assert decoded.roles[0].tid == threading.get_native_id()
    finally:
        agent.close()


def test_a_samples_thread_roles_are_rebuilt_when_a_count_changes_or_a_second_passed(monkeypatch):
    """Roles are built again only when the threads' counts change (a thread started or ended) or after
    ROLES_EVERY: a thread that took another's place is named within that second. A sample carries them
    only where they differ from what the agent said last (hello, or an earlier sample)."""
    from torchpar_top.probes.agent import agent as agent_module

    agent = _agent()
    built = []
    real = agent.roles
    monkeypatch.setattr(agent, "roles", lambda: built.append(1) or real())
    gate = threading.Event()
    worker = threading.Thread(target=gate.wait, name="user-worker")
    try:
        t = time.perf_counter()
        first = agent.sample(t - 0.1, t).roles
        assert first and first[0].tid == threading.get_native_id()
        again = agent.sample(t, t + 0.1).roles
        assert len(built) == 1 and again == ()  # not built, not said again
        worker.start()
        third = agent.sample(t + 0.1, t + 0.2).roles
        assert len(built) == 2 and worker.native_id in {r.tid for r in third}
        assert {r.tid for r in first} < {r.tid for r in third}  # said whole, not as a difference
        later = t + 0.2 + agent_module.ROLES_EVERY
        assert agent.sample(later - 0.1, later).roles == ()  # built again (a second old): the same
        assert len(built) == 3
        gate.set()
        worker.join()
        gone = later + 0.1
        assert worker.native_id not in {r.tid for r in agent.sample(later, gone).roles}  # changed: said
        assert len(built) == 4
    finally:
        gate.set()
        agent.close()


def test_the_roles_said_in_hello_are_not_said_again_by_the_first_sample():
    parent, child = socket.socketpair()
    agent = _agent(child)
    reader = parent.makefile("rb")
    try:
        agent.start()
        hello = m.decode(reader.readline())
        assert isinstance(hello, m.Hello) and hello.roles
        t = time.perf_counter()
        sample = agent.sample(t - 0.1, t)
        # the sampler thread started after hello: its role is new, and the roles are said whole
        assert {r.tid for r in hello.roles} <= {r.tid for r in sample.roles}
        assert agent.sample(t, t + 0.1).roles == ()
    finally:
        agent.close()
        reader.close()
        parent.close()
        samplers_stopped()


def test_commands_over_the_socket_change_mode_and_threads():
    parent, child = socket.socketpair()
    agent = _agent(child)
    agent.start()
    try:
        parent.sendall(m.SetSync(value=True, scope=SyncScope.STEP).to_json())
        parent.sendall(m.SetThreads(value=1).to_json())
        parent.sendall(b'{"v":%d,"type":"set_threads","value":"many"}\n' % m.VERSION)
        reader, acks = LineReader(), []
        parent.settimeout(5)
        while len(acks) < 3:
            for line in reader.feed(parent.recv(65536)):
                msg = m.decode(line)
                if isinstance(msg, m.Ack):
                    acks.append(msg)
        assert agent.sync.enabled and agent.sync.scope == SyncScope.STEP and agent.num_threads == 1
        assert [a.ok for a in acks] == [True, True, False]
        assert "bad command" in acks[2].detail
    finally:
        parent.close()
        agent.close()


def test_a_profiler_window_without_cuda_says_there_is_no_queue_to_analyse():
    parent, child = socket.socketpair()
    agent = _agent(child)
    stream = agent.emulated_stream("s")
    agent.start()
    try:
        for _ in range(50):
            agent.launch(stream, time.sleep, 0.001)  # work running while the profiler records
        parent.sendall(m.Profile(seconds=0.2).to_json())
        reader, logs = LineReader(), []
        parent.settimeout(30)
        while not any("profiler window" in text for text in logs):
            for line in reader.feed(parent.recv(65536)):
                msg = m.decode(line)
                if isinstance(msg, m.Log):
                    logs.append(msg.text)
        assert any("no launch queue to analyse (no CUDA stream is watched)" in text for text in logs)
    finally:
        parent.close()
        agent.close()


def test_a_sample_that_cannot_be_made_is_said_once_and_sampling_goes_on():
    """A sample part that raises (a bug, a NaN JSON cannot carry) costs that sample: the log says so
    once and the samples after it still come."""
    parent, child = socket.socketpair()
    agent = _agent(child)
    calls = []

    def flaky(t0, t1):
        calls.append(t1)
        if len(calls) <= 3:
            return {"op_coverage": float("nan")} if len(calls) == 1 else {"no_such_field": 1}
        return {}

    agent.sample_parts.append(flaky)
    agent.start()
    try:
        reader, logs, samples = LineReader(), [], 0
        parent.settimeout(30)
        while samples < 3:
            for line in reader.feed(parent.recv(65536)):
                msg = m.decode(line)
                if isinstance(msg, m.Log):
                    logs.append(msg.text)
                samples += isinstance(msg, m.Sample)
        assert len(calls) >= 6
        assert [t for t in logs if "could not be made" in t] == [
            "agent: a sample could not be made (ValueError: NaN or infinity is not JSON); the next ones are"
            " tried (this is said once)"
        ]
    finally:
        parent.close()
        agent.close()


def test_the_agent_stops_when_torchpar_top_goes_away():
    parent, child = socket.socketpair()
    stopped = threading.Event()
    agent = _agent(child)
    agent.hard_exit = stopped.set
    agent.start()
    parent.close()
    deadline = time.monotonic() + 5
    while agent.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not agent.running
    agent.close()


def test_a_sample_taken_during_a_wait_counts_it_up_to_now():
    agent = _agent()
    stream = agent.emulated_stream("s")
    gate = threading.Event()
    try:
        stream.launch(gate.wait)
        t0 = time.perf_counter()
        waiter = threading.Thread(target=stream.synchronize)  # stands in for the frontend
        stream._wait = agent.frontend_wait
        waiter.start()
        time.sleep(0.3)
        msg = agent.sample(t0, time.perf_counter())
        assert msg.frontend.wait > 0.8  # the synchronize still running is counted
    finally:
        gate.set()
        agent.close()


def test_a_socket_left_at_a_low_number_is_checked_before_each_send(monkeypatch):
    """Where the protocol socket could not move high, the workload's next socket may get its number:
    each send checks what the number holds, and nothing goes into the workload's socket."""
    import os

    from torchpar_top.probes.agent import agent as agent_module

    monkeypatch.setattr(agent_module, "_socket_floor", lambda: 1 << 30)  # past any limit: it stays
    parent, child = socket.socketpair()
    theirs, their_peer = socket.socketpair()
    agent = _agent(child)
    try:
        fd = agent._sock.fileno()
        assert fd == child.fileno() and agent._check_each_send
        os.dup2(theirs.fileno(), fd)  # the workload's socket now has our number
        with pytest.raises(OSError):
            agent.send(m.Log(text="must not land in the workload's socket"))
        their_peer.setblocking(False)
        with pytest.raises(BlockingIOError):
            their_peer.recv(100)
        assert agent.channel_lost
    finally:
        for s in (parent, theirs, their_peer):
            s.close()
        agent.close()
        os.close(fd)  # the copy of the workload's socket: the agent left that number alone


def _eof_within(sock, timeout=10):
    """Whether ``sock`` reaches end of file within ``timeout`` (messages before it are skipped)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
    return False


def test_the_channel_moves_out_of_reach_of_closerange_and_frees_its_number():
    import os
    import resource

    parent, child = socket.socketpair()
    low = child.fileno()
    agent = _agent(child)
    try:
        fd = agent._sock.fileno()
        if resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 1100:
            assert fd >= 1024  # os.closerange(3, 1024) does not reach it
        assert fd > low
        with pytest.raises(OSError):
            os.fstat(low)  # the number the workload was started with is free again, as under python
    finally:
        parent.close()
        agent.close()


@pytest.mark.parametrize("reuse", [False, True])
def test_a_workload_that_closes_the_channel_runs_on_and_is_never_written_into(tmp_path, reuse):
    """The workload closes our descriptor (and maybe opens a file that gets its number): the agent does
    not take it for torchpar-top going away (no stop), writes nothing into the file, and lets the socket
    close so that torchpar-top sees monitoring is lost."""
    import os

    parent, child = socket.socketpair()
    stopped = threading.Event()
    agent = _agent(child)
    agent.hard_exit = stopped.set
    agent.start()
    try:
        fd = agent._sock.fileno()
        os.close(fd)  # what os.closerange does to it
        if reuse:
            f = open(tmp_path / "mine.txt", "wb")  # noqa: SIM115 open across the checks below, closed after them
            os.dup2(f.fileno(), fd)  # the workload's file now has our old number
        assert _eof_within(parent)
        for _ in range(5):
            with pytest.raises(OSError):
                agent.send(m.Log(text="must not land in the workload's file"))
            time.sleep(agent.interval)
        assert agent.running and not stopped.is_set() and agent.channel_lost
        if reuse:
            f.close()
            os.close(fd)
            assert (tmp_path / "mine.txt").read_bytes() == b""
    finally:
        parent.close()
        agent.close()


class FakeSchedstat:
    """Cumulative ``(run_ns, wait_ns)`` per tid that grow by a set step at every reading."""

    def __init__(self, steps):
        self.steps, self.now = steps, {}

    def __call__(self, tid):
        if tid not in self.steps:
            return None
        run, wait = self.now.get(tid, (10**9, 10**9))
        step = self.steps[tid]
        self.now[tid] = (run + step[0], wait + step[1])
        return self.now[tid]


def test_thread_clock_gives_run_and_wait_since_the_previous_reading():
    clock = ThreadClock(FakeSchedstat({5: (30_000_000, 70_000_000)}))
    assert clock.take(5) is None  # no span yet
    assert clock.take(5) == approx((0.03, 0.07))
    assert clock.take(6) is None  # not readable (no schedstat, or the thread ended)


def test_real_schedstat_of_this_thread_counts_its_run_time():
    read_schedstat = Schedstats()  # the sampler's reader
    before = read_schedstat(threading.get_native_id())
    if before is None:
        pytest.skip("this kernel keeps no schedstat")
    # spin for 50 ms of this thread's own CPU time (not wall time: on a busy machine the thread may get
    # a small share of a core), then the kernel's run time must have counted about as much
    cpu0 = time.thread_time()
    while time.thread_time() - cpu0 < 0.05:
        pass
    spun = time.thread_time() - cpu0
    after = read_schedstat(threading.get_native_id())
    assert after[0] - before[0] >= 0.8 * spun * 1e9


def test_a_sample_splits_busy_into_running_and_waiting_for_a_core():
    """Recorded numbers: a stream with an item in progress all window whose thread ran half of it and
    waited 40 % for a core; a frontend that ran 2 % (a sleeping script: not busy)."""
    agent = _agent()
    stream = agent.emulated_stream("s")
    gate = threading.Event()
    try:
        stream.launch(gate.wait)
        while stream.started < 1:
            time.sleep(0.001)
        window = 0.1
        agent.clock = ThreadClock(
            FakeSchedstat({stream.tids[0]: (50_000_000, 40_000_000), agent.frontend_tid: (2_000_000, 0)})
        )
        t0 = time.perf_counter()
        first = agent.sample(t0, t0 + window)  # no span yet: the intervals are all there is
        assert first.executors[0].running is None and first.frontend.busy == 1.0
        second = m.decode(agent.sample(t0, t0 + window).to_json())
        row = second.executors[0]
        assert row.busy == 1.0 and row.running == approx(0.5) and row.core_wait == approx(0.4)
        assert second.frontend.busy == approx(0.02) and second.frontend.wait == 0.0
        assert second.frontend.core_wait == 0.0
    finally:
        gate.set()
        agent.close()


def test_a_spinning_wait_is_not_busy():
    """A frontend on a core all window but inside a recorded wait (a synchronize that spins)."""
    agent = _agent()
    agent.clock = ThreadClock(FakeSchedstat({agent.frontend_tid: (100_000_000, 0)}))
    t0 = time.perf_counter()
    agent.frontend_wait.add(t0, t0 + 0.1)
    agent.sample(t0, t0 + 0.1)
    msg = agent.sample(t0, t0 + 0.1)
    assert msg.frontend.wait == approx(1.0) and msg.frontend.busy == approx(0.0, abs=1e-9)
    agent.close()


def _parked(event):
    event.wait()


def test_the_agent_reads_the_frontends_stack_itself():
    """What py-spy dump would print, read in the process: outermost first, the wait innermost."""
    event = threading.Event()
    frontend = threading.Thread(target=_parked, args=(event,))
    frontend.start()
    agent = _agent()
    try:
        agent.frontend_ident = frontend.ident
        stack = m.decode(
            m.Sample(
                t=1.0,
                window=0.1,
                mode="async",
                throughput=0.0,
                unit="it/s",
                num_threads=1,
                frontend=m.Frontend(busy=0.0, wait=0.0),
                overlap=0.0,
                stack=agent.frontend_stack(idle=True),
            ).to_json()
        ).stack
        names = [f.function for f in stack.frames]
        assert names[0] == "Thread._bootstrap" and names[-1] == "Condition.wait", names
        parked = next(f for f in stack.frames if f.function == "_parked")
        assert parked.filename == __file__ and parked.line > 0 and stack.idle
    finally:
        event.set()
        frontend.join()
        agent.close()
    assert agent.frontend_stack() is None  # the frontend thread has ended


def _window_logs(monkeypatch, *windows, cuda_part: bool = True) -> list[str]:
    """What the agent logs for profiler windows that ended with ``windows`` (the profiler faked), one
    window after the other."""
    from torchpar_top.probes.agent import cuda

    agent = _agent()
    logs: list[str] = []
    monkeypatch.setattr(agent, "log", logs.append)
    try:
        if cuda_part:
            agent.cuda = object()  # a CUDA part is there
        for window in windows:
            monkeypatch.setattr(cuda, "profile_queue", lambda seconds, w=window, **kw: w)
            agent._profile(0.5)
    finally:
        agent.cuda = None
        agent.close()
    return logs


def test_a_profiler_window_with_launches_and_no_gpu_op_says_the_records_were_lost(monkeypatch):
    """Seen on an H100: a window's trace kept 8,545 launch calls and not one kernel."""
    from torchpar_top.probes.agent.cuda import ProfileWindow

    assert _window_logs(monkeypatch, ProfileWindow([], 8545)) == [
        "profiler window (0.5 s): no launch queue to analyse (its trace holds 8545 launch calls but no GPU "
        "op: the profiler lost its GPU records (profile again))"
    ]


def test_a_profiler_window_read_in_the_workloads_process_says_so(monkeypatch):
    from torchpar_top.probes.agent.cuda import ProfileWindow

    line = "cuda:0 stream 7: max depth 3, at the 1024 cap 0.0 ms (0% of 500 ms)"
    window = ProfileWindow([line], 12, "FileNotFoundError: no python3")
    assert _window_logs(monkeypatch, window) == [
        "profiler window (0.5 s): its trace was read in the workload's process (no process of its own: "
        "FileNotFoundError: no python3)",
        f"profiler window (0.5 s): {line}",
    ]


def test_a_profiler_window_that_imported_much_to_start_says_so(monkeypatch):
    from torchpar_top.probes.agent.cuda import ProfileWindow

    slow = ProfileWindow([], 0, None, start_s=2.4, imported=822)
    logs = _window_logs(monkeypatch, slow, slow._replace(imported=3), cuda_part=False)
    said = [line for line in logs if "to start" in line]
    assert said == [
        "profiler window (0.5 s): torch.profiler took 2.4 s to start, importing 822 modules "
        "(torch._inductor and what it needs, once a process; the workload's Python was slowed meanwhile)"
    ]


def _run_for_samples(agent, parent, n):
    """Start ``agent``, read from its socket until ``n`` samples came, close both and wait for its
    sampler to end."""
    agent.start()
    try:
        reader, samples = LineReader(), 0
        parent.settimeout(30)
        while samples < n:
            samples += sum(isinstance(m.decode(line), m.Sample) for line in reader.feed(parent.recv(65536)))
    finally:
        parent.close()
        agent.close()
        samplers_stopped()


def test_a_sample_is_made_with_the_gil_handed_off_often_and_the_interval_put_back():
    """While the sampler builds and encodes a sample the GIL's switch interval is the agent's short one
    (the user's loop waits that long for it, not the interpreter's 5 ms); between samples, and after a
    sample that failed, it is the interpreter's again."""
    parent, child = socket.socketpair()
    agent = _agent(child)
    samplers_stopped()
    usual = sys.getswitchinterval()
    seen = []

    def part(t0, t1):
        seen.append(sys.getswitchinterval())
        if len(seen) == 2:
            raise RuntimeError("a part's bug")
        return {}

    agent.sample_parts.append(part)
    _run_for_samples(agent, parent, 3)
    assert seen[:4] == [approx(agent_module.SAMPLE_SWITCH_INTERVAL, abs=2e-6)] * 4
    assert usual > 10 * agent_module.SAMPLE_SWITCH_INTERVAL
    assert sys.getswitchinterval() == usual


def test_a_switch_interval_the_workload_set_during_a_sample_stays():
    samplers_stopped()
    usual = sys.getswitchinterval()
    switch = agent_module._SwitchInterval()
    try:
        switch.lower(50e-6)
        assert sys.getswitchinterval() == approx(50e-6, abs=2e-6)
        switch.restore()
        switch.restore()  # twice is once
        assert sys.getswitchinterval() == usual
        switch.lower(50e-6)
        sys.setswitchinterval(0.001)  # the user's own thread, meanwhile
        switch.restore()
        assert sys.getswitchinterval() == approx(0.001)
        switch.lower(None)
        assert sys.getswitchinterval() == approx(0.001)
    finally:
        sys.setswitchinterval(usual)


def test_a_samples_socket_write_happens_at_the_usual_switch_interval():
    """The write can block for as long as torchpar-top does not read (its terminal suspended): the
    workload's threads must not take turns every 50 µs meanwhile. The sample is encoded at the low
    interval, written at the usual one."""
    parent, child = socket.socketpair()
    agent = _agent(child)
    samplers_stopped()
    usual = sys.getswitchinterval()
    at_write, at_encode = [], []

    class Recording:
        def __init__(self, sock):
            self._sock = sock

        def sendall(self, data):
            at_write.append(sys.getswitchinterval())
            return self._sock.sendall(data)

        def __getattr__(self, name):  # the rest (recv, fileno, close...) as the socket's own
            return getattr(self._sock, name)

    agent._sock = Recording(agent._sock)
    sample = agent.sample

    def encoding_recorded(t0, t1):
        msg = sample(t0, t1)
        to_json = msg.to_json

        class Encoded:
            def to_json(self):
                at_encode.append(sys.getswitchinterval())
                return to_json()

        return Encoded()

    agent.sample = encoding_recorded
    _run_for_samples(agent, parent, 2)
    assert at_encode[:2] == [approx(agent_module.SAMPLE_SWITCH_INTERVAL, abs=2e-6)] * 2
    assert at_write[:2] == [usual, usual]


def test_a_process_forked_while_a_sample_is_made_gets_the_usual_switch_interval():
    """A DataLoader worker forked during a sample has no sampler to put the interval back."""
    samplers_stopped()
    usual = sys.getswitchinterval()
    switch = agent_module._SwitchInterval()
    read, write = os.pipe()
    switch.lower(50e-6)
    try:
        pid = os.fork()
        if pid == 0:  # the child: report its interval, then leave at once
            os.write(write, repr(sys.getswitchinterval()).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            child = float(f.read())
        os.waitpid(pid, 0)
        assert sys.getswitchinterval() == approx(50e-6, abs=2e-6)  # the parent's sample goes on
    finally:
        switch.restore()
    assert child == usual
    assert sys.getswitchinterval() == usual


def test_a_message_sent_in_the_middle_of_a_sample_is_written_at_the_usual_interval_and_the_sample_goes_on():
    """Sync points go out from an after-sample hook: their write at the usual interval, the rest of the
    sample (its encoding) at the low one again."""
    parent, child = socket.socketpair()
    agent = _agent(child)
    samplers_stopped()
    usual = sys.getswitchinterval()
    seen = []

    def part(t0, t1):
        agent.send(m.Log(text="sent in the middle of a sample"))
        seen.append(sys.getswitchinterval())
        return {}

    agent.sample_parts.append(part)
    _run_for_samples(agent, parent, 2)
    assert seen[:2] == [approx(agent_module.SAMPLE_SWITCH_INTERVAL, abs=2e-6)] * 2
    assert sys.getswitchinterval() == usual


def test_a_write_from_another_thread_during_a_sample_leaves_the_interval_usual():
    """The command thread's ack in the middle of a sample: it must not lower the interval again after
    its write (the sampler may have finished and put it back meanwhile)."""
    samplers_stopped()
    usual = sys.getswitchinterval()
    switch = agent_module._SwitchInterval()
    switch.lower(50e-6)
    resumed = []
    other = threading.Thread(target=lambda: resumed.append(switch.restore()))
    other.start()
    other.join()
    try:
        assert resumed == [None]
        assert sys.getswitchinterval() == usual
    finally:
        switch.restore()
        sys.setswitchinterval(usual)


def _messages(parent):
    """Every message the agent sent so far (its socket read until nothing more comes)."""
    reader, out = LineReader(), []
    parent.settimeout(0.5)
    try:
        while data := parent.recv(65536):
            out += [m.decode(line) for line in reader.feed(data)]
    except TimeoutError:
        pass
    return out


def test_the_last_sample_covers_the_time_since_the_samplers_last_window_at_once():
    """The workload's code returned between two samples: the sampler is woken from its wait (not
    waited out) and one last sample covers the time since its start; a second call sends nothing."""
    parent, child = socket.socketpair()
    agent = _agent(child, interval=30.0)
    try:
        agent.start()
        time.sleep(0.2)
        agent.step(7)
        begun = time.perf_counter()
        agent.last_sample()
        took = time.perf_counter() - begun
        agent.last_sample()
        samples = [msg for msg in _messages(parent) if isinstance(msg, m.Sample)]
    finally:
        parent.close()
        agent.close()
    assert took < 5.0  # not the sampler's 30 s sleep
    assert not [th for th in agent._threads if th.name == "tpt-sampler" and th.is_alive()]
    assert len(samples) == 1
    assert samples[0].window >= 0.2 and samples[0].throughput == approx(7 / samples[0].window)


def test_the_last_sample_made_on_the_frontend_thread_carries_no_stack_of_the_agents_own_calls():
    """After the user's code returned, the frontend thread makes the last sample itself: a stack read
    then would be the agent's calls (``last_sample``, ``sample``...), shown as where the workload was.
    It carries none; a sample the sampler thread makes carries the frontend's stack."""
    parent, child = socket.socketpair()
    agent = _agent(child, interval=30.0)
    try:
        agent.start()
        agent.last_sample()
        last = [msg for msg in _messages(parent) if isinstance(msg, m.Sample)]
        from_the_sampler: list = []
        sampler = threading.Thread(target=lambda: from_the_sampler.append(agent.sample(0.0, 1.0)))
        sampler.start()
        sampler.join()
    finally:
        parent.close()
        agent.close()
    assert len(last) == 1 and last[0].stack is None
    stack = from_the_sampler[0].stack
    assert stack is not None and stack.frames  # the frontend (this test's thread) as it waits in join


def test_a_last_sample_that_cannot_be_made_is_said_and_the_exit_goes_on():
    parent, child = socket.socketpair()
    agent = _agent(child, interval=30.0)

    def broken(t0, t1):
        raise ValueError("a part's bug")

    agent.sample_parts.append(broken)
    try:
        agent.start()
        agent.last_sample()
        agent.report_exit(0)
        got = _messages(parent)
    finally:
        parent.close()
        agent.close()
    logs = [msg.text for msg in got if isinstance(msg, m.Log)]
    assert any("a part's bug" in text and "last interval is not counted" in text for text in logs)
    assert isinstance(got[-1], m.Exit)
