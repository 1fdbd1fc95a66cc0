"""What a Python stack waits in: the frontend stack's wait kind, shown by the stack panel and the verdict.

Functions implemented in C (``time.sleep``, ``Tensor.item``) have no frame of their own, so the source
line of the innermost frame is read too (``linecache``) to tell what it calls.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Callable

from torchpar_top.contract.messages import StackFrame
from torchpar_top.contract.vocab import WaitKind

_DATALOADER_FUNCS = {"__next__", "_next_data", "_get_data", "_try_get_data"}
_COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "broadcast", "barrier", "monitored_barrier", "reduce", "all_to_all", "all_to_all_single", "gather",
    "scatter", "send", "recv", "wait",
}  # fmt: skip
_LINE_RULES = (  # the innermost frame's source line, for calls into C
    (re.compile(r"\bsleep\("), WaitKind.SLEEP),
    (re.compile(r"\.(item|cpu|tolist)\(\s*\)"), WaitKind.ITEM),
    (re.compile(r"\bsynchronize\("), WaitKind.SYNC),
    (re.compile(r"\.wait\(\s*\)"), WaitKind.COLLECTIVE),  # c10d Work.wait() is C; Python waits have frames
)


def source_line(filename: str, line: int) -> str:
    """Line ``line`` of ``filename`` (the target's source, same machine), or '' when unreadable."""
    if line <= 0 or filename.startswith("<"):
        return ""
    linecache.checkcache(filename)
    return linecache.getline(filename, line).strip()


def _short(name: str) -> str:
    """``Queue.get`` -> ``get``: py-spy shows qualified names for Python 3.11+, bare ones before."""
    return name.rsplit(".", 1)[-1]


def _torch_not_dist(path: str) -> bool:
    """Inside torch but not torch.distributed (there ``.wait()`` is a future's, not a collective's)."""
    return "/torch/" in path and "/torch/distributed/" not in path


def classify_wait(
    frames: tuple[StackFrame, ...], source: Callable[[str, int], str] = source_line
) -> WaitKind:
    """What the stack (outermost first) waits in, or :attr:`WaitKind.NONE` (running Python)."""
    path = [f.filename.replace("\\", "/") for f in frames]
    for f, p in zip(frames, path, strict=True):  # fetching a batch, even inside the user's own Dataset code
        if p.endswith("torch/utils/data/dataloader.py") and _short(f.function) in _DATALOADER_FUNCS:
            return WaitKind.DATA
    weak = WaitKind.NONE
    for i in range(len(frames) - 1, -1, -1):  # innermost first
        f, p, name = frames[i], path[i], _short(frames[i].function)
        inner = _short(frames[i + 1].function) if i + 1 < len(frames) else ""
        if i == len(frames) - 1:
            text = source(f.filename, f.line)
            for pattern, label in _LINE_RULES:
                collective_in_torch = label == WaitKind.COLLECTIVE and _torch_not_dist(p)
                if text and pattern.search(text) and not collective_in_torch:
                    return label
        if p.endswith("probes/agent/stream.py"):
            if name == "synchronize":
                return WaitKind.EMU_SYNC
            if name == "launch" and inner == "put":
                return WaitKind.EMU_FULL
        if "/torch/" in p:
            if name == "synchronize":
                return WaitKind.SYNC
            if "/torch/distributed/" in p and name in _COLLECTIVES:
                return WaitKind.COLLECTIVE
            if p.endswith("torch/_tensor_str.py"):
                return WaitKind.ITEM  # printing a tensor copies it to the host
        if not weak and name == "get" and p.endswith(("/queue.py", "/queues.py")):
            weak = WaitKind.QUEUE
    return weak


#: Paths of frames that are not the user's code: torch, installed packages, the standard library, ours.
_NOT_USER = ("/torch/", "/site-packages/", "/dist-packages/", "/torchpar_top/", "/lib/python3")


#: What :func:`where` says of an idle thread in a wait Python cannot see, and of a running one.
IDLE_WAIT, RUNNING = "waits", "running"
#: The waits of :func:`where` that are waits for other ranks: a collective, or an idle wait (DDP's
#: all-reduce inside ``backward`` is one).
PEER_WAITS = (WaitKind.COLLECTIVE.value, IDLE_WAIT)


def waits_for_peers(at: str) -> bool:
    """Whether a place :func:`where` wrote is a wait for other ranks (a hung job's ranks that are not are
    where the others' wait comes from)."""
    return at.startswith(tuple(f"{w} at " for w in PEER_WAITS))


def where(frames: tuple[StackFrame, ...], wait: WaitKind, idle: bool = False) -> str:
    """``sleep at ddp_steps.py:66 (forward)``: what the stack waits in (``waits`` where that is not known
    but the thread is ``idle``: a C++ wait such as DDP's all-reduce inside ``backward``; else ``running``)
    and the innermost frame of the user's code (not torch, an installed package, the standard library or
    torchpar-top); '' for an empty stack."""
    if not frames:
        return ""
    paths = [f.filename.replace("\\", "/") for f in frames]
    user = next(
        (
            f
            for f, p in zip(reversed(frames), reversed(paths), strict=True)
            if not any(n in p for n in _NOT_USER)
        ),
        frames[-1],
    )
    name = user.filename.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{wait.value or (IDLE_WAIT if idle else RUNNING)} at {name}:{user.line} ({_short(user.function)})"
