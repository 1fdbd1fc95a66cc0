"""Play a recording back through the same screen: ``torchpar-top replay RUN.jsonl``.

A ``SnapshotSource`` with ``ReplayControls`` like :class:`~torchpar_top.sources.trace.TraceReplay`
for traces, but what it shows is the snapshots recorded, not an analysis: a clock thread moves the position
``interval × speed`` seconds of recording time on each tick, and the snapshot shown is the last one
recorded at or before the position, exactly as it was recorded (histories included), with the replay's
own state on top (paused, position, speed, notes in the log). Stepping moves one recorded snapshot.
A seek decodes from the nearest line written whole before it (a keyframe, indexed when the file was read:
at most ``KEYFRAME`` lines), or from a snapshot kept on the way (every :data:`CHECKPOINT`), whichever is
nearer: a recording without keyframes (format version 1) decodes from its start the first time.
"""

from __future__ import annotations

import math
import os
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from torchpar_top.contract.recording import Decoder, Recording, RecordingError, decode_line, read_recording
from torchpar_top.contract.snapshot import ChildStatus, LogLine, ReplayView, Snapshot
from torchpar_top.contract.vocab import ChildState, Mode
from torchpar_top.model.snapshot import build, rebuild
from torchpar_top.sources.playback import Playback
from torchpar_top.sources.trace import KEYS_HINT

#: Snapshots between two kept whole (a seek decodes at most this many lines).
CHECKPOINT = 100


class RecordingReplay(Playback):
    """Plays a :class:`~torchpar_top.contract.recording.Recording` (read from a file, or given)."""

    THING, SOURCE, SHORT, THREAD = "a recording", "the run", "recording", "tpt-playback"

    def __init__(
        self,
        source: str | os.PathLike[str] | Recording,
        *,
        interval: float | None = None,
        speed: float = 1.0,
        clock: bool = True,
        snapshots: Sequence[Snapshot] | None = None,
    ) -> None:
        """Read the recording (nothing plays until :meth:`start`).

        Args:
            source: a recording's path, or a :class:`Recording` already read.
            interval: seconds on screen between ticks (default: the recording's sampling interval).
            speed: seconds of recording per second on screen.
            clock: tick on a thread after :meth:`start`; ``False`` leaves :meth:`tick` to the caller.
            snapshots: the snapshots themselves, for a source that is not a file of lines (an export read
                back); the recording's lines are then not used.

        Raises:
            RecordingError: the file is not a recording this version reads (one line).
        """
        self.recording = source if isinstance(source, Recording) else read_recording(os.fspath(source))
        rec = self.recording
        self._given = tuple(snapshots) if snapshots is not None else None
        self.times = tuple(s.t for s in self._given) if self._given is not None else rec.times
        self.path = rec.path
        self._init_player(interval or rec.header.interval, speed, clock)
        self.host_samples = 0
        """Ticks that showed another snapshot (headless mode prints one line each)."""
        self._t0 = self.times[0] if self.times else rec.header.t
        self._duration = (self.times[-1] - self._t0) if self.times else 0.0
        self._checkpoints: dict[int, Snapshot] = {}
        self._index = -1
        self._current: Snapshot | None = None
        self._pos = 0.0
        self._recorded_seq = 0
        """The newest recorded log line shown."""
        self._ticked = False
        self._intro()
        if self.times:
            self._show(0)  # RecordingError: not even the first line decodes

    # -- playing ----------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """At the last snapshot (or nothing recorded)."""
        return self._index >= len(self.times) - 1

    @property
    def index(self) -> int:
        """The snapshot shown (0-based line after the header)."""
        return self._index

    def tick(self) -> bool:
        """Move ``interval × speed`` on, unless paused or finished; returns whether the snapshot changed."""
        with self._lock:
            first, self._ticked = not self._ticked, True
            moved = False
            if not self._paused and not self.finished:
                self._pos = min(self._pos + self.interval * self._speed, self._duration)
                moved = self._show(self._index_at(self._pos))
            if moved or first:
                self.host_samples += 1
            return moved

    def _index_at(self, pos: float) -> int:
        return max(0, bisect_right(self.times, self._t0 + pos + 1e-9) - 1)

    def _show(self, index: int) -> bool:
        """Make snapshot ``index`` the one shown; returns whether it changed."""
        index = min(max(index, 0), len(self.times) - 1)
        if index == self._index:
            return False
        back = index < self._index
        self._current, index = self._snapshot_at(index)
        self._index = index
        self._take_log(self._current, back)
        self._announce_end()
        self._changed()
        return True

    def _snapshot_at(self, index: int) -> tuple[Snapshot, int]:
        """Snapshot ``index`` (and ``index``); a line that does not decode ends the recording before it
        (said in the log), and the last one before it is returned with its index."""
        if self._given is not None:
            return self._given[index], index
        keys = self.recording.keyframes
        key = keys[bisect_right(keys, index) - 1] if keys and keys[0] <= index else None
        prev: Snapshot | None
        if self._current is not None and self._index < index <= self._index + CHECKPOINT:
            start, prev = self._index + 1, self._current
        else:
            base = max((c for c in self._checkpoints if c <= index), default=None)
            if base is None:
                start, prev = 0, None
            else:
                start, prev = base + 1, self._checkpoints[base]
                if base == index:
                    return prev, index
        if key is not None and key >= start:  # a line written whole is nearer: decode from it
            start, prev = key, None
        decoder = Decoder(prev)
        snap = prev
        for i in range(start, index + 1):
            try:
                snap = decode_line(decoder, self.recording.lines[i], f"{self.path} line {i + 2}")
            except RecordingError as exc:
                if i == 0:
                    raise
                self._cut(i, str(exc))
                return (snap, i - 1) if snap is not None else self._snapshot_at(i - 1)
            if i % CHECKPOINT == 0 and len(self.recording.keyframes) <= 1:  # keyframes make them needless
                self._checkpoints[i] = snap
        assert snap is not None
        return snap, index

    def _cut(self, i: int, why: str) -> None:
        """Line ``i`` (0-based after the header) cannot be read: the recording ends before it."""
        self.times = self.times[:i]
        self._duration = self.times[-1] - self._t0
        self._pos = min(self._pos, self._duration)
        self._say(f"{why}: the replay ends before it")

    def _take_log(self, snap: Snapshot, back: bool) -> None:
        """The recorded log lines that are new at this snapshot join the replay's log (after a jump back,
        they are taken as seen)."""
        if back:
            self._recorded_seq = snap.log[-1].seq if snap.log else 0
            return
        for line in snap.log:
            if line.seq > self._recorded_seq:
                self._seq += 1
                self._log.append(LogLine(self._seq, line.source, line.text))
        if snap.log:
            self._recorded_seq = max(self._recorded_seq, snap.log[-1].seq)

    def _jump(self, pos: float) -> None:
        self._pos = min(max(pos, 0.0), self._duration)
        self._show(self._index_at(self._pos))
        self._changed()

    # -- commands ---------------------------------------------------------------------------------

    def _span(self) -> float:
        return self._duration

    def _origin(self) -> float:
        return 0.0

    def _replayable(self) -> bool:
        return len(self.times) > 1

    def step(self, frames: int) -> None:
        """Pause, then move ``frames`` recorded snapshots forward (negative: back)."""
        with self._lock:
            self._pause_to_step()
            target = min(max(self._index + frames, 0), len(self.times) - 1)
            if self.times:
                self._pos = self.times[target] - self._t0
                self._show(target)
            self._changed()

    def restart(self) -> None:
        """Play again from the start."""
        with self._lock:
            self._jump(0.0)
            self._say("replaying from the start")

    # -- the snapshot -----------------------------------------------------------------------------

    def _build(self) -> Snapshot:
        finished = self.finished
        view = ReplayView(
            self.path,
            self._pos,
            self._duration,
            self._speed,
            self.interval * self._speed,
            finished,
            recorded=True,
        )
        log = tuple(self._log)
        base = self._current
        if base is None:
            return build(
                t=self.recording.header.t,
                experiment="replay",
                description="nothing recorded",
                mode=Mode.ASYNC,
                paused=self._paused,
                interval=self.interval,
                child=ChildStatus(None, ChildState.FINISHED, message="replay finished"),
                log=log,
                target=self._target(""),
                notice="the recording has no snapshots",
                replay=view,
            )
        child = base.child
        if finished:
            child = ChildStatus(
                child.pid,
                ChildState.FINISHED,
                None,
                "replay finished" + (f" (recorded: {child.message})" if child.message else ""),
            )
        return rebuild(  # the figures derived again: a recording of an older version may lack some
            base,
            paused=self._paused,
            child=child,
            log=log,
            replay=view,
            target=self._target(base.target),
            notice=self._notice(base),
        )

    def _target(self, recorded: str) -> str:
        name = os.path.basename(os.path.normpath(self.path))
        return f"replay {name}" + (f": {recorded}" if recorded else "")

    def _notice(self, base: Snapshot) -> str:
        state = "finished: r plays it again" if self.finished else "paused" if self._paused else "playing"
        kept = f" · recorded: {base.notice}" if base.notice else ""
        return (
            f"recording t = {self._at()} of {self._at(self._duration)} · {self._speed:g}× · snapshot "
            f"{self._index + 1}/{len(self.times)} · {state} · {KEYS_HINT}{kept}"
        )

    def _at(self, seconds: float | None = None) -> str:
        value = self._pos if seconds is None else seconds
        decimals = max(1, math.ceil(-math.log10(self.interval))) if self.interval > 0 else 1
        return f"{value:.{decimals}f} s"

    # -- the log ----------------------------------------------------------------------------------

    def _intro(self) -> None:
        h = self.recording.header
        m = h.machine
        names = m.gpus or self._first_gpus()
        gpus = f", GPUs: {', '.join(names)}" if names else ""
        self._say(
            f"replay of {self.path}: {len(self.times)} snapshots over {self._duration:.1f} s, recorded "
            f"{h.started} on {m.hostname} ({m.cores} cores{gpus}, torch {m.torch or 'not installed'})"
        )
        if h.command:
            self._say("recorded command: torchpar-top " + " ".join(h.command))
        if self.recording.note:
            self._say(f"note: {self.recording.note}")

    def _first_gpus(self) -> tuple[str, ...]:
        """The GPUs of the first snapshot (the header is written before the first sample: no GPUs)."""
        first: Any = None
        if self._given:
            first = self._given[0]
        elif self.times:
            try:
                first = decode_line(Decoder(), self.recording.lines[0], self.path)
            except RecordingError:
                return ()
        return tuple(g.name for g in first.gpus) if first is not None else ()
