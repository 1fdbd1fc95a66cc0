"""What a session watches: a built-in experiment, the user's script (optionally under torchrun), or a PID.

Each target knows how to say what it is and, when it runs a child, the command line for it. The agent
reaches torchpar-top either on an inherited socketpair (``--fd``) or, for torchrun ranks that cannot
inherit descriptors, on a Unix socket in a private directory (``TORCHPAR_TOP_SOCKET``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from torchpar_top import workloads


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

    def command(self, fd: int | None, interval: float, sync: bool) -> list[str]:
        """The child's argv; ``fd`` is the inherited protocol socket."""
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

    @property
    def label(self) -> str:
        """Shown in the header."""
        what = f"-m {self.path}" if self.module else self.path
        return f"run {what}" + (f" ×{self.nproc} ranks" if self.nproc else "")

    @property
    def description(self) -> str:
        """One line on what it does."""
        return " ".join([("-m " if self.module else "") + self.path, *self.args])

    def command(self, fd: int | None, interval: float, sync: bool) -> list[str]:
        """The child's argv (torchrun's when ``nproc`` is set; then ``fd`` is None)."""
        agent = ["--interval", str(interval), "--sync-scope", self.sync_scope] + (["--sync"] if sync else [])
        agent += ["--every-op"] if self.every_op else []
        agent += ["--cupti-duty", repr(self.cupti_duty)] if self.cupti_duty is not None else []
        user = (["-m", self.path] if self.module else [self.path]) + list(self.args)
        if self.nproc:
            return [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={self.nproc}",
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
