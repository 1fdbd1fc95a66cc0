"""Every key of the main screen, once: the bindings, the help table, the README's table and the command
palette are all made from :data:`KEYS` (``tests/unit/test_docs.py`` checks the README against it)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Literal

from textual.binding import Binding


@dataclass(frozen=True)
class Command:
    """A palette entry: its name, the app action it runs, and a line of help."""

    name: str
    action: str
    help: str


@dataclass(frozen=True)
class Key:
    """One row of the keys table: how the key is written, what it does, its bindings and palette entries."""

    shown: str
    """The key as the help and the README write it (``\\`+\\` \\`=\\` / \\`-\\```)."""
    does: str
    bindings: tuple[Binding, ...] = ()
    commands: tuple[Command, ...] = ()
    footer: Literal["both", "live", "replay"] = "both"
    """Where its first binding is shown in the footer (if shown at all): in both, only in a live session
    (``s``, ``+/-``, ``w``: nothing to do in a replay), or only in a replay (stepping, seeking, speed).
    The key itself is bound everywhere (on a source without the capability the app says so in a note)."""
    replay_display: str | None = None
    """The footer's key for a replay key (``./,`` for step and step back)."""
    essential: bool = False
    """Kept in the footer when the terminal is too narrow for every key (the others stay bound, and help
    lists them)."""


KEYS: tuple[Key, ...] = (
    Key(
        "`s`",
        "toggle ASYNC / SYNC",
        (Binding("s", "toggle_sync", "sync"),),
        (Command("Toggle sync (ASYNC / SYNC)", "toggle_sync", "synchronize after every op, or not (key s)"),),
        footer="live",
        essential=True,
    ),
    Key(
        "`+` `=` / `-`",
        "one more / one fewer intra-op thread (`torch.set_num_threads`)",
        (
            Binding("plus,equals_sign", "more_threads", "threads", key_display="+/-"),
            Binding("minus", "fewer_threads", "fewer threads", key_display="-", show=False),
        ),
        (
            Command("More threads", "more_threads", "torch.set_num_threads(n + 1) in the child (key +)"),
            Command("Fewer threads", "fewer_threads", "torch.set_num_threads(n - 1) in the child (key -)"),
        ),
        footer="live",
    ),
    Key("`w`", "pick an experiment to run", (Binding("w", "pick_experiment", "experiment"),), footer="live"),
    Key(
        "`r`",
        "restart: run the same script or experiment again (e.g. after it ended); an experiment keeps "
        "the thread count of `+`/`-`, set before any of its threads start; a replay plays again from "
        "its first launch",
        (Binding("r", "restart", "restart"),),
        (Command("Restart", "restart", "run the same script or experiment again (key r)"),),
    ),
    Key(
        "`k`",
        "show / hide the frontend stack panel",
        (Binding("k", "toggle_stack", "stack"),),
        (Command("Toggle stack panel", "toggle_stack", "the frontend's Python stack (key k)"),),
        footer="live",
    ),
    Key(
        "`h`",
        "a 1 s `torch.profiler` window, analysed the way Holistic Trace Analysis computes queue length: "
        "exact depth per CUDA stream and time at the 1024 cap, in the log (CUDA only)",
        (Binding("h", "profile", "profile", show=False),),
        (
            Command(
                "Profile the launch queue",
                "profile",
                "1 s torch.profiler window: exact per-stream queue length, HTA's way (key h; CUDA only)",
            ),
        ),
    ),
    Key(
        "`p`",
        "pause / resume sampling (the child keeps running); in a replay, pause / play",
        (Binding("p", "toggle_pause", "pause"),),
        (
            Command(
                "Pause / resume sampling", "toggle_pause", "the child keeps running; a replay stops (key p)"
            ),
        ),
        essential=True,
    ),
    Key(
        "`.` / `,`",
        "replay: one frame on / back (pauses first)",
        (
            Binding("full_stop", "step_forward", "step", key_display=".", show=False),
            Binding("comma", "step_back", "step back", key_display=",", show=False),
        ),
        (
            Command("Step one frame", "step_forward", "replay: pause and show the next frame (key .)"),
            Command("Step one frame back", "step_back", "replay: pause and show the previous frame (key ,)"),
        ),
        footer="replay",
        replay_display="./,",
    ),
    Key(
        "`←` / `→`",
        "replay: seek back / forward by 5 % of the trace or recording",
        (
            Binding("left", "seek_back", "seek", key_display="←", show=False),
            Binding("right", "seek_forward", "seek", key_display="→", show=False),
        ),
        (
            Command("Seek back", "seek_back", "replay: 5 % of the trace or recording back (key ←)"),
            Command("Seek forward", "seek_forward", "replay: 5 % of the trace or recording on (key →)"),
        ),
        footer="replay",
        replay_display="←/→",
        essential=True,
    ),
    Key(
        "`home`",
        "replay: go to the start (t = 0)",
        (Binding("home", "seek_start", "start", show=False),),
        (Command("Go to the start", "seek_start", "replay: t = 0 (key home)"),),
        footer="replay",
    ),
    Key(
        "`[` / `]`",
        "replay: half / double speed (trace time per second on screen)",
        (
            Binding("left_square_bracket", "slower", "speed", key_display="[", show=False),
            Binding("right_square_bracket", "faster", "faster", key_display="]", show=False),
        ),
        (
            Command("Slower replay", "slower", "replay: half the speed (key [)"),
            Command("Faster replay", "faster", "replay: double the speed (key ])"),
        ),
        footer="replay",
        replay_display="[/]",
    ),
    Key(
        "`?`",
        "this help",
        (Binding("question_mark", "help", "help", key_display="?"),),
        (Command("Help", "help", "what each panel means (key ?)"),),
        essential=True,
    ),
    Key("`ctrl+p`", "command palette"),  # Textual's own binding
    Key(
        "`q`",
        "quit",
        (
            Binding("q", "quit", "quit"),
            # Ctrl-C quits at once (Textual's default asks to press ctrl+q): a profiler must let go fast.
            Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        ),
        essential=True,
    ),
)


def bindings(replay: bool = False, narrow: bool = False) -> list[Binding]:
    """The main screen's bindings, in table order; the footer shows a live session's keys, or with
    ``replay`` a replay's, and with ``narrow`` only the :attr:`Key.essential` ones (every key is bound
    either way)."""
    out = []
    for key in KEYS:
        for i, binding in enumerate(key.bindings):
            b = binding
            if key.footer == "live" and replay:
                b = replace(b, show=False)
            elif key.footer == "replay" and i == 0:
                b = replace(b, show=replay, key_display=key.replay_display or b.key_display)
            if narrow and not key.essential:
                b = replace(b, show=False)
            out.append(b)
    return out


def footer_keys(replay: bool = False, narrow: bool = False) -> list[str]:
    """The footer's keys, as it writes them, in order (tests and docs)."""
    return [b.key_display or b.key for b in bindings(replay, narrow) if b.show]


@functools.cache
def footer_width(replay: bool = False) -> int:
    """Columns the compact footer needs for every key it shows (``key description`` and a space each):
    below this the footer keeps only the essential keys rather than cutting the last one in half. The
    keys are fixed: worked out once (every frame asks)."""
    return sum(len(b.key_display or b.key) + len(b.description) + 2 for b in bindings(replay) if b.show)


def commands() -> list[Command]:
    """The palette's commands for the keys, in table order."""
    return [c for key in KEYS for c in key.commands]


def keys_table() -> str:
    """The keys as a Markdown table (help screen and README)."""
    rows = ["| key | does |", "|-----|------|"]
    rows += [f"| {key.shown} | {key.does} |" for key in KEYS]
    return "\n".join(rows) + "\n"
