"""Tensor operators and methods, bound to the public ops (those whose meaning PyTorch fixes
differently are in torch_methods.py).

Binary operators whose op function is `bind(P[name], x, y)` bind their primitive themselves
where the compiled bind is (eager/bind.py: `operator`; `Tensor.__add__.__wrapped__ is add`),
else they are the op functions (`Tensor.__add__ is add`), so `x + y` costs at most one
Python call before `bind`. In-place forms compute out of place and give the tensor the new
buffer; see tensor.py for why.
"""
from __future__ import annotations

from .. import cpu_memory, dtypes as dt
from ..eager.bind import operator
from ..eager.context import current, no_grad
from ..errors import DTypeError, GradientError, ShapeError
from ..tensor import Tensor
from ..eager.context import detached_value
from . import elementwise as E
from . import indexing, linalg, reduce, shape, sorting
from .arguments import as_tensor


def _binary(fn, reflected: bool = False):
    """The operator of `fn`, an op function that is `bind(P[fn.__name__], x, y)` (tests/eager/
    test_compiled_bind.py checks that it is)."""
    compiled = operator(E.P[fn.__name__], fn, reflected)
    if compiled is not None:
        return compiled
    return _reflected(fn) if reflected else fn


def _reflected(fn):
    def method(self, other):
        return fn(other, self)
    method.__name__ = f"r{fn.__name__}"
    return method


def _invert(x):
    if x.dtype is dt.bool_:
        return E.logical_not(x)
    if x.dtype.is_integer:
        return E.subtract(E.neg(x), 1)
    raise DTypeError(f"~ needs a bool or integer tensor, got {x.dtype}", op="invert")


def _comparison(fn):
    """== and != against non-numbers (None, strings) fall back to Python's identity test."""
    def method(self, other):
        if other is None or isinstance(other, str):
            return NotImplemented
        return fn(self, other)
    method.__name__ = fn.__name__
    return method


def snapshot(t: Tensor) -> Tensor:
    """A second handle on t's current value and tape position (for in-place updates)."""
    old = object.__new__(Tensor)
    for slot in Tensor.__slots__[:-1]:
        setattr(old, slot, getattr(t, slot))
    old.grad = None
    _repoint_outputs(t._node, t, old)  # the node's saved output must keep the old value
    return old


def casts_back(result: dt.DType, target: dt.DType) -> bool:
    """Whether an in-place op may store a `result` in a `target` tensor, cast back: the
    Array API standard leaves this to the library; rill takes PyTorch's rule (canCast). The
    cast is refused only where it would lose the result's kind: float -> integer or bool,
    complex -> real, number -> bool. So float32 += float64 and int8 += int64 cast back, and
    int32 += 0.5 raises. NumPy's same_kind agrees but also refuses uint8 += int8."""
    if result.is_complex and not target.is_complex:
        return False
    if result.is_floating and (target.is_integer or target.is_bool):
        return False
    return result.is_bool or not target.is_bool


def update_in_place(t: Tensor, fn, *args) -> Tensor:
    """t takes the value fn(t, *args); the tape sees an out-of-place op on t's old value."""
    ctx = current()
    recording = ctx.grad_enabled
    if ctx.interpreter.capturing:
        ctx.interpreter.before_update(t)
    if t.requires_grad and t._node is None and recording:
        raise GradientError("in-place change of a leaf tensor that requires grad; do it under "
                            "rill.no_grad() (as optimizers do) or use the out-of-place op",
                            op="in-place")
    if t._node is None and not recording:
        # An optimizer's update of a leaf under no_grad: nothing will be recorded, and no
        # tape node saved t as an output, so no snapshot of the old value is needed (nodes
        # that took t as an input see its version move and refuse a stale backward).
        result = fn(t, *args)
    else:
        old = snapshot(t)
        if ctx.interpreter.capturing:
            # The snapshot is t's value at this point of the trace. Left holding t's buffer it
            # would be a separate outside tensor, read by reference: frozen at the value t had
            # when traced (a counter `c += 1` would stay at 1 on every call).
            old._data = ctx.interpreter.value_of(t)
        result = fn(old, *args)
    if result.shape != t.shape:
        raise ShapeError(f"an in-place result of shape {result.shape} does not fit the tensor's "
                         f"shape {t.shape}", op="in-place")
    if result.dtype is not t.dtype:
        if not casts_back(result.dtype, t.dtype):
            raise DTypeError(f"an in-place result of dtype {result.dtype} cannot be stored in a "
                             f"{t.dtype} tensor: it would lose its kind (PyTorch refuses it "
                             f"too); write `x = x op y` for a new {result.dtype} tensor, or "
                             f"cast the operand to {t.dtype} first", op="in-place")
        result = E.cast(result, t.dtype)
    check_write = getattr(result._data, "check_write", None)  # a transform's value (vmap)
    if check_write is not None:
        check_write(t._data)
    replaced, t._data = t._data, result._data
    t._version += 1
    if not ctx.interpreter.capturing:
        cpu_memory.give(replaced)  # kept for a later result only if nothing else holds it
    del replaced
    if result.requires_grad:
        t.requires_grad, t._node, t._index = True, result._node, result._index
        _repoint_outputs(result._node, result, t)
    return t


def _repoint_outputs(node, old, new) -> None:
    """A tape node that saved `old` as its output (exp, sigmoid, ...) saves `new` instead:
    the value moved to another tensor object, and `old` is about to be dropped."""
    if node is None or node.outputs is None:
        return
    import weakref
    node.outputs = tuple(weakref.ref(new) if isinstance(o, weakref.ref) and o() is old else o
                         for o in node.outputs)


def write(t: Tensor, fn, *args) -> Tensor:
    """t takes the value fn(t, *args), in place; a view's base takes the change too."""
    alias = t._alias
    if alias is not None:
        from .views import refusal  # the view rule (ops/views.py) says what a view writes
        refused = refusal(t)
        if refused:
            raise ShapeError(refused, op="in-place")
    update_in_place(t, fn, *args)
    if alias is not None:
        base, write_back, detached = alias[:3]
        # A second handle on the new value: later in-place changes of t must not move the
        # version of what the base's update recorded as its input.
        new = detached_value(t) if detached else snapshot(t)
        if detached:
            with no_grad():
                write(base, write_back, new)
        else:
            write(base, write_back, new)
    return t


def _take_second(old, value):
    return value


def assign(t: Tensor, value: Tensor) -> Tensor:
    """t takes value's contents (same shape; dtype cast as an in-place op would), keeping the
    object: optimizers, modules and users hold tensors by identity."""
    if not isinstance(t, Tensor):
        from ..errors import ArgumentError
        from .arguments import describe
        raise ArgumentError(f"assign changes a tensor, got {describe(t)}", op="assign")
    return update_in_place(t, _take_second, as_tensor(value, "value", "assign"))


def _inplace(fn):
    def method(self, other):
        return write(self, fn, other)
    method.__name__ = f"i{fn.__name__}"
    return method


def _setitem(self, key, value):
    write(self, lambda old, v: indexing.index_set(old, key, v), value)


OPERATORS = {
    "__add__": _binary(E.add), "__radd__": _binary(E.add, True), "__iadd__": _inplace(E.add),
    "__sub__": _binary(E.subtract), "__rsub__": _binary(E.subtract, True),
    "__isub__": _inplace(E.subtract),
    "__mul__": _binary(E.multiply), "__rmul__": _binary(E.multiply, True),
    "__imul__": _inplace(E.multiply),
    "__truediv__": _binary(E.divide), "__rtruediv__": _binary(E.divide, True),
    "__itruediv__": _inplace(E.divide),
    "__floordiv__": _binary(E.floor_divide), "__rfloordiv__": _binary(E.floor_divide, True),
    "__ifloordiv__": _inplace(E.floor_divide),
    "__mod__": _binary(E.remainder), "__rmod__": _binary(E.remainder, True),
    "__imod__": _inplace(E.remainder),
    "__pow__": _binary(E.power), "__rpow__": _binary(E.power, True), "__ipow__": _inplace(E.power),
    "__matmul__": linalg.matmul, "__rmatmul__": _reflected(linalg.matmul),
    "__imatmul__": _inplace(linalg.matmul),
    "__lshift__": _binary(E.bitwise_left_shift), "__rlshift__": _binary(E.bitwise_left_shift, True),
    "__ilshift__": _inplace(E.bitwise_left_shift),
    "__rshift__": _binary(E.bitwise_right_shift),
    "__rrshift__": _binary(E.bitwise_right_shift, True),
    "__irshift__": _inplace(E.bitwise_right_shift),
    "__and__": _binary(E.bitwise_and), "__rand__": _binary(E.bitwise_and, True),
    "__iand__": _inplace(E.bitwise_and),
    "__or__": _binary(E.bitwise_or), "__ror__": _binary(E.bitwise_or, True),
    "__ior__": _inplace(E.bitwise_or),
    "__xor__": _binary(E.bitwise_xor), "__rxor__": _binary(E.bitwise_xor, True),
    "__ixor__": _inplace(E.bitwise_xor),
    "__eq__": _comparison(E.equal), "__ne__": _comparison(E.not_equal),
    "__lt__": _binary(E.less), "__le__": _binary(E.less_equal),
    "__gt__": _binary(E.greater), "__ge__": _binary(E.greater_equal),
    "__neg__": E.neg, "__pos__": lambda self: self, "__abs__": E.abs, "__invert__": _invert,
    "__setitem__": _setitem,  # __getitem__ makes views: ops/view_spellings.py
}

METHODS = {
    # elementwise
    **{name: getattr(E, name) for name in (
        "abs", "sign", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt",
        "square", "reciprocal", "sin", "cos", "tan", "tanh", "sinh", "cosh", "arcsin",
        "arccos", "arctan", "sigmoid", "relu", "leaky_relu", "elu", "gelu", "silu", "softplus",
        "erf", "floor", "ceil", "round", "trunc", "isnan", "isinf", "isfinite", "logical_not",
        "clip", "maximum", "minimum", "power", "logical_and", "logical_or", "logical_xor")},
    "neg": E.neg,
    # reductions
    **{name: getattr(reduce, name) for name in (
        "argmax", "argmin", "logsumexp", "all", "any", "cumsum", "cumprod", "norm")},
    # shape (those that return views are in ops/view_spellings.py)
    **{name: getattr(shape, name) for name in ("flip", "roll", "tile", "tril", "triu", "pad")},
    "take": indexing.take, "take_along_axis": indexing.take_along_axis,
    "argsort": sorting.argsort, "dot": linalg.dot,
    # sum, max, std, sort, transpose, repeat, split, ... follow PyTorch: ops/torch_methods.py
}


# ---- methods made of the layers above Tensor (docs/DESIGN.md, "Layers") --------------------

def _construct(self, *args, dtype=None, device=None, requires_grad: bool = False):
    """PyTorch's legacy constructor, with its meanings (ops/torch_constructors.py):
    `Tensor(2, 3)` is an uninitialized float32 tensor of shape (2, 3), `Tensor(data)`
    holds data as float32, `Tensor(t)` is a view of t. `dtype=` (rill's addition) makes
    `Tensor(data, dtype=d)` rill.tensor(data, dtype=d). rill.tensor is the usual way."""
    from .torch_constructors import construct
    other = construct(args, dtype, device)
    for slot in Tensor.__slots__[:-1]:
        setattr(self, slot, getattr(other, slot))
    _repoint_outputs(other._node, other, self)  # the tape's output is this object now
    if requires_grad:
        self.requires_grad_()


def to_device(self, device, /, *, stream=None):
    """The tensor on `device` (the standard's spelling of `x.to(device)`)."""
    from .creation import to_device as move
    return move(self, device)


def dlpack(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    """Export through DLPack, never as a writable alias (ops/conversion.py:
    dlpack_export): NumPy gets the buffer flagged read-only; PyTorch, which ignores the
    flag, and consumers of DLPack before 1.0 get a copy. bfloat16 goes out as bfloat16
    (a copy: ops/dlpack_bfloat16.py)."""
    import sys
    from .conversion import dlpack_capsule
    caller = sys._getframe(1).f_globals.get("__name__", "")
    return dlpack_capsule(self, stream, max_version, dl_device, copy, caller)


def astype(self, dtype):
    """The tensor in `dtype` (the Array API's spelling of `x.to(dtype)`)."""
    return E.cast(self, dtype)


LAYERED = {"__init__": _construct, "to_device": to_device, "__dlpack__": dlpack,
           "astype": astype}


def install() -> None:
    for name, fn in {**OPERATORS, **METHODS, **LAYERED}.items():
        setattr(Tensor, name, fn)
    Tensor.__hash__ = object.__hash__  # __eq__ is elementwise; identity stays the hash
