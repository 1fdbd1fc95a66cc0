"""tui/compositor.py subclasses Textual's private ``Compositor`` (no public API says what a partial
update renders). These tests fail, saying what to do, on a Textual whose overridden code changed."""

from __future__ import annotations

import hashlib
import inspect

from textual._compositor import Compositor
from textual.screen import Screen
from torchpar_top.tui.compositor import TESTED_TEXTUAL, textual_version

#: The Textual code LineCompositor relies on, as it reads in TESTED_TEXTUAL: a digest of its source.
RELIED_ON = {
    "Compositor.render_partial_update": (Compositor.render_partial_update, "888dccc892d8ecc2"),
    "Compositor._get_renders": (Compositor._get_renders, "8ac93299aa5d3bef"),
    "Compositor.visible_widgets": (Compositor.visible_widgets.fget, "6eddec5f271628f7"),
}

WHAT_TO_DO = (
    "tui/compositor.py overrides it (LineCompositor): read the new code, check that LineCompositor "
    "still writes what Textual's own compositor writes (tests/functional/test_tui_frames.py), then set "
    "TESTED_TEXTUAL, the textual pin in pyproject.toml and the digests in this test to the new version"
)


def _digest(obj: object) -> str:
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]  # type: ignore[arg-type]


def test_the_installed_textual_is_the_one_the_compositor_was_checked_against() -> None:
    assert textual_version() == TESTED_TEXTUAL, (
        f"Textual {textual_version()} is installed, LineCompositor was checked against {TESTED_TEXTUAL}; "
        + WHAT_TO_DO
    )


def test_the_private_textual_code_the_compositor_overrides_is_unchanged() -> None:
    changed = [name for name, (obj, digest) in RELIED_ON.items() if _digest(obj) != digest]
    assert not changed, f"Textual {textual_version()} changed {', '.join(changed)}; " + WHAT_TO_DO


def test_a_screen_still_draws_with_the_compositor_it_makes_in_init() -> None:
    # LineScreen replaces Screen's ``_compositor`` after Screen.__init__ made it; the private attribute
    # and the moment it is made are what that relies on
    assert "self._compositor = Compositor()" in inspect.getsource(Screen.__init__), (
        "Screen.__init__ no longer makes self._compositor; " + WHAT_TO_DO
    )
    assert "_dirty_regions" in inspect.getsource(Compositor), (
        "Compositor no longer keeps _dirty_regions; " + WHAT_TO_DO
    )
