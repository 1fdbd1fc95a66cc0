"""What goes out of a run besides the screen or the JSON lines: the end-of-run verdict (printed, and
``--report FILE.json``), the Prometheus endpoint (``--metrics-port``), and ``torchpar-top compare``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import stat
import sys
from typing import Any, TextIO

from torchpar_top import __version__
from torchpar_top.args import fail
from torchpar_top.contract.snapshot import Snapshot
from torchpar_top.contract.vocab import CHILD_ENDED, ChildState


class Outputs:
    """The verdict's tally and the metrics server around one session, from start to end.

    Build it before the session starts (a port in use ends the command with status 2 before anything
    runs), call :meth:`start` once it runs, and :meth:`finish` once it has ended (or been closed).
    """

    def __init__(self, session: Any, args: argparse.Namespace) -> None:
        from torchpar_top.sinks.verdict import RunTally, TallyWatch

        self.session = session
        self.report_path: str | None = args.report
        self.tally = RunTally()
        self.watch = TallyWatch(
            session.snapshot,
            self.tally,
            session.interval,
            getattr(session, "recent_snapshot", None),
            getattr(session, "built", None),
        )
        self.metrics = None
        if args.report:
            _check_writable(args.report)
        if args.metrics_port is not None:
            from torchpar_top.sinks.metrics import MetricsError, MetricsServer, SnapshotCollector

            try:
                self.metrics = MetricsServer(
                    SnapshotCollector(session.snapshot, version=__version__),
                    args.metrics_port,
                    args.metrics_addr,
                )
            except MetricsError as exc:
                fail(str(exc))
        self._started = False
        self._finished = False
        self.failed = False
        """``--report`` could not be written (the status is then non-zero)."""

    def start(self) -> None:
        """Start feeding the tally (call once the session has started)."""
        if not self._started:
            self._started = True
            self.watch.start()

    def finish(
        self, out: TextIO, quit_by: str = "", received: int | None = None, duration: float | None = None
    ) -> None:
        """The run ended: stop the metrics server, print the verdict on ``out`` and write ``--report``.

        Args:
            quit_by: how the user ended it when it did not end by itself (``q``).
            received: the signal that ended it, if one did.
            duration: ``--duration`` when given (headless).
        """
        if self._finished:
            return
        self._finished = True
        if self.metrics is not None:
            self.metrics.close()
        from torchpar_top.sinks import verdict

        if self._started:
            self.watch.stop()
        final = self.session.snapshot()
        report = self.tally.report(
            final, _ended_by(final, quit_by, received, duration), f"torchpar-top {__version__}"
        )
        problem = ""
        if self.report_path:
            try:
                verdict.write(report, self.report_path)
            except OSError as exc:
                problem = f"torchpar-top: error: --report {self.report_path}: {exc.strerror or exc}\n"
                self.failed = True
        try:
            out.write(verdict.render(report, None if problem else self.report_path) + problem)
            out.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # nobody reads the terminal any more: the file still has it

    def status(self, otherwise: int) -> int:
        """``otherwise``, or 1 when it is 0 but ``--report`` could not be written."""
        return 1 if self.failed and otherwise == 0 else otherwise

    def close(self) -> None:
        """Stop everything this started without a report (an error path)."""
        if self.metrics is not None:
            self.metrics.close()
        if self._started:
            self.watch.stop()


def _ended_by(final: Snapshot, quit_by: str, received: int | None, duration: float | None) -> str:
    state = final.child.state
    if state == ChildState.FINISHED:
        recorded = final.replay is not None and final.replay.recorded
        return f"the replay reached the {'recording' if recorded else 'trace'}'s end"
    if state in CHILD_ENDED and final.child.message:
        return final.child.message
    if received is not None:
        return f"ended by {signal.Signals(received).name}"
    if quit_by:
        return quit_by
    if duration is not None:
        return f"--duration {duration:g} s reached"
    return ""


def print_summary(summary: Any, note: str | None) -> None:
    """``replay --summary``'s object on stdout, its note (if any) on stderr."""
    if note:
        print(f"torchpar-top: note: {note}", file=sys.stderr)
    json.dump(summary, sys.stdout, indent=1)
    sys.stdout.write("\n")


#: The least free space ``--report``'s file system must have at the start (a report is a few kB).
MIN_FREE = 1 << 20


def _check_writable(path: str) -> None:
    """``--report`` must be writable: its folder there and writable, a file there writable, space on the
    disk, a device that takes bytes (``/dev/full`` does not): say so now, not after the run."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        fail(f"--report {path}: is a folder")
    if not os.path.isdir(folder):
        fail(f"--report {path}: no such folder {folder}")
    exists = os.path.exists(path)
    if not os.access(path if exists else folder, os.W_OK):
        fail(f"--report {path}: {os.strerror(13)} ({'the file' if exists else 'its folder'} is not writable)")
    try:
        if exists and not stat.S_ISREG(os.stat(path).st_mode):
            with open(path, "w") as probe:  # a device: does it take a byte?
                probe.write("\n")
        else:
            vfs = os.statvfs(folder)
            if vfs.f_bavail * vfs.f_frsize < MIN_FREE:
                raise OSError(28, os.strerror(28))
    except OSError as exc:
        fail(f"--report {path}: {exc.strerror or exc}")


def compare(args: argparse.Namespace) -> int:
    """``torchpar-top compare A.json B.json [--tolerance X] [--metric NAME]``: 1 when the figure fell."""
    from torchpar_top.sinks.verdict import ReportError, load
    from torchpar_top.sinks.verdict import compare as side_by_side

    try:
        a, b = load(args.a), load(args.b)
        result = side_by_side(
            a, b, args.tolerance, args.metric, (os.path.basename(args.a), os.path.basename(args.b))
        )
    except ReportError as exc:
        fail(str(exc))
    sys.stdout.write(result.text)
    return 1 if result.regressed else 0
