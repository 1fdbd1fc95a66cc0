"""Keeping a run: ``--record FILE`` on the live modes, ``replay`` of a recording or an export, ``export``.

Errors are one line and exit status 2 (:func:`~torchpar_top.args.fail`), as everywhere on the command line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from torchpar_top.args import fail, usage_error
from torchpar_top.outputs import print_summary


def open_record(path: str | None) -> Any:
    """The file ``--record`` writes, opened before anything starts (an unwritable path fails at once)."""
    if path is None:
        return None
    from torchpar_top.contract.recording import RecordingError, open_output

    try:
        return open_output(path)
    except RecordingError as exc:
        fail(str(exc))


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


def replay(args: argparse.Namespace, kind: str, play: Callable[[Any, argparse.Namespace, str], int]) -> int:
    """``torchpar-top replay FILE`` of a recording or an export (``kind``, as
    :func:`~torchpar_top.contract.recording.sniff` tells it; ``headless``: JSON lines, which it names).
    ``play(session, args, note)`` runs a session on the screen or headless (``note`` on stderr there)."""
    from torchpar_top.contract.recording import RecordingError, headless_output, read_recording
    from torchpar_top.sinks.export import export_summary, read_export
    from torchpar_top.sources.recording import RecordingReplay

    if kind == "headless":
        fail(str(headless_output(args.trace)))

    try:
        if kind == "export":
            rec, snaps = read_export(args.trace)
            if not snaps:
                fail(f"{args.trace}: an export without samples")
        else:
            rec, snaps = read_recording(args.trace), None
    except RecordingError as exc:
        fail(str(exc))
    if args.summary:
        if kind == "export":
            usage_error(args, "--summary reads a recording or a trace; an export holds only its counters")
        try:
            summary = export_summary(rec)
        except RecordingError as exc:
            fail(str(exc))
        print_summary(summary, rec.note)
        return 0
    try:
        session = RecordingReplay(rec, interval=args.interval, speed=args.speed or 1.0, snapshots=snaps)
    except RecordingError as exc:
        fail(str(exc))
    return play(session, args, rec.note)


def export(args: argparse.Namespace) -> int:
    """``torchpar-top export FILE --perfetto OUT.json --csv OUT.csv``."""
    from torchpar_top.analysis import TraceError
    from torchpar_top.contract.recording import RecordingError, open_output
    from torchpar_top.sinks.export import load_source, write_csv, write_perfetto

    if not args.perfetto and not args.csv:
        usage_error(args, "export needs --perfetto OUT.json, --csv OUT.csv or both")
    try:
        source = load_source(args.file)
    except (RecordingError, TraceError) as exc:
        fail(str(exc))
    outputs: list[Any] = []
    for path in (args.perfetto, args.csv):
        try:
            outputs.append(open_output(path) if path else None)
        except RecordingError as exc:  # a bad path leaves no file behind
            for f, made in zip(outputs, (args.perfetto, args.csv), strict=False):
                if f is not None:
                    f.close()
                    os.remove(made)
            fail(str(exc))
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
