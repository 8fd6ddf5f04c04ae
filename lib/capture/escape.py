"""Graph values that outlive their trace, named where they are used.

A tensor made while tracing holds a graph value, which has data only while its graph runs.
If the traced function stores one outside itself (a mask cached on a module, a global, a
list in a closure), a later eager op or another capture would meet a tensor with no data.
At the end of each trace `find` looks where such tensors could have been put (the modules,
objects, closures and globals the function reaches) and remembers the attribute path of
each one found; `error` is the CaptureError any later use raises: what the tensor is, where
it was stored, the user's line that made it, and what to do instead.
"""
from __future__ import annotations

import weakref

from ..errors import CaptureError
from ..tensor import Tensor

# Value -> (captured function's name, attribute path or None)
_ESCAPED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def find(name: str, roots: list, own: set) -> None:
    """Remember graph values of this trace (nodes in `own`) reachable from `roots`, a list of
    (path prefix, object), one attribute or item deep (and every submodule of a Module)."""
    from .holders import is_module
    from .ir import Value

    def note(path: str, obj) -> None:
        if isinstance(obj, Tensor) and type(obj._data) is Value and obj._data.node in own:
            _ESCAPED.setdefault(obj._data, (name, path))

    def items(path: str, obj):
        if isinstance(obj, (list, tuple)):
            return [(f"{path}[{i}]", v) for i, v in enumerate(obj[:1000])]
        if isinstance(obj, dict):
            return [(f"{path}[{k!r}]", v) for k, v in list(obj.items())[:1000]]
        return [(path, obj)]

    for prefix, root in roots:
        prefix = prefix.rstrip(".") or type(root).__name__  # a captured Module: its class
        objects = [(prefix, root)]
        if is_module(root):
            objects = [(f"{prefix}.{n}" if n else prefix, m) for n, m in root.named_modules()]
        for path, obj in objects:
            fields = getattr(obj, "__dict__", None)
            if isinstance(fields, dict):
                for key, value in list(fields.items()):
                    for where, leaf in items(f"{path}.{key}", value):
                        note(where, leaf)
            else:
                for where, leaf in items(path, obj):
                    note(where, leaf)


def error(value, op: str = "capture") -> CaptureError:
    """The error for using graph value `value` outside the trace that made it."""
    name, path = _ESCAPED.get(value, (None, None))
    made = f" at {value.node.source}" if value.node.source else ""
    traced = f"tracing {name}" if name else "tracing a captured function"
    stored = f", and was stored as {path}" if path else \
        ", and was kept outside it (on an object, in a global or a list)"
    return CaptureError(
        f"this tensor was made while {traced} (a {value.node.op} result{made}){stored}. "
        "Outside its graph it has no data. Compute it inside the captured function on every "
        "call instead of caching it, or make it once before the first call", op=op)
