"""Tensor methods with PyTorch's names and meanings.

Tensor methods follow PyTorch (docs/DESIGN.md, "Names and meanings"): `x.max(dim)` and
`x.sort()` give (values, indices), `x.std()` divides by n - 1, `x.repeat(2, 1)` tiles, and
`x.size()` is the shape. The Array API standard defines no such methods, so nothing of it is
given up here.

Views. rill tensors are values: an op never writes its inputs' buffers. PyTorch's view ops
(`x[0]`, `view`, `narrow`, `transpose`, `unsqueeze`, `.data`, ...) share memory instead, and
programs write through them: `w.data.normal_()`, `x[:, 0].zero_()`. The result of each such
op here remembers its base and how to put a changed value back (`_alias`), and the in-place
methods (`add_`, `fill_`, `copy_`, ...) write the base too, recursively, so those lines mean
what they mean in PyTorch. The other direction, a later write to the base showing in a view
taken before, is not reproduced (docs/COMING_FROM_PYTORCH.md lists it).
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import ArgumentError, DeviceError, ShapeError
from ..eager.context import is_grad_enabled, no_grad
from ..tensor import Tensor
from . import creation
from . import elementwise as E
from . import indexing, linalg, random, reduce, searching, shape, sorting
from . import torch_functions as T
from .activation import log_softmax, softmax
from .arguments import as_int
from .keywords import accept_torch_keywords
from .methods import snapshot, update_in_place, write
from .rules import normalize_axis

# ---- views and writing through them ---------------------------------------------------------


def _alias(out: Tensor, base: Tensor, write_back, detached: bool = False) -> Tensor:
    """Mark `out` as a PyTorch view of `base`: write_back(base, new_out) -> new base value."""
    if out is base:  # a view that is the tensor itself (x.view(x.shape)): out is base already
        return out
    out._alias = (base, write_back, detached)
    return out


def _source(base: Tensor) -> Tensor:
    """What a view op reads: a second handle on base's value when the tape records it, so
    that writing base through the view later does not look, to backward, like a change of
    the view op's input after its use."""
    if base._node is not None and is_grad_enabled():  # (a leaf's gradient goes to the leaf)
        return snapshot(base)
    return base


def _take_new(old, new):
    return new


def _basic_key(key) -> bool:
    """Ints, slices, None and Ellipsis only: the keys that make a view in PyTorch."""
    parts = key if isinstance(key, tuple) else (key,)
    for k in parts:
        if not (k is None or k is Ellipsis or isinstance(k, slice) or
                (isinstance(k, int) and not isinstance(k, bool))):
            return False
    return True


def _getitem(self, key):
    if not _basic_key(key):
        return indexing.getitem(self, key)  # a copy in PyTorch too
    return _alias(indexing.getitem(_source(self), key), self,
                  lambda b, new: indexing.index_set(b, key, new))


def _reshaped_back(b, new):
    return shape.reshape(new, b.shape)


def _data(self) -> Tensor:
    """The values without autodiff history; in-place methods on it change this tensor, as
    PyTorch's `.data` (under no_grad)."""
    return _alias(self.detach(), self, _take_new, detached=True)


def _set_data(self, value) -> None:
    with no_grad():
        update_in_place(self, _take_new, _as_tensor_like(value, self))


def _as_tensor_like(value, like: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return creation.tensor(value, dtype=like.dtype, device=like.device)


def view(self, *shape_or_dtype):
    """The same elements in a new shape (-1 inferred); in-place methods on the result change
    this tensor too, as a PyTorch view's do."""
    if len(shape_or_dtype) == 1 and not isinstance(shape_or_dtype[0], (int, tuple, list)):
        raise ArgumentError("view(dtype) reinterprets bits, which rill does not do; use "
                            ".to(dtype) to convert values", op="view")
    return _alias(shape.reshape(_source(self), *shape_or_dtype), self, _reshaped_back)


def view_as(self, other):
    return view(self, other.shape)


def unsqueeze(self, dim: int):
    return _alias(shape.expand_dims(_source(self), dim), self, _reshaped_back)


def squeeze(self, dim=None):
    return _alias(shape.squeeze(_source(self), dim), self, _reshaped_back)


def _permuted(self, order):
    inverse = [0] * len(order)
    for i, a in enumerate(order):
        inverse[a] = i
    return _alias(shape.transpose(_source(self), order), self,
                  lambda b, new: shape.transpose(new, inverse))


def transpose(self, *axes):
    """`x.transpose(dim0, dim1)` swaps two axes (PyTorch); `x.transpose((2, 0, 1))` permutes."""
    if len(axes) == 2:
        order = list(range(self.ndim))
        a, b = (normalize_axis(as_int(d, "dim", "transpose"), self.ndim) for d in axes)
        order[a], order[b] = order[b], order[a]
    elif len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        order = [normalize_axis(as_int(d, "dims", "transpose"), self.ndim) for d in axes[0]]
    elif not axes:
        order = list(range(self.ndim))[::-1]
    else:
        raise ArgumentError(f"transpose takes two axes to swap or one permutation, got {axes}",
                            op="transpose")
    return _permuted(self, order)


def permute(self, *dims):
    """The axes in the given order (`x.permute(2, 0, 1)` or `x.permute((2, 0, 1))`)."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    if sorted(normalize_axis(as_int(d, "dims", "permute"), self.ndim) for d in dims) != \
            list(range(self.ndim)):
        raise ShapeError(f"permute needs each of the {self.ndim} axes once, got {dims}",
                         op="permute")
    return _permuted(self, [normalize_axis(d, self.ndim) for d in dims])


def t(self):
    return _alias(T.t(_source(self)), self, lambda b, new: T.t(new))


def narrow(self, dim: int, start: int, length: int):
    out = T.narrow(_source(self), dim, start, length)
    a = normalize_axis(dim, self.ndim)
    begin = start + self.shape[a] if start < 0 else start
    key = (slice(None),) * a + (slice(begin, begin + length),)
    return _alias(out, self, lambda b, new: indexing.index_set(b, key, new))


def _sizes(args) -> tuple:
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def expand(self, *sizes):
    """Broadcast to `sizes` (-1 keeps an axis); in-place changes of the result are refused,
    as they would write one element many times."""
    sizes = _sizes(sizes)
    lead = len(sizes) - self.ndim
    if lead < 0:
        raise ShapeError(f"expand to {len(sizes)} axes cannot drop axes of shape {self.shape}",
                         op="expand")
    target = tuple(self.shape[i - lead] if s == -1 and i >= lead else s
                   for i, s in enumerate(sizes))
    return _alias(shape.broadcast_to(self, target), self, None)


def expand_as(self, other):
    return expand(self, other.shape)


def reshape_as(self, other):
    return shape.reshape(self, other.shape)


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
    return E.cast(self, dtype)


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


def _new(maker):
    def method(self, *size, dtype=None, device=None, requires_grad=False, **kwargs):
        out = maker(_sizes(size), dtype=dtype or self.dtype, device=device or self.device,
                    **kwargs)
        return out.requires_grad_() if requires_grad else out
    return method


def _new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    return creation.full(tuple(size), fill_value, dtype=dtype or self.dtype,
                         device=device or self.device, requires_grad=requires_grad)


def _new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
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
    "__getitem__": _getitem, "view": view, "view_as": view_as, "unsqueeze": unsqueeze,
    "squeeze": squeeze, "transpose": transpose, "permute": permute, "t": t, "narrow": narrow,
    "expand": expand, "expand_as": expand_as, "reshape_as": reshape_as,
    "contiguous": lambda self, memory_format=None: self,
    "is_contiguous": lambda self, memory_format=None: True,
    "clone": lambda self, memory_format=None: E.add(self, 0) if self.requires_grad else
    self.detach(),
    "chunk": T.chunk, "unbind": T.unbind, "split": shape.split,
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
    "get_device": _get_device, "conj": E.conj,
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
    "data": property(_data, _set_data),
    "real": property(E.real, doc="The real part (the tensor itself for real dtypes)."),
    "imag": property(E.imag, doc="The imaginary part (zeros for real dtypes)."),
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
