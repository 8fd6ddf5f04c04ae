"""Guards: what a trace baked in that is not an argument, checked before each call.

A trace runs Python once; a Python value it reads (a module's `training` flag, whether a
parameter requires grad, an optimizer option such as `nesterov`) is baked into the graph. So
that nothing a training loop changes between steps is silently frozen, code that reads such
a value while tracing calls `guard(label, read)`: the captured function then compares
`read()` with the traced value before every call, and traces again, saying once which value
changed, when they differ. Reads are cheap (an attribute, a tuple of flags); values that
change every step are not guarded but made graph state instead (optimizer hyper-parameters).
"""
from __future__ import annotations

import contextvars

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("rill_guards", default=None)


class Guard:
    __slots__ = ("label", "read", "value")

    def __init__(self, label: str, read, value):
        self.label, self.read, self.value = label, read, value

    def failure(self) -> str | None:
        now = self.read()
        if now == self.value:
            return None
        return f"{self.label} was {self.value!r} when traced and is {now!r} now"


class RequiresGrad(Guard):
    """Whether each tensor the graph reads as state requires grad (backward differs)."""

    def __init__(self, variables):
        owners = tuple(v.owner for v in variables)
        names = tuple(v.name for v in variables)
        super().__init__("requires_grad", lambda: tuple(o.requires_grad for o in owners),
                         tuple(o.requires_grad for o in owners))
        self.names = names

    def failure(self) -> str | None:
        now = self.read()
        if now == self.value:
            return None
        i = next(i for i, (a, b) in enumerate(zip(self.value, now)) if a != b)
        return f"{self.names[i]}.requires_grad was {self.value[i]} when traced and is {now[i]} now"


def guard(label: str, read) -> None:
    """While a capture traces: remember read()'s value; the trace holds only while read()
    gives the same value. Outside a trace: nothing."""
    active = _ACTIVE.get()
    if active is not None:
        active.guards.append(Guard(label, read, read()))


def module_called(module) -> None:
    """A module's forward ran inside a trace: its `training` flag is baked in (dropout,
    batch norm). One guard per module object."""
    active = _ACTIVE.get()
    if active is not None and id(module) not in active.modules:
        active.modules[id(module)] = module
        active.guards.append(Guard(f"{type(module).__name__}.training",
                                   lambda: module.training, module.training))


def inherit(checks) -> None:
    """A captured function ran inside another's trace (its graph is inlined there): the
    outer trace holds only while the inner one's guards do."""
    active = _ACTIVE.get()
    if active is not None:
        known = {id(c) for c in active.guards}
        active.guards.extend(c for c in checks if id(c) not in known)


class collecting:
    """Context manager for one trace: guards registered while it is active are collected in
    `self.guards`."""

    def __init__(self):
        self.guards: list = []
        self.reads: list = []  # python_reads.Read: checked after the guards above
        self.modules: dict = {}

    def __enter__(self):
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE.reset(self._token)
