"""Tensor methods with PyTorch's names and meanings.

Tensor methods follow PyTorch (docs/DESIGN.md, "Names and meanings"): `x.max(dim)` and
`x.sort()` give (values, indices), `x.std()` divides by n - 1, `x.repeat(2, 1)` tiles, and
`x.size()` is the shape. The Array API standard defines no such methods, so nothing of it is
given up here.

Views (`x[0]`, `view`, `transpose`, `.data`, ...) are not here: every spelling that returns
a view, method or function, is in ops/view_spellings.py, under the one rule of ops/views.py.
The in-place methods below (`add_`, `fill_`, `copy_`, ...) write a view's base too
(methods.write).
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import ArgumentError, DeviceError
from ..eager.context import no_grad
from ..tensor import Tensor
from ..eager.context import detached_value
from . import creation
from . import elementwise as E
from . import indexing, linalg, random, reduce, searching, shape, sorting
from . import torch_functions as T
from .activation import log_softmax, softmax
from .keywords import accept_torch_keywords
from .methods import update_in_place, write

# ---- .data's setter (its getter, and every view, are in ops/view_spellings.py) ---------------


def _take_new(old, new):
    return new


def _set_data(self, value) -> None:
    with no_grad():
        update_in_place(self, _take_new, _as_tensor_like(value, self))


def _as_tensor_like(value, like: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return creation.tensor(value, dtype=like.dtype, device=like.device)


def _sizes(args) -> tuple:
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


# ---- in-place methods -----------------------------------------------------------------------


def _in_place(name: str, fn):
    def method(self, *args, **kwargs):
        return write(self, lambda t: fn(t, *args, **kwargs))
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"In place: the tensor takes the value of `{name[:-1]}` (see docs/" \
                     "COMING_FROM_PYTORCH.md for what in place means for rill's values)."
    return method


def _alpha(fn):
    def with_alpha(self, other, *, alpha=1):
        return fn(self, other if alpha == 1 else E.multiply(other, alpha))
    return with_alpha


def _div(self, other, *, rounding_mode=None):
    if rounding_mode is None:
        return E.divide(self, other)
    if rounding_mode == "floor":
        return E.floor_divide(self, other)
    if rounding_mode == "trunc":
        q = E.divide(self, other)
        return E.trunc(q) if q.dtype.is_floating and self.dtype.is_floating else \
            E.cast(E.trunc(q), dt.promote_types(self.dtype, _dtype_of(other)))
    raise ArgumentError(f"rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}",
                        op="div")


def _dtype_of(value):
    return value.dtype if isinstance(value, Tensor) else dt.result_type(
        (), (dt.scalar_kind(value),))


def _fill(self, value):
    return creation.full_like(self, value) if not isinstance(value, Tensor) else \
        shape.broadcast_to(E.cast(value, self.dtype), self.shape)


def _copy(self, src, non_blocking: bool = False):
    src = _as_tensor_like(src, self)
    if src.device is not self.device:
        src = creation.to_device(src, self.device)
    return shape.broadcast_to(E.cast(src, self.dtype), self.shape)


def _normal(self, mean=0.0, std=1.0, *, generator=None):
    from .random import normal
    return normal(mean, std, self.shape, dtype=self.dtype, device=self.device,
                  generator=generator)


def _uniform(self, a=0.0, b=1.0, *, generator=None):
    from .random import uniform
    return uniform(a, b, self.shape, dtype=self.dtype, device=self.device, generator=generator)


def _addcmul(self, tensor1, tensor2, *, value=1):
    return E.add(self, E.multiply(E.multiply(tensor1, tensor2), value))


def _addcdiv(self, tensor1, tensor2, *, value=1):
    return E.add(self, E.multiply(E.divide(tensor1, tensor2), value))


def _lerp(self, end, weight):
    return E.add(self, E.multiply(E.subtract(end, self), weight))


def _clamp_min(self, min):  # noqa: A002
    return E.clip(self, min, None)


def _clamp_max(self, max):  # noqa: A002
    return E.clip(self, None, max)


OUT_OF_PLACE = {
    "add": _alpha(E.add), "sub": _alpha(E.subtract), "subtract": _alpha(E.subtract),
    "mul": E.multiply, "multiply": E.multiply, "div": _div, "divide": _div,
    "true_divide": E.divide, "floor_divide": E.floor_divide, "remainder": E.remainder,
    "pow": E.power, "eq": E.equal, "ne": E.not_equal, "lt": E.less, "le": E.less_equal,
    "gt": E.greater, "ge": E.greater_equal, "greater": E.greater, "less": E.less,
    "clamp": E.clip, "clamp_min": _clamp_min, "clamp_max": _clamp_max,
    "masked_fill": indexing.masked_fill,
    "addcmul": _addcmul, "addcdiv": _addcdiv, "lerp": _lerp, "atan2": E.arctan2,
}

# Each becomes `name_`, writing the tensor (and a view's base) in place.
IN_PLACE_OF = {
    **OUT_OF_PLACE,
    **{name: getattr(E, name) for name in (
        "abs", "neg", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
        "sigmoid", "relu", "floor", "ceil", "round", "trunc", "sign", "reciprocal", "square",
        "clip")},
    "fill": _fill, "zero": lambda self: creation.zeros_like(self), "copy": _copy,
    "normal": _normal, "uniform": _uniform,
    **{name: getattr(indexing, name) for name in ("scatter", "scatter_reduce")},
    "scatter_add": lambda self, dim, index, src: indexing.scatter_add(self, index, src, dim),
}
IN_PLACE_OF.pop("eq"), IN_PLACE_OF.pop("ne")


# ---- reductions with PyTorch's results --------------------------------------------------------


def _extremum(standard, arg):
    def method(self, dim=None, keepdim=False, **kwargs):
        if isinstance(dim, Tensor):  # x.max(other): elementwise, as torch
            return (E.maximum if standard is reduce.max else E.minimum)(self, dim)
        if "axis" in kwargs:
            dim = kwargs.pop("axis")
        if "keepdims" in kwargs:
            keepdim = kwargs.pop("keepdims")
        if kwargs:
            raise ArgumentError(f"unexpected arguments {sorted(kwargs)}", op=standard.__name__)
        if dim is None:
            return standard(self)
        return T.values_indices(standard(self, axis=dim, keepdims=keepdim),
                                arg(self, axis=dim, keepdims=keepdim))
    method.__name__ = standard.__name__
    method.__doc__ = (f"PyTorch's {standard.__name__}: over all elements, a value; along dim, "
                      "(values, indices).")
    return method


def _sort(self, dim=-1, descending=False, stable=False):
    return T.torch_sort(self, dim, descending, stable)


def _topk(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's name
    return T.values_indices(*sorting.topk(self, k, axis=dim, largest=largest))


def _spread(fn):
    def method(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return T._torch_spread(fn, self, dim, unbiased, keepdim, correction=correction)
    method.__name__ = fn.__name__
    method.__doc__ = f"PyTorch's {fn.__name__}: correction=1 (unbiased) unless told otherwise."
    return method


def _with_dtype(fn):
    def method(self, *args, dtype=None, **kwargs):
        return fn(self if dtype is None else E.cast(self, dtype), *args, **kwargs)
    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


# ---- dtypes and devices ---------------------------------------------------------------------

_CASTS = {"float": dt.float32, "double": dt.float64, "half": dt.float16,
          "bfloat16": dt.bfloat16, "long": dt.int64, "int": dt.int32, "short": dt.int16,
          "char": dt.int8, "byte": dt.uint8, "bool": dt.bool_}


def _cast_method(name, dtype):
    def method(self):
        return self if self.dtype is dtype else E.cast(self, dtype)
    method.__name__ = name
    method.__doc__ = f"The tensor as {dtype}."
    return method


def _type(self, dtype=None):
    """With no argument, the dtype's name ('float32'); with one, the tensor cast to it."""
    if dtype is None:
        return self.dtype.name
    dtype = dt.as_dtype(dtype, "type")
    return self if self.dtype is dtype else E.cast(self, dtype)  # the tensor itself, as torch


def _to(self, *args, **kwargs):
    """`x.to(dtype)`, `x.to(device)`, `x.to(device, dtype)`, `x.to(other)`, and keywords
    `dtype=`, `device=`; `non_blocking` and `copy` are accepted (copies are cheap: buffers
    are never written)."""
    kwargs.pop("non_blocking", None), kwargs.pop("copy", None), kwargs.pop("memory_format", None)
    dtype, device = kwargs.pop("dtype", None), kwargs.pop("device", None)
    if kwargs:
        raise ArgumentError(f"unexpected arguments {sorted(kwargs)}", op="to")
    for a in args:
        if isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        elif isinstance(a, dt.DType) or a in (float, int, bool) or (
                isinstance(a, str) and a in dt._BY_NAME):
            dtype = a
        else:
            device = a
    out = self
    if device is not None:
        out = creation.to_device(out, device)
    if dtype is not None:
        dtype = dt.as_dtype(dtype, "to")
        out = out if out.dtype is dtype else E.cast(out, dtype)
    return out


def _cuda(self, device=None, non_blocking: bool = False):
    from .. import gpu
    if not gpu.is_available():
        raise DeviceError("no gpu device here (" + "; ".join(gpu.missing_parts()) + "); "
                          "PyTorch's .cuda() is rill's .to('gpu')", op="cuda")
    index = 0 if device is None else device if isinstance(device, int) else None
    return creation.to_device(self, f"gpu:{index}" if index is not None else device)


def _layout(layout, pin_memory, op: str) -> None:
    """PyTorch's layout= and pin_memory=: rill has the strided layout only, and pins nothing."""
    if layout not in (None, "strided") and getattr(layout, "__name__", str(layout)) not in (
            "strided", "torch.strided"):
        raise ArgumentError(f"rill tensors have the strided layout only, got layout={layout}",
                            op=op)
    if pin_memory:
        raise ArgumentError("pin_memory=True: rill hands host buffers to the gpu directly; "
                            "leave it out", op=op)


def _new(maker):
    def method(self, *size, dtype=None, device=None, requires_grad=False, layout=None,
               pin_memory=False):
        _layout(layout, pin_memory, maker.__name__)
        out = maker(_sizes(size), dtype=dtype or self.dtype, device=device or self.device)
        return out.requires_grad_() if requires_grad else out
    method.__name__ = f"new_{maker.__name__}"
    method.__doc__ = (f"rill.{maker.__name__} of this size, in this tensor's dtype and on its "
                      "device unless told otherwise (PyTorch's).")
    return method


def _new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False,
              layout=None, pin_memory=False):
    """A tensor of `size` (a sequence) filled with fill_value, in this tensor's dtype and on
    its device unless told otherwise (PyTorch's)."""
    _layout(layout, pin_memory, "new_full")
    if not isinstance(size, (tuple, list)):
        raise ArgumentError(f"new_full takes the size as a sequence (PyTorch's too), got "
                            f"{size!r}: write new_full(({size!r},), ...)", op="new_full")
    return creation.full(tuple(size), fill_value, dtype=dtype or self.dtype,
                         device=device or self.device, requires_grad=requires_grad)


def _new_tensor(self, data, *, dtype=None, device=None, requires_grad=False, layout=None,
                pin_memory=False):
    """A new tensor holding a copy of data, in this tensor's dtype and on its device unless
    told otherwise (PyTorch's)."""
    _layout(layout, pin_memory, "new_tensor")
    return creation.tensor(data, dtype=dtype or self.dtype, device=device or self.device,
                           requires_grad=requires_grad)


def _repeat(self, *sizes, axis=None):
    """PyTorch's repeat: the whole tensor tiled `sizes` times (NumPy's tile); rill.repeat and
    x.repeat_interleave repeat each element."""
    if axis is not None:
        raise ArgumentError("x.repeat follows PyTorch and tiles the tensor; NumPy's "
                            "x.repeat(n, axis=a) is x.repeat_interleave(n, dim=a) or "
                            "rill.repeat(x, n, axis=a)", op="repeat")
    return shape.tile(self, _sizes(sizes))


def _repeat_interleave(self, repeats, dim=None, *, output_size=None):
    return shape.repeat(self, repeats, axis=dim)


def _where(self, condition, other):
    return E.where(condition, self, other)


def _get_device(self) -> int:
    return self.device.index if self.device.kind == "gpu" else -1


METHODS = {
    "clone": lambda self, memory_format=None: E.add(self, 0) if self.requires_grad else
    detached_value(self),
    "repeat": _repeat, "repeat_interleave": _repeat_interleave,
    "numel": T.numel, "nelement": T.numel, "dim": lambda self: self.ndim,
    "ndimension": lambda self: self.ndim, "element_size": lambda self: self.dtype.itemsize,
    **OUT_OF_PLACE,
    **{f"{name}_": _in_place(f"{name}_", fn) for name, fn in IN_PLACE_OF.items()},
    "max": _extremum(reduce.max, reduce.argmax), "min": _extremum(reduce.min, reduce.argmin),
    "amax": reduce.max, "amin": reduce.min, "sort": _sort, "topk": _topk,
    "std": _spread(reduce.std), "var": _spread(reduce.var),
    "sum": reduce.sum, "mean": _with_dtype(reduce.mean), "prod": reduce.prod,
    "softmax": softmax, "log_softmax": log_softmax,
    "mm": T.mm, "bmm": T.bmm, "mv": T.mv, "where": _where, "allclose": T.allclose,
    "isclose": T.isclose, "equal": T.equal, "matmul": linalg.matmul,
    **{name: _cast_method(name, d) for name, d in _CASTS.items()},
    "type": _type, "type_as": lambda self, other: _to(self, other.dtype), "to": _to,
    "cpu": lambda self: creation.to_device(self, "cpu"), "cuda": _cuda,
    "get_device": _get_device,
    "angle": lambda self: E.arctan2(E.imag(self), E.real(self)),
    "multinomial": random.multinomial, "bernoulli": random.bernoulli,
    "nonzero": searching.torch_nonzero, "unique": T.unique,
    "count_nonzero": searching.count_nonzero,
    **{name: getattr(indexing, name) for name in (
        "gather", "scatter", "scatter_reduce", "index_select", "masked_select")},
    "cummax": lambda self, dim: T.values_indices(*reduce.cummax(self, dim)),
    "cummin": lambda self, dim: T.values_indices(*reduce.cummin(self, dim)),
    "logcumsumexp": reduce.logcumsumexp,
    "scatter_add": lambda self, dim, index, src: indexing.scatter_add(self, index, src, dim),
    "new_zeros": _new(creation.zeros), "new_ones": _new(creation.ones),
    "new_empty": _new(creation.empty), "new_full": _new_full, "new_tensor": _new_tensor,
}

PROPERTIES = {
    "is_cuda": property(lambda self: self.device.kind == "gpu",
                        doc="True on the gpu device (PyTorch's name)."),
    "is_gpu": property(lambda self: self.device.kind == "gpu", doc="True on the gpu device."),
    "is_cpu": property(lambda self: self.device.kind == "cpu", doc="True on the cpu device."),
}


def install() -> None:
    for name, fn in METHODS.items():
        setattr(Tensor, name, accept_torch_keywords(fn) if name.isidentifier() and
                not name.startswith("__") else fn)
    for name, prop in PROPERTIES.items():
        setattr(Tensor, name, prop)
