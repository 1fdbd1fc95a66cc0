"""A private Unix socket that torchrun ranks connect to (they cannot inherit our descriptors).

One thread reads every connection until someone pulls (:meth:`AgentListener.pull`, the screen's frame):
then the pulls read and the thread only stands behind them (:mod:`.pacing`).

The socket lives in a fresh directory only this user can enter (``mkdtemp``: mode 0700). Each
connection is one agent; its lines are validated like any other protocol stream.

The directory must not outlive us, even after SIGKILL (no chance to clean up then). So: once every rank
expected has connected, the socket's name is not needed any more (connections live on without it), and
the socket file and its directory are removed at once; and the directory's name carries our pid, so a
later start removes those of a torchpar-top that died before its ranks all connected.

torchrun keeps its own directory too (``--log-dir``: each rank's ``error.json`` when it fails), in the
system's temp folder under a fresh name when not told where, and never removes it: every job would
leave one behind. So the listener also makes :attr:`AgentListener.log_dir` for it, named the same way,
and removes it in :meth:`AgentListener.close` (after the launcher has ended: the session closes the
listener after stopping the child).
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable

from torchpar_top.contract.messages import Message
from torchpar_top.sources.live.pacing import PullPace, drain, read_ready, ready
from torchpar_top.sources.live.wire import MessageStream

#: The start of the private directories' names; the pid of the torchpar-top that made one follows.
DIR_PREFIX = "torchpar-top-"


def remove_stale_dirs() -> None:
    """Remove the listener directories of torchpar-top processes that are gone (killed before their ranks
    all connected); those of living ones, and anything not ours, are left alone."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        pid, sep, _ = name[len(DIR_PREFIX) :].partition("-")
        if not name.startswith(DIR_PREFIX) or not sep or not pid.isdigit() or _alive(int(pid)):
            continue
        path = os.path.join(root, name)
        try:
            if os.stat(path).st_uid == os.getuid() and os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (ours or not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class AgentListener:
    """Accepts agent connections and reads them, on its thread or in the callers of :meth:`pull`."""

    def __init__(
        self,
        on_message: Callable[[Message, int], None],
        on_closed: Callable[[int], None],
        on_error: Callable[[str], None],
        expected: int | None = None,
    ) -> None:
        """Create the socket (listening at once).

        Args:
            on_message: called with (message, connection number) for each valid message.
            on_closed: called with the connection number when an agent disconnects.
            on_error: called with a line for the log pane (malformed input).
            expected: how many agents will connect (torchrun's ranks); once they all have, the socket's
                file and directory are removed. None: kept until :meth:`close`.
        """
        remove_stale_dirs()
        self._dir = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")
        os.chmod(self._dir, 0o700)
        self.log_dir = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-torchrun-")
        """For torchrun's ``--log-dir`` (mode 0700 as ``mkdtemp`` makes it), removed by :meth:`close`."""
        self.path = os.path.join(self._dir, "agent.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(64)
        self._server.setblocking(False)
        self._on_message, self._on_closed, self._on_error = on_message, on_closed, on_error
        self._expected = expected
        self._conns: dict[int, tuple[socket.socket, MessageStream]] = {}
        self._lock = threading.Lock()
        self._next = 1
        self._stop = threading.Event()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._server, selectors.EVENT_READ, 0)
        self._read_lock = threading.Lock()
        """Held while a connection is read and its stream fed: the thread and a pull never interleave."""
        self.pace = PullPace()
        self._thread = threading.Thread(target=self._loop, name="tpt-listener", daemon=True)
        self._thread.start()

    def broadcast(self, cmd: Message) -> int:
        """Send a command to every connected agent; returns how many got it."""
        data = cmd.to_json()
        sent = 0
        with self._lock:
            conns = [c for c, _ in self._conns.values()]
        for conn in conns:
            try:
                conn.sendall(data)
                sent += 1
            except OSError:
                pass
        return sent

    def close(self) -> None:
        """Stop reading, close every connection, remove the directories. Idempotent."""
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            for conn, _ in self._conns.values():
                conn.close()
            self._conns.clear()
        self._server.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        shutil.rmtree(self.log_dir, ignore_errors=True)

    def pull(self) -> None:
        """Read, in the caller's thread, what the agents sent so far (and accept who connected); the
        thread then leaves the reading to the pulls while they keep coming (:class:`PullPace`)."""
        self.pace.pulled()
        self._handle(ready(self._sel, 0))

    def drain(self) -> None:
        """Read every connection to its end, in the caller's thread, for at most half a second
        (:func:`~torchpar_top.sources.live.pacing.drain`): torchrun ended, and with it its ranks, so what
        they sent last (their exit reports) and their closed connections are all there to read. Unlike
        :meth:`pull` it reads past :data:`~torchpar_top.sources.live.pacing.READ_AT_MOST`, and it waits
        for a read the thread has in progress (the read lock) rather than find nothing ready and leave a
        connection's end unsaid. Returns when no connection is left, or none had anything to read for
        50 ms (a rank on another node, or one that runs on)."""
        self.pace.pulled()

        def open_() -> bool:
            with self._read_lock:  # a read in progress on the thread ends (and says its close) first
                return not self._stop.is_set() and bool(self._conns)

        drain(lambda timeout: ready(self._sel, timeout), self._handle, open_)

    def _loop(self) -> None:
        while not self._stop.is_set():
            idle = self.pace.idle_for()
            if idle > 0:
                self._stop.wait(idle)
                continue
            self._handle(ready(self._sel, 0.2))
        with self._read_lock:
            self._sel.close()

    def _handle(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        """Accept and read what ``events`` say is ready. Both the thread and a pull may have seen the same
        event: whoever comes second finds nothing to read (non-blocking), and nothing happens."""
        if not events:
            return
        with self._read_lock:
            if self._stop.is_set():
                return
            for key, _ in events:
                if key.data == 0:
                    self._accept(self._sel)
                else:
                    self._read(self._sel, key.data)

    def _numbered(self, number: int) -> Callable[[Message], None]:
        """``on_message`` for the connection ``number``: each message comes with it."""
        on_message = self._on_message
        return lambda msg: on_message(msg, number)

    def _accept(self, sel: selectors.BaseSelector) -> None:
        try:
            conn, _ = self._server.accept()
        except OSError:
            return
        conn.setblocking(False)
        with self._lock:
            number, self._next = self._next, self._next + 1
            stream = MessageStream(self._numbered(number), self._on_error)
            self._conns[number] = (conn, stream)
        sel.register(conn, selectors.EVENT_READ, number)
        if self._expected is not None and number >= self._expected:
            self.remove_path()  # every rank is in: nothing is left behind, even if we are killed now

    @property
    def directory(self) -> str:
        """The private directory holding the socket (gone once every expected agent connected)."""
        return self._dir

    def remove_path(self) -> None:
        """Remove the socket's file and its directory; connections made live on. Idempotent."""
        shutil.rmtree(self._dir, ignore_errors=True)

    def _read(self, sel: selectors.BaseSelector, number: int) -> None:
        entry = self._conns.get(number)
        if entry is None:  # closed by the other reader
            return
        conn, stream = entry
        if not read_ready(conn.recv, stream.feed):
            sel.unregister(conn)
            with self._lock:
                self._conns.pop(number, None)
            conn.close()
            self._on_closed(number)
