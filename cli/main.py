"""The ``torchpar-top`` command: parse arguments, build a session, hand it to the TUI or headless mode."""

from __future__ import annotations

import argparse
import atexit
import signal
import sys
from typing import NoReturn, Sequence

from torchpar_top import __version__, workloads


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (``torchpar-top: error: ...``) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = _Parser(
        prog="torchpar-top",
        description="top for PyTorch parallelism: runs an experiment in a child process and shows, live, "
        "per-core load, the child's threads by role, launch-queue depth per executor, busy lanes and "
        "overlap, and async vs sync throughput.",
        epilog="Keys in the TUI: s sync on/off, +/- intra-op threads, w experiment, p pause, ? help, q quit.",
    )
    parser.add_argument(
        "--experiment", "-e", default=workloads.DEFAULT, choices=workloads.names(), metavar="NAME",
        help=f"built-in experiment: {', '.join(workloads.names())} (default: {workloads.DEFAULT})",
    )
    parser.add_argument("--interval", type=_positive, default=0.1, metavar="SECONDS",
                        help="seconds between samples (default: 0.1)")
    parser.add_argument("--sync", action="store_true", help="start in SYNC mode (synchronize after every op)")
    parser.add_argument("--headless", action="store_true",
                        help="no screen: write one JSON object per sample to stdout, then exit")
    parser.add_argument("--duration", type=_positive, metavar="SECONDS",
                        help="with --headless: how long to run (required there)")
    parser.add_argument("--version", action="version", version=f"torchpar-top {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.headless and args.duration is None:
        parser.error("--headless needs --duration SECONDS")
    if args.duration is not None and not args.headless:
        parser.error("--duration only applies with --headless")

    from torchpar_top.session.session import Session

    session = Session(args.experiment, interval=args.interval, sync=args.sync, gpu_probe=_gpu_probe())
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


if __name__ == "__main__":
    sys.exit(main())
