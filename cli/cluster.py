"""``torchpar-top cluster``: parse, check, then the screen or headless lines, then the report."""

from __future__ import annotations

import argparse
import os
import sys
import threading

from torchpar_top import __version__


def cluster(args: argparse.Namespace) -> int:
    """Entry point of ``torchpar-top cluster`` (its parsed arguments); returns the exit status."""
    from torchpar_top.args import fail, usage_error
    from torchpar_top.main import QuitSignals
    from torchpar_top.sinks.cluster import ClusterTally, render, run_headless, write_report
    from torchpar_top.sources.prometheus import ClusterSource, check_url

    if args.headless and args.duration is None:
        usage_error(args, "--headless needs --duration SECONDS")
    if args.duration is not None and not args.headless:
        usage_error(args, "--duration only applies with --headless")
    problem = check_url(args.prometheus)
    if not problem and args.report:
        folder = os.path.dirname(os.path.abspath(args.report))
        if os.path.isdir(args.report) or not os.path.isdir(folder):
            problem = (
                f"--report {args.report}: {'is a folder' if os.path.isdir(args.report) else 'no such folder'}"
            )
    if problem:
        fail(problem)
    source = ClusterSource(args.prometheus, args.job, args.nodes)
    tally = ClusterTally()
    try:
        if args.headless:
            stop = threading.Event()
            signals = QuitSignals(stop.set)
            status = run_headless(
                source.refresh, tally, source.url, args.job, args.duration, args.interval, sys.stdout, stop
            )
            if status:
                return status
            ended = f"--duration {args.duration:g} s reached"
            out = sys.stderr
        else:
            from torchpar_top.tui.cluster import ClusterApp

            app = ClusterApp(source, args.interval, source.url, args.job, on_view=tally.add)
            signals = QuitSignals(app.quit_from_signal)
            app.run()
            ended, out = "quit", sys.stdout
    finally:
        source.close()
    if signals.received is not None:
        import signal

        ended = f"ended by {signal.Signals(signals.received).name}"
    report = tally.report(source.url, args.job, ended, f"torchpar-top {__version__}")
    problem = ""
    if args.report:
        try:
            write_report(report, args.report)
        except OSError as exc:
            problem = f"torchpar-top: error: --report {args.report}: {exc.strerror or exc}\n"
    try:
        out.write(render(report, None if problem else args.report) + problem)
        out.flush()
    except (BrokenPipeError, ValueError, OSError):
        pass
    return signals.status(0)
