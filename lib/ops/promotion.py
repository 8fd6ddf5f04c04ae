"""Input normalization for bind: lift Python scalars, promote dtypes by the one table.

Each primitive names one of these as its `normalize`. They return the inputs as Tensors of
the dtypes its kernel expects, inserting `cast` ops (so casts are on the tape and, when
capturing, in the graph). The common case, tensors already agreeing, returns at once.
"""
from __future__ import annotations

import weakref

import numpy as np

from .. import dtypes as dt
from ..devices import cpu
from ..errors import ArgumentError, DTypeError, Error
from ..tensor import Tensor, new_tensor


def _device_of(args):
    for a in args:
        if isinstance(a, Tensor):
            return a.device
    return cpu


# Tensors that are constants wherever they appear (the cached weak scalars made here, and
# values a graph evaluation made), by id: a capture bakes them in rather than reading them as
# state (capture/tracer.py). Weak, so that an id is forgotten when its tensor dies. (Not a
# WeakSet: Tensor's == is elementwise.)
KNOWN_CONSTANTS: "weakref.WeakValueDictionary[int, Tensor]" = weakref.WeakValueDictionary()

_CONSTANTS: dict = {}


def constant(value, dtype: dt.DType, device) -> Tensor:
    """A weak Python scalar as a 0-d tensor of `dtype` (a constant, not an op).

    Constants are cached: `lr * grad` in every step of a training loop reuses one tensor
    (safe, since buffers are never written and constants never reach the user).
    """
    key = (type(value), value, dtype, device)
    hit = _CONSTANTS.get(key)
    if hit is not None:
        return hit
    if len(_CONSTANTS) >= 4096:
        _CONSTANTS.clear()
    _CONSTANTS[key] = made = _make_constant(value, dtype, device)
    return made


def _make_constant(value, dtype: dt.DType, device) -> Tensor:
    try:
        array = np.array(value, dtype=dtype.storage)
    except OverflowError:
        raise DTypeError(f"the Python scalar {value!r} does not fit in {dtype}") from None
    if dtype is dt.bfloat16:
        array = dt.round_to_bfloat16(array)
    made = new_tensor(device.backend.from_host(array, device), dtype, device)
    KNOWN_CONSTANTS[id(made)] = made  # a capture bakes it in rather than reading it as state
    return made


def as_input(value, device) -> Tensor:
    """A non-scalar, non-tensor input (list, ndarray, NumPy scalar) as a strong tensor.

    Errors name no op: the op being bound names itself (bind fills in `op`)."""
    from .arguments import array_like, describe
    from .creation import tensor
    dense = getattr(value, "dense_operand", None)  # SparseRows (p - lr * g), a sparse tensor
    if dense is not None:
        return dense()
    if not array_like(value):
        raise ArgumentError(f"expected a tensor or a number, got {describe(value)}")
    try:
        return tensor(value, device=device)
    except Error as e:
        e.op = None
        raise


def lift(args):
    """Default: Python scalars become tensors of their default dtype; nothing is promoted."""
    for a in args:
        if not isinstance(a, Tensor):
            break
    else:
        return args
    device = _device_of(args)
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif dt.scalar_kind(a) is not None:
            out.append(constant(a, dt.result_type((), (dt.scalar_kind(a),)), device))
        else:
            out.append(as_input(a, device))
    return tuple(out)


def _promote(args, to_float: bool, skip: int = 0):
    """Lift and cast args[skip:] to their common dtype (a float one if `to_float`)."""
    strong, kinds = [], []
    for a in args[skip:]:
        if isinstance(a, Tensor):
            strong.append(a.dtype)
        elif dt.scalar_kind(a) is not None:
            kinds.append(dt.scalar_kind(a))
        else:
            strong.append(None)
    if None in strong:  # lists / arrays: make them tensors first, then promote
        device = _device_of(args)
        args = args[:skip] + tuple(a if isinstance(a, Tensor) or dt.scalar_kind(a) else
                                   as_input(a, device) for a in args[skip:])
        return _promote(args, to_float, skip)
    target = dt.result_type(strong, kinds)
    if to_float:
        target = dt.to_float(target)
    device = _device_of(args)
    out = list(args[:skip])
    for a in args[skip:]:
        if not isinstance(a, Tensor):
            out.append(constant(a, target, device))
        elif a.dtype is not target:
            out.append(cast(a, target))
        else:
            out.append(a)
    return tuple(out)


def _weak_fits(t, value) -> bool:
    """A Python number that, as a weak scalar, leaves tensor t's dtype as it is."""
    kind = t.dtype.kind
    return (type(value) is float and kind in "fc") or (type(value) is int and kind in "fiuc") \
        or (type(value) is complex and kind == "c")


def common(args):
    """All inputs to their promoted dtype (add, maximum, equal, concat, ...)."""
    if len(args) == 2:
        x, y = args
        if isinstance(x, Tensor):
            if isinstance(y, Tensor):
                if x.dtype is y.dtype:
                    return args
            elif _weak_fits(x, y):  # x > 0, x * 2.0: the common scalar case, kept lean
                return x, constant(y, x.dtype, x.device)
        elif isinstance(y, Tensor) and _weak_fits(y, x):
            return constant(x, y.dtype, y.device), y
    return _promote(args, False)


def common_float(args):
    """Promoted, then to a float dtype (divide, arctan2, power of floats ...)."""
    if len(args) == 2:
        x, y = args
        if isinstance(x, Tensor) and isinstance(y, Tensor) and x.dtype is y.dtype and \
                x.dtype.kind in "fc":
            return args
    return _promote(args, True)


def floating(args):
    """One input, made floating (exp, sin, sqrt, ...): int tensors compute in float32;
    complex ones stay complex."""
    (x,) = args
    if isinstance(x, Tensor) and x.dtype.kind in "fc":
        return args
    return _promote(args, True)


def bool_then_common(args):
    """where(cond, x, y): cond to bool, x and y promoted together."""
    c, x, y = args
    if isinstance(c, Tensor) and c.dtype is dt.bool_ and isinstance(x, Tensor):
        if isinstance(y, Tensor) and x.dtype is y.dtype:
            return args
        if _weak_fits(x, y):  # where(mask, g, 0)
            return c, x, constant(y, x.dtype, x.device)
    c = lift((c,))[0]
    if c.dtype is not dt.bool_:
        c = cast(c, dt.bool_)
    return _promote((c,) + tuple(args[1:]), False, skip=1)


def cast(x: Tensor, dtype) -> Tensor:
    from .elementwise import cast as _cast
    return _cast(x, dtype)
