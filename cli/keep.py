"""Keeping a run: ``--record FILE`` on the live modes, ``replay`` of a recording or an export, ``export``.

Errors are one line and exit status 2, as everywhere on the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from torchpar_top.args import export_parser


def _fail(message: str) -> NoReturn:
    print(f"torchpar-top: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def open_record(path: str | None) -> Any:
    """The file ``--record`` writes, opened before anything starts (an unwritable path fails at once)."""
    if path is None:
        return None
    from torchpar_top.contract.recording import RecordingError, open_output

    try:
        return open_output(path)
    except RecordingError as exc:
        _fail(str(exc))


def start_recorder(out: Any, session: Any, command: Sequence[str]) -> Any:
    """A :class:`~torchpar_top.contract.recording.Recorder` of ``session`` into ``out`` (None: none).

    Close it after the session: it writes the last snapshot and closes the file."""
    if out is None:
        return None
    from torchpar_top.contract.recording import Recorder

    recorder = Recorder(session, out, command)
    recorder.start()
    return recorder


def stop_recorder(recorder: Any) -> None:
    """Close the recorder; says on stderr if recording stopped early (a full disk)."""
    if recorder is None:
        return
    recorder.close()
    if recorder.error:
        print(f"torchpar-top: warning: {recorder.error}", file=sys.stderr)
    if recorder.skipped:
        print(
            f"torchpar-top: warning: {recorder.skipped} snapshots left out of the recording "
            f"({recorder.skip_reason})",
            file=sys.stderr,
        )


def replay(
    argv: list[str],
    parser: argparse.ArgumentParser,
    trace_replay: Callable[[argparse.Namespace], int],
    play: Callable[[Any, argparse.Namespace, str], int],
) -> int:
    """``torchpar-top replay FILE``: a recording or an export is played here; a trace goes to
    ``trace_replay``. ``play(session, args, note)`` runs a session on the screen or headless (``note`` on
    stderr there)."""
    from torchpar_top.contract.recording import sniff

    args = parser.parse_args(argv)
    kind = sniff(args.trace)
    if kind == "trace":
        return trace_replay(args)
    from torchpar_top.contract.recording import RecordingError, headless_output, read_recording
    from torchpar_top.sinks.export import export_summary, read_export
    from torchpar_top.sources.recording import RecordingReplay

    if kind == "headless":
        _fail(str(headless_output(args.trace)))

    try:
        if kind == "export":
            rec, snaps = read_export(args.trace)
            if not snaps:
                _fail(f"{args.trace}: an export without samples")
        else:
            rec, snaps = read_recording(args.trace), None
    except RecordingError as exc:
        _fail(str(exc))
    if args.summary:
        if args.headless or args.duration is not None:
            parser.error("--summary prints one object: --headless and --duration do not apply")
        if kind == "export":
            parser.error("--summary reads a recording or a trace; an export holds only its counters")
        try:
            summary = export_summary(rec)
        except RecordingError as exc:
            _fail(str(exc))
        if rec.note:
            print(f"torchpar-top: note: {rec.note}", file=sys.stderr)
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if args.duration is not None and not args.headless:
        parser.error("--duration only applies with --headless")
    try:
        session = RecordingReplay(rec, interval=args.interval, speed=args.speed or 1.0, snapshots=snaps)
    except RecordingError as exc:
        _fail(str(exc))
    return play(session, args, rec.note)


def export(argv: list[str]) -> int:
    """``torchpar-top export FILE --perfetto OUT.json --csv OUT.csv``."""
    from torchpar_top.analysis import TraceError
    from torchpar_top.contract.recording import RecordingError, open_output
    from torchpar_top.sinks.export import load_source, write_csv, write_perfetto

    parser = export_parser()
    args = parser.parse_args(argv)
    if not args.perfetto and not args.csv:
        parser.error("export needs --perfetto OUT.json, --csv OUT.csv or both")
    try:
        source = load_source(args.file)
    except (RecordingError, TraceError) as exc:
        _fail(str(exc))
    outputs: list[Any] = []
    for path in (args.perfetto, args.csv):
        try:
            outputs.append(open_output(path) if path else None)
        except RecordingError as exc:  # a bad path leaves no file behind
            for f, made in zip(outputs, (args.perfetto, args.csv)):
                if f is not None:
                    f.close()
                    os.remove(made)
            _fail(str(exc))
    perfetto_out, csv_out = outputs
    if source.note:
        print(f"torchpar-top: note: {source.note}", file=sys.stderr)
    if perfetto_out is not None:
        with perfetto_out:
            n = write_perfetto(source, perfetto_out)
        print(
            f"torchpar-top: wrote {args.perfetto}: {n} trace events from {len(source.samples)} samples "
            "(open it in https://ui.perfetto.dev or chrome://tracing)",
            file=sys.stderr,
        )
    if csv_out is not None:
        with csv_out:
            rows = write_csv(source, csv_out)
        print(f"torchpar-top: wrote {args.csv}: {rows} rows", file=sys.stderr)
    return 0
