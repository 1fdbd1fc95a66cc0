"""``torchpar-top run``'s agent with some of its parts switched off, to measure what each part costs.

    python benchmarks/agent_without.py PART[+PART...] [agent options] SCRIPT [ARGS...]

The rest of the command line is :mod:`torchpar_top.probes.agent.run`'s. ``bench_interleaved.py`` runs it
as the variant ``agent-no-PART[+PART]`` beside the plain loop, so the difference between ``agent`` and
``agent-no-sampler`` is what the sampler costs the loop. Parts (each patched here, before the agent
starts; nothing in the package changes):

- ``sampler``: the sampler thread sends no samples (it ends at once): no stacks, no thread clocks, no
  memory reads, no switch signal from it; the loop's process keeps its control thread;
- ``ops``: the sampled op counter never switches on (its function mode never enters the mode stack);
- ``phases``: no phase boundaries (no backward, module, optimizer-pre or collective wrappers); steps
  are still counted by the optimizer's post hook;
- ``steps``: no optimizer step post hook (steps then come from backward, where ``phases`` is on);
- ``signal``: no switch signal handler (the op counter switches at steps alone);
- ``all``: every part above.

A benchmark's tool, not a mode of the product: what is off here is off for this process only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def _no_sampler() -> None:
    from torchpar_top.probes.agent import agent

    def sample_loop(self: Any) -> None:
        return None

    agent.Agent._sample_loop = sample_loop  # type: ignore[method-assign]


def _no_ops() -> None:
    from torchpar_top.probes.agent import usercode_sampling

    def switch_on(self: Any, now: float) -> None:
        self._next_on = float("inf")  # never due: the tick after this sets due to never

    usercode_sampling.SampledCounting._switch_on = switch_on  # type: ignore[method-assign]


def _no_phases() -> None:
    from torchpar_top.probes.agent import usercode_phases

    def install(self: Any) -> None:
        return None

    usercode_phases.PhaseHooks.install = install  # type: ignore[method-assign]


class _NoHandle:
    def remove(self) -> None:
        return None


def _no_steps() -> None:
    from torchpar_top.probes.agent import usercode_install

    def register(hook: Callable[..., Any]) -> _NoHandle:
        return _NoHandle()

    usercode_install.register_optimizer_step_post_hook = register  # type: ignore[assignment]


def _no_signal() -> None:
    from torchpar_top.probes.agent import usercode_sampling

    def install(self: Any) -> bool:
        return False

    usercode_sampling.SwitchSignal.install = install  # type: ignore[method-assign]


PARTS: dict[str, Callable[[], None]] = {
    "sampler": _no_sampler,
    "ops": _no_ops,
    "phases": _no_phases,
    "steps": _no_steps,
    "signal": _no_signal,
}


def parts_of(spec: str) -> list[str]:
    """``"sampler+ops"`` as a list of parts; ``"all"`` is every part. Raises SystemExit on an unknown one."""
    names = list(PARTS) if spec == "all" else spec.split("+")
    unknown = [n for n in names if n not in PARTS]
    if unknown or not names:
        raise SystemExit(
            f"agent_without: unknown part {', '.join(unknown) or spec!r} (parts: {', '.join(PARTS)}, all)"
        )
    return names


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit("usage: agent_without.py PART[+PART...] [agent options] SCRIPT [ARGS...]")
    for name in parts_of(argv[0]):
        PARTS[name]()
    from torchpar_top.probes.agent.run import main as run_main

    return run_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
