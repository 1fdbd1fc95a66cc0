"""The command line: ``torchpar-top [OPTIONS]``, ``torchpar-top run ... SCRIPT|-m MODULE [ARGS]``,
``torchpar-top attach PID``. Errors are one line and exit status 2."""

from __future__ import annotations

import argparse
from typing import NoReturn, Sequence

from torchpar_top import __version__, workloads

KEYS = "Keys in the TUI: s sync on/off, +/- intra-op threads, w experiment, r restart, k stack, p pause, " \
       "? help, q quit."


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (``torchpar-top: error: ...``) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"torchpar-top: error: {message} (see {self.prog} --help)\n")


def positive(text: str) -> float:
    """A number greater than zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0: {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number of at least one."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _common(parser: argparse.ArgumentParser, sync: bool = True) -> None:
    parser.add_argument("--interval", type=positive, default=0.1, metavar="SECONDS",
                        help="seconds between samples (default: 0.1)")
    if sync:
        parser.add_argument("--sync", action="store_true",
                            help="start in SYNC mode (synchronize after every op)")
    parser.add_argument("--no-stacks", action="store_true",
                        help="do not sample the frontend's Python stack (the stack panel stays empty)")
    parser.add_argument("--headless", action="store_true",
                        help="no screen: write one JSON object per sample to stdout, then exit")
    parser.add_argument("--duration", type=positive, metavar="SECONDS",
                        help="with --headless: how long to run (required there)")


def main_parser() -> Parser:
    """``torchpar-top [OPTIONS]``: a built-in experiment."""
    parser = Parser(
        prog="torchpar-top",
        description="top for PyTorch parallelism: runs an experiment in a child process and shows, live, "
        "per-core load, the child's threads by role, launch-queue depth per executor, busy lanes and "
        "overlap, and async vs sync throughput. Subcommands: `torchpar-top run SCRIPT.py [ARGS]` "
        "(your code, see `torchpar-top run --help`) and `torchpar-top attach PID`.",
        epilog=KEYS,
    )
    parser.add_argument(
        "--experiment", "-e", default=workloads.DEFAULT, choices=workloads.names(), metavar="NAME",
        help=f"built-in experiment: {', '.join(workloads.names())} (default: {workloads.DEFAULT})",
    )
    _common(parser)
    parser.add_argument("--version", action="version", version=f"torchpar-top {__version__}")
    return parser


def run_parser() -> Parser:
    """``torchpar-top run [OPTIONS] (SCRIPT | -m MODULE) [ARGS...]``: the user's code."""
    parser = Parser(
        prog="torchpar-top run",
        usage="torchpar-top run [OPTIONS] (SCRIPT.py | -m MODULE) [ARGS...]",
        description="Run your code unmodified under the agent, as `python SCRIPT.py ARGS` would, and watch "
        "it: ops, steps/s (optimizer steps), queue depth, DataLoader prefetch, sync points, stacks.",
        epilog="Everything after SCRIPT (or -m MODULE) is passed to your code. " + KEYS,
    )
    _common(parser)
    parser.add_argument("--sync-scope", choices=("op", "step"), default="op",
                        help="in SYNC mode, synchronize after every op (default) or every optimizer step")
    parser.add_argument("--nproc-per-node", type=positive_int, metavar="N",
                        help="launch through torchrun with N ranks on this node (Gloo on CPU)")
    return parser


def attach_parser() -> Parser:
    """``torchpar-top attach PID``: a process we did not start."""
    parser = Parser(
        prog="torchpar-top attach",
        description="Watch a process torchpar-top did not start: per-core load, its threads by role, its GPU "
        "use and its Python stacks. Queue depth needs `torchpar-top run`.",
    )
    parser.add_argument("pid", type=positive_int, help="the process id")
    _common(parser, sync=False)
    return parser


def split_run(argv: Sequence[str]) -> tuple[list[str], str | None, bool, list[str]]:
    """Split ``run``'s argv into (our options, script or module, is_module, the user's args).

    Our options come first; the first token that is not one of them (or ``-m MODULE``) starts the
    user's command, and everything after it belongs to the user's code.
    """
    takes_value = {"--interval", "--duration", "--nproc-per-node", "--sync-scope"}
    ours: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "-m":
            if i + 1 >= len(argv):
                return ours + ["-m"], None, True, []
            return ours, argv[i + 1], True, list(argv[i + 2:])
        if token.startswith("-"):
            ours.append(token)
            if token in takes_value and i + 1 < len(argv):
                ours.append(argv[i + 1])
                i += 1
            i += 1
            continue
        return ours, token, False, list(argv[i + 1:])
    return ours, None, False, []
