"""The instrumentation around user code, in this process: sync points, steps, ops, DataLoader, targets."""

import importlib.util
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from torchpar_top.contract import messages as m
from torchpar_top.contract.vocab import StepSource, SyncScope
from torchpar_top.probes.agent import usercode
from torchpar_top.probes.agent.activity import busy_time
from torchpar_top.probes.agent.run import UsageError, exception_line, parse_args, system_exit_status
from torchpar_top.probes.agent.usercode import CPU_SYNC_NOTE, UserCode
from torchpar_top.probes.agent.usercode_install import Instrumentation, after_fork_in_child
from torchpar_top.probes.agent.usercode_target import check_target

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"tpt_test_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


helper = _load("syncpoint_helper")


class RecordingUser(UserCode):
    """Keeps every message its agent would send (through the real codec), without a socket."""

    def __init__(self, **kw):
        super().__init__(None, target="test", **kw)
        self.steps.hold = 0.0  # the first steps go out at once (the hold: test_usercode_steps.py)
        self.sent = []
        self.agent.send = lambda msg: self.sent.append(m.decode(msg.to_json()))

    def of_type(self, cls):
        return [msg for msg in self.sent if isinstance(msg, cls)]


@pytest.fixture
def agent():
    a = RecordingUser(every_op=True)  # the counting itself; slices: tests/unit/test_usercode_sampling.py
    yield a
    a.agent.close()


def sites_by_line(agent):
    """{("file.py:LINE", call): count} from the agent's sync points."""
    out = {}
    for s in agent.syncpoints.sites():
        path, line = s.where.rsplit(":", 1)
        out[(f"{Path(path).name}:{line}", s.call)] = s.count
    return out


def test_sync_points_are_charged_to_the_calling_line(agent):
    t = torch.tensor(1.5)
    with Instrumentation(agent):
        for _ in range(3):
            helper.call_item(t)
        helper.print_tensor(t)
        helper.branch_on(t)
        helper.moves(t)
        helper.library_bookkeeping()
    sites = sites_by_line(agent)
    at = lambda mark: f"syncpoint_helper.py:{helper.line_of(mark)}"  # noqa: E731
    assert sites[(at("item"), "item()")] == 3
    assert sites[(at("repr"), "print/repr(tensor)")] == 1
    assert sites[(at("bool"), "bool(tensor)")] == 1
    assert sites[(at("to-cpu"), "to('cpu')")] == 1
    lines = {where for where, _ in sites}
    assert at("to-dtype") not in lines  # a dtype change is no transfer
    assert at("sampler") not in lines  # the sampler's own randperm().tolist() is torch's bookkeeping
    assert agent.syncpoints.total() == 6


def test_boolean_mask_indexing_is_a_sync_point_and_other_indexing_is_not(agent):
    with Instrumentation(agent):
        helper.masks(torch.tensor(1.0))
    sites = sites_by_line(agent)
    at = lambda mark: f"syncpoint_helper.py:{helper.line_of(mark)}"  # noqa: E731
    assert sites[(at("mask-read"), "x[bool mask]")] == 1
    assert sites[(at("mask-write"), "x[bool mask] = ...")] == 1
    assert sites[(at("mask-in-tuple"), "x[bool mask]")] == 1
    lines = {where for where, _ in sites}
    assert at("slice") not in lines and at("int-index") not in lines
    assert agent.syncpoints.total() == 3


def test_the_syncpoints_message_is_sent_only_when_a_count_changed(agent):
    with Instrumentation(agent):
        helper.call_item(torch.tensor(2.0))
    agent.flush_syncpoints()
    agent.flush_syncpoints()
    (msg,) = agent.of_type(m.SyncPoints)
    (site,) = msg.sites
    assert site.where.endswith(f"syncpoint_helper.py:{helper.line_of('item')}")
    assert (site.call, site.count) == ("item()", 1)


def test_ops_are_counted_on_the_eager_device_and_metadata_is_not(agent):
    a = torch.ones(3)
    with Instrumentation(agent):
        n0 = agent.eager.n
        b = a + 1
        _ = (b.shape, b.size(), b.dim(), b.requires_grad)
        torch.mm(b.view(3, 1), b.view(1, 3))
        n = agent.eager.n - n0
    assert n == 4  # add, view, view, mm
    ex = agent.eager
    assert ex.launched == ex.started == ex.completed == agent.eager.n and ex.value() == 0
    now = time.perf_counter()
    assert busy_time(ex.activity.intervals(now - 10, now)) > 0
    b + 1  # outside the mode: not counted
    assert ex.n == n0 + n


def test_each_step_of_the_first_optimizer_is_a_step():
    agent = RecordingUser()
    w1, w2 = torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
    opt1, opt2 = torch.optim.SGD([w1], lr=0.1), torch.optim.SGD([w2], lr=0.1)
    with Instrumentation(agent):
        for _ in range(5):
            (w1.sum() + w2.sum()).backward()
            opt1.step()
            opt2.step()  # a second optimizer (a GAN's) does not double the step count
    assert agent.agent.items == 5
    opt1.step()  # the hook is gone with the instrumentation
    assert agent.agent.items == 5


def test_samples_count_ops_until_the_first_step_then_steps(agent):
    w = torch.zeros(2, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    with Instrumentation(agent):
        t0 = time.perf_counter()
        w.detach() * 2
        first = agent.agent.sample(t0, time.perf_counter())
        for _ in range(3):
            w.sum().backward()
            opt.step()
        t1 = time.perf_counter()
        second = agent.agent.sample(t0, t1)
    assert first.unit == "ops/s" and first.throughput > 0
    assert second.unit == "steps/s" and second.throughput == pytest.approx(3 / (t1 - t0))
    assert second.data_wait == 0.0
    assert m.decode(second.to_json()) == second


def test_sync_scope_op_syncs_after_every_op_and_the_cpu_note_is_logged_once(agent, monkeypatch):
    calls = []
    monkeypatch.setattr(agent.agent, "synchronize", lambda: calls.append(1))
    with Instrumentation(agent) as inst:
        agent.agent.apply(m.SetSync(value=True, scope=SyncScope.OP))
        torch.ones(2) + 1
        assert inst.mode.after_op is not None and len(calls) >= 2
        agent.agent.sample(0.0, 1.0)
        agent.agent.sample(1.0, 2.0)
        agent.agent.apply(m.SetSync(value=True, scope=SyncScope.STEP))
        assert inst.mode.after_op is None
        agent.agent.apply(m.SetSync(value=False))
    assert [msg.text for msg in agent.of_type(m.Log)] == [CPU_SYNC_NOTE]
    assert [msg.ok for msg in agent.of_type(m.Ack)] == [True, True, True]


def test_cuda_watching_is_started_on_the_frontend_thread_at_the_next_op(agent, monkeypatch):
    seen = []
    monkeypatch.setattr(usercode, "cuda_in_use", lambda: True)
    monkeypatch.setattr(agent, "watch_cuda_streams", lambda: seen.append(threading.get_ident()))
    monkeypatch.setattr(agent, "_sync_cuda", lambda: None)
    with Instrumentation(agent):
        agent.agent.sample(0.0, 1.0)  # the sampler notices CUDA
        assert seen == []
        torch.ones(2) + 1
    assert seen == [threading.get_ident()]  # on the frontend thread, at its next op (not the sampler's)


def test_forked_children_pass_every_call_through(agent):
    with Instrumentation(agent) as inst:
        after_fork_in_child()
        n = agent.eager.n
        torch.ones(2) + 1
        assert agent.eager.n == n
        w = torch.zeros(2, requires_grad=True)
        w.sum().backward()  # the phase hooks pass through too: no step in a worker
        assert agent.steps.count == 0
        inst.mode.active = True


class SlowItems(Dataset):
    """Items that take ``sleep`` seconds each to load."""

    def __init__(self, n, sleep):
        self.n, self.sleep = n, sleep

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.sleep)
        return torch.full((2,), float(i))


def test_a_dataloader_with_workers_is_an_executor_with_outstanding_tasks(agent):
    loader = DataLoader(SlowItems(48, 0.005), batch_size=4, num_workers=2, prefetch_factor=2)
    seen = []
    with Instrumentation(agent):
        for _ in loader:
            ex = agent.data.executors[0]
            ex.refresh()
            seen.append((ex.value(), ex.ready(), ex.launched, ex.completed))
        ex.refresh()
    assert (ex.name, ex.kind, ex.quantity, ex.capacity) == ("dataloader:0", "dataloader", "outstanding", 4)
    assert ex in agent.agent.executors
    assert any(o > 0 for o, *_ in seen)
    assert all(0 <= o <= 4 and ready >= 0 and o + ready <= 4 for o, ready, *_ in seen)
    assert all(c <= la for _, _, la, c in seen)
    assert (ex.launched, ex.completed, ex.value()) == (12, 12, 0)


def test_epochs_accumulate_and_an_abandoned_iterator_is_closed_out(agent):
    loader = DataLoader(SlowItems(16, 0.001), batch_size=4, num_workers=2, persistent_workers=True)
    short = DataLoader(SlowItems(64, 0.001), batch_size=4, num_workers=2)
    with Instrumentation(agent):
        for _ in range(2):
            assert len(list(loader)) == 4
        ex = agent.data.executors[0]
        ex.refresh()
        assert (ex.launched, ex.completed) == (8, 8)
        for i, _ in enumerate(short):
            if i == 1:
                break
        other = agent.data.executors[1]
        other.refresh()
        assert other.value() == 0 and other.launched == other.completed >= 2


def test_time_in_a_single_process_loader_is_data_wait(agent):
    loader = DataLoader(SlowItems(5, 0.02), batch_size=1, num_workers=0)
    with Instrumentation(agent):
        t0 = time.perf_counter()
        for _ in loader:
            pass
        t1 = time.perf_counter()
        msg = agent.agent.sample(t0, t1)
    assert agent.data.executors == []
    # loading in this process is data time (the data phase, data_wait), not a wait for the device
    assert msg.data_wait > 0.5 and msg.frontend.wait == 0.0
    assert msg.steps.source == StepSource.DATALOADER and msg.steps.count == 5
    assert msg.steps.phases.data > 0.5 * msg.steps.seconds


# -- targets and the command line -------------------------------------------------------------------


def test_check_target_accepts_scripts_and_modules_without_importing_them(monkeypatch):
    assert check_target(str(SCRIPTS / "argv_echo.py"), False) is None
    monkeypatch.chdir(SCRIPTS)
    assert check_target("pkgdemo", True) is None
    assert check_target("json.tool", True) is None
    assert "pkgdemo" not in sys.modules


def test_check_target_says_what_is_wrong_in_one_line(tmp_path, monkeypatch):
    binary = tmp_path / "prog"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"x = '\xe9t\xe9'\n")
    (tmp_path / "nomain").mkdir()
    bad_pkg = tmp_path / "badpkg"
    bad_pkg.mkdir()
    (bad_pkg / "__init__.py").write_text("")
    (bad_pkg / "__main__.py").write_text("x = (\n")
    syntax = SCRIPTS / "syntax_error.py"
    monkeypatch.chdir(tmp_path)
    cases = {
        ("missing.py", False): "can't open file 'missing.py': no such file",
        (str(binary), False): f"{binary}: not a Python file (binary content)",
        (str(latin), False): f"{latin}: not a Python file (not UTF-8 text and no coding declaration)",
        ("nomain", False): "can't find '__main__' module in 'nomain'",
        (str(syntax), False): f"{syntax}:4: SyntaxError: invalid syntax",
        ("no_such_module_xyz", True): "No module named 'no_such_module_xyz'",
        ("json.nope", True): "No module named 'json.nope'",
        ("json", True): (
            "No module named 'json.__main__'; 'json' is a package and cannot be directly executed"
        ),
        ("not a name", True): "No module named 'not a name'",
    }
    for (target, is_module), message in cases.items():
        assert check_target(target, is_module) == message
    problem = check_target("badpkg", True)
    assert problem.startswith(str(bad_pkg / "__main__.py") + ":1: SyntaxError:") and "\n" not in problem


def test_parse_args_stops_at_the_users_command():
    opts = parse_args(
        ["--fd", "5", "--interval", "0.2", "--sync", "--sync-scope", "step", "train.py", "--fd", "x"]
    )
    assert (opts.fd, opts.interval, opts.sync, opts.sync_scope) == (5, 0.2, True, "step")
    assert (opts.target, opts.is_module, opts.args) == ("train.py", False, ["--fd", "x"])
    opts = parse_args(["--fd=3", "-m", "pkg.mod", "-m", "x"])
    assert (opts.fd, opts.target, opts.is_module, opts.args) == (3, "pkg.mod", True, ["-m", "x"])
    assert parse_args(["-mpkg"]).target == "pkg"
    assert parse_args(["--", "-weird.py"]).target == "-weird.py"
    bad_lines = (
        [],
        ["--fd"],
        ["--sync-scope", "epoch", "a.py"],
        ["--bogus", "a.py"],
        ["-m"],
        ["--interval", "0", "a.py"],
    )
    for bad in bad_lines:
        with pytest.raises(UsageError):
            parse_args(bad)


def test_torch_compile_traces_through_the_mode_without_a_graph_break(agent):
    def f(x):
        return torch.relu(x @ x.T + 1).sum()

    compiled = torch.compile(f, backend="eager", fullgraph=True)  # a graph break would raise
    x = torch.randn(4, 4)
    with Instrumentation(agent):
        assert torch.allclose(compiled(x), f(x))


def test_without_the_private_attributes_the_executor_counts_batches():
    from torchpar_top.probes.agent.usercode_data import DataLoaderExecutor

    class OpaqueIterator:
        """A future torch whose iterator has none of the attributes we read."""

    ex, it = DataLoaderExecutor("dataloader:0", capacity=4), OpaqueIterator()
    ex.attach(it)
    for _ in range(3):
        ex.consumed_one()
    ex.refresh()
    assert (ex.launched, ex.completed, ex.value(), ex.ready(), ex.degraded) == (3, 3, 0, None, True)
    ex.detach()
    assert (ex.launched, ex.completed) == (3, 3)


def test_a_thread_count_change_applies_at_the_next_op_without_an_optimizer(agent):
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    try:
        with Instrumentation(agent):
            agent.agent.apply(m.SetThreads(value=wanted))
            agent.agent.sample(0.0, 1.0)
            assert torch.get_num_threads() == before  # applied on the frontend thread, not the sampler's
            torch.ones(2) + 1
            assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads(before)


def test_a_stop_raises_at_the_next_op_outside_a_dataloader_fetch(agent, monkeypatch):
    monkeypatch.setattr(usercode, "STOP_SAFE_WAIT", 60.0)  # the fallback must not fire in this test
    agent.agent.hard_exit = lambda: None
    x = torch.ones(2)
    try:
        with Instrumentation(agent):
            agent.interruptible = True
            agent.agent.request_stop()
            agent.data.inside = 1  # as inside DataLoader.__next__: not a safe point
            x + 1
            agent.data.inside = 0
            with pytest.raises(KeyboardInterrupt):
                x + 1
            x + 1  # once only
    finally:
        agent.interruptible = False
    assert agent.stop_requested


def test_watching_cuda_adds_the_current_devices_stream_once(agent, monkeypatch):
    made = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(agent.agent, "cuda_stream", lambda name, device: made.append((name, device)))
    agent.watch_cuda_streams()
    agent.watch_cuda_streams()
    assert made == [("cuda:0", 0)]
    assert agent.of_type(m.Log)[-1].text == "CUDA in use: watching the current stream of cuda:0"


def test_a_failure_to_watch_cuda_is_a_log_line_not_an_error(agent, monkeypatch):
    def broken(name, device):
        raise RuntimeError("no driver")

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(agent.agent, "cuda_stream", broken)
    agent.watch_cuda_streams()
    assert "not watched: RuntimeError: no driver" in agent.of_type(m.Log)[-1].text


@pytest.mark.parametrize("code", ["None", "0", "3", "256", "-1", "True", "'bye'"])
def test_system_exit_status_is_the_one_python_exits_with(code):
    real = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.exit({code})"], capture_output=True, check=False
    )
    status, reason = system_exit_status(eval(code))
    assert status == real.returncode
    assert (reason == "") == (real.stderr == b"")  # python prints a non-numeric code, and so do we say why


def test_exception_line_is_pythons_last_traceback_line():
    real = subprocess.run(
        [sys.executable, "-c", "raise KeyError('k')"], capture_output=True, text=True, check=False
    )
    assert exception_line(KeyError("k")) == real.stderr.strip().splitlines()[-1] == "KeyError: 'k'"
