"""The phase boundaries of a training step in unmodified user code, for :class:`.usercode_steps.StepClock`.

A handful of timestamps per step, all on the frontend (main) thread; calls from other threads pass
through untouched:

- ``optimizer``: a global optimizer step pre hook (the post hook is :class:`UserCode`'s, which also
  marks the step);
- ``backward``: ``torch.autograd.backward`` (which ``Tensor.backward`` calls) and ``torch.autograd.grad``
  wrapped; nested calls (a reentrant checkpoint's) are inside the outer one. With ``torch.distributed``
  initialised, a pre-hook on the loss's ``grad_fn`` queues one autograd-engine callback at the start of
  backward; it runs when the gradients are done, before DDP's own callback waits for the all-reduce, so
  backward's return minus that moment is ``comm`` (DESIGN.md, "Step anatomy");
- ``forward``: the outermost module call. For the first steps global module hooks find the modules
  called while no other module's call is in progress (the roots: the model, a loss module); then those
  hooks go and a forward pre-hook and hook on each root alone remain (never a hook per module);
- ``comm``: the ``torch.distributed`` collectives, barriers and point-to-point calls, and
  ``Work.wait()`` of an async one;
- ``data``: the DataLoader wrapper (:mod:`.usercode_data`) calls the clock;
- on CUDA only (there is no other device on a CPU run): ``transfer`` is ``Tensor.to``/``.cuda``/``.cpu``
  and ``copy_`` between devices, ``sync`` is ``.item()``/``.tolist()`` of a CUDA tensor and
  ``torch.cuda.synchronize``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as _module
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torchpar_top.contract.vocab import StepSource
from torchpar_top.probes.agent.usercode_steps import (
    BACKWARD,
    COMM,
    FORWARD,
    OPTIMIZER,
    SYNC,
    TRANSFER,
    StepClock,
)

_dynamo_compiling: Callable[[], bool] = getattr(
    torch.compiler, "is_dynamo_compiling", getattr(torch.compiler, "is_compiling", lambda: False)
)
_get_ident = threading.get_ident
_perf = time.perf_counter

#: Steps closed with the global module hooks on before they give way to hooks on the roots alone.
DISCOVERY_STEPS = 3

#: ``torch.distributed`` calls that wait for other ranks (when not ``async_op``).
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "barrier",
    "monitored_barrier",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "send",
    "recv",
)


class PhaseHooks:
    """Installs (and removes) every phase boundary but the DataLoader's; enter and exit on the main thread."""

    def __init__(self, clock: StepClock, frontend_ident: int | None = None) -> None:
        self.clock = clock
        self.frontend = _get_ident() if frontend_ident is None else frontend_ident
        self._undo: list[Callable[[], None]] = []
        self._depth = 0
        """Module calls in progress on the frontend (roots only, once discovery is over)."""
        self._backward_depth = 0
        self._comm_depth = 0
        self._discovery: list[Any] = []
        self._roots: dict[int, Any] = {}
        self._root_ids: frozenset[int] = frozenset()
        self._discovered_at = 0
        self._toggled: list[tuple[Any, str, Any, Any, bool, StepSource]] = []
        """``(owner, name, original, wrapper, inherited, marks)`` of the per-step wrappers that come off
        while a step's phases are not timed (:attr:`StepClock.sampling
        <.usercode_steps.StepClock.sampling>`), unless they mark the steps (``marks`` is the source)."""
        self._pre: Any = None
        """The optimizer step pre hook's handle while it is registered."""
        self.cuda_installed = False
        self._dist = False
        self._dist_asked = float("-inf")
        self.before_destroy: list[Callable[[], None]] = []
        """Called when the user's code destroys a process group, before torch does."""

    # -- install / uninstall ------------------------------------------------------------------------

    def install(self) -> None:
        """Hooks and patches for the CPU boundaries (idempotent per instance)."""
        if self._undo:
            return
        self._pre = register_optimizer_step_pre_hook(self._optimizer_pre)
        self._undo.append(self._remove_pre)
        self._patch(torch.autograd, "backward", self._wrap_backward, toggled=StepSource.BACKWARD)
        self._patch(torch.autograd, "grad", self._wrap_backward, toggled=StepSource.BACKWARD)
        # torch warns that a compiled module's global hooks fire for its wrapper too: ours know (they count
        # the outermost call only), and the warning is about them, not the user's code
        warnings.filterwarnings("ignore", message=_COMPILE_HOOKS_WARNING, category=UserWarning)
        self._undo.append(_drop_filter)
        pre = _module.register_module_forward_pre_hook(self._global_pre)
        post = _module.register_module_forward_hook(self._global_post, always_call=True)
        self._discovery = [pre, post]
        self._undo.append(self._end_discovery)
        self._undo.append(self._remove_roots)
        if torch.distributed.is_available():
            import torch.distributed as dist

            for name in COLLECTIVES:
                if callable(getattr(dist, name, None)):
                    self._patch(dist, name, self._wrap_comm)
            work = getattr(dist, "Work", None)
            if work is not None and callable(getattr(work, "wait", None)):
                self._patch(work, "wait", self._wrap_comm)
            if callable(getattr(dist, "destroy_process_group", None)):
                self._patch(dist, "destroy_process_group", self._wrap_destroy)

    def install_cuda(self) -> None:
        """Transfers and blocking waits on CUDA (on the frontend, once CUDA is in use)."""
        if self.cuda_installed:
            return
        self.cuda_installed = True
        T = torch.Tensor
        self._patch(T, "to", lambda orig: self._wrap_transfer(orig, _to_moves))
        self._patch(T, "cuda", lambda orig: self._wrap_transfer(orig, _cuda_moves))
        self._patch(T, "cpu", lambda orig: self._wrap_transfer(orig, _cpu_moves))
        self._patch(T, "copy_", lambda orig: self._wrap_transfer(orig, _copy_moves))
        self._patch(T, "item", lambda orig: self._wrap_transfer(orig, _on_cuda, SYNC))
        self._patch(T, "tolist", lambda orig: self._wrap_transfer(orig, _on_cuda, SYNC))
        self._patch(torch.cuda, "synchronize", lambda orig: self._wrap_transfer(orig, None, SYNC))

    def uninstall(self) -> None:
        """Everything back as it was."""
        self.clock.on_timing = None
        self.clock.stop_sampling()
        self._toggled = []
        while self._undo:
            with contextlib.suppress(Exception):
                self._undo.pop()()
        self.cuda_installed = False

    def _patch(
        self, owner: Any, name: str, wrap: Callable[[Any], Any], toggled: StepSource | None = None
    ) -> None:
        """``owner.name`` wrapped; put back (or, where a class inherited it, removed) on uninstall.
        ``toggled``: a per-step wrapper marking steps of that source, off while a step's phases are not
        timed (:meth:`set_timing`). Only attributes of modules are: setting a class's attribute makes
        the interpreter drop what it specialised for the class (its ``__call__`` wrapper costs more
        taken off and put back every few steps than left on)."""
        orig = getattr(owner, name)
        inherited = isinstance(owner, type) and name not in owner.__dict__
        wrapper = wrap(orig)
        setattr(owner, name, wrapper)
        self._undo.append(lambda: delattr(owner, name) if inherited else setattr(owner, name, orig))
        if toggled is not None:
            self._toggled.append((owner, name, orig, wrapper, inherited, toggled))

    def set_timing(self, on: bool) -> None:
        """From the step clock, at a step's end on the frontend: the per-step wrappers and the optimizer
        pre hook go back (``on``: the next step is timed) or come off (it is not), but for a wrapper
        that marks the steps (backward's, where no optimizer steps): steps are still counted. A wrapper
        someone else replaced since is left where it is (and keeps timing when on)."""
        source = self.clock.source
        for owner, name, orig, wrapper, inherited, marks in self._toggled:
            if not on and marks is source:
                continue
            now = owner.__dict__.get(name) if inherited else getattr(owner, name, None)
            if on and now is (None if inherited else orig):
                setattr(owner, name, wrapper)
            elif not on and now is wrapper:
                if inherited:
                    delattr(owner, name)
                else:
                    setattr(owner, name, orig)
        if on and self._pre is None:
            self._pre = register_optimizer_step_pre_hook(self._optimizer_pre)
        elif not on:
            self._remove_pre()

    def _remove_pre(self) -> None:
        if self._pre is not None:
            self._pre.remove()
            self._pre = None

    # -- optimizer ------------------------------------------------------------------------------------

    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if _get_ident() == self.frontend:
            self.clock.enter(OPTIMIZER)

    # -- backward -------------------------------------------------------------------------------------

    def _wrap_backward(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        hooks = self

        @functools.wraps(orig)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if hooks._backward_depth or _get_ident() != hooks.frontend or _dynamo_compiling():
                return orig(*args, **kwargs)
            clock = hooks.clock
            hooks._backward_depth = 1
            clock.enter(BACKWARD)
            done = [0.0]
            handle = None
            if hooks._dist_on():
                root = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
                handle = _queue_done_callback(root, done, clock)
            try:
                return orig(*args, **kwargs)
            finally:
                hooks._backward_depth = 0
                if handle is not None:
                    handle.remove()
                clock.exit(BACKWARD, done[0], COMM, StepSource.BACKWARD)

        return backward

    def _dist_on(self) -> bool:
        """Whether ``torch.distributed`` is initialised (asked at most once a second until it is)."""
        if self._dist:
            return True
        now = _perf()
        if now - self._dist_asked >= 1.0:
            self._dist_asked = now
            dist = torch.distributed
            self._dist = dist.is_available() and dist.is_initialized()
        return self._dist

    # -- forward: the outermost module call -----------------------------------------------------------

    def _global_pre(self, module: Any, args: Any) -> None:
        if _dynamo_compiling() or _get_ident() != self.frontend:
            return
        if self._depth == 0:
            if self._discovery:
                self._roots.setdefault(id(module), module)
            self.clock.enter(FORWARD)
        self._depth += 1

    def _global_post(self, module: Any, args: Any, out: Any) -> None:
        if _dynamo_compiling() or _get_ident() != self.frontend or not self._depth:
            return
        self._depth -= 1
        if self._depth == 0:
            self.clock.exit(FORWARD, step=StepSource.MODULE)
            if self._discovery:
                if self._discovered_at == 0:
                    self._discovered_at = self.clock.count
                elif self.clock.count >= self._discovered_at + DISCOVERY_STEPS:
                    self._switch_to_roots()

    def _switch_to_roots(self) -> None:
        """Discovery is over: the roots' calls alone are timed from now on, by ``__call__`` wrapped on
        their classes (a call of another instance of such a class passes through at the cost of one
        Python call). Not module hooks: any hook sends a module's call down torch's slower path (~10 µs
        a step measured on an MLP with Adam, ``benchmarks/bench_step_clock.py``)."""
        self._end_discovery()
        self._root_ids = frozenset(self._roots)
        for cls in {type(m) for m in self._roots.values()}:
            if "__call__" in cls.__dict__ and getattr(cls.__dict__["__call__"], "_tpt_root_call", False):
                continue
            try:
                self._patch(cls, "__call__", self._wrap_root_call)
            except Exception:
                continue
        self.clock.on_timing = self.set_timing
        self.clock.allow_sampling()

    def _wrap_root_call(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        hooks, clock = self, self.clock
        module_steps = StepSource.MODULE

        @functools.wraps(orig)
        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if not clock.timing and clock.source is not module_steps:  # an untimed step: pass
                return orig(module, *args, **kwargs)
            if (
                hooks._depth
                or id(module) not in hooks._root_ids
                or _get_ident() != hooks.frontend
                or _dynamo_compiling()
            ):
                return orig(module, *args, **kwargs)
            hooks._depth = 1
            clock.enter(FORWARD)
            try:
                return orig(module, *args, **kwargs)
            finally:
                hooks._depth = 0
                clock.exit(FORWARD, 0.0, COMM, StepSource.MODULE)

        __call__._tpt_root_call = True  # type: ignore[attr-defined]
        return __call__

    def _end_discovery(self) -> None:
        for handle in self._discovery:
            handle.remove()
        self._discovery = []

    def _remove_roots(self) -> None:
        self._roots = {}
        self._root_ids = frozenset()

    @property
    def roots(self) -> list[Any]:
        """The modules found to be called outermost (discovery ongoing or over)."""
        return list(self._roots.values())

    @property
    def discovering(self) -> bool:
        """True while the global module hooks are on."""
        return bool(self._discovery)

    # -- comm ---------------------------------------------------------------------------------------------

    def _wrap_comm(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        hooks = self

        @functools.wraps(orig)
        def collective(*args: Any, **kwargs: Any) -> Any:
            if hooks._comm_depth or _get_ident() != hooks.frontend or _dynamo_compiling():
                return orig(*args, **kwargs)
            hooks._comm_depth = 1
            hooks.clock.enter(COMM)
            try:
                return orig(*args, **kwargs)
            finally:
                hooks._comm_depth = 0
                hooks.clock.exit(COMM)

        return collective

    def _wrap_destroy(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        """``destroy_process_group``: :attr:`before_destroy` runs first (the flight recorder's last read),
        its errors kept from the user's code."""
        hooks = self.before_destroy

        @functools.wraps(orig)
        def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
            for hook in hooks:
                with contextlib.suppress(Exception):
                    hook()
            return orig(*args, **kwargs)

        return destroy_process_group

    # -- CUDA: transfers and waits -------------------------------------------------------------------

    def _wrap_transfer(
        self, orig: Callable[..., Any], moves: Callable[..., bool] | None, phase: int = TRANSFER
    ) -> Callable[..., Any]:
        hooks = self

        @functools.wraps(orig)
        def call(*args: Any, **kwargs: Any) -> Any:
            if (
                _dynamo_compiling()
                or _get_ident() != hooks.frontend
                or (moves is not None and not moves(*args, **kwargs))
            ):
                return orig(*args, **kwargs)
            clock = hooks.clock
            clock.enter(phase)
            try:
                return orig(*args, **kwargs)
            finally:
                clock.exit(phase)

        return call


#: The start of the warning ``torch.compile(module)`` gives while global module hooks are installed.
_COMPILE_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"


def _drop_filter() -> None:
    """Remove our warnings filter (the first one with our message), leaving the user's alone."""
    filters: list = warnings.filters  # type: ignore[assignment]
    for i, f in enumerate(filters):
        msg = f[1]
        if msg is not None and getattr(msg, "pattern", None) == _COMPILE_HOOKS_WARNING:
            del filters[i]
            warnings._filters_mutated()  # type: ignore[attr-defined]
            return


def _queue_done_callback(root: Any, done: list[float], clock: StepClock) -> Any:
    """A pre-hook on ``root``'s ``grad_fn`` that queues one engine callback noting when the gradients
    are done (``done[0]``, ``perf_counter``); returns the hook's handle (None when it cannot)."""
    if isinstance(root, (list, tuple)):
        root = next((t for t in root if isinstance(t, torch.Tensor) and t.grad_fn is not None), None)
    fn = getattr(root, "grad_fn", None)
    if fn is None:
        return None

    def finished() -> None:
        done[0] = _perf()
        clock.mark_split(BACKWARD)

    def prehook(grad_outputs: Any) -> None:
        with contextlib.suppress(Exception):
            torch.autograd.Variable._execution_engine.queue_callback(finished)

    try:
        return fn.register_prehook(prehook)
    except Exception:
        return None


# -- what moves between devices ------------------------------------------------------------------------


def _device_of(x: Any) -> tuple[str, int | None] | None:
    """``(type, index)`` of a device given as a tensor, a device, a string or an int (a CUDA ordinal);
    None when ``x`` names no device (a dtype)."""
    if isinstance(x, torch.Tensor):
        return x.device.type, x.device.index
    if isinstance(x, torch.device):
        return x.type, x.index
    if isinstance(x, str):
        return _device_of(torch.device(x))
    if isinstance(x, int) and not isinstance(x, bool):
        return "cuda", x
    return None


def _to_moves(self: Any, *args: Any, **kwargs: Any) -> bool:
    """Whether ``self.to(*args, **kwargs)`` copies to another device (not a dtype change)."""
    target = kwargs.get("device")
    if target is None and args:
        target = args[0]
    try:
        where = _device_of(target)
    except (RuntimeError, ValueError, TypeError):
        return False
    if where is None:
        return False
    kind, index = where
    device = self.device
    return kind != device.type or (index is not None and device.index is not None and index != device.index)


def _cuda_moves(self: Any, *args: Any, **kwargs: Any) -> bool:
    return not self.is_cuda


def _cpu_moves(self: Any, *args: Any, **kwargs: Any) -> bool:
    return bool(self.is_cuda)


def _copy_moves(self: Any, src: Any = None, *args: Any, **kwargs: Any) -> bool:
    return isinstance(src, torch.Tensor) and src.is_cuda != self.is_cuda


def _on_cuda(self: Any, *args: Any, **kwargs: Any) -> bool:
    return bool(self.is_cuda)
