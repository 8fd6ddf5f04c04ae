"""Checks on values that only exist when an op runs: the dataflow form of `assert`.

`check(ok, value, message)` is `value`, after making sure every element of `ok` is true.
Eagerly it fails at once; in a captured graph it is a node that fails when the graph runs,
naming the user's line — where a Python `if` on a tensor could not be captured.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..eager.bind import bind
from ..errors import DTypeError
from . import attrs as A
from . import batching
from .primitive import primitive


def _check_infer(ok, value, *, message, error, op):
    if ok.dtype is not dt.bool_:
        raise DTypeError(f"check needs a bool condition, got {ok.dtype}", op="check")
    return value.shape, value.dtype


def _check_vjp(g, out, ok, value, **_):
    return None, g


check_p = primitive("check", _check_infer, _check_vjp, effect="check",
                    attrs=dict(message=A.STR, error=A.ErrorName, op=A.STR),
                    batch=batching.check_rule)


def check(ok, value, message: str, error: str = "ArgumentError", op: str = "check"):
    """value, once all of `ok` holds; else rill.<error>(message) naming `op`.

    >>> import rill
    >>> x = rill.tensor([1, 2])
    >>> rill.ops.checks.check(x > 0, x, "x must be positive")
    tensor([1, 2])
    """
    return bind(check_p, ok, value, message=message, error=error, op=op)
