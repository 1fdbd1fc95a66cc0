"""Run the user's code unmodified under the agent: ``torchpar-top run``'s child (and each torchrun rank).

    python -m torchpar_top.probes.agent.run [--fd N] [--interval S] [--sync] [--sync-scope op|step]
        (-m MODULE | SCRIPT) [ARGS...]

It behaves like ``python SCRIPT ARGS`` / ``python -m MODULE ARGS``: ``sys.argv``, ``__main__``,
``sys.path[0]`` and the exit status are the same, and an uncaught exception prints a normal traceback
(without this module's frames) and exits 1. The protocol goes over the inherited socket ``--fd`` or,
without it, the Unix socket named by ``TORCHPAR_TOP_SOCKET`` (torchrun ranks). A target that cannot run
(missing, not Python, a syntax error, no such module) is one line on stderr and exit status 2; the
parent can print the same line before spawning with :func:`check_target`. This module imports torch
only in :func:`main`, so the parent can import :func:`check_target` cheaply.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import traceback
from dataclasses import dataclass, field

from torchpar_top.contract.vocab import ENV_SOCKET, SyncScope
from torchpar_top.probes.agent.usercode_target import check_target

__all__ = ["check_target", "main"]

#: Exit status for a target that cannot run or a bad command line (the user's code never ran).
EXIT_CANNOT_RUN = 2


class UsageError(Exception):
    """A command line this entry point does not understand."""


@dataclass
class Options:
    """The parsed command line."""

    target: str = ""
    is_module: bool = False
    args: list[str] = field(default_factory=list)
    fd: int | None = None
    interval: float = 0.1
    sync: bool = False
    sync_scope: str = "op"
    every_op: bool = False
    cupti_duty: float | None = None
    queues: bool = True
    step_records: bool = True


def parse_args(argv: list[str]) -> Options:
    """Our options first; ``-m MODULE`` or the first other word starts the user's command line."""
    opts, i = Options(), 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=")
        if name in ("--fd", "--interval", "--sync-scope", "--cupti-duty"):
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"{name} needs a value")
                inline, i = argv[i + 1], i + 1
            try:
                if name == "--fd":
                    opts.fd = int(inline)
                elif name == "--interval":
                    opts.interval = float(inline)
                    if not opts.interval > 0:
                        raise ValueError
                elif name == "--cupti-duty":
                    opts.cupti_duty = float(inline)
                    if not 0 < opts.cupti_duty <= 1:
                        raise ValueError
                elif inline in ("op", "step"):
                    opts.sync_scope = inline
                else:
                    raise ValueError
            except ValueError:
                raise UsageError(f"bad value for {name}: {inline!r}") from None
        elif arg == "--sync":
            opts.sync = True
        elif arg == "--every-op":
            opts.every_op = True
        elif arg == "--no-queues":
            opts.queues = False
        elif arg == "--no-step-records":
            opts.step_records = False
        elif arg.startswith("-m"):
            module = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            if not module:
                raise UsageError("-m needs a module name")
            rest = i + (1 if arg[2:] else 2)
            opts.target, opts.is_module, opts.args = module, True, argv[rest:]
            return opts
        elif arg == "--":
            if i + 1 >= len(argv):
                break
            opts.target, opts.args = argv[i + 1], argv[i + 2 :]
            return opts
        elif arg.startswith("-"):
            raise UsageError(f"unknown option {arg}")
        else:
            opts.target, opts.args = arg, argv[i + 1 :]
            return opts
        i += 1
    raise UsageError("missing SCRIPT or -m MODULE")


def connect(fd: int | None) -> socket.socket:
    """The protocol socket: the inherited ``fd``, else a connection to ``$TORCHPAR_TOP_SOCKET``.

    Raises:
        UsageError: neither is given, or the connection fails.
    """
    if fd is not None:
        try:
            sock = socket.socket(fileno=fd)
        except OSError as exc:
            raise UsageError(f"--fd {fd}: {exc.strerror or exc}") from None
    else:
        path = os.environ.get(ENV_SOCKET)
        if not path:
            raise UsageError(f"no --fd and {ENV_SOCKET} is not set: nothing to report to")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            raise UsageError(f"cannot connect to {ENV_SOCKET}={path}: {exc.strerror or exc}") from None
    sock.set_inheritable(False)  # not into the user's subprocesses
    return sock


def _env_int(name: str) -> int | None:
    """An environment variable as a non-negative int, None when unset or not a number."""
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def main(argv: list[str] | None = None) -> int:
    """Check the target, connect, install the agent, run the user's code; returns its exit status."""
    try:
        opts = parse_args(list(sys.argv[1:] if argv is None else argv))
        problem = check_target(opts.target, opts.is_module)
        if problem:
            print(f"torchpar-top: error: {problem}", file=sys.stderr)
            return EXIT_CANNOT_RUN
        sock = connect(opts.fd)
    except UsageError as exc:
        print(f"torchpar-top: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN

    from torchpar_top.probes.agent.agent import adopt_orphans, kill_descendants
    from torchpar_top.probes.agent.usercode import UserCode
    from torchpar_top.probes.agent.usercode_exec import run_user_code
    from torchpar_top.probes.agent.usercode_install import Instrumentation

    adopt_orphans()
    label = f"-m {opts.target}" if opts.is_module else opts.target
    agent = UserCode(
        sock,
        target=label,
        interval=opts.interval,
        sync=opts.sync,
        sync_scope=SyncScope(opts.sync_scope),
        rank=_env_int("RANK"),
        world_size=_env_int("WORLD_SIZE"),
        every_op=opts.every_op,
        cupti_duty=opts.cupti_duty,
        watch_queues=opts.queues,
        step_records=opts.step_records,
    )
    agent.start()
    status: int | None = 0  # None: die of SIGINT, as python does after an uncaught KeyboardInterrupt
    reported: tuple[int, str] = (0, "")  # the status and why, for torchpar-top (ranks are not its children)
    try:
        with Instrumentation(agent):
            agent.interruptible = True
            try:
                run_user_code(opts.target, opts.is_module, opts.args)
            finally:
                agent.interruptible = False
                agent.last_sample()  # the steps since the sampler's last window, counted while hooked
    except SystemExit as exc:
        reported = system_exit_status(exc.code)
        raise  # the interpreter turns the code into the exit status, as for python SCRIPT
    except KeyboardInterrupt as exc:
        if agent.stop_requested:  # a stop from torchpar-top ends quietly with 0, and soon
            status = -1
            reported = (0, "stopped by torchpar-top")
        else:
            _print_user_traceback(exc)
            status = None
            reported = (-signal.SIGINT, "KeyboardInterrupt")
    except BaseException as exc:
        _print_user_traceback(exc)
        status = 1
        reported = (1, exception_line(exc))
    finally:
        agent.report_exit(*reported)
        agent.finish()
        if agent.agent.peer_gone:
            # torchpar-top went away (killed, say) and the code unwound before the stop's grace ran out
            # (a signal woke a sleep, a loop reached a safe point): what it started is ours to end, as the
            # grace's hard exit would have (a daemon in a session of its own, a group of its own)
            kill_descendants()
        sys.stdout.flush()
    if status is None:
        _die_of_sigint()
    if status == -1:
        _exit_soon()
    return status or 0


def system_exit_status(code: object) -> tuple[int, str]:
    """The exit status Python gives ``sys.exit(code)``, and a reason when it is not a plain number."""
    if code is None:
        return 0, ""
    if isinstance(code, int):  # bool too: sys.exit(True) is status 1
        return code & 0xFF, ""
    return 1, f"sys.exit({code!r})"


def exception_line(exc: BaseException) -> str:
    """The last line Python prints for an uncaught ``exc``: ``ValueError: bad value 42``."""
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def _print_user_traceback(exc: BaseException) -> None:
    """Print as Python would (``sys.excepthook``), minus the frames of this bootstrap."""
    from torchpar_top.probes.agent.usercode_exec import user_traceback

    tb = user_traceback(exc.__traceback__)
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


def _exit_soon() -> None:
    """After a stop: the user's ``finally`` blocks ran; run the atexit handlers and leave with 0 at once.

    Python's own teardown of a torch process takes 0.5-1 s (more on a loaded machine), longer than the
    parent waits before SIGTERM, which would skip the handlers and turn the exit status into -15.
    """
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _die_of_sigint() -> None:
    """End like python after an uncaught KeyboardInterrupt: killed by SIGINT."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


if __name__ == "__main__":
    sys.exit(main())
