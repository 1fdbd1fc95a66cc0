"""Put the user-code instrumentation in place around the user's code, and take it away after.

:class:`Instrumentation` enters the :class:`OpCounter` function mode on the frontend (main) thread,
registers the global optimizer step post hook and wraps the DataLoader; DataLoader workers forked
while it is in place inherit the mode, which then passes every call through.
"""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING, Any

from torch.optim.optimizer import register_optimizer_step_post_hook

from torchpar_top.probes.agent.usercode_ops import OpCounter

if TYPE_CHECKING:
    from torchpar_top.probes.agent.usercode import UserCode

_MODES: "weakref.WeakSet[OpCounter]" = weakref.WeakSet()


def after_fork_in_child() -> None:
    """DataLoader workers inherit the frontend's function mode: make it pass every call through."""
    for mode in list(_MODES):
        mode.active = False


os.register_at_fork(after_in_child=after_fork_in_child)


class Instrumentation:
    """Installs the mode, the step hook and the DataLoader wrappers; enter and exit on the main thread."""

    def __init__(self, user: "UserCode") -> None:
        self.user = user
        self.mode = OpCounter(user.eager, user.syncpoints)
        self._hook: Any = None

    def __enter__(self) -> "Instrumentation":
        user = self.user
        user.use_mode(self.mode)
        _MODES.add(self.mode)
        self._hook = register_optimizer_step_post_hook(user.on_optimizer_step)
        user.data.install()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.mode.__exit__(None, None, None)
        self.user.data.uninstall()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        _MODES.discard(self.mode)
