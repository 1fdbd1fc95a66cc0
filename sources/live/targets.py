"""What a session watches: a built-in experiment, the user's script (optionally under torchrun), or a PID.

Each target knows how to say what it is and, when it runs a child, the command line for it. The agent
reaches torchpar-top either on an inherited socketpair (``--fd``) or, for torchrun ranks that cannot
inherit descriptors, on a Unix socket in a private directory (``TORCHPAR_TOP_SOCKET``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields

from torchpar_top import workloads
from torchpar_top.model.store import RENDEZVOUS_NOTICE


@dataclass(frozen=True)
class ExperimentTarget:
    """A built-in experiment."""

    name: str
    threads: int | None = None
    """Intra-op threads to start with (a restart after ``+``/``-``); None: torch's default."""

    @property
    def label(self) -> str:
        """Shown in the header."""
        return self.name

    def command(self, fd: int | None, interval: float, sync: bool, log_dir: str | None = None) -> list[str]:
        """The child's argv; ``fd`` is the inherited protocol socket. ``log_dir`` is torchrun's, which an
        experiment never runs under: taken as :meth:`ScriptTarget.command` takes it, and unused."""
        cmd = [
            sys.executable,
            "-m",
            "torchpar_top.probes.agent.bootstrap",
            "--fd",
            str(fd),
            "--experiment",
            self.name,
            "--interval",
            str(interval),
        ]
        if self.threads is not None:
            cmd += ["--threads", str(self.threads)]
        return cmd + (["--sync"] if sync else [])

    @property
    def description(self) -> str:
        """One line on what it does."""
        return workloads.info(self.name).title


def parse_endpoint(text: str) -> tuple[str, int | None] | None:
    """``HOST[:PORT]`` (``[V6]:PORT`` for an IPv6 address) as torchrun's rendezvous takes it, or None."""
    host, port = text, None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        rest = rest[1:]
    elif text.count(":") == 1:
        host, _, rest = text.partition(":")
    else:
        rest = "" if ":" not in text else "x"  # several colons, no brackets: not an endpoint
    if rest:
        if not rest.isdigit() or not 1 <= int(rest) <= 65535:
            return None
        port = int(rest)
    if not host or any(c.isspace() or c in "/@?#" for c in host):
        return None
    return host, port


def max_nodes(text: str) -> int | None:
    """The most nodes ``--nnodes N`` or ``MIN:MAX`` allows, or None when it is neither."""
    low, _, high = text.partition(":")
    try:
        lo, hi = int(low), int(high or low)
    except ValueError:
        return None
    return hi if 1 <= lo <= hi else None


@dataclass(frozen=True)
class Nodes:
    """torchrun's options for a job on several nodes, as the user gave them (None: not given)."""

    nnodes: str | None = None
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_backend: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: str | None = None
    master_addr: str | None = None
    master_port: int | None = None
    standalone: bool = False

    @property
    def count(self) -> int:
        """The most nodes the job can have."""
        return max_nodes(self.nnodes or "1") or 1

    def options(self) -> list[str]:
        """torchrun's arguments, in its own spelling (``--nnodes=2``...); one node without a rendezvous
        of its own is ``--standalone``, as before."""
        out = [
            f"--{f.name.replace('_', '-')}={getattr(self, f.name)}"
            for f in fields(self)
            if f.name != "standalone" and getattr(self, f.name) is not None
        ]
        alone = self.count == 1 and self.rdzv_endpoint is None and self.master_addr is None
        return (["--standalone"] if self.standalone or alone else []) + out

    @property
    def endpoint(self) -> str:
        """Where the nodes meet: the rendezvous endpoint, or (static) node 0's address and port."""
        if self.rdzv_endpoint:
            return self.rdzv_endpoint
        return f"{self.master_addr or '127.0.0.1'}:{self.master_port or 29500}"

    @property
    def waiting(self) -> str:
        """The notice until a rank says hello (a node whose peers never come sees only this)."""
        if self.count == 1:
            return ""
        return f"{RENDEZVOUS_NOTICE}{self.endpoint}: {self.count} nodes expected, none has said hello yet"


@dataclass(frozen=True)
class ScriptTarget:
    """The user's code, run unmodified under the agent: ``SCRIPT ARGS`` or ``-m MODULE ARGS``."""

    path: str
    args: tuple[str, ...] = ()
    module: bool = False
    nproc: int | None = None
    """With a number, launch through torchrun with that many ranks on this node."""
    sync_scope: str = "op"
    """In SYNC mode, synchronize after every ``op`` or every optimizer ``step``."""
    every_op: bool = False
    """Count every torch call (exact, about a microsecond per call) instead of slices of the time."""
    cupti_duty: float | None = None
    """On CUDA, the share of sample intervals CUPTI records in (None: the agent's default)."""
    queues: bool = True
    """On CUDA, watch the launch queues (False: ``--no-queues``)."""
    step_records: bool = True
    """Send each step whole (``Steps.recent``, what a recording's Perfetto export draws a slice per phase
    per step from); False (``--no-step-records``) where nothing records them: nothing else reads them,
    and they were two fifths of a rank's sample to decode (six steps a sample at 60 steps/s)."""
    nodes: Nodes = Nodes()
    """torchrun's multi-node options (with ``nproc``)."""

    @property
    def label(self) -> str:
        """Shown in the header."""
        what = f"-m {self.path}" if self.module else self.path
        node = ""
        if self.nodes.count > 1:
            rank = "?" if self.nodes.node_rank is None else self.nodes.node_rank
            node = f" on node {rank} of {self.nodes.count}"
        return f"run {what}" + (f" ×{self.nproc} ranks{node}" if self.nproc else "")

    @property
    def description(self) -> str:
        """One line on what it does."""
        return " ".join([("-m " if self.module else "") + self.path, *self.args])

    def command(self, fd: int | None, interval: float, sync: bool, log_dir: str | None = None) -> list[str]:
        """The child's argv (torchrun's when ``nproc`` is set; then ``fd`` is None, and ``log_dir`` is
        torchrun's ``--log-dir``, its own temporary folder when None)."""
        agent = ["--interval", str(interval), "--sync-scope", self.sync_scope] + (["--sync"] if sync else [])
        agent += ["--every-op"] if self.every_op else []
        agent += ["--cupti-duty", repr(self.cupti_duty)] if self.cupti_duty is not None else []
        agent += [] if self.queues else ["--no-queues"]
        agent += [] if self.step_records else ["--no-step-records"]
        user = (["-m", self.path] if self.module else [self.path]) + list(self.args)
        if self.nproc:
            return [
                sys.executable,
                "-m",
                "torch.distributed.run",
                *self.nodes.options(),
                f"--nproc-per-node={self.nproc}",
                *([f"--log-dir={log_dir}"] if log_dir else []),
                "-m",
                "torchpar_top.probes.agent.run",
                *agent,
                *user,
            ]
        return [sys.executable, "-m", "torchpar_top.probes.agent.run", "--fd", str(fd), *agent, *user]


@dataclass(frozen=True)
class AttachTarget:
    """A process torchpar-top did not start: host probes and stacks only."""

    pid: int

    @property
    def label(self) -> str:
        """Shown in the header."""
        return f"attach {self.pid}"

    @property
    def description(self) -> str:
        """One line on what it does."""
        return f"watching pid {self.pid} (not started by torchpar-top)"


Target = ExperimentTarget | ScriptTarget | AttachTarget
