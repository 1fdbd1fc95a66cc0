"""One source for keys and panel texts: the README, the help screen and the palette agree with it."""

from __future__ import annotations

import pathlib

from torchpar_top.tui import docs, keys
from torchpar_top.tui.app import TorchparTopApp
from torchpar_top.tui.meanings import PANELS, help_markdown
from torchpar_top.tui.screens.help import HELP

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_readme_sections_are_the_generated_ones():
    text = (ROOT / "README.md").read_text()
    assert docs.rewrite(text) == text, "README is stale: run python -m torchpar_top.tui.docs README.md"
    assert "| `s` | toggle ASYNC / SYNC |" in docs.section(text, "keys")


def test_the_help_screen_shows_every_panel_and_key():
    assert help_markdown() == HELP
    for panel in PANELS:
        assert f"**{panel.name}**" in HELP
    for key in keys.KEYS:
        assert f"| {key.shown} | {key.does} |" in HELP


def test_every_binding_and_command_runs_an_action_the_app_has():
    assert keys.bindings() == TorchparTopApp.BINDINGS
    actions = {b.action for b in keys.bindings()} | {c.action for c in keys.commands()}
    for action in actions:
        assert callable(getattr(TorchparTopApp, f"action_{action}", None)), action


def test_a_missing_section_is_reported():
    try:
        docs.section("no markers here", "keys")
    except ValueError as exc:
        assert "keys:begin" in str(exc)
    else:
        raise AssertionError("a missing section must be an error")


def test_ci_runs_the_readme_lint_and_test_commands_in_order():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("Before the tests, the lint", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["ruff format --check .", "ruff check .", "mypy"]
    assert "`python -m pytest -q`" in readme
    ci = [line.removeprefix("check ") for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    ci = [line for line in ci if line in [*commands, "python -m pytest -q"]]
    assert ci == [*commands, "python -m pytest -q"]  # each once, the tests last
