"""Shared test setup: deterministic colours for Textual snapshots, and ``fakes`` importable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Textual snapshots must not depend on the user's environment.
os.environ.pop("NO_COLOR", None)
os.environ.pop("TEXTUAL_THEME", None)

# tests/fakes/ (FakeSession) imports as ``fakes`` (pytest runs with --import-mode=importlib).
sys.path.insert(0, str(Path(__file__).parent))


import pytest


@pytest.fixture(autouse=True)
def _no_compiled_code_carried_over():
    """torch.compile's "frames compiled" counter is process-wide, and the op counter freezes once it
    sees compiled code: a test that compiles must not change what the next test's counter does."""
    yield
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is not None and hasattr(utils, "counters"):
        utils.counters.clear()


@pytest.fixture(autouse=True)
def _no_sampler_carried_over():
    """An agent's sampler thread ends within its interval after ``Agent.close()``, which does not wait
    for it. The GIL's switch interval is the process's, and the sampler lowers it while it makes a sample:
    a closed agent's last sample overlapping the next test's agent's can leave it lowered for good (one
    agent a process, as in a workload, cannot; seen once in a CI run). So each test ends with every
    sampler ended, and with the interval it began with."""
    from waiting import samplers_stopped

    usual = sys.getswitchinterval()
    yield
    samplers_stopped()
    assert sys.getswitchinterval() == usual, "the GIL's switch interval was left changed"
