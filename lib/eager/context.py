"""The per-thread context that `bind` consults: which interpreter runs ops, and grad mode.

It is a context variable, so threads and async tasks each have their own, and `capture`
(later) swaps the interpreter in without `bind` looking at its arguments.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar

from .interpreter import EAGER


class Context:
    __slots__ = ("interpreter", "grad_enabled")

    def __init__(self, interpreter, grad_enabled: bool):
        self.interpreter = interpreter
        self.grad_enabled = grad_enabled


# New threads start from an empty contextvars.Context, hence a default rather than a set().
_context: ContextVar[Context] = ContextVar("rill_context", default=Context(EAGER, True))
current = _context.get


@contextlib.contextmanager
def _switch(interpreter=None, grad_enabled=None):
    ctx = _context.get()
    token = _context.set(Context(ctx.interpreter if interpreter is None else interpreter,
                                 ctx.grad_enabled if grad_enabled is None else grad_enabled))
    try:
        yield
    finally:
        _context.reset(token)


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
