"""The ``torchpar-top`` command: parse arguments, build a session, hand it to the TUI or headless mode."""

from __future__ import annotations

import argparse
import atexit
import signal
import sys
from typing import Any, NoReturn, Sequence

from torchpar_top.args import attach_parser, main_parser, run_parser, split_run


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        target, args = _run_target(argv[1:])
    elif argv[:1] == ["attach"]:
        target, args = _attach_target(argv[1:])
    else:
        parser = main_parser()
        args = parser.parse_args(argv)
        _check_headless(parser, args)
        target = args.experiment

    from torchpar_top.session.session import Session

    session = Session(target, interval=args.interval, sync=getattr(args, "sync", False),
                      gpu_probe=_gpu_probe(), stack_source=_stack_source(), stacks=not args.no_stacks)
    atexit.register(session.close)  # however we leave, the child's process group goes with us
    if args.headless:
        from torchpar_top.session import headless

        _on_signals(_exit_on_signal)
        try:
            return headless.run(session, args.duration, sys.stdout)
        except KeyboardInterrupt:
            return 130

    from torchpar_top.tui.app import TorchparTopApp

    app = TorchparTopApp(session)

    def _quit() -> None:
        session.close()
        app.exit()

    _on_signals(_quit)
    app.run()
    session.close()
    return 0


def _check_headless(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.headless and args.duration is None:
        parser.error("--headless needs --duration SECONDS")
    if args.duration is not None and not args.headless:
        parser.error("--duration only applies with --headless")


def _run_target(argv: list[str]) -> tuple[Any, argparse.Namespace]:
    from torchpar_top.probes.agent.run import check_target
    from torchpar_top.session.targets import ScriptTarget

    parser = run_parser()
    ours, what, is_module, user_args = split_run(argv)
    args = parser.parse_args(ours)
    _check_headless(parser, args)
    if what is None:
        parser.error("run needs a script (SCRIPT.py) or -m MODULE")
    problem = check_target(what, is_module)
    if problem:
        parser.exit(2, f"torchpar-top: error: {problem}\n")
    if args.sync_scope != "op" and not args.sync:
        parser.error("--sync-scope only applies with --sync")
    target = ScriptTarget(what, tuple(user_args), module=is_module, nproc=args.nproc_per_node,
                          sync_scope=args.sync_scope)
    return target, args


def _attach_target(argv: list[str]) -> tuple[Any, argparse.Namespace]:
    from torchpar_top.probes.host.process import check_attach
    from torchpar_top.session.targets import AttachTarget

    parser = attach_parser()
    args = parser.parse_args(argv)
    _check_headless(parser, args)
    problem = check_attach(args.pid)
    if problem:
        parser.exit(2, f"torchpar-top: error: {problem}\n")
    return AttachTarget(args.pid), args


def _on_signals(handler) -> None:
    """SIGTERM and SIGHUP (terminal closed) end the run cleanly."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: handler())


def _exit_on_signal() -> NoReturn:
    """Headless: leave through the ``finally`` that closes the session."""
    raise SystemExit(128 + signal.SIGTERM)


def _gpu_probe():
    """The NVML probe, or None when the probe module is not available."""
    try:
        from torchpar_top.probes.host.nvml import NvmlProbe
    except ImportError:
        return None
    return NvmlProbe()


def _stack_source():
    """A function that starts a py-spy stack poller (about 2 Hz) for a pid (``attach``: no agent)."""
    from torchpar_top.probes.host.stacks import StackPoller, StackSampler

    def start(pid: int) -> StackPoller:
        poller = StackPoller(StackSampler(pid))
        poller.start()
        return poller

    return start


if __name__ == "__main__":
    sys.exit(main())
