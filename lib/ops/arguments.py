"""Public arguments, checked and made canonical in one place.

Public functions take what users write (NumPy scalars, lists, 0-d tensors, dtype names) and
pass primitives the typed attrs they declare (ops/attrs.py). Every helper here returns the
canonical value or raises a rill error naming `op` (the function the user called) and the
argument, so a wrong type never surfaces as a bare TypeError from deep inside:

    axis = as_axes(axis, "sum")            # None | int | tuple of ints
    k = as_int(k, "k", "triu")             # an int, not 1.5 and not True
    x = as_tensor(x, "x", "conv2d")        # a Tensor, from a tensor, a number or nested lists
"""
from __future__ import annotations

import math
import operator

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentError, CaptureError, Error, IndexingError, ShapeError
from ..tensor import Tensor
from .attrs import INT64_MAX, INT64_MIN, show, show_int

_REAL = (int, float, np.integer, np.floating)


def describe(value) -> str:
    """What a message says was given: 'str', "'a'", '2**70', 'a float32[2] tensor'."""
    if isinstance(value, Tensor):
        return f"a {value.dtype}{list(value.shape)} tensor"
    return show(value)


def _int_range(low, high) -> str:
    hi = "2**63)" if high == INT64_MAX else f"{show_int(high)}]"
    return f"[{show_int(low)}, {hi}"


def _integer(value, must: str, op: str, error) -> int:
    """operator.index(value) for an integer-like value (NumPy integer, 0-d integer tensor);
    `error(f"{must}, got ...")` for anything else, bools included."""
    if isinstance(value, (bool, np.bool_)) or not hasattr(type(value), "__index__"):
        raise error(f"{must}, got {describe(value)}", op=op)
    try:
        return operator.index(value)
    except CaptureError:
        raise
    except Exception:  # noqa: BLE001 - a float tensor's __index__, an odd __index__
        raise error(f"{must}, got {describe(value)}", op=op) from None


def as_int(value, what: str, op: str, low: int = INT64_MIN, high: int = INT64_MAX,
           error=ArgumentError) -> int:
    """An int (from an int, a NumPy integer or a 0-d integer tensor) in [low, high]; below
    `low` raises `error` (a negative size is a ShapeError), above `high` an ArgumentError."""
    if type(value) is not int:
        value = _integer(value, f"{what} must be an int", op, ArgumentError)
    if not low <= value <= high:
        raise (error if value < low else ArgumentError)(
            f"{what} must be an int in {_int_range(low, high)}, got {show_int(value)}", op=op)
    return value


def as_number(value, what: str, op: str, finite: bool = False) -> float | int:
    """A real number (int, float, NumPy number or one-element tensor), never bool; ints stay
    ints (arange's bounds must stay exact)."""
    if type(value) is float or type(value) is int:
        pass
    elif isinstance(value, _REAL) and not isinstance(value, (bool, np.bool_)):
        value = int(value) if isinstance(value, (int, np.integer)) else float(value)
    elif isinstance(value, Tensor) and value.size == 1 and value.dtype.kind in "iuf":
        value = value.item()
    else:
        raise ArgumentError(f"{what} must be a number, got {describe(value)}", op=op)
    if finite and isinstance(value, float) and not math.isfinite(value):
        raise ArgumentError(f"{what} must be finite, got {value}", op=op)
    return value


def as_float(value, what: str, op: str, finite: bool = False) -> float:
    """A real number as a float (see as_number)."""
    if type(value) is float and not finite:
        return value
    value = as_number(value, what, op, finite)
    try:
        return float(value)
    except OverflowError:
        raise ArgumentError(f"{what} {show_int(value)} is too large for a float", op=op) from None


def as_bool(value, what: str, op: str) -> bool:
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise ArgumentError(f"{what} must be True or False, got {describe(value)}", op=op)


def as_choice(value, what: str, op: str, options) -> str:
    if isinstance(value, str) and value in options:
        return value
    raise ArgumentError(f"{what} must be one of {', '.join(map(repr, options))}, got "
                        f"{describe(value)}", op=op)


def _is_int_like(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def as_axis(value, op: str, what: str = "axis") -> int:
    """One axis: an int (its range is the shape rule's to check)."""
    if type(value) is int:
        return value
    return as_int(value, what, op)


def as_axes(value, op: str, what: str = "axis"):
    """None (all axes), an int, or a tuple of ints, from an int, a list or a tuple."""
    if value is None or type(value) is int:
        return value
    if _is_int_like(value):
        return as_int(value, what, op)
    if isinstance(value, (tuple, list)):
        return tuple(as_int(a, f"{what}[{i}]", op) for i, a in enumerate(value))
    raise ArgumentError(f"{what} must be None, an int or a tuple of ints, got "
                        f"{describe(value)}", op=op)


def as_ints(value, what: str, op: str, low: int = INT64_MIN, error=ArgumentError) -> tuple:
    """A tuple of ints, from one int or a sequence of them."""
    if type(value) is tuple:  # a shape: every reshape, view and creation op asks
        for v in value:
            if type(v) is not int or not low <= v <= INT64_MAX:
                break
        else:
            return value
    if _is_int_like(value):
        return (as_int(value, what, op, low, error=error),)
    if isinstance(value, (tuple, list)):
        return tuple(as_int(v, f"{what}[{i}]", op, low, error=error) for i, v in enumerate(value))
    raise ArgumentError(f"{what} must be an int or a sequence of ints, got {describe(value)}",
                        op=op)


def as_shape(value, op: str, what: str = "shape") -> tuple:
    """A shape: non-negative ints, from an int or a sequence. Anything else is a ShapeError
    (a shape that does not fit the op), whatever is wrong with it."""
    try:
        return as_ints(value, what, op, low=0, error=ShapeError)
    except ArgumentError as e:
        raise ShapeError(e.message, op=op) from None


def as_dtype(value, op: str, default=None):
    """A rill dtype from a dtype, a name, a NumPy dtype or a Python type (`default` for None);
    DTypeError naming the op otherwise."""
    if isinstance(value, dt.DType):
        return value
    if value is None and default is not None:
        return default
    return dt.as_dtype(value, op=op)


def as_tensor(value, what: str, op: str):
    """A Tensor, from a tensor, a Python number (weak, as an op's scalar operand is) or
    nested lists / arrays of numbers; ArgumentError naming `what` for anything else."""
    if isinstance(value, Tensor):
        return value
    if dt.scalar_kind(value) is None and not array_like(value):
        raise ArgumentError(f"{what} must be a tensor, got {describe(value)}", op=op)
    from .promotion import lift
    try:
        return lift((value,))[0]
    except Error as e:
        if e.op is None:
            e.op = op
        raise


def array_like(value) -> bool:
    """Something `rill.tensor` may make a tensor of: a tensor, a NumPy array or scalar, or a
    (nested) list or tuple, whose items it checks itself."""
    return isinstance(value, (Tensor, np.ndarray, np.generic, list, tuple))


def as_tensors(values, what: str, op: str) -> list:
    """A non-empty sequence of tensors (concat, stack)."""
    if not isinstance(values, (list, tuple)):
        raise ArgumentError(f"{what} must be a list or tuple of tensors, got "
                            f"{describe(values)}", op=op)
    if not values:
        raise ArgumentError(f"{what} must hold at least one tensor", op=op)
    return [as_tensor(v, f"{what}[{i}]", op) for i, v in enumerate(values)]


def optional_tensor(value, what: str, op: str):
    return None if value is None else as_tensor(value, what, op)


# ---- values that must fit a dtype ----------------------------------------------------------


def check_fits(array: np.ndarray, dtype, op: str, what: str = "value") -> None:
    """ArgumentError unless every value of `array` fits the integer `dtype` when converted:
    creation refuses to wrap (300 as int8) where a cast of a tensor would."""
    if not dtype.is_integer or array.size == 0:
        return
    info = np.iinfo(dtype.storage)
    kind = array.dtype.kind
    if kind == "b" or (kind in "iu" and np.can_cast(array.dtype, dtype.storage)):
        return
    if kind == "O":  # Python ints beyond int64, or anything else NumPy could not type
        values = [v for v in array.flat]
        if not all(_is_int_like(v) or isinstance(v, (bool, float)) for v in values):
            raise ArgumentError(f"cannot make a {dtype} tensor from {describe(values[0])}",
                                op=op)
        lo, hi = min(values), max(values)
    elif kind in "iuf":
        lo, hi = array.min(), array.max()
    else:
        return
    if kind == "f" or isinstance(lo, float) or isinstance(hi, float):
        # Floats truncate toward zero: anything in (min - 1, max + 1) lands in range.
        lo, hi = float(lo), float(hi)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ArgumentError(f"{what} {lo if not math.isfinite(lo) else hi} has no {dtype} "
                                "value", op=op)
        bad = lo if lo <= info.min - 1 else hi if hi >= info.max + 1 else None
    else:
        lo, hi = int(lo), int(hi)
        bad = lo if lo < info.min else hi if hi > info.max else None
    if bad is not None:
        shown = show_int(bad) if isinstance(bad, int) else repr(bad)
        raise ArgumentError(f"{what} {shown} does not fit {dtype} (range "
                            f"[{info.min}, {info.max}])", op=op)


def as_index(p, what: str, op: str) -> int | None:
    """An int index, slice bound or step: None or an int64 (a 0-d integer tensor counts);
    IndexingError naming `what` ("slice step") otherwise."""
    if p is None or type(p) is int and INT64_MIN <= p <= INT64_MAX:
        return p
    value = _integer(p, f"{what} must be an int or None", op, IndexingError)
    if not INT64_MIN <= value <= INT64_MAX:
        raise IndexingError(f"{what} {show_int(value)} is out of bounds (outside int64)", op=op)
    return value
