"""The child's threads summed per role: what the threads panel, the verdict and headless show."""

from __future__ import annotations

from collections.abc import Iterable

from torchpar_top.contract.snapshot import BUSY_THREAD_PERCENT, ThreadGroup, ThreadInfo
from torchpar_top.contract.vocab import Role

#: Display order of the groups: the order in which :class:`Role` defines its members.
_ORDER = tuple(Role)


def group(threads: Iterable[ThreadInfo]) -> tuple[ThreadGroup, ...]:
    """Sum threads per role (and per executor, for executors' own threads), in display order."""
    by_role: dict[tuple[Role, str], list[ThreadInfo]] = {}
    for t in threads:
        by_role.setdefault((t.role, t.executor), []).append(t)
    return tuple(
        ThreadGroup(
            role=role,
            count=len(ts),
            busy=sum(1 for t in ts if t.cpu_percent > BUSY_THREAD_PERCENT),
            cpu_percent=sum(t.cpu_percent for t in ts),
            wait_percent=sum(t.wait_percent for t in ts),
            tids=tuple(sorted(t.tid for t in ts)),
            executor=executor,
        )
        for (role, executor), ts in sorted(by_role.items(), key=lambda kv: (_ORDER.index(kv[0][0]), kv[0][1]))
    )
