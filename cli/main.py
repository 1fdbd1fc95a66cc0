"""The ``torchpar-top`` command: parse arguments, build a session, hand it to the TUI or headless mode."""

from __future__ import annotations

import argparse
import atexit
import functools
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from torchpar_top import keep
from torchpar_top.args import (
    attach_parser,
    check_terminal,
    main_parser,
    nproc_warning,
    replay_parser,
    run_parser,
    split_run,
    terminal_problem,
)


def _quiet_interrupt(entry: Callable[..., int]) -> Callable[..., int]:
    """Ctrl-C before the signal handlers are in place (a large trace or recording loading for replay,
    export or --summary) ends the command quietly with 130, as a shell reports SIGINT, no traceback."""

    @functools.wraps(entry)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        try:
            return entry(*args, **kwargs)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while Python ends: no traceback
            return 128 + signal.SIGINT

    return wrapper


@_quiet_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["replay"]:  # a recording or an export in keep.replay, a trace in _replay
        return keep.replay(argv[1:], replay_parser(), lambda args: _replay(argv[1:]), _play)
    if argv[:1] == ["export"]:
        return keep.export(argv[1:])
    if argv[:1] == ["compare"]:
        from torchpar_top.outputs import compare

        return compare(argv[1:])
    if argv[:1] == ["run"]:
        target, args = _run_target(argv[1:])
    elif argv[:1] == ["attach"]:
        target, args = _attach_target(argv[1:])
    else:
        parser = main_parser()
        args = parser.parse_args(argv)
        _check_headless(parser, args)
        target = args.experiment
    existed = args.record is not None and os.path.lexists(args.record)
    record = keep.open_record(args.record)  # an unwritable path fails before anything starts
    if not args.headless and terminal_problem():  # bad input is said first, then this
        if record is not None:
            record.close()
            if not existed:
                os.remove(args.record)
        check_terminal()

    from torchpar_top.sources.live.session import Session

    session = Session(
        target,
        interval=args.interval,
        sync=getattr(args, "sync", False),
        gpu_probe=_gpu_probe(),
        stack_source=_stack_source(),
        stacks=not args.no_stacks,
    )
    atexit.register(session.close)  # however we leave, the child's process group goes with us
    outputs = _outputs(session, args)
    recorder = keep.start_recorder(record, session, argv)
    atexit.register(keep.stop_recorder, recorder)  # runs first (last in, first out); idempotent
    if args.headless:
        from torchpar_top.sinks import headless

        stop = threading.Event()
        signals = QuitSignals(lambda: stop.set())
        status = headless.run(session, args.duration, sys.stdout, stop=stop)
        keep.stop_recorder(recorder)
        outputs.finish(  # stdout: JSON only
            sys.stderr, quit_by=_reader_gone(status), received=signals.received, duration=args.duration
        )
        return signals.status(status)

    from torchpar_top.tui.app import TorchparTopApp, quiet_gc

    # a frame per sample: never faster than 10 Hz, slower with a longer --interval (nothing new between)
    app = TorchparTopApp(session, render_interval=max(0.1, args.interval))
    signals = QuitSignals(app.quit_from_signal)
    quiet_gc()
    app.run()
    session.close()
    keep.stop_recorder(recorder)
    outputs.finish(sys.stdout, quit_by="quit", received=signals.received)  # after the alternate screen
    return signals.status(0)


def _outputs(session: Any, args: argparse.Namespace) -> Any:
    """The verdict's tally and ``--metrics-port``'s server (a port in use: exit 2 before anything runs)."""
    from torchpar_top.outputs import Outputs

    outputs = Outputs(session, args)
    atexit.register(outputs.close)
    outputs.start()
    return outputs


class QuitSignals:
    """SIGINT, SIGTERM and SIGHUP (terminal closed) as a request to quit: the first one calls ``on_first``,
    which must only schedule the quit (it runs inside a signal handler); the ones after it are ignored,
    so a stop in progress is never re-entered (a deadlock) nor interrupted (a traceback, a child left)."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, on_first: Callable[[], None]) -> None:
        """Install the handler for :attr:`HANDLED`."""
        self.received: int | None = None
        """The first signal received, or None."""
        self._on_first = on_first
        for sig in self.HANDLED:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        """The handler: remember the first signal and ask once."""
        if self.received is None:
            self.received = signum
            self._on_first()

    def status(self, otherwise: int) -> int:
        """128 + the signal that ended the run (as shells report it), else ``otherwise``."""
        return 128 + self.received if self.received is not None else otherwise


def _reader_gone(status: int) -> str:
    """What ended a headless run whose JSON lines nobody read any more (``| head -1``), or ''."""
    from torchpar_top.sinks.headless import BROKEN_PIPE_STATUS

    return "stdout closed (its reader went away)" if status == BROKEN_PIPE_STATUS else ""


def _check_headless(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.headless and args.duration is None:
        parser.error("--headless needs --duration SECONDS")
    if args.duration is not None and not args.headless:
        parser.error("--duration only applies with --headless")


def _run_target(argv: list[str]) -> tuple[Any, argparse.Namespace]:
    from torchpar_top.probes.agent.run import check_target
    from torchpar_top.sources.live.targets import ScriptTarget

    parser = run_parser()
    ours, what, is_module, user_args = split_run(argv)
    args = parser.parse_args(ours)
    _check_headless(parser, args)
    if what is None:
        parser.error("-m needs a MODULE name" if is_module else "run needs a script (SCRIPT.py) or -m MODULE")
    problem = check_target(what, is_module)
    if problem:
        parser.exit(2, f"torchpar-top: error: {problem}\n")
    if args.sync_scope != "op" and not args.sync:
        parser.error("--sync-scope only applies with --sync")
    warning = nproc_warning(args.nproc_per_node)
    if warning:
        print(f"torchpar-top: warning: {warning}", file=sys.stderr)
    target = ScriptTarget(
        what,
        tuple(user_args),
        module=is_module,
        nproc=args.nproc_per_node,
        sync_scope=args.sync_scope,
        every_op=args.every_op,
        cupti_duty=args.cupti_duty,
    )
    return target, args


def _attach_target(argv: list[str]) -> tuple[Any, argparse.Namespace]:
    from torchpar_top.probes.host.process import check_attach
    from torchpar_top.sources.live.targets import AttachTarget

    parser = attach_parser()
    args = parser.parse_args(argv)
    _check_headless(parser, args)
    problem = check_attach(args.pid)
    if problem:
        parser.exit(2, f"torchpar-top: error: {problem}\n")
    return AttachTarget(args.pid), args


def _replay(argv: list[str]) -> int:
    """``torchpar-top replay TRACE``: play a recorded trace on the screen (or headless), or ``--summary``."""
    from torchpar_top.analysis import TraceError, analyse_path, summary

    parser = replay_parser()
    args = parser.parse_args(argv)
    if args.summary:
        if args.headless or args.duration is not None:
            parser.error("--summary prints one object: --headless and --duration do not apply")
        try:
            result = summary(analyse_path(args.trace))
        except TraceError as exc:
            parser.exit(2, f"torchpar-top: error: {exc}\n")
        if result["note"]:
            print(f"torchpar-top: note: {result['note']}", file=sys.stderr)
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if args.duration is not None and not args.headless:
        parser.error("--duration only applies with --headless")

    from torchpar_top.sources.trace import DEFAULT_SPEED, TraceReplay

    try:
        session = TraceReplay(args.trace, interval=args.interval or 0.1, speed=args.speed or DEFAULT_SPEED)
    except TraceError as exc:
        parser.exit(2, f"torchpar-top: error: {exc}\n")
    from torchpar_top.analysis import NO_GPU_NOTE

    return _play(session, args, note="" if session.analysis.has_gpu else NO_GPU_NOTE)


def _play(session: Any, args: argparse.Namespace, note: str = "") -> int:
    """Play a replay's session (a trace's or a recording's) headless or on the screen, then the verdict;
    ``note`` goes to stderr in headless mode."""
    atexit.register(session.close)  # the clock's thread stops however we leave
    outputs = _outputs(session, args)
    if args.headless:
        from torchpar_top.sinks import headless

        if note:
            print(f"torchpar-top: note: {note}", file=sys.stderr)

        stop = threading.Event()
        signals = QuitSignals(stop.set)
        status = headless.run(session, args.duration or math.inf, sys.stdout, stop=stop)
        outputs.finish(
            sys.stderr, quit_by=_reader_gone(status), received=signals.received, duration=args.duration
        )
        return signals.status(status)

    check_terminal()  # after the file loaded: its errors come first
    from torchpar_top.tui.app import TorchparTopApp, quiet_gc

    app = TorchparTopApp(session)
    signals = QuitSignals(app.quit_from_signal)
    quiet_gc()
    app.run()
    session.close()
    outputs.finish(sys.stdout, quit_by="quit", received=signals.received)
    return signals.status(0)


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
