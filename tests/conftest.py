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
