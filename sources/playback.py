"""What the two replays share: :class:`~torchpar_top.sources.trace.TraceReplay` (a profiler trace) and
:class:`~torchpar_top.sources.recording.RecordingReplay` (a recording of a run).

Both are a position on a timeline moved by a clock thread (``interval`` seconds on screen, ``interval ×
speed`` of the timeline), commands that pause, step, seek and change the speed under one lock, a log of
their own, one snapshot built per change, and polite refusals of what only a live run can do. A subclass
says what its timeline is (:meth:`_span`, :meth:`_origin`, :meth:`_jump`), how a tick and a step move on,
and how a snapshot is built; the rest is here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import ClassVar

from torchpar_top.contract.snapshot import Experiment, LogLine, Snapshot
from torchpar_top.contract.vocab import LogSource
from torchpar_top.model.store import LOG_LINES, SNAPSHOT_LOG

#: The slowest and fastest speeds ``change_speed`` goes to.
MIN_SPEED, MAX_SPEED = 1e-5, 100.0


class Playback:
    """The clock, the log, the snapshot cache and the shared commands of a replay."""

    THING: ClassVar[str] = "a replay"
    """What is played, as the log names it: ``a recording``, ``a recorded trace``."""
    SOURCE: ClassVar[str] = "the run"
    """What it shows a record of: ``the run``, ``the program``."""
    SHORT: ClassVar[str] = "replay"
    """The timeline's short name: ``back to the SHORT's start``."""
    THREAD: ClassVar[str] = "tpt-replay"
    """The clock thread's name."""

    interval: float
    _pos: float

    def _init_player(self, interval: float, speed: float, clock: bool) -> None:
        """The shared state (call from ``__init__`` before anything is said in the log)."""
        self.interval = interval
        self._clock = clock
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._speed = min(max(speed, MIN_SPEED), MAX_SPEED)
        self._paused = False
        self._log: deque[LogLine] = deque(maxlen=LOG_LINES)
        self._seq = 0
        self._snap: Snapshot | None = None
        self._announced_end = False

    # -- what a subclass says ---------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """At the end of the timeline (or nothing to play)."""
        raise NotImplementedError

    def tick(self) -> bool:
        """Move one tick on (the clock thread calls this every ``interval``)."""
        raise NotImplementedError

    def _span(self) -> float:
        """The timeline's length, in the unit of the position."""
        raise NotImplementedError

    def _origin(self) -> float:
        """The timeline's start, in the unit of the position."""
        raise NotImplementedError

    def _jump(self, pos: float) -> None:
        """Go to ``pos`` (clamped to the timeline)."""
        raise NotImplementedError

    def _replayable(self) -> bool:
        """Whether playing again at the end starts over (there is something to play)."""
        raise NotImplementedError

    def _speed_changed(self) -> str:
        """Called after a change of speed; returns what the log adds to ``speed N×``."""
        return ""

    def _build(self) -> Snapshot:
        """The snapshot for the current position and state."""
        raise NotImplementedError

    def _at(self, value: float | None = None) -> str:
        """A position (the current one by default) for a person."""
        raise NotImplementedError

    def restart(self) -> None:
        """Play again from the beginning."""
        raise NotImplementedError

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the clock (unless built with ``clock=False``)."""
        if self._clock and self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._loop, name=self.THREAD, daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the clock and wait for its thread. Idempotent."""
        self._closed = True
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            next_t += self.interval
            self.tick()
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    # -- commands ---------------------------------------------------------------------------------

    def set_paused(self, paused: bool) -> None:
        """Pause or play; playing again at the end plays it again from the beginning."""
        with self._lock:
            if not paused and self.finished and self._replayable():
                self.restart()
            self._paused = paused
            self._say(f"paused at t = {self._at()}" if paused else f"playing from t = {self._at()}")

    def _pause_to_step(self) -> None:
        """A step pauses first (and says so)."""
        if not self._paused:
            self._paused = True
            self._say(f"paused at t = {self._at()} to step")

    def seek(self, share: float) -> None:
        """Move the position by ``share`` of the timeline (negative: back), within it."""
        with self._lock:
            self._jump(self._pos + share * self._span())
            self._say(f"seek to t = {self._at()}")

    def seek_start(self) -> None:
        """Go to the timeline's start."""
        with self._lock:
            self._jump(self._origin())
            self._say(f"back to the {self.SHORT}'s start, t = 0")

    def change_speed(self, factor: float) -> None:
        """Multiply the speed by ``factor`` (within :data:`MIN_SPEED` .. :data:`MAX_SPEED`)."""
        with self._lock:
            speed = min(max(self._speed * factor, MIN_SPEED), MAX_SPEED)
            if speed == self._speed:
                self._say(f"speed stays at {self._speed:g}× ({MIN_SPEED:g}× .. {MAX_SPEED:g}×)")
                return
            self._speed = speed
            self._say(f"speed {speed:g}×{self._speed_changed()}")

    def toggle_sync(self) -> None:
        """A record cannot be switched: says so."""
        self._say(f"{self.THING} cannot be switched: it shows what {self.SOURCE} did (ASYNC or SYNC)")

    def change_threads(self, delta: int) -> None:
        """A record has no threads to change: says so."""
        self._say(f"{self.THING} has no threads to change: + and - act on a live run")

    def experiments(self) -> Sequence[Experiment]:
        """None: a replay runs no experiment."""
        return ()

    def switch_experiment(self, name: str) -> None:
        """A replay runs no experiment: says so."""
        self._say(
            f"a replay runs no experiment: torchpar-top -e {name} starts one"
            if name
            else "a replay runs no experiment"
        )

    # -- the snapshot and the log -----------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The snapshot shown; the same object until something changes (a paused replay redraws nothing)."""
        with self._lock:
            if self._snap is None:
                self._snap = self._build()
            return self._snap

    def _changed(self) -> None:
        self._snap = None

    def _shown_log(self) -> tuple[LogLine, ...]:
        """The log lines the snapshot carries."""
        return tuple(self._log)[-SNAPSHOT_LOG:]

    def _say(self, text: str) -> None:
        with self._lock:
            self._seq += 1
            self._log.append(LogLine(self._seq, LogSource.APP, text))
            self._changed()

    def _announce_end(self) -> None:
        """Say once that the end is reached (again after leaving it)."""
        if self.finished and not self._announced_end:
            self._announced_end = True
            self._say(f"replay finished at t = {self._at()}: r plays it again, home or ← goes back")
        elif not self.finished:
            self._announced_end = False
