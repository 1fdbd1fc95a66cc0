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
