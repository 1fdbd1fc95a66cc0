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


def _note(text: str) -> None:
    print(f"torchpar-top: {text}", file=sys.stderr, flush=True)


def open_record(path: str | None) -> Any:
    """The file ``--record`` writes, opened before anything starts (an unwritable path or a full disk fails
    at once; a FIFO without a reader is waited for, said on stderr, Ctrl-C gives up with status 130)."""
    if path is None:
        return None
    from torchpar_top.contract.recording import RecordingError, check_writable, open_output

    try:
        out = open_output(path, say=_note)
        check_writable(out, path)
        return out
    except RecordingError as exc:
        fail(f"--record {exc}")
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def start_recorder(out: Any, session: Any, command: Sequence[str]) -> Any:
    """A :class:`~torchpar_top.sinks.recording.Recorder` of ``session`` into ``out`` (None: none): its
    header is written now (a destination that takes no bytes, ``/dev/full``, ends the command with status
    2 before the run), and what goes wrong later (a full disk, the file deleted) is said in the session's
    log, on the screen.

    Close it after the session: it writes the last snapshot and closes the file."""
    if out is None:
        return None
    from torchpar_top.contract.vocab import LogSource
    from torchpar_top.sinks.recording import Recorder

    store = getattr(session, "store", None)
    say = (lambda text: store.add_log(LogSource.APP, text)) if store is not None else None
    recorder = Recorder(session, out, command, say=say)
    recorder.start()
    if recorder.error:
        recorder.close()
        fail(f"--record {recorder.error}")
    return recorder


def stop_recorder(recorder: Any) -> None:
    """Close the recorder; says on stderr if recording stopped early (a full disk)."""
    if recorder is None:
        return
    recorder.close()
    if recorder.error:
        print(f"torchpar-top: warning: {recorder.error}", file=sys.stderr)
    elif recorder.deleted:
        print(
            f"torchpar-top: warning: the recording {recorder.path} was deleted during the run",
            file=sys.stderr,
        )
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
    from torchpar_top.contract.recording import (
        RecordingError,
        RecordingReader,
        headless_output,
        read_recording,
    )
    from torchpar_top.sinks.export import export_summary, read_export
    from torchpar_top.sources.recording import RecordingReplay

    if kind == "headless":
        fail(str(headless_output(args.trace)))
    if args.summary:
        if kind == "export":
            usage_error(args, "--summary reads a recording or a trace; an export holds only its counters")
        try:  # streamed: one snapshot held at a time
            reader = RecordingReader(args.trace)
            summary = export_summary(reader)
        except RecordingError as exc:
            fail(str(exc))
        print_summary(summary, reader.note)
        return 0

    try:
        if kind == "export":
            rec, snaps = read_export(args.trace)
            if not snaps:
                fail(f"{args.trace}: an export without samples")
        else:
            rec, snaps = read_recording(args.trace), None
    except RecordingError as exc:
        fail(str(exc))
    try:
        session = RecordingReplay(rec, interval=args.interval, speed=args.speed or 1.0, snapshots=snaps)
    except RecordingError as exc:
        fail(str(exc))
    return play(session, args, rec.note)


def _write(path: str, out: Any, write: Callable[[Any], Any]) -> Any:
    """``write(out)``, then close ``out``; a failed write (a full disk) is one line and status 2, and the
    partial file is removed (a regular file only: never ``/dev/full``)."""
    import stat

    try:
        with out:
            return write(out)
    except OSError as exc:
        try:
            if stat.S_ISREG(os.stat(path).st_mode):
                os.remove(path)
        except OSError:
            pass
        fail(f"cannot write {path}: {exc.strerror or exc}")


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
            outputs.append(open_output(path, say=_note) if path else None)
        except RecordingError as exc:  # a bad path leaves no file behind
            for f, made in zip(outputs, (args.perfetto, args.csv), strict=False):
                if f is not None:
                    f.close()
                    os.remove(made)
            fail(str(exc))
    perfetto_out, csv_out = outputs
    try:
        if perfetto_out is not None:
            n, samples = _write(args.perfetto, perfetto_out, lambda f: write_perfetto(source, f))
            print(
                f"torchpar-top: wrote {args.perfetto}: {n} trace events from {samples} samples "
                "(open it in https://ui.perfetto.dev or chrome://tracing)",
                file=sys.stderr,
            )
        if csv_out is not None:
            rows = _write(args.csv, csv_out, lambda f: write_csv(source, f))
            print(f"torchpar-top: wrote {args.csv}: {rows} rows", file=sys.stderr)
    except RecordingError as exc:  # the recording's header read, but not even its first snapshot decodes
        fail(str(exc))
    if source.note:
        print(f"torchpar-top: note: {source.note}", file=sys.stderr)
    return 0
