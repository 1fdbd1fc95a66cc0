"""Training steps of unmodified user code and where each one goes: a handful of timestamps per step.

:class:`StepClock` lives on the frontend (main) thread. The hooks of :mod:`.usercode_phases` tell it when
a phase begins and ends (a DataLoader's ``__next__``, the outermost module call, ``backward``,
``optimizer.step``, a collective...) and when something that marks a step happened. Phases nest (a
transfer inside the forward, DDP's all-reduce wait at the end of backward): the clock keeps a small
stack and charges each stretch of time to the innermost open phase only, the bottom of the stack being
``other``. So a step's phases add up to its time exactly, and the clock costs one ``perf_counter`` and a
few list operations per boundary, never a hook per module, parameter or op.

What marks a step, in this order of preference: optimizer steps, else backward calls, else DataLoader
batches, else calls of the outermost module (:class:`~torchpar_top.contract.vocab.StepSource`). The first
source seen with a higher preference wins from then on. Each step runs from the end of the one before
to its own end; the first from the first phase boundary of the run. When a better source shows up before
any step went out in a sample (the first iteration of a loop sees a batch, then a module call, then a
backward, then an optimizer step), the steps counted so far are folded back into the open one, so the
count starts with the source that stays; after that the count never goes back.

On CUDA the phases can be GPU time instead (:class:`GpuSteps`): a CUDA event recorded on the current
stream at every boundary (from a pool, reused), read with ``query()`` a step or more later (never a
synchronize), each stretch between two events charged to the phase that was open. Untested on
hardware: checked with ``tests/fakes/fake_cuda.py`` and by ``benchmarks/gpu_check.py`` on a GPU.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from itertools import compress, islice
from typing import Any, cast

from torchpar_top.contract.messages import (
    MAX_STEP_ENDS,
    MAX_STEP_RECORDS,
    DeviceMemory,
    Memory,
    StepPhases,
    StepRecord,
    Steps,
)
from torchpar_top.contract.vocab import PHASES, StepSource
from torchpar_top.probes.agent.cputime import ProcFile

DATA, TRANSFER, FORWARD, BACKWARD, COMM, OPTIMIZER, SYNC, OTHER = range(len(PHASES))
#: Preference of each step source (higher wins).
PREFERENCE = {StepSource.MODULE: 1, StepSource.DATALOADER: 2, StepSource.BACKWARD: 3, StepSource.OPTIMIZER: 4}
#: Seconds from the first step of a source that may yet be replaced (anything but optimizer steps) during
#: which its steps are not sent, so that a better source seen meanwhile takes the count over from the
#: start: a DDP job's first optimizer step (Gloo, 2 ranks) came after 2 backward calls had gone out in a
#: sample, and every such job said "the first 2 steps were backward calls" and started its scoreboard
#: again. A loop with no better source shows its steps this much later; its last sample sends them all.
HOLD_S = 1.0
#: Steps the GPU may be behind the frontend before a step goes untimed on the GPU (its CPU phases count).
MAX_PENDING = 64
#: Finished steps the frontend keeps for the sampler before it merges them into one (nobody sampling).
COMPACT_AT = 1 << 14
#: Once phase timing may be sampled, one step's phases are timed per this many seconds of steps (eight
#: in a sample at ``run``'s 5 Hz). A timed step with the hooks taken off and put back around it cost a
#: 0.36 ms MLP step ~2.3 µs a step in its loop (0.6 %) at one per 10 ms (measured by difference with none
#: timed).
TIMED_EVERY_S = 0.025
#: Steps are sampled only where that leaves at least this many steps between timed ones (else every
#: step is timed: steps of ~3 ms and longer, where timing them all costs less than switching).
MIN_EVERY = 8
#: At most this many steps go untimed in a row.
MAX_UNTIMED = 255

_N = len(PHASES)

StepTimes = tuple[float, float, Sequence[float]]
"""One step: its end (``perf_counter``), its seconds, its phases (seconds, in :data:`PHASES` order)."""
Record = tuple[float, float, Sequence[float] | None, int, int]
"""A finished step for the sampler: ``(end, seconds, phases, n, timed)``; phases None for a step whose
phases were not timed; ``n`` steps (1, or more once merged), ``timed`` of them timed."""


class StepClock:
    """Steps and their phases, written by the frontend thread, read by the sampler (:meth:`take`).

    The frontend does as little as it can per step (the clock runs inside the user's loop): a
    timestamp and a list addition per boundary, and at a step's end one :data:`Record` appended to a
    deque (an atomic append, no lock). Everything else (the run's totals, the count, the ends and the
    whole steps of a sample) is done by the sampler, at each sample, over the records it drains.

    **Sampled phases.** Once :attr:`sampling` is set (the phase hooks set it when their root discovery
    is over), a fast loop's steps are not all timed: one step per :data:`TIMED_EVERY_S` of steps is,
    and :attr:`on_timing` takes the per-step hooks off in between (the other steps are still counted,
    with their duration); loops of ~1 ms steps and longer have every step timed (:data:`MIN_EVERY`).
    The untimed steps' phases are estimated: the sample's timed steps' phases scaled to the sample's
    whole step time (so they add up), and the count
    of timed steps goes out with them (``Steps.timed``). Phases on the GPU are never sampled.
    """

    def __init__(
        self, clock: Callable[[], float] = time.perf_counter, hold: float = 0.0, records: bool = True
    ) -> None:
        self._clock = clock
        self.hold = hold
        """Seconds a replaceable source's first steps are held back (:data:`HOLD_S` in the agent)."""
        self.records = records
        """Whether :meth:`take` sends the latest steps whole (``Steps.recent``); False
        (``--no-step-records``) where nothing records them."""
        self.source: StepSource | None = None
        self._pref = 0
        self.phase = OTHER
        """The innermost open phase."""
        self._stack: list[int] = []
        self._since = 0.0
        self._start: float | None = None
        """Start of the open step (None before the first boundary)."""
        self._first = 0.0
        self._cur = [0.0] * _N
        self.count = 0
        """Steps closed so far (the frontend's count; with the GPU, the sampler's may lag it)."""
        self.timing = True
        """Whether the open step's phases are timed (see "Sampled phases")."""
        self.sampling = False
        """Whether steps may go untimed (set once the phase hooks know what to take off)."""
        self.on_timing: Callable[[bool], None] | None = None
        """Called on the frontend when :attr:`timing` changes (the hooks come off or go back)."""
        self._untimed_left = 0
        self._done: deque[Record] = deque()
        """Finished steps not yet taken by the sampler: appended by the frontend."""
        self._lock = threading.Lock()
        """Held by the sampler's :meth:`take` and by the frontend's rare paths (a better source,
        merging records), never by the per-step path."""
        # the sampler's side: the run's totals over the records taken
        self._resolved = 0
        self._timed = 0
        self._seconds = 0.0
        self._tot = [0.0] * _N
        self.sent = False
        """True once a sample carried steps: from then on the count only grows."""
        self.gpu: GpuSteps | None = None
        """Times the phases on the GPU (CUDA events) while set."""
        self._gpu_next: GpuSteps | None = None
        self.on_step: Callable[[], None] | None = None
        """Called on the frontend after each step closes (the agent's per-step work)."""
        self.late_source: tuple[StepSource, int] | None = None
        """``(the source before, steps counted by it)`` once a better source showed up after steps had
        gone out in a sample: the count goes on from there (it never goes back), so its first steps are
        the other source's (a slow first optimizer step: LBFGS's closure, gradient accumulation). The
        sampler says so once (:meth:`UserCode._steps_part <.usercode.UserCode._steps_part>`)."""

    # -- on the frontend thread ----------------------------------------------------------------------

    def enter(self, phase: int) -> None:
        """A phase begins (nested inside the one open now)."""
        if not self.timing:
            return
        t = self._clock()
        if self._start is None:
            self._start = self._first = self._since = t
        prev = self.phase
        self._cur[prev] += t - self._since
        self._stack.append(prev)
        self.phase, self._since = phase, t
        if self.gpu is not None:
            self.gpu.mark(prev)

    def exit(
        self, phase: int, split_at: float = 0.0, then: int = COMM, step: StepSource | None = None
    ) -> bool:
        """``phase`` ends (phases left open inside it end with it). With ``split_at`` (a moment inside
        it), the time after that moment is charged to ``then`` (backward's wait for the other ranks).
        With ``step``, its end also marks a step of that source (one timestamp for both); returns
        whether a step closed."""
        cur = self.phase
        if not self.timing or (phase != cur and phase not in self._stack):
            if step is None or (step is not self.source and not self._better(step)):
                return False
            return self._close(self._clock())
        t = self._clock()
        if self._since < split_at < t:
            self._cur[cur] += split_at - self._since
            self._cur[then] += t - split_at
        else:
            self._cur[cur] += t - self._since
        self._since = t
        if self.gpu is not None:
            self.gpu.mark(then if split_at else cur)
        stack = self._stack
        if cur == phase:
            self.phase = stack.pop() if stack else OTHER
        else:
            while stack:
                popped, self.phase = self.phase, stack.pop()
                if popped == phase:
                    break
        if step is None:
            return False
        if step is not self.source and not self._better(step):
            return False
        return self._close(t)

    def mark_split(self, phase: int) -> None:
        """The GPU side of a split (see :meth:`exit`): the stretch up to now was ``phase`` (any thread)."""
        gpu = self.gpu
        if gpu is not None:
            gpu.mark(phase)

    def step(self, source: StepSource) -> bool:
        """Something that marks a step of ``source`` happened; True when it closed a step."""
        if source is not self.source and not self._better(source):
            return False
        return self._close(self._clock())

    def _better(self, source: StepSource) -> bool:
        """``source`` is not the one marking steps: True (and it marks them from now on) when it is
        preferred. Before any step went out in a sample, the steps of the source it replaces are
        folded back into the open one, so the count starts with the source that stays."""
        pref = PREFERENCE[source]
        if pref <= self._pref:
            return False
        with self._lock:  # take() sets sent under it: unsent, the sampler's totals are still zero
            if self.sent and self.source is not None:
                self.late_source = (self.source, self.count)
            self.source, self._pref = source, pref
            if not self.sent and self.count:
                cur = self._cur
                for _, seconds, phases, _, _ in self._drain():
                    if phases is None:
                        cur[OTHER] += seconds
                        continue
                    for i in range(_N):
                        cur[i] += phases[i]
                self.count = 0
                self._start = self._first
        return True

    def close_untimed(self, source: StepSource) -> float:
        """The common step end of a fast loop in one call: an untimed step of the marking ``source``,
        with untimed steps still to go, nothing else to do. Returns the step's end (clock seconds), or
        0.0 where this is not that case (nothing was done: the caller takes the full path, :meth:`exit`).
        The same record as :meth:`_close` appends; :attr:`on_step` is the caller's to run."""
        if self.timing or source is not self.source or self._untimed_left <= 0 or self._gpu_next is not None:
            return 0.0
        done, start = self._done, self._start
        if start is None or not self.sampling or len(done) >= COMPACT_AT:
            return 0.0
        t = self._clock()
        done.append((t, t - start, None, 1, 0))
        self._start = t
        self.count += 1
        self._untimed_left -= 1
        return t

    def _close(self, t: float) -> bool:
        """A step of the current source ends at ``t``."""
        if self._start is None:
            self._start = self._first = self._since = t
        seconds = t - self._start
        self._start = t
        self.count += 1
        done = self._done
        gpu = self.gpu
        if not self.timing:
            done.append((t, seconds, None, 1, 0))
        else:
            cur = self._cur
            stretch = t != self._since  # False right after a phase ended at this very moment
            cur[self.phase] += t - self._since
            self._since = t
            self._cur = [0.0] * _N
            if gpu is None:
                done.append((t, seconds, cur, 1, 1))
            else:
                for end, secs, phases in gpu.end(self.phase, (t, seconds, cur), mark=stretch):
                    done.append((end, secs, phases, 1, 1))
        if len(done) > COMPACT_AT:
            self._compact()
        if self._gpu_next is not None:  # GPU timing starts with a step
            self.gpu, self._gpu_next = self._gpu_next, None
            self.gpu.begin()
            self.sampling = False
            if not self.timing:
                self._set_timing(True, t)
        if self.sampling:
            if self._untimed_left:
                self._untimed_left -= 1
                if self.timing:
                    self._set_timing(False, t)
            else:
                every = int(TIMED_EVERY_S / seconds) if seconds > 0 else MAX_UNTIMED + 1
                self._untimed_left = min(MAX_UNTIMED, every - 1) if every >= MIN_EVERY else 0
                if not self.timing:
                    self._set_timing(True, t)
        if self.on_step is not None:
            self.on_step()
        return True

    def _set_timing(self, on: bool, t: float) -> None:
        """The next step is timed (``on``) or not: from a step's end at ``t``."""
        self.timing = on
        if on:  # a phase left open when timing stopped ended unseen: start afresh
            self._stack.clear()
            self.phase, self._since = OTHER, t
        if self.on_timing is not None:
            self.on_timing(on)

    def allow_sampling(self) -> None:
        """The per-step hooks can come off between timed steps: sample a fast loop's phases (never
        while they are GPU time)."""
        if self.gpu is None and self._gpu_next is None:
            self.sampling = True

    def stop_sampling(self) -> None:
        """Time every step from now on (the hooks that sampling takes off are going away)."""
        self.sampling = False
        if not self.timing:
            self._set_timing(True, self._clock())

    def _compact(self) -> None:
        """Nobody took the finished steps for a while: merge them into one record (bounded memory)."""
        with self._lock:
            records = self._drain()
            seconds, phases, n, timed = _merge(records, self._tot, self._seconds)
            self._done.append((records[-1][0], seconds, phases, n, timed))

    def _drain(self) -> list[Record]:
        """The finished steps appended so far, taken out (under the lock; the frontend may append meanwhile:
        ``popleft`` and ``append`` are each atomic, so none is lost). ``popleft`` is called by ``islice``
        in C: the records there now, never one the frontend appends meanwhile (none is ever None)."""
        done = self._done
        return list(islice(iter(done.popleft, None), len(done)))

    def use_gpu(self, gpu: GpuSteps) -> None:
        """Time the phases with CUDA events from the next step on (on the frontend thread)."""
        self._gpu_next = gpu

    # -- on the sampler thread ------------------------------------------------------------------------

    def take(self, wall: Callable[[], float] = time.time, final: bool = False) -> Steps | None:
        """The ``steps`` of a sample: cumulative totals, the ends and whole steps since the last call;
        None before the first step, and for :attr:`hold` seconds from the first step of a source a
        better one may still replace (unless ``final``: the run's last sample sends what there is).

        Ten times a second beside the user's loop, over ~100 records a sample for a 1 ms step: the
        records are walked by builtins (``zip``, ``sum``, ``compress``, ``map``), not Python loops."""
        with self._lock:
            if (
                not final
                and not self.sent
                and self._pref < PREFERENCE[StepSource.OPTIMIZER]
                and self._start is not None
                and self._clock() - self._first < self.hold
            ):
                return None
            records = self._drain()
            if records:
                columns = _columns(records)
                seconds, phases, n, timed = _merge_columns(columns, self._tot, self._seconds)
                self._resolved += n
                self._timed += timed
                self._seconds += seconds
                self._tot = [a + b for a, b in zip(self._tot, phases, strict=True)]
            source = self.source
            if source is None or not self._resolved:
                return None
            self.sent = True
            count, timed, seconds, tot = self._resolved, self._timed, self._seconds, self._tot
        offset = wall() - self._clock()
        ends: list[float] = []
        recent: list[tuple[float, Sequence[float]]] = []
        if records:
            times, _, all_phases, _, _ = columns
            if n == len(records):  # every record one whole step (none merged by _compact): the usual case
                ends = list(map(offset.__add__, times[-MAX_STEP_ENDS:]))
                if self.records:
                    timed_ones = compress(zip(times, all_phases, strict=True), all_phases)  # phases not None
                    recent = cast(list[tuple[float, Sequence[float]]], list(timed_ones))[-MAX_STEP_RECORDS:]
            else:
                ends = [r[0] + offset for r in records[-MAX_STEP_ENDS:] if r[3] == 1]
                if self.records:
                    recent = [(r[0], r[2]) for r in records if r[3] == 1 and r[2] is not None]
                    recent = recent[-MAX_STEP_RECORDS:]
        gpu = self.gpu
        return Steps(
            source=source,
            count=count,
            seconds=max(0.0, seconds),
            phases=_phases(tot),
            ends=tuple(ends),
            recent=tuple(StepRecord(end=end + offset, phases=_phases(p)) for end, p in recent),
            gpu=gpu is not None and gpu.timed > 0,
            timed=None if timed == count else timed,
            before=min(late[1], count) if (late := self.late_source) is not None else 0,
        )


#: A record's fields as columns (times, seconds, phases, steps, timed steps).
_Columns = tuple[
    tuple[float, ...], tuple[float, ...], tuple[Sequence[float] | None, ...], tuple[int, ...], tuple[int, ...]
]


def _columns(records: Sequence[Record]) -> _Columns:
    times, secs, all_phases, ns, timed_ns = zip(*records, strict=True)
    return times, secs, all_phases, ns, timed_ns


def _merge(
    records: Sequence[Record], run_phases: Sequence[float], run_seconds: float
) -> tuple[float, list[float], int, int]:
    """Records summed: ``(seconds, phases, n, timed)``. Where some steps were not timed, the phases are
    the timed ones' scaled to all the steps' seconds (the run's shares so far where none was timed)."""
    return _merge_columns(_columns(records), run_phases, run_seconds)


def _merge_columns(
    columns: _Columns, run_phases: Sequence[float], run_seconds: float
) -> tuple[float, list[float], int, int]:
    """:func:`_merge` of records already in columns (a timed record's phases are a non-empty list: true,
    an untimed one's None: false, which ``compress`` and ``filter`` select by)."""
    _, secs, all_phases, ns, timed_ns = columns
    seconds, n, timed = sum(secs), sum(ns), sum(timed_ns)
    measured = list(filter(None, all_phases))
    if measured:
        phases = [sum(col) for col in zip(*measured, strict=True)]
        if len(measured) < len(secs):
            covered = sum(compress(secs, all_phases))
            scale = seconds / covered if covered > 0 else 0.0
            phases = [p * scale for p in phases]
        return seconds, phases, n, timed
    if run_seconds > 0:
        return seconds, [p * seconds / run_seconds for p in run_phases], n, timed
    return seconds, [seconds if i == OTHER else 0.0 for i in range(_N)], n, timed


def _phases(values: Sequence[float]) -> StepPhases:
    """The phases, none below zero (NaN read as zero). Checked by ``min`` and ``sum`` over the eight at
    once in the usual case (a NaN makes the sum NaN; ``min`` alone can pass over one)."""
    if not math.isnan(sum(values)) and min(values) >= 0.0:
        return StepPhases(*values)
    return StepPhases(*(v if v > 0.0 else 0.0 for v in values))


class GpuSteps:
    """Phases as GPU time: a CUDA event per phase boundary on the current stream, resolved later.

    ``cuda`` is ``torch.cuda`` (tests pass ``tests/fakes/fake_cuda.FakeCuda``). Events come from a pool
    and go back to it once read. A step is read when its last event completed (``query()``, at a later
    step's end); every stretch between two of its events is charged to the phase open during it. A step
    the GPU is more than :data:`MAX_PENDING` steps behind, one begun while a CUDA graph is captured, or
    one whose events fail keeps its CPU phases. Checked on an H100 and an H200 (``benchmarks/gpu_check.py``,
    ``step_phases``: the forward 2.99 ms a step against the script's own events' 3.00 on the H200).
    """

    def __init__(self, cuda: Any, log: Callable[[str], None] | None = None) -> None:
        self.cuda = cuda
        self.log = log
        self._pool: list[Any] = []
        self._pending: deque[tuple[Any, list[tuple[int, Any]] | None, StepTimes]] = deque()
        self._marks: list[tuple[int, Any]] | None = None
        self._start: Any = None
        self._stream: Any = None
        self._lock = threading.Lock()
        self.timed = 0
        """Steps read as GPU time so far."""
        self.untimed = 0
        """Steps that kept their CPU phases."""
        self.failed = ""

    def _event(self) -> Any:
        pool = self._pool
        return pool.pop() if pool else self.cuda.Event(enable_timing=True)

    def begin(self) -> None:
        """Start timing the step that begins now (its start event)."""
        self._marks = None
        if self.failed or len(self._pending) >= MAX_PENDING:
            return
        try:
            if self.cuda.is_current_stream_capturing():
                return
            stream = self.cuda.current_stream()
            ev = self._event()
            ev.record(stream)
        except Exception as exc:
            self._fail(exc)
            return
        self._stream, self._start, self._marks = stream, ev, []

    def mark(self, phase: int) -> None:
        """The stretch since the previous event was ``phase`` (frontend, or autograd's thread)."""
        marks = self._marks
        if marks is None:
            return
        try:
            with self._lock:
                ev = self._event()
            ev.record(self._stream)
        except Exception as exc:
            self._fail(exc)
            self._marks = None
            return
        marks.append((phase, ev))

    def end(self, phase: int, cpu: StepTimes, mark: bool = True) -> list[StepTimes]:
        """The step ends now (its last stretch was ``phase``; ``mark`` False: a phase boundary was just
        marked at this moment); returns the steps read since, in order, as ``(end, seconds, phases)``;
        the next step's timing begins."""
        if mark or not self._marks:
            self.mark(phase)
        marks = self._marks
        if marks:
            self._pending.append((self._start, marks, cpu))
            self._start, self._marks = marks[-1][1], []  # its end is the next step's start
            if len(self._pending) >= MAX_PENDING:
                self._marks = None
        else:
            self._pending.append((None, None, cpu))
            self.begin()
        return self.poll()

    def poll(self) -> list[StepTimes]:
        """Steps whose events all completed, oldest first (``query()`` only: never waits)."""
        out = []
        pending = self._pending
        while pending:
            start, marks, cpu = pending[0]
            if marks is None:
                pending.popleft()
                self.untimed += 1
                out.append(cpu)
                continue
            try:
                if not marks[-1][1].query():
                    break
                phases = [0.0] * len(PHASES)
                prev = start
                for phase, ev in marks:
                    phases[phase] += max(0.0, prev.elapsed_time(ev)) / 1000.0
                    prev = ev
            except Exception as exc:
                self._fail(exc)
                pending.popleft()
                self.untimed += 1
                out.append(cpu)
                continue
            pending.popleft()
            self.timed += 1
            with self._lock:
                self._pool.append(start)
                self._pool.extend(ev for _, ev in marks[:-1])
            out.append((cpu[0], sum(phases), phases))
        return out

    def _fail(self, exc: Exception) -> None:
        if not self.failed:
            self.failed = f"{type(exc).__name__}: {exc}"
            if self.log is not None:
                with contextlib.suppress(OSError):
                    self.log(f"step phases on the GPU stopped ({self.failed}); CPU time from now on")


# -- memory --------------------------------------------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


_statm = ProcFile("/proc/self/statm")
"""This process's statm, kept open for the sampler's ten readings a second (:class:`.cputime.ProcFile`)."""


def rss_bytes() -> int | None:
    """This process's resident memory (``/proc/self/statm``'s second field, in pages), None elsewhere."""
    try:
        return int((_statm.read() or b"").split()[1]) * _PAGE
    except (IndexError, ValueError):
        return None


def read_memory(cuda: Any = None) -> Memory | None:
    """The process's RSS and, where ``cuda`` (``torch.cuda``) is initialised already, each device's
    caching allocator (``memory_stats``: allocated, reserved, peak allocated); never initialises CUDA."""
    rss = rss_bytes()
    devices: list[DeviceMemory] = []
    if cuda is not None and cuda.is_initialized():
        try:
            current = cuda.current_device()
            for i in range(cuda.device_count()):
                s = cuda.memory_stats(i)
                reserved = int(s.get("reserved_bytes.all.current", 0))
                if not reserved and i != current:
                    continue  # a device this process does not use
                devices.append(
                    DeviceMemory(
                        device=f"cuda:{i}",
                        allocated_bytes=max(0, int(s.get("allocated_bytes.all.current", 0))),
                        reserved_bytes=max(0, reserved),
                        peak_bytes=max(0, int(s.get("allocated_bytes.all.peak", 0))),
                    )
                )
        except Exception:
            devices = []
    if rss is None and not devices:
        return None
    return Memory(rss_bytes=rss or 0, devices=tuple(devices))
