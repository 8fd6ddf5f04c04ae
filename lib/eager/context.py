"""The per-thread context that `bind` consults: which interpreter runs ops, and grad mode.

It is a context variable, so threads and async tasks each have their own, and `capture`
(later) swaps the interpreter in without `bind` looking at its arguments.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar

from ..tensor import Tensor, graph_value, new_tensor
from .interpreter import EAGER


class Context:
    """`autocast`: None, or the mixed-precision state (rill.amp) whose `cast_inputs` bind
    calls before each op; None keeps bind's common path at one attribute check."""
    __slots__ = ("interpreter", "grad_enabled", "autocast")

    def __init__(self, interpreter, grad_enabled: bool, autocast=None):
        self.interpreter = interpreter
        self.grad_enabled = grad_enabled
        self.autocast = autocast


# New threads start from an empty contextvars.Context, hence a default rather than a set().
_context: ContextVar[Context] = ContextVar("rill_context", default=Context(EAGER, True))
current = _context.get

# Set by rill.amp (a higher layer; this is the registry it owns here): state -> the state a
# trace runs under, which guards the autocast state and default dtype the trace baked in.
# Called whenever the interpreter changes, with whether the new one records a trace.
autocast_for_interpreter = None
_KEEP = object()


@contextlib.contextmanager
def _switch(interpreter=None, grad_enabled=None, autocast=_KEEP):
    ctx = _context.get()
    state = ctx.autocast if autocast is _KEEP else autocast
    if interpreter is not None and autocast_for_interpreter is not None:
        state = autocast_for_interpreter(state, getattr(interpreter, "capturing", False))
    token = _context.set(Context(ctx.interpreter if interpreter is None else interpreter,
                                 ctx.grad_enabled if grad_enabled is None else grad_enabled,
                                 state))
    try:
        yield
    finally:
        _context.reset(token)


def use_autocast(state):
    """Run ops inside under autocast `state` (rill.amp's; None turns autocast off)."""
    return _switch(autocast=state)


def no_grad():
    """Ops inside record nothing on the tape. Usable as a context manager or decorator.

    >>> import rill
    >>> w = rill.ones(3, requires_grad=True)
    >>> with rill.no_grad():
    ...     y = w * 2
    >>> y.requires_grad
    False
    """
    return _switch(grad_enabled=False)


def inference_mode(mode=True):
    """As `no_grad` (mode=True) or `enable_grad` (mode=False): a context manager, or a
    decorator, also written without parentheses (`@rill.inference_mode`).

    Unlike PyTorch's, tensors made inside are ordinary tensors: rill counts versions of
    every tensor, inside too, so PyTorch's reason to refuse them later in autograd (a version
    counter they skip) does not arise, and using them later is allowed and correct.

    >>> import rill
    >>> w = rill.ones(3, requires_grad=True)
    >>> with rill.inference_mode():
    ...     y = w * 2
    >>> y.requires_grad
    False
    """
    if callable(mode):  # @rill.inference_mode, bare
        return _switch(grad_enabled=False)(mode)
    if not isinstance(mode, bool):
        from ..errors import ArgumentError
        raise ArgumentError(f"mode must be a bool (or the function to decorate), got {mode!r}",
                            op="inference_mode")
    return _switch(grad_enabled=not mode)


def enable_grad():
    """Turn tape recording back on inside a `no_grad` region."""
    return _switch(grad_enabled=True)


def use_interpreter(interpreter):
    """Run ops inside with `interpreter` (capture uses this)."""
    return _switch(interpreter=interpreter)


def outside_capture():
    """Ops inside run eagerly even while a capture is in progress: for state that must
    outlive the trace (an optimizer's slots made at its first step), which the graph then
    reads and updates by reference."""
    return _switch(interpreter=EAGER)


def is_grad_enabled() -> bool:
    return _context.get().grad_enabled


def set_grad(t, grad) -> None:
    """t.grad = grad, told to a capture in progress (so that the graph writes it)."""
    interpreter = _context.get().interpreter
    if interpreter.capturing:
        interpreter.set_grad(t, grad)
    else:
        t.grad = grad


def detached_value(t: Tensor) -> Tensor:
    """t's values cut from the tape, as a value of its own: an in-place change of it leaves
    t alone (what rill hands out or keeps: gradients, copies, optimizer slots). The public
    `t.detach()` is a view of t, as PyTorch's, and writes reach t.

    While a capture records, a tensor from outside it is read through the trace (the graph's
    read of t): wrapped as it is, its buffer would become a second, frozen graph input,
    stale as soon as t changes between calls."""
    data = t._data
    interpreter = _context.get().interpreter
    if interpreter.capturing and not interpreter.reruns_python and not graph_value(data):
        data = interpreter.value_of(t)
    return new_tensor(data, t.dtype, t.device)
