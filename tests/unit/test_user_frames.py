"""The frontend's stack shows the user's code only: the agent's frames that start it and the agent's
wrappers inside it are left out; experiments' own frames (the emulated stream) are kept."""

from types import SimpleNamespace

from torchpar_top.probes.agent.usercode_exec import AGENT_DIR, user_frames


def frames(*files):
    return [SimpleNamespace(filename=f) for f in files]


def test_the_wrappers_inside_the_users_stack_are_left_out():
    stack = frames(
        AGENT_DIR + "run.py",
        AGENT_DIR + "usercode_exec.py",
        "/home/me/train.py",
        "/venv/torch/_tensor.py",
        AGENT_DIR + "usercode_phases.py",  # the backward wrapper
        "/venv/torch/autograd/__init__.py",
        AGENT_DIR + "usercode_data.py",
    )
    assert [f.filename for f in user_frames(stack)] == [
        "/home/me/train.py",
        "/venv/torch/_tensor.py",
        "/venv/torch/autograd/__init__.py",
    ]


def test_the_emulated_stream_the_experiments_wait_in_is_kept():
    stack = frames("/pkg/workloads/async_compute.py", AGENT_DIR + "stream.py")
    assert user_frames(stack) == stack


def test_a_stack_of_the_agent_alone_is_kept_whole():
    stack = frames(AGENT_DIR + "run.py", AGENT_DIR + "agent.py")
    assert user_frames(stack) == stack


def test_the_agents_own_work_calling_the_standard_library_is_kept_whole():
    """Before the user's code starts, the instrumentation's install calls ``warnings.filterwarnings``: that
    is the agent at work, not the user's code (a script that crashed at once had this as its last stack)."""
    stack = frames(
        "<frozen runpy>",
        AGENT_DIR + "run.py",
        AGENT_DIR + "usercode_install.py",
        AGENT_DIR + "usercode_phases.py",
        "/usr/lib/python3.11/warnings.py",
        "/usr/lib/python3.11/re/__init__.py",
    )
    assert user_frames(stack) == stack


def test_a_module_run_with_minus_m_starts_at_its_own_frame():
    stack = frames(
        AGENT_DIR + "run.py",
        AGENT_DIR + "usercode_exec.py",
        "<frozen runpy>",
        "<frozen runpy>",
        "/home/me/pkg/train.py",
        "/venv/torch/nn/modules/module.py",
    )
    assert [f.filename for f in user_frames(stack)] == [
        "/home/me/pkg/train.py",
        "/venv/torch/nn/modules/module.py",
    ]
