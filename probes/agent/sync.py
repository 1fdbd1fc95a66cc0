"""SYNC on or off, and what it follows (every op or every step): one small object everyone can watch."""

from __future__ import annotations

from collections.abc import Callable

from torchpar_top.contract.vocab import Mode, SyncScope


class SyncPolicy:
    """The agent's sync setting; listeners learn of every change at once (the op counter's after-op)."""

    def __init__(self, enabled: bool = False, scope: SyncScope = SyncScope.OP) -> None:
        self.enabled = enabled
        """True in SYNC mode."""
        self.scope = SyncScope(scope)
        """What a synchronize follows in SYNC mode: every ``op`` or every ``step``."""
        self._listeners: list[Callable[[SyncPolicy], None]] = []

    def set(self, enabled: bool, scope: SyncScope | None = None) -> None:
        """Switch SYNC on or off (and change the scope, when given); tell the listeners."""
        self.enabled = bool(enabled)
        if scope is not None:
            self.scope = SyncScope(scope)
        for listener in self._listeners:
            listener(self)

    def on_change(self, listener: Callable[[SyncPolicy], None]) -> None:
        """Call ``listener(policy)`` now and after every change."""
        self._listeners.append(listener)
        listener(self)

    @property
    def mode(self) -> Mode:
        """``ASYNC`` or ``SYNC``, as the wire says it."""
        return Mode.SYNC if self.enabled else Mode.ASYNC

    @property
    def per_op(self) -> bool:
        """Whether every op is followed by a synchronize now."""
        return self.enabled and self.scope == SyncScope.OP

    @property
    def per_step(self) -> bool:
        """Whether every step is followed by a synchronize now."""
        return self.enabled and self.scope == SyncScope.STEP
