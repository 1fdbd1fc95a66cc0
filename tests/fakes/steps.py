"""Synthetic agents that step: samples with cumulative ``Steps`` and ``Memory``, as the agent sends them."""

import json
import random

from torchpar_top.contract import messages as m
from torchpar_top.contract.vocab import PHASES


def wire(**plain):
    """A message as the agent sends it, read back by the real codec."""
    return m.decode(json.dumps({"v": m.VERSION, **plain}))


T0 = 1_700_000_000.0


def hello(pid, rank=None):
    return wire(
        type="hello",
        pid=pid,
        experiment="run",
        device="cpu",
        torch="2",
        num_threads=1,
        interop_threads=1,
        rank=rank,
        world_size=None if rank is None else 2,
    )


class Rank:
    """A rank's agent: steps of ``per_step`` phase seconds, cumulative, sampled every ``window`` s; its
    frontend waits for a core ``core_wait`` of each window (None: no schedstat, not said)."""

    def __init__(
        self,
        step=0.01,
        offset=0.0,
        window=0.1,
        rss=100_000_000,
        leak=0.0,
        jitter=0.0,
        seed=0,
        core_wait=None,
        **per_step,
    ):
        self.core_wait = core_wait
        self.t = T0 + offset
        self.window, self.step, self.count, self.rss, self.leak = window, step, 0, rss, leak
        self.per_step = per_step or {"forward": step}
        self.total = dict.fromkeys(PHASES, 0.0)
        self.next_end = self.t + step
        self.rng, self.jitter = random.Random(seed), jitter
        self.source = "backward"
        """What marks its steps (a test may change it mid-run: the count goes on)."""
        self.before = 0
        """Of the count, the steps another source marked before this one took over (as the agent says)."""
        self._sent: str | None = None

    def sample(self, unit="steps/s", throughput=0.0, op_coverage=None):
        self.t += self.window
        ends, recent = [], []
        per = self.per_step
        while self.next_end <= self.t:
            ends.append(self.next_end)
            ph = {p: v * (1 + self.rng.uniform(-self.jitter, self.jitter)) for p, v in per.items()}
            for p, v in ph.items():
                self.total[p] += v
            recent.append({"end": self.next_end, "phases": ph})
            self.count += 1
            self.next_end += self.step
        self.rss += self.leak * self.window
        if self._sent is not None and self.source != self._sent:
            self.before = self._sent_count  # the agent's count of the source before: what it had sent
        if self.count:
            self._sent, self._sent_count = self.source, self.count
        return wire(
            type="sample",
            t=self.t,
            window=self.window,
            mode="async",
            throughput=throughput,
            unit=unit,
            num_threads=1,
            frontend={"busy": 1.0, "wait": 0.0}
            if self.core_wait is None
            else {"busy": 1.0 - self.core_wait, "wait": 0.0, "core_wait": self.core_wait},
            overlap=0.0,
            steps=None
            if not self.count
            else {
                "source": self.source,
                "count": self.count,
                "seconds": sum(self.total.values()),
                "phases": self.total,
                "ends": ends[-m.MAX_STEP_ENDS :],
                "recent": recent[-m.MAX_STEP_RECORDS :],
            }
            | ({"before": self.before} if self.before else {}),
            memory={"rss_bytes": int(self.rss)},
            op_coverage=op_coverage,
        )
