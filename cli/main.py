"""The ``torchpar-top`` command: parse arguments, build a session, hand it to the TUI or headless mode."""

from __future__ import annotations

import argparse
import atexit
import functools
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from torchpar_top import keep
from torchpar_top.args import (
    check_terminal,
    fail,
    nproc_warning,
    parse,
    terminal_problem,
    usage_error,
)
from torchpar_top.outputs import print_summary


def _quiet_interrupt(entry: Callable[..., int]) -> Callable[..., int]:
    """Ctrl-C before the signal handlers are in place (a large trace or recording loading for replay,
    export or --summary) ends the command quietly with 130, as a shell reports SIGINT, no traceback."""

    @functools.wraps(entry)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        try:
            return entry(*args, **kwargs)
        except KeyboardInterrupt:
            _ignore_interrupts()
            return 128 + signal.SIGINT

    return wrapper


def _ignore_interrupts() -> None:
    """Ctrl-C ignored from now on (a second one while Python ends: no traceback), even when it comes
    before that is in place: on a loaded machine the first KeyboardInterrupt can take longer to unwind
    (a large document freed on the way) than a person takes to press Ctrl-C again, and the second one
    then landed inside ``signal.signal`` (a traceback, status -2). Asked again until it holds; once it
    does, a Ctrl-C already pending finds SIG_IGN and raises nothing."""
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return
        except KeyboardInterrupt:
            continue


@_quiet_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.command == "replay":
        return _replay(args)
    if args.command == "export":
        return keep.export(args)
    if args.command == "cluster":
        from torchpar_top.cluster import cluster

        return cluster(args)
    if args.command == "compare":
        from torchpar_top.outputs import compare

        return compare(args)
    return _live(args, argv)  # the built-in experiment, run or attach


def _live(args: argparse.Namespace, argv: list[str]) -> int:
    """A live session (a built-in experiment, ``run`` or ``attach``) on the screen or headless."""
    _check_headless(args)
    if args.command == "run":
        target = _run_target(args)
    elif args.command == "attach":
        target = _attach_target(args)
    else:
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
        signals = QuitSignals(stop.set, session.hang_up)
        status = headless.run(session, args.duration, sys.stdout, stop=stop)
        keep.stop_recorder(recorder)
        outputs.finish(  # stdout: JSON only
            sys.stderr, quit_by=_reader_gone(status), received=signals.received, duration=args.duration
        )
        return signals.status(outputs.status(status))

    from torchpar_top.tui.app import TorchparTopApp, quiet_gc

    # a frame per sample: never faster than 10 Hz, slower with a longer --interval (nothing new between)
    app = TorchparTopApp(session, render_interval=max(0.1, args.interval))
    signals = QuitSignals(app.quit_from_signal, session.hang_up)
    quiet_gc()
    app.run()
    session.close()
    keep.stop_recorder(recorder)
    outputs.finish(sys.stdout, quit_by="quit", received=signals.received)  # after the alternate screen
    return signals.status(outputs.status(0))


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
    so a stop in progress is never re-entered (a deadlock) nor interrupted (a traceback, a child left).
    A SIGHUP first calls ``on_hangup`` (a live session's :meth:`Session.hang_up`: its close then stops the
    user's code at once, as the hang-up would have without torchpar-top; Ctrl-C, ``q`` and SIGTERM let
    it unwind)."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, on_first: Callable[[], None], on_hangup: Callable[[], None] | None = None) -> None:
        """Install the handler for :attr:`HANDLED`."""
        self.received: int | None = None
        """The first signal received, or None."""
        self._on_first = on_first
        self._on_hangup = on_hangup
        for sig in self.HANDLED:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        """The handler: remember the first signal and ask once."""
        if signum == signal.SIGHUP and self._on_hangup is not None:
            self._on_hangup()  # also after a q: the terminal is gone, nobody waits to read
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


def _check_headless(args: argparse.Namespace) -> None:
    if args.headless and args.duration is None:
        usage_error(args, "--headless needs --duration SECONDS")
    if args.duration is not None and not args.headless:
        usage_error(args, "--duration only applies with --headless")


def _run_target(args: argparse.Namespace) -> Any:
    """``run``'s target: the script or module with its arguments (split off by :func:`~.args.parse`)."""
    from torchpar_top.args import NODE_OPTIONS, check_nodes
    from torchpar_top.probes.agent.run import check_target
    from torchpar_top.sources.live.targets import Nodes, ScriptTarget

    if args.target is None:
        usage_error(
            args, "-m needs a MODULE name" if args.module else "run needs a script (SCRIPT.py) or -m MODULE"
        )
    problem = check_target(args.target, args.module)
    if problem:
        fail(problem)
    if args.sync_scope != "op" and not args.sync:
        usage_error(args, "--sync-scope only applies with --sync")
    problem = check_nodes(args)
    if problem:
        fail(problem)
    warning = nproc_warning(args.nproc_per_node)
    if warning:
        print(f"torchpar-top: warning: {warning}", file=sys.stderr)
    nodes = {f[2:].replace("-", "_"): getattr(args, f[2:].replace("-", "_")) for f in NODE_OPTIONS}
    return ScriptTarget(
        args.target,
        tuple(args.target_args),
        module=args.module,
        nproc=args.nproc_per_node,
        sync_scope=args.sync_scope,
        every_op=args.every_op,
        cupti_duty=args.cupti_duty,
        queues=not args.no_queues,
        step_records=args.record is not None,  # only a recording's export draws them
        nodes=Nodes(**nodes, standalone=args.standalone),
    )


def _attach_target(args: argparse.Namespace) -> Any:
    from torchpar_top.probes.host.process import check_attach
    from torchpar_top.sources.live.targets import AttachTarget

    problem = check_attach(args.pid)
    if problem:
        fail(problem)
    return AttachTarget(args.pid)


def _replay(args: argparse.Namespace) -> int:
    """``torchpar-top replay FILE``: a recorded trace here, a recording or an export in :mod:`.keep`;
    on the screen, headless, or ``--summary``."""
    from torchpar_top.contract.recording import sniff

    if args.summary and (args.headless or args.duration is not None):
        usage_error(args, "--summary prints one object: --headless and --duration do not apply")
    if args.duration is not None and not args.headless:
        usage_error(args, "--duration only applies with --headless")
    kind = sniff(args.trace)
    if kind != "trace":
        return keep.replay(args, kind, _play)
    from torchpar_top.analysis import NO_GPU_NOTE, TraceError, analyse_path, summary

    if args.summary:
        try:
            result = summary(analyse_path(args.trace))
        except TraceError as exc:
            fail(str(exc))
        print_summary(result, result["note"])
        return 0
    from torchpar_top.sources.trace import DEFAULT_SPEED, TraceReplay

    try:
        session = TraceReplay(args.trace, interval=args.interval or 0.1, speed=args.speed or DEFAULT_SPEED)
    except TraceError as exc:
        fail(str(exc))
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
        return signals.status(outputs.status(status))

    check_terminal()  # after the file loaded: its errors come first
    from torchpar_top.tui.app import TorchparTopApp, quiet_gc

    app = TorchparTopApp(session)
    signals = QuitSignals(app.quit_from_signal)
    quiet_gc()
    app.run()
    session.close()
    outputs.finish(sys.stdout, quit_by="quit", received=signals.received)
    return signals.status(outputs.status(0))


def _gpu_probe() -> Any:
    """The NVML probe, or None when the probe module is not available."""
    try:
        from torchpar_top.probes.host.nvml import NvmlProbe
    except ImportError:
        return None
    return NvmlProbe()


def _stack_source() -> Callable[[int], Any]:
    """A function that starts a py-spy stack poller (about 2 Hz) for a pid (``attach``: no agent)."""
    from torchpar_top.probes.host.stacks import StackPoller, StackSampler

    def start(pid: int) -> StackPoller:
        poller = StackPoller(StackSampler(pid))
        poller.start()
        return poller

    return start


if __name__ == "__main__":
    sys.exit(main())
