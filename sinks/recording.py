"""The ``--record`` writer: a small thread that takes the session's snapshot after each host sample and
writes it as the next line of a recording (the format, its encoder and its reader are
:mod:`torchpar_top.contract.recording`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import IO, Any

from torchpar_top.contract.codec import to_plain
from torchpar_top.contract.messages import VERSION as PROTOCOL_VERSION
from torchpar_top.contract.recording import FORMAT, FORMAT_VERSION, Encoder, Header, machine_info
from torchpar_top.contract.snapshot import ChildStatus, Snapshot


class Recorder:
    """Writes a session's snapshots to a file: a small thread takes ``session.snapshot()`` after each
    host sample (as headless mode does), so the TUI and headless mode record the same thing.

    Times are the start's wall time plus monotonic seconds (a wall clock stepped back loses nothing).
    Problems while recording (a full disk, the file deleted) are said through ``say`` as they happen
    (the live session's log: on the screen) and kept in :attr:`error`.
    """

    #: Seconds between two checks that the file is still there.
    CHECK_EVERY = 1.0

    def __init__(
        self,
        session: Any,
        out: IO[str],
        command: Sequence[str],
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        say: Callable[[str], None] | None = None,
    ) -> None:
        """Nothing is written until :meth:`start` (or :meth:`write`)."""
        self.session = session
        self._out = out
        self._command = tuple(command)
        self._clock = clock
        self._monotonic = monotonic
        self._started = clock()
        self._m0 = monotonic()
        self._say = say
        self.path = str(getattr(out, "name", "") or "")
        self._encoder = Encoder()
        self._header_written = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen = -1
        self._last_child: ChildStatus | None = None
        self._checked = 0.0
        self.lines = 0
        """Snapshot lines written."""
        self.error: str | None = None
        """Why recording stopped early (the disk filled...), or None."""
        self.deleted = False
        """The file was deleted while being written (the lines go nowhere a reader can find)."""
        self.skipped = 0
        """Snapshots left out because a number in them was not finite (not JSON)."""
        self.skip_reason = ""

    def start(self) -> None:
        """Write the header now (an unwritable file is found before the run: :attr:`error`), then start the
        recording thread."""
        with self._lock:
            if not self._header_written and self.error is None:
                try:
                    self._write_header(None)
                except (OSError, ValueError) as exc:
                    self._fail(exc, started=False)
        if self.error is None:
            self._thread = threading.Thread(target=self._loop, name="tpt-recorder", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.session.interval / 4):
            self._take()
            self._check_deleted()

    def _check_deleted(self, now: bool = False) -> None:
        """Say once if the file was deleted (checked every :attr:`CHECK_EVERY` s, or ``now``)."""
        if self.deleted:
            return
        if not now:
            t = time.monotonic()
            if t - self._checked < self.CHECK_EVERY:
                return
            self._checked = t
        try:
            gone = os.fstat(self._out.fileno()).st_nlink == 0
        except (OSError, ValueError, AttributeError):
            return
        if gone:
            self.deleted = True
            self._tell(f"the recording {self.path} was deleted while being written: what follows is lost")

    def _tell(self, text: str) -> None:
        if self._say is not None:
            with contextlib.suppress(Exception):  # the screen's log is a courtesy: recording goes on
                self._say(text)

    def _fail(self, exc: BaseException, started: bool = True) -> None:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if not started:
            self.error = f"cannot write {self.path or 'the recording'}: {why}"
        else:
            self.error = f"recording {self.path} stopped: {why}" if self.path else f"recording stopped: {why}"
        self._tell(self.error)

    def _take(self, final: bool = False) -> None:
        """Write the session's snapshot when a host sample came since the last one written; ``final``
        (at close), also when the child's status changed without one (it exited after the last host
        sample: the recording must end on how the run ended)."""
        samples = self.session.host_samples
        if samples == 0:
            return
        if samples == self._seen:
            if final:
                snap = self.session.snapshot()
                if snap.child != self._last_child:
                    self.write(snap)
            return
        self._seen = samples
        self.write(self.session.snapshot())

    def write(self, snap: Snapshot) -> None:
        """Write ``snap`` as the next line (after the header, the first time), and flush."""
        with self._lock:
            if self.error is not None or self._out.closed:
                return
            snap = dataclasses.replace(snap, t=self._started + (self._monotonic() - self._m0))
            try:
                line = self._encoder.line(snap)
            except ValueError as exc:  # a NaN somewhere: this snapshot is left out, the next ones are not
                self.skipped += 1
                self.skip_reason = str(exc)
                return
            try:
                if not self._header_written:
                    self._write_header(snap)
                self._out.write(line)
                self._out.flush()
                self.lines += 1
                self._last_child = snap.child
            except (OSError, ValueError) as exc:
                self._fail(exc)

    def _write_header(self, snap: Snapshot | None) -> None:
        header = Header(
            FORMAT,
            FORMAT_VERSION,
            PROTOCOL_VERSION,
            self._command,
            datetime.fromtimestamp(self._started, timezone.utc).isoformat(timespec="seconds"),
            self._started,
            self.session.interval,
            machine_info(snap),
        )
        self._out.write(json.dumps(to_plain(header), separators=(",", ":")) + "\n")
        self._out.flush()
        self._header_written = True

    def close(self) -> None:
        """Stop the thread, write the last snapshot if it is new, close the file. Idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        if not self._out.closed:
            try:
                self._take(final=True)
                self._check_deleted(now=True)
                with self._lock:
                    if not self._header_written and self.error is None:
                        self._write_header(None)
            except (OSError, ValueError) as exc:
                self._fail(exc)
            finally:
                try:
                    self._out.close()
                except OSError as exc:
                    if self.error is None:
                        self._fail(exc)
