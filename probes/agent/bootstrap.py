"""Entry point of the workload process: ``python -m torchpar_top.probes.agent.bootstrap``.

torchpar-top starts it in its own process group with one end of a socketpair inherited as ``--fd``.
The workload's own stdout and stderr stay separate from the protocol on that socket.
"""

from __future__ import annotations

import argparse
import socket
import sys
import traceback

from torchpar_top.probes.agent.agent import Agent, adopt_orphans


def main(argv: list[str] | None = None) -> int:
    """Connect, build the agent, run the experiment until stopped."""
    parser = argparse.ArgumentParser(prog="torchpar-top-agent")
    parser.add_argument("--fd", type=int, required=True, help="inherited socket for the protocol")
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--sync", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads before anything runs (so pool threads start with it too)",
    )
    args = parser.parse_args(argv)

    # After argument parsing: torch and the workloads are heavy imports.
    import torch
    from torchpar_top import workloads

    if args.threads is not None:
        # Before the workload starts any thread: the inter-op pool's threads size their OpenMP team from
        # this when they start, and keep it; a later set_num_threads reaches only the calling thread.
        torch.set_num_threads(max(1, args.threads))

    adopt_orphans()
    sock = socket.socket(fileno=args.fd)
    experiment = workloads.get(args.experiment)
    agent = Agent(
        sock,
        experiment=experiment.name,
        description=experiment.title,
        device=experiment.device(torch.cuda.is_available()),
        interval=args.interval,
        sync=args.sync,
    )
    agent.start()
    status = 0
    try:
        experiment.run(agent)
    except Exception as exc:
        traceback.print_exc()
        status = 1
        agent.report_exit(1, traceback.format_exception_only(type(exc), exc)[-1].strip())
    else:
        agent.report_exit(0)  # the socket closes as the process ends: torchpar-top knows it is not lost
    finally:
        agent.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
