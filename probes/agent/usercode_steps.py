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
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

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

DATA, TRANSFER, FORWARD, BACKWARD, COMM, OPTIMIZER, SYNC, OTHER = range(len(PHASES))
#: Preference of each step source (higher wins).
PREFERENCE = {StepSource.MODULE: 1, StepSource.DATALOADER: 2, StepSource.BACKWARD: 3, StepSource.OPTIMIZER: 4}
#: Steps the GPU may be behind the frontend before a step goes untimed on the GPU (its CPU phases count).
MAX_PENDING = 64

_NO_PHASES = (0.0,) * len(PHASES)


class StepClock:
    """Steps and their phases, written by the frontend thread, read by the sampler (:meth:`take`)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.source: StepSource | None = None
        self._pref = 0
        self.phase = OTHER
        """The innermost open phase."""
        self._stack: list[int] = []
        self._since = 0.0
        self._start: float | None = None
        """Start of the open step (None before the first boundary)."""
        self._first = 0.0
        self._cur = [0.0] * len(PHASES)
        self._tot = [0.0] * len(PHASES)
        self.count = 0
        """Steps closed so far (the frontend's count; with the GPU, :attr:`state` may lag it)."""
        self._seconds = 0.0
        self.state: tuple[StepSource, int, float, tuple[float, ...]] | None = None
        """``(source, count, seconds, phases)`` of the steps whose phases are final: replaced whole, so
        the sampler reads one consistent tuple."""
        self._ends: deque[tuple[int, float]] = deque(maxlen=MAX_STEP_ENDS)
        self._records: deque[tuple[int, float, tuple[float, ...]]] = deque(maxlen=MAX_STEP_RECORDS)
        self._resolved = 0
        self._taken_end = self._taken_record = 0
        self.sent = False
        """True once a sample carried steps: from then on the count only grows."""
        self.gpu: GpuSteps | None = None
        """Times the phases on the GPU (CUDA events) while set."""
        self._gpu_next: GpuSteps | None = None
        self.on_step: Callable[[], None] | None = None
        """Called on the frontend after each step closes (the agent's per-step work)."""

    # -- on the frontend thread ----------------------------------------------------------------------

    def enter(self, phase: int) -> None:
        """A phase begins (nested inside the one open now)."""
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
        if phase != self.phase and phase not in self._stack:
            return self.step(step) if step is not None else False
        t = self._clock()
        cur = self.phase
        if self._since < split_at < t:
            self._cur[cur] += split_at - self._since
            self._cur[then] += t - split_at
        else:
            self._cur[cur] += t - self._since
        self._since = t
        if self.gpu is not None:
            self.gpu.mark(then if split_at else cur)
        while self._stack:
            popped = self.phase
            self.phase = self._stack.pop()
            if popped == phase:
                break
        if step is None or PREFERENCE[step] < self._pref:
            return False
        return self._close(step, t)

    def mark_split(self, phase: int) -> None:
        """The GPU side of a split (see :meth:`exit`): the stretch up to now was ``phase`` (any thread)."""
        gpu = self.gpu
        if gpu is not None:
            gpu.mark(phase)

    def step(self, source: StepSource) -> bool:
        """Something that marks a step of ``source`` happened; True when it closed a step."""
        if PREFERENCE[source] < self._pref:
            return False
        return self._close(source, self._clock())

    def _close(self, source: StepSource, t: float) -> bool:
        """A step of ``source`` ends at ``t`` (if that source marks steps)."""
        pref = PREFERENCE[source]
        if pref < self._pref:
            return False
        if self._start is None:
            self._start = self._first = self._since = t
        if pref > self._pref:
            self.source, self._pref = source, pref
            if not self.sent and self.count:  # fold the lower source's steps back into the open one
                cur, tot = self._cur, self._tot
                for i in range(len(cur)):
                    cur[i] += tot[i]
                self._tot = [0.0] * len(PHASES)
                self.count = self._resolved = 0
                self._seconds = 0.0
                self._start = self._first
                self._ends.clear()
                self._records.clear()
                self.state = None
                self._taken_end = self._taken_record = 0
        cur = self._cur
        stretch = t != self._since  # False right after a phase ended at this very moment
        cur[self.phase] += t - self._since
        self._since = t
        phases = tuple(cur)
        self._cur = [0.0] * len(PHASES)
        seconds = t - self._start
        self._start = t
        self.count += 1
        self._ends.append((self.count, t))
        gpu = self.gpu
        if gpu is None:
            self._final(t, seconds, phases)
        else:
            for rec in gpu.end(self.phase, (t, seconds, phases), mark=stretch):
                self._final(*rec)
        if self._gpu_next is not None:  # GPU timing starts with a step
            self.gpu, self._gpu_next = self._gpu_next, None
            self.gpu.begin()
        if self.on_step is not None:
            self.on_step()
        return True

    def _final(self, end: float, seconds: float, phases: tuple[float, ...]) -> None:
        """One step's phases are final: into the totals and the records."""
        self._resolved += 1
        self._seconds += seconds
        self._tot = tot = [a + b for a, b in zip(self._tot, phases, strict=True)]
        self._records.append((self._resolved, end, phases))
        self.state = (self.source, self._resolved, self._seconds, tuple(tot))  # type: ignore[assignment]

    def use_gpu(self, gpu: GpuSteps) -> None:
        """Time the phases with CUDA events from the next step on (on the frontend thread)."""
        self._gpu_next = gpu

    # -- on the sampler thread ------------------------------------------------------------------------

    def take(self, wall: Callable[[], float] = time.time) -> Steps | None:
        """The ``steps`` of a sample: cumulative totals, the ends and whole steps since the last call."""
        state = self.state
        if state is None:
            return None
        source, count, seconds, tot = state
        offset = wall() - self._clock()
        ends = [(i, t) for i, t in list(self._ends) if i > self._taken_end]
        records = [r for r in list(self._records) if r[0] > self._taken_record]
        if ends:
            self._taken_end = ends[-1][0]
        if records:
            self._taken_record = records[-1][0]
        self.sent = True
        gpu = self.gpu
        return Steps(
            source=source,
            count=count,
            seconds=max(0.0, seconds),
            phases=_phases(tot),
            ends=tuple(t + offset for _, t in ends[-MAX_STEP_ENDS:]),
            recent=tuple(
                StepRecord(end=t + offset, phases=_phases(p)) for _, t, p in records[-MAX_STEP_RECORDS:]
            ),
            gpu=gpu is not None and gpu.timed > 0,
        )


def _phases(values: tuple[float, ...]) -> StepPhases:
    return StepPhases(*(max(0.0, v) for v in values))


class GpuSteps:
    """Phases as GPU time: a CUDA event per phase boundary on the current stream, resolved later.

    ``cuda`` is ``torch.cuda`` (tests pass ``tests/fakes/fake_cuda.FakeCuda``). Events come from a pool
    and go back to it once read. A step is read when its last event completed (``query()``, at a later
    step's end); every stretch between two of its events is charged to the phase open during it. A step
    the GPU is more than :data:`MAX_PENDING` steps behind, one begun while a CUDA graph is captured, or
    one whose events fail keeps its CPU phases. Untested on hardware.
    """

    def __init__(self, cuda: Any, log: Callable[[str], None] | None = None) -> None:
        self.cuda = cuda
        self.log = log
        self._pool: list[Any] = []
        self._pending: deque[tuple[Any, list[tuple[int, Any]] | None, tuple[float, float, tuple]]] = deque()
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

    def end(
        self, phase: int, cpu: tuple[float, float, tuple], mark: bool = True
    ) -> list[tuple[float, float, tuple]]:
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

    def poll(self) -> list[tuple[float, float, tuple]]:
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
            out.append((cpu[0], sum(phases), tuple(phases)))
        return out

    def _fail(self, exc: Exception) -> None:
        if not self.failed:
            self.failed = f"{type(exc).__name__}: {exc}"
            if self.log is not None:
                with contextlib.suppress(OSError):
                    self.log(f"step phases on the GPU stopped ({self.failed}); CPU time from now on")


# -- memory --------------------------------------------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes(path: str = "/proc/self/statm") -> int | None:
    """This process's resident memory (``/proc/self/statm``'s second field, in pages), None elsewhere."""
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
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
