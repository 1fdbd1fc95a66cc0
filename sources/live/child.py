"""The workload process: spawn it in its own process group, read its three streams, stop it for sure.

The protocol travels on one end of a socketpair that the child inherits (``pass_fds``); the child's
stdout and stderr are separate pipes that feed the log pane, so the workload's prints never corrupt
the protocol. One reader thread multiplexes the three with ``selectors`` and a short timeout, so it
never keeps the app from exiting; once the screen pulls (:meth:`ChildProcess.pull`, in its frame), the
pulls read and the thread stands behind them (:mod:`.pacing`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from torchpar_top.contract.messages import Message, Stop
from torchpar_top.contract.vocab import ENV_RUN, PARENT_STOP_GRACE, LogSource
from torchpar_top.sources.live.pacing import Events, PullPace, drain, read_ready, ready
from torchpar_top.sources.live.tree import ProcessTree
from torchpar_top.sources.live.wire import MessageStream, TextStream

OnMessage = Callable[[Message], None]
OnOutput = Callable[..., None]
"""(source, text) for a line; (source, text, True) for the latest state of a line still being written."""
OnExit = Callable[[int], None]

#: How long a child gets after SIGTERM before SIGKILL (the grace after ``stop`` is PARENT_STOP_GRACE).
TERM_GRACE = 1.0


class ChildProcess:
    """One run of a workload under the agent."""

    def __init__(
        self,
        make_command: Callable[[int | None], Sequence[str]],
        *,
        on_message: OnMessage,
        on_output: OnOutput,
        on_exit: OnExit,
        env: dict[str, str] | None = None,
        socketpair: bool = True,
        on_channel_closed: Callable[[], None] | None = None,
    ) -> None:
        """Prepare (not start) a child.

        Args:
            make_command: builds argv given the fd number of the child's protocol socket (None when
                ``socketpair`` is false: the agents then connect to a listener instead).
            on_message: called with each valid protocol message, from the reader thread.
            on_output: called with (``stdout``|``stderr``|``protocol``, line) for the log pane.
            on_exit: called once with the exit status (negative: killed by that signal).
            env: extra environment variables.
            socketpair: give the child one end of a socketpair for the protocol.
            on_channel_closed: called (from the reader thread) when the protocol socket closes while the
                child still runs: it is ending, or it closed the descriptor and runs on unmonitored.
        """
        self._make_command = make_command
        self._on_message, self._on_output, self._on_exit = on_message, on_output, on_exit
        self._on_channel_closed = on_channel_closed
        self._env = env or {}
        self._socketpair = socketpair
        self.proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self.tree: ProcessTree | None = None
        """What the child started, followed so that it ends with the child (see :mod:`.tree`)."""
        self._stopping = threading.Event()
        self._send_lock = threading.Lock()
        self.pace = PullPace()
        self._read_lock = threading.Lock()
        """Held while a stream is read and fed: the thread and a pull never interleave."""
        self._streams: _Streams | None = None
        """The open streams while the reader reads them (None before and after)."""

    @property
    def pid(self) -> int | None:
        """The child's pid once started."""
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        """Spawn the child in a new session (its own process group, no controlling terminal).

        Raises:
            OSError: the interpreter could not be started.
        """
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        mark = secrets.token_hex(8)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self._env, ENV_RUN: mark}
        fd = child.fileno() if self._socketpair else None
        try:
            self.proc = subprocess.Popen(
                list(self._make_command(fd)),
                pass_fds=[fd] if fd is not None else [],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=env,
            )
        except OSError:
            parent.close()
            raise
        finally:
            child.close()  # the parent's copy of the child's end: without this, EOF never comes
        self._sock = parent
        self.tree = ProcessTree(self.proc.pid, mark)
        self._reader = threading.Thread(target=self._read_loop, name="tpt-child-reader", daemon=True)
        self._reader.start()

    @property
    def running(self) -> bool:
        """Whether the child has started and not ended."""
        return self.proc is not None and self.proc.poll() is None

    def send(self, cmd: Message) -> bool:
        """Send a command; False when the child is gone."""
        if self._sock is None:
            return False
        try:
            with self._send_lock:
                self._sock.sendall(cmd.to_json())
            return True
        except OSError:
            return False

    def stop(self, grace: float = PARENT_STOP_GRACE) -> int | None:
        """Stop the child, everything in its process group and every process it started (even those that
        left the group, or outlived the child); wait for the reader. Idempotent.

        Args:
            grace: seconds the workload gets to return after the ``stop`` command before SIGTERM;
                0 goes straight to SIGTERM (the app is quitting and nobody will read what it says).

        Returns:
            The exit status, or None if it never started.
        """
        proc = self.proc
        if proc is None:
            return None
        self._stopping.set()
        tree = self.tree
        if tree is not None:
            tree.walk()  # the latest picture while the child lives: what it started since the last walk
        if grace > 0 and proc.poll() is None:
            self.send(Stop())
            _wait(proc, grace)
            if tree is not None:
                tree.walk()
        term_deadline = time.monotonic() + TERM_GRACE
        _kill_group(proc.pid, signal.SIGTERM)
        if tree is not None:
            tree.terminate()
        if proc.poll() is None:
            _wait(proc, TERM_GRACE)
        _kill_group(proc.pid, signal.SIGKILL)
        proc.wait()
        if tree is not None:
            tree.end(term_deadline)
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
        return proc.returncode

    def pull(self) -> None:
        """Read, in the caller's thread, what the child wrote so far; the thread then leaves the reading to
        the pulls while they keep coming (:class:`PullPace`)."""
        self.pace.pulled()
        streams = self._streams
        if streams is not None:
            self._handle(streams, streams.ready(0))

    def _read_loop(self) -> None:
        proc, sock = self.proc, self._sock
        assert proc is not None and sock is not None and proc.stdout and proc.stderr
        protocol_error = lambda text: self._on_output(LogSource.PROTOCOL, text)  # noqa: E731
        streams = _Streams(
            {
                sock.fileno(): MessageStream(self._on_message, protocol_error),
                proc.stdout.fileno(): TextStream(
                    lambda text: self._on_output(LogSource.STDOUT, text),
                    lambda text: self._on_output(LogSource.STDOUT, text, True),
                ),
                proc.stderr.fileno(): TextStream(
                    lambda text: self._on_output(LogSource.STDERR, text),
                    lambda text: self._on_output(LogSource.STDERR, text, True),
                ),
            }
        )
        self._streams = streams
        while streams.open_fds:
            if self.tree is not None:
                self.tree.walk_if_due()
            idle = 0.0 if self._stopping.is_set() else self.pace.idle_for()
            if idle > 0:
                time.sleep(min(idle, 0.2))
            else:
                self._handle(streams, streams.ready(0.2))
            if proc.poll() is not None:
                # the child is dead: drain what is left, without waiting on pipes a grandchild holds
                with self._read_lock:
                    self._streams = None
                    self._drain(streams)
                break
        with self._read_lock:
            self._streams = None
            for fd in streams.open_fds:  # a last line without a newline still counts
                streams.readers[fd].finish()
            streams.sel.close()
        proc.stdout.close()
        proc.stderr.close()
        self._on_exit(proc.wait())

    def _handle(self, streams: _Streams, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        """Read the streams ``events`` say are ready. The thread and a pull may both have seen an event:
        whoever comes second finds nothing to read (non-blocking), and nothing happens."""
        if not events:
            return
        with self._read_lock:
            if self._streams is not streams:  # the reader finished meanwhile
                return
            for key, _ in events:
                self._read(streams, key.fd)

    def _read(self, streams: _Streams, fd: int) -> None:
        """What ``fd`` holds now (:func:`read_ready`), fed to its reader; its end seen."""
        if fd not in streams.open_fds or read_ready(lambda n: os.read(fd, n), streams.readers[fd].feed):
            return
        streams.close(fd)
        proc, sock = self.proc, self._sock
        if sock is not None and fd == sock.fileno() and self._socketpair and proc and proc.poll() is None:
            self._channel_closed()

    def _channel_closed(self) -> None:
        """The protocol socket closed while the child runs: tell whoever asked."""
        if self._on_channel_closed is not None:
            self._on_channel_closed()

    def _drain(self, streams: _Streams) -> None:
        """What the dead child's streams still hold, for at most half a second (a grandchild may keep a
        pipe open): :func:`~torchpar_top.sources.live.pacing.drain`."""

        def read(events: Events) -> None:
            for key, _ in events:
                self._read(streams, key.fd)

        drain(streams.ready, read, lambda: bool(streams.open_fds))


class _Streams:
    """The child's three streams being read: a selector over the open ones and each one's reader."""

    def __init__(self, readers: dict[int, MessageStream | TextStream]) -> None:
        self.readers = readers
        self.sel = selectors.DefaultSelector()
        for fd in readers:
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ)
        self.open_fds = set(readers)

    def ready(self, timeout: float) -> list[tuple[selectors.SelectorKey, int]]:
        """The streams with something to read (none once the selector is closed)."""
        return ready(self.sel, timeout)

    def close(self, fd: int) -> None:
        """``fd`` reached its end: no more reading, its last line counts."""
        self.sel.unregister(fd)
        self.open_fds.discard(fd)
        self.readers[fd].finish()


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)


def _kill_group(pgid: int, sig: int) -> None:
    """Signal the child's whole process group (its pid is the group id); ignore a group already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
