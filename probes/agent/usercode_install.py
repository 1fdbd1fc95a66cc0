"""Put the user-code instrumentation in place around the user's code, and take it away after.

:class:`Instrumentation` puts the :class:`OpCounter` function mode under a :class:`SampledCounting`
switch on the frontend (main) thread (on for slices of the time; always with ``every_op``), registers
the global optimizer step post hook, wraps the DataLoader (both are switch points), and installs the
fallback switch signal; DataLoader workers forked while the mode is on inherit it, and it then passes
every call through.
"""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING, Any

from torch.optim.optimizer import register_optimizer_step_post_hook
from torchpar_top.probes.agent.usercode_ops import OpCounter
from torchpar_top.probes.agent.usercode_phases import PhaseHooks
from torchpar_top.probes.agent.usercode_sampling import SampledCounting, SwitchSignal

if TYPE_CHECKING:
    from torchpar_top.probes.agent.usercode import UserCode

_MODES: weakref.WeakSet[OpCounter] = weakref.WeakSet()
_PHASES: weakref.WeakSet[PhaseHooks] = weakref.WeakSet()


def after_fork_in_child() -> None:
    """DataLoader workers inherit the frontend's function mode and the phase hooks (a forked worker's
    thread has the frontend's ident): make them pass every call through."""
    for mode in list(_MODES):
        mode.active = False
    for hooks in list(_PHASES):
        hooks.frontend = -1


os.register_at_fork(after_in_child=after_fork_in_child)


class Instrumentation:
    """Installs the mode, the step hook and the DataLoader wrappers; enter and exit on the main thread."""

    def __init__(self, user: UserCode) -> None:
        self.user = user
        self.mode = OpCounter(user.eager, user.syncpoints)
        self.counting = SampledCounting(self.mode)
        self.switch = SwitchSignal(self.counting)
        self._hook: Any = None

    def __enter__(self) -> Instrumentation:
        user = self.user
        _MODES.add(self.mode)
        self.switch.install()
        user.use_counting(self.counting, self.switch if self.switch.installed else None)
        self._hook = register_optimizer_step_post_hook(user.on_optimizer_step)
        user.phases.install()
        _PHASES.add(user.phases)
        user.data.on_frontend = self.counting.tick
        user.data.install()
        self.counting.tick()  # on at once: the first slice (or for good, with every_op)
        return self

    def __exit__(self, *exc: object) -> None:
        self.counting.stop()
        self.switch.uninstall()
        self.user.data.on_frontend = None
        self.user.data.uninstall()
        self.user.phases.uninstall()
        _PHASES.discard(self.user.phases)
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        _MODES.discard(self.mode)
