"""The command line, one argparse parser: ``torchpar-top [OPTIONS]`` (a built-in experiment) and its
subcommands ``run ... SCRIPT|-m MODULE [ARGS]``, ``attach PID``, ``replay FILE``, ``export FILE`` and
``compare A.json B.json``. Every error is one line and exit status 2 (:func:`fail`)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from torchpar_top import __version__, workloads
from torchpar_top.probes.agent.cuda_cupti import DEFAULT_DUTY as DEFAULT_CUPTI_DUTY

KEYS = (
    "Keys in the TUI: s sync on/off, +/- intra-op threads, w experiment, r restart, k stack, p pause, "
    "? help, q quit."
)


T = TypeVar("T")

#: The subcommands, in the order ``--help`` lists them.
COMMANDS = ("run", "attach", "replay", "export", "cluster", "compare")


def fail(message: str, help_of: str | None = None) -> NoReturn:
    """The command line's one error: ``torchpar-top: error: MESSAGE`` on stderr, exit status 2.

    Args:
        help_of: for a usage error, the command whose ``--help`` to point at (``torchpar-top run``).
    """
    hint = f" (see {help_of} --help)" if help_of else ""
    sys.stderr.write(f"torchpar-top: error: {message}{hint}\n")
    raise SystemExit(2)


def usage_error(args: argparse.Namespace, message: str) -> NoReturn:
    """A usage error of the (sub)command ``args`` were parsed for."""
    fail(message, prog_of(args))


def prog_of(args: argparse.Namespace) -> str:
    """``torchpar-top``, or ``torchpar-top COMMAND`` for a subcommand's arguments."""
    command = getattr(args, "command", None)
    return f"torchpar-top {command}" if command else "torchpar-top"


class Parser(argparse.ArgumentParser):
    """argparse whose errors go through :func:`fail`. A subcommand's parser reports what it does not
    know itself (argparse would leave it to the top parser, which would point at the wrong ``--help``)."""

    commands: dict[str, Parser]
    """The subcommands' parsers (on the top parser)."""

    def error(self, message: str) -> NoReturn:
        fail(message, self.prog)

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads; same behaviour
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self.prog != "torchpar-top":
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


#: Seconds between samples accepted by ``--interval``: below 20 ms the monitor would cost more than what it
#: watches (1e-9 took 98 % of a core); above a minute it shows nothing live (and infinity overflows timers).
INTERVAL_RANGE = (0.02, 60.0)


def _read(text: str, convert: Callable[[str], T], what: str) -> T:
    """``convert(text)``; a text it cannot read is an argument error naming ``what`` was expected."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None


def positive(text: str) -> float:
    """A finite number greater than zero."""
    value = _read(text, float, "a number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0: {text!r}")
    if math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds: {text!r}")
    return value


def interval(text: str) -> float:
    """Seconds between samples, within :data:`INTERVAL_RANGE`."""
    value = positive(text)
    lo, hi = INTERVAL_RANGE
    if not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"must be between {lo:g} and {hi:g} seconds: {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number of at least one."""
    value = _read(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


#: Resident memory of one rank before it does any work: a Python process that imported torch and
#: torch.distributed (219 MB, ``ru_maxrss`` on torch 2.13 CPU, Linux x86-64); ``--nproc-per-node`` asks for
#: at least this much per rank, so more ranks than the machine's memory holds are refused before they start.
RANK_MEMORY = 219 * 2**20


def nproc(text: str) -> int:
    """Ranks for ``--nproc-per-node``: at least one, and no more than the machine's memory can start."""
    value = positive_int(text)
    import psutil

    total = psutil.virtual_memory().total
    if value * RANK_MEMORY > total:
        raise argparse.ArgumentTypeError(
            f"{value} ranks need at least {value * RANK_MEMORY / 2**30:.0f} GiB (a rank with torch loaded "
            f"takes about {RANK_MEMORY / 2**20:.0f} MiB) and this machine has {total / 2**30:.0f} GiB: "
            f"at most {max(1, total // RANK_MEMORY)}"
        )
    return value


def nproc_warning(value: int | None) -> str:
    """A warning for more ranks than cores (they run, but take turns on the cores: every rate is lower and
    the run-queue wait shows it), or ''."""
    cores = os.cpu_count() or 1
    if value is None or value <= cores:
        return ""
    return (
        f"--nproc-per-node {value} on {cores} cores: the ranks take turns on the cores (their rates fall and "
        "the threads panel shows the wait)"
    )


def terminal_problem() -> str:
    """Why the screen cannot run here, or '': it reads keys from stdin and draws on stdout, so both must
    be terminals (``< /dev/null`` spun a core with ``q`` dead; under nohup Textual's input thread failed and
    the app ended with 0)."""
    for fd, name in ((0, "stdin"), (1, "stdout")):
        if not os.isatty(fd):
            return f"the screen needs a terminal ({name} is not one); use --headless"
    return ""


def check_terminal() -> None:
    """:func:`terminal_problem` as one line and status 2, before the screen starts."""
    problem = terminal_problem()
    if problem:
        fail(problem)


#: Seconds between samples of the built-in experiments and ``attach``: 10 Hz.
INTERVAL = 0.1

#: Seconds between ``run``'s samples: 5 Hz. Each of the agent's samples is Python that runs under the GIL
#: beside the user's loop, and costs the loop ~2.5-3.5 ms of its time (docs/benchmarks.md, session 17): at
#: 10 Hz a launch-bound loop kept 0.967-0.974 of its plain speed end to end and a 7.6 ms transformer step
#: 0.979-0.996, at issue 18's goals of 0.97 and 0.99 but not clear of them (sessions 31-33). At 5 Hz: 0.973
#: and 0.991, 0.991 and 0.997 in two runs (session 34; 10 Hz in the same rounds as the first: 0.957 and
#: 0.977; ``benchmarks/bench_run_steps.py``, variants ``run`` and ``run-10hz``). ``--interval 0.1`` brings
#: 10 Hz back.
RUN_INTERVAL = 0.2


def _common(parser: argparse.ArgumentParser, sync: bool = True, every: float = INTERVAL) -> None:
    parser.add_argument(
        "--interval",
        type=interval,
        default=every,
        metavar="SECONDS",
        help="seconds between samples, {:g} to {:g} (default: {:g})".format(*INTERVAL_RANGE, every),
    )
    if sync:
        parser.add_argument(
            "--sync", action="store_true", help="start in SYNC mode (synchronize after every op)"
        )
    parser.add_argument(
        "--no-stacks",
        action="store_true",
        help="do not sample the frontend's Python stack (the stack panel stays empty)",
    )
    parser.add_argument(
        "--headless",
        action="store_true",
        help="no screen: write one JSON object per sample to stdout, then exit",
    )
    parser.add_argument(
        "--duration",
        type=positive,
        metavar="SECONDS",
        help="with --headless: how long to run (required there)",
    )
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="keep the run: write every snapshot to FILE as JSON lines (torchpar-top replay "
        "FILE plays it back, torchpar-top export FILE converts it)",
    )
    outputs(parser)


def port(text: str) -> int:
    """A TCP port number, 1 to 65535."""
    value = _read(text, int, "a port number")
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535: {text!r}")
    return value


def outputs(parser: argparse.ArgumentParser) -> None:
    """``--report`` and ``--metrics-port``/``--metrics-addr``, on every mode (cli/outputs.py)."""
    parser.add_argument(
        "--report",
        metavar="FILE.json",
        help="when the run ends, write its verdict and figures as JSON (always printed)",
    )
    parser.add_argument(
        "--metrics-port",
        type=port,
        metavar="PORT",
        help="serve the live figures for Prometheus on this port (/metrics)",
    )
    parser.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        metavar="ADDR",
        help="address for --metrics-port (default: 127.0.0.1; 0.0.0.0 for all)",
    )


def _compare(commands: Any) -> Parser:
    """``torchpar-top compare A.json B.json [--tolerance X] [--metric NAME]``: two reports, for CI."""
    from torchpar_top.sinks.verdict import METRICS

    parser = _add(
        commands,
        "compare",
        help="two --report files side by side; exit 1 when steps/s fell",
        description="Two --report files side by side (figures and verdicts). Exit status 1 when the chosen "
        "figure fell from A to B by more than the tolerance, 0 otherwise, 2 for bad input.",
    )
    parser.add_argument("a", metavar="A.json", help="the reference report")
    parser.add_argument("b", metavar="B.json", help="the report to check")
    parser.add_argument(
        "--tolerance",
        type=share,
        default=0.05,
        metavar="X",
        help="largest accepted fall, a share of A's value (default: 0.05, 5%%)",
    )
    parser.add_argument(
        "--metric",
        choices=METRICS,
        metavar="NAME",
        help="the figure to check: " + ", ".join(METRICS) + " (default: steps_per_s where "
        "both runs counted steps, else throughput)",
    )
    return parser


def duty(text: str) -> float:
    """A share above 0, at most 1."""
    value = share(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return value


def share(text: str) -> float:
    """A number from 0 to 1."""
    value = _read(text, float, "a number")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1: {text!r}")
    return value


def build_parser() -> Parser:
    """The whole command line: ``torchpar-top [OPTIONS]`` runs a built-in experiment; the subcommands
    are in :attr:`Parser.commands` (``COMMAND --help`` for each)."""
    parser = Parser(
        prog="torchpar-top",
        description="top for PyTorch parallelism: runs an experiment in a child process and shows, live, "
        "per-core load, the child's threads by role, launch-queue depth per executor, busy lanes and "
        "overlap, and async vs sync throughput. Or a subcommand: your code (`torchpar-top run "
        "SCRIPT.py [ARGS]`), a process (`attach PID`), a recording or a torch.profiler trace played back "
        "(`replay FILE`), converted (`export FILE`), a job on several nodes read from Prometheus (`cluster "
        "--prometheus URL`), two reports compared (`compare A.json B.json`).",
        epilog=KEYS,
    )
    parser.add_argument(
        "--experiment",
        "-e",
        default=workloads.DEFAULT,
        choices=workloads.names(),
        metavar="NAME",
        help=f"built-in experiment: {', '.join(workloads.names())} (default: {workloads.DEFAULT})",
    )
    _common(parser)
    parser.add_argument("--version", action="version", version=f"torchpar-top {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    made = (
        _run(commands),
        _attach(commands),
        _replay(commands),
        _export(commands),
        _cluster(commands),
        _compare(commands),
    )
    parser.commands = dict(zip(COMMANDS, made, strict=True))
    return parser


def run_parser() -> Parser:
    """``run``'s parser (its options; :func:`split_run` takes the user's command off first)."""
    return build_parser().commands["run"]


def compare_parser() -> Parser:
    """``compare``'s parser."""
    return build_parser().commands["compare"]


def _add(commands: Any, name: str, **kwargs: Any) -> Parser:
    """The subcommand ``name``'s parser (``prog`` ``torchpar-top NAME``, as its errors say)."""
    parser: Parser = commands.add_parser(name, prog=f"torchpar-top {name}", **kwargs)
    return parser


def _run(commands: Any) -> Parser:
    """``torchpar-top run [OPTIONS] (SCRIPT | -m MODULE) [ARGS...]``: the user's code."""
    parser = _add(
        commands,
        "run",
        help="your code, unmodified, under the agent",
        usage="torchpar-top run [OPTIONS] (SCRIPT.py | -m MODULE) [ARGS...]",
        description="Run your code unmodified under the agent, as `python SCRIPT.py ARGS` would, and watch "
        "it: ops, steps/s (optimizer steps), queue depth, DataLoader prefetch, sync points, stacks.",
        epilog="Everything after SCRIPT (or -m MODULE) is passed to your code. " + KEYS,
    )
    _common(parser, every=RUN_INTERVAL)
    parser.add_argument(
        "--sync-scope",
        choices=("op", "step"),
        default="op",
        help="in SYNC mode, synchronize after every op (default) or every optimizer step",
    )
    parser.add_argument(
        "--every-op",
        action="store_true",
        help="count every torch call exactly (costs about a microsecond per call); by default "
        "ops and sync points are counted in slices of 5%% of the time and scaled. On CUDA "
        "it also counts launches per torch call instead of reading CUPTI's records",
    )
    parser.add_argument(
        "--cupti-duty",
        type=duty,
        default=DEFAULT_CUPTI_DUTY,
        metavar="SHARE",
        help="on CUDA, the share of sample intervals in which CUPTI records launches and "
        "GPU ops (default %(default)s: one interval in 20; 1 records all the time). The "
        "queue rows show the latest window's depth, labelled sampled",
    )
    parser.add_argument(
        "--no-queues",
        action="store_true",
        help="on CUDA, watch no launch queue: neither CUPTI's records nor a Python hook per op slows a "
        "launch-bound loop (once CUPTI had recorded, such a loop ran at 0.52-0.67x of plain on an "
        "H200 one day, 0.87x another); the GPU panel and the step phases remain",
    )
    parser.add_argument(
        "--nproc-per-node",
        type=nproc,
        metavar="N",
        help="launch through torchrun with N ranks on this node (Gloo on CPU)",
    )
    nodes(parser)
    return parser


#: torchrun's options for a job on several nodes, passed through as torchrun takes them (``--flag value``
#: or ``--flag=value``); ``run`` checks them first (:func:`check_nodes`, one line and exit 2).
NODE_OPTIONS = {
    "--nnodes": "nodes in the job: N, or MIN:MAX (elastic)",
    "--node-rank": "this node's rank, 0 to N-1 (the static rendezvous)",
    "--rdzv-endpoint": "HOST[:PORT] of the rendezvous (every node the same)",
    "--rdzv-backend": "rendezvous backend: static (torchrun's default) or c10d",
    "--rdzv-id": "the job's id for the rendezvous",
    "--rdzv-conf": "KEY=VALUE,... for the rendezvous (join_timeout=600...)",
    "--master-addr": "address of node 0 (static rendezvous without --rdzv-endpoint)",
    "--master-port": "port on node 0 (static rendezvous without --rdzv-endpoint)",
}


def nodes(parser: argparse.ArgumentParser) -> None:
    """torchrun's multi-node options on ``run`` (:data:`NODE_OPTIONS`) and ``--standalone``."""
    group = parser.add_argument_group("several nodes (torchrun's own options, passed through)")
    types: dict[str, Callable[[str], Any]] = {"--node-rank": int, "--master-port": port}
    for flag, text in NODE_OPTIONS.items():
        kind = types.get(flag, str)
        group.add_argument(flag, type=kind, metavar=flag[2:].upper().replace("-", "_"), help=text)
    group.add_argument("--standalone", action="store_true", help="one node, its own rendezvous")


def check_nodes(args: argparse.Namespace) -> str:
    """What is wrong with ``run``'s node options, in one line, or ''."""
    from torchpar_top.sources.live.targets import max_nodes, parse_endpoint

    given = [f for f in NODE_OPTIONS if getattr(args, f[2:].replace("-", "_")) is not None]
    if given and args.nproc_per_node is None:
        args.nproc_per_node = 1  # torchrun's default
    nnodes = 1
    if args.nnodes is not None:
        most = max_nodes(args.nnodes)
        if most is None:
            return f"--nnodes {args.nnodes!r}: not N or MIN:MAX with 1 <= MIN <= MAX"
        nnodes = most
    if args.standalone and nnodes > 1:
        return f"--standalone is one node: it cannot go with --nnodes {args.nnodes}"
    if args.standalone and args.nproc_per_node is None:
        return "--standalone needs --nproc-per-node N"
    if args.node_rank is not None and not 0 <= args.node_rank < nnodes:
        return f"--node-rank {args.node_rank} must be between 0 and --nnodes - 1 ({nnodes - 1})"
    if args.rdzv_endpoint is not None and parse_endpoint(args.rdzv_endpoint) is None:
        return f"--rdzv-endpoint {args.rdzv_endpoint!r}: not HOST:PORT (port 1 to 65535)"
    if nnodes > 1 and args.rdzv_endpoint is None and args.master_addr is None:
        return f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT (or --master-addr and --master-port)"
    if args.rdzv_backend not in (None, "static") and args.rdzv_endpoint is None and nnodes > 1:
        return f"--rdzv-backend {args.rdzv_backend} needs --rdzv-endpoint HOST:PORT"
    return ""


def _cluster(commands: Any) -> Parser:
    """``torchpar-top cluster --prometheus URL [--job NAME]``: the whole job, from Prometheus."""
    parser = _add(
        commands,
        "cluster",
        help="a job on several nodes, live, read from Prometheus",
        description="A live view of a job on several nodes, read from Prometheus' HTTP API: each node runs "
        "`torchpar-top run ... --metrics-port P` and Prometheus scrapes them (docs/cluster.md). A row per "
        "(node, rank): state, steps/s, step time and phases, queue depth, data wait, GPU use, the "
        "straggler; a stale node is marked, not dropped.",
        epilog="Keys: p pause, ? help, q quit.",
    )
    parser.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus, http://HOST:9090")
    parser.add_argument("--job", metavar="NAME", help="only the series of this scrape job (its job label)")
    parser.add_argument(
        "--nodes", type=positive_int, metavar="N", help="nodes expected (default: the job's scrape targets)"
    )
    parser.add_argument(
        "--interval",
        type=interval,
        default=2.0,
        metavar="SECONDS",
        help="seconds between refreshes (default: 2; Prometheus has nothing newer than its scrape_interval)",
    )
    parser.add_argument(
        "--headless", action="store_true", help="no screen: one JSON object per refresh on stdout"
    )
    parser.add_argument(
        "--duration", type=positive, metavar="SECONDS", help="with --headless: how long (required there)"
    )
    parser.add_argument(
        "--report", metavar="FILE.json", help="when it ends, write the job's summary as JSON (always printed)"
    )
    return parser


def _attach(commands: Any) -> Parser:
    """``torchpar-top attach PID``: a process we did not start."""
    parser = _add(
        commands,
        "attach",
        help="a process torchpar-top did not start",
        description="Watch a process torchpar-top did not start: per-core load, its threads by role, its GPU "
        "use and its Python stacks. Queue depth needs `torchpar-top run`.",
    )
    parser.add_argument("pid", type=positive_int, help="the process id")
    _common(parser, sync=False)
    return parser


def _replay(commands: Any) -> Parser:
    """``torchpar-top replay FILE [--speed X] [--summary]``: a recording, an export or a profiler trace."""
    parser = _add(
        commands,
        "replay",
        help="a recording, an export or a torch.profiler trace, played back",
        description="Play a recording (--record FILE, .jsonl or gzipped), an export read back (export "
        "--perfetto), or a recorded torch.profiler trace (Chrome trace JSON, .json or .json.gz, or a folder "
        "of rank-N.json.gz) through the same screen; the format is told from the first bytes. A trace shows "
        "launch-queue depth per stream as Holistic Trace Analysis computes it, busy lanes and overlap, "
        "kernel-active share per device, the frontend's sync points. --summary prints the whole recording's "
        "or trace's summary as one JSON object instead.",
        epilog="Keys in a replay: p pause/play, . and , one frame on/back, left/right seek 5%, home the "
        "trace's start, [ and ] half/double speed, r again, ? help, q quit.",
    )
    parser.add_argument(
        "trace",
        metavar="FILE",
        help="a recording, an export, a trace file, or a folder of one trace per rank",
    )
    parser.add_argument(
        "--summary", action="store_true", help="print one JSON object that summarises the trace, then exit"
    )
    parser.add_argument(
        "--speed",
        type=positive,
        metavar="X",
        help="seconds of trace time per second on screen (default: 0.01 for a trace, 100 "
        "times slower than it ran; 1 for a recording)",
    )
    parser.add_argument(
        "--interval",
        type=interval,
        metavar="SECONDS",
        help=f"seconds on screen between frames, {INTERVAL_RANGE[0]:g} to {INTERVAL_RANGE[1]:g} "
        "(default: 0.1 for a trace; a recording's own sampling interval)",
    )
    parser.add_argument(
        "--headless",
        action="store_true",
        help="no screen: write one JSON object per frame to stdout until the end of the trace",
    )
    parser.add_argument(
        "--duration",
        type=positive,
        metavar="SECONDS",
        help="with --headless: stop after this many seconds, before the end of the trace",
    )
    outputs(parser)
    return parser


def _export(commands: Any) -> Parser:
    """``torchpar-top export FILE --perfetto OUT.json --csv OUT.csv``."""
    parser = _add(
        commands,
        "export",
        help="a recording or a trace as Perfetto trace events or CSV",
        description="Convert a recording (--record FILE) or a profiler trace for other tools: --perfetto "
        "writes Chrome trace-event JSON (Perfetto UI, chrome://tracing) with counter tracks per core, GPU "
        "and executor, busy lanes, ASYNC/SYNC periods and sync points; --csv writes one row per sample.",
    )
    parser.add_argument("file", metavar="FILE", help="a recording, a trace file, or a folder of traces")
    parser.add_argument("--perfetto", metavar="OUT.json", help="write a trace-event JSON file")
    parser.add_argument("--csv", metavar="OUT.csv", help="write one row per sample")
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line parsed by :func:`build_parser`; ``command`` names the subcommand (None: the
    built-in experiment).

    A subcommand's arguments go to its own parser: the top parser would first read them against its own
    options, and abbreviations that are unique in the subcommand (``compare --metric``) are ambiguous
    there (``--metrics-port``, ``--metrics-addr``). ``run``'s user command is split off before that
    (:func:`split_run`: everything after SCRIPT or ``-m MODULE`` belongs to the user's code, untouched)
    into ``target``, ``module`` and ``target_args``.
    """
    parser = build_parser()
    argv = list(argv)
    command = argv[0] if argv and argv[0] in parser.commands else None
    if command is None:
        args = parser.parse_args(argv)
        if args.command is not None:  # after options of the experiment's: they would be dropped
            fail(f"options before {args.command} belong to the built-in experiment", "torchpar-top")
        return args
    if command == "run":
        ours, target, module, target_args = split_run(argv[1:], parser.commands["run"])
        args = parser.commands[command].parse_args(ours)
        args.target, args.module, args.target_args = target, module, target_args
    else:
        args = parser.commands[command].parse_args(argv[1:])
    args.command = command
    return args


def split_run(
    argv: Sequence[str], run: argparse.ArgumentParser | None = None
) -> tuple[list[str], str | None, bool, list[str]]:
    """Split ``run``'s argv into (our options, script or module, is_module, the user's args).

    Our options come first; the first token that is not one of them (or ``-m MODULE``) starts the
    user's command, and everything after it belongs to the user's code. ``--`` ends our options: the
    token after it is the script, whatever it looks like. ``-m`` without a module gives (ours, None,
    True, []). ``run``: the run subcommand's parser, when the caller has built it already.
    """
    takes_value = {  # every option that takes a value, as the parser has it (--cupti-duty 0.5 was missed)
        option
        for action in (run or run_parser())._actions
        if action.nargs != 0
        for option in action.option_strings
    }
    ours: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            rest = list(argv[i + 1 :])
            return (ours, rest[0], False, rest[1:]) if rest else (ours, None, False, [])
        if token == "-m":
            if i + 1 >= len(argv):
                return ours, None, True, []
            return ours, argv[i + 1], True, list(argv[i + 2 :])
        if token.startswith("-"):
            ours.append(token)
            if token in takes_value and i + 1 < len(argv):
                ours.append(argv[i + 1])
                i += 1
            i += 1
            continue
        return ours, token, False, list(argv[i + 1 :])
    return ours, None, False, []
