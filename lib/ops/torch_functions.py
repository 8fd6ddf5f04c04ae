"""Functions under PyTorch's names, for what the Array API standard does not define.

The rule (docs/DESIGN.md, "Names and meanings"): rill's namespace follows the Array API
standard where the standard defines a function, and PyTorch everywhere else. Most PyTorch
names here are another spelling of a rill function (`cat` is `concat`). Four functions exist
in both with different results: the standard's `max`, `min`, `sort` return values and its
`std`/`var` default to `correction=0`, while PyTorch's `max(x, dim)` and `sort` return
(values, indices) and its `std`/`var` default to `correction=1`. The standard passes `axis`
only by keyword, so a call it cannot write (a positional dim, or `dim=`, `keepdim=`,
`unbiased=`) is a PyTorch call and gets PyTorch's meaning; `rill.max(x, axis=1)` keeps the
standard's. A bare `rill.std(x)` is the standard's, and warns once that PyTorch differs.
"""
from __future__ import annotations

import warnings
from collections import namedtuple

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentError, DifferenceWarning, ShapeError
from ..layouts import strided
from ..tensor import new_tensor, Tensor
from . import elementwise as E
from . import linalg, reduce, shape, sorting
from .arguments import as_int, as_tensor, describe
from .creation import _made
from .rules import normalize_axis
from ..devices import cpu

values_indices = namedtuple("values_indices", "values indices")
values_indices.__doc__ = "(values, indices), as PyTorch's max/min/sort/topk with a dim return."

_TORCH_ONLY = frozenset(("dim", "keepdim", "unbiased", "out"))


def _is_torch_call(args, kwargs) -> bool:
    return bool(args) or not _TORCH_ONLY.isdisjoint(kwargs)


def _refuse_out(kwargs, op):
    if "out" in kwargs:
        raise ArgumentError("out= is not supported: rill tensors are values; assign the result "
                            "(y = f(x)) or update in place with y.copy_(f(x))", op=op)


def _extremum(name: str, standard, arg, elementwise):
    def extremum(x, *args, **kwargs):
        x = as_tensor(x, "input", name)
        if len(args) > 2 or (args and isinstance(args[0], Tensor) and len(args) > 1):
            raise ArgumentError(f"{name} takes (x, axis=, keepdims=), (input, dim, keepdim) or "
                                f"(input, other); got {1 + len(args)} positional arguments",
                                op=name)
        if args and isinstance(args[0], Tensor):  # torch.max(input, other)
            return elementwise(x, *args, **kwargs)
        if not _is_torch_call(args, kwargs):
            return standard(x, **kwargs)
        _refuse_out(kwargs, name)
        return _torch_extremum(x, standard, arg, *args, **kwargs)
    extremum.__name__ = extremum.__qualname__ = name
    extremum.__doc__ = (f"The {name}imum: `rill.{name}(x, axis=..., keepdims=...)` is the Array "
                        f"API's (values); `rill.{name}(x, dim)` / `dim=` is PyTorch's "
                        f"((values, indices) along dim); `rill.{name}(x, y)` is elementwise.")
    return extremum


def _torch_extremum(x, standard, arg, dim=None, keepdim=False, *, axis=None, keepdims=None):
    if axis is not None or keepdims is not None:
        raise ArgumentError("mix of PyTorch's (dim, keepdim) and the standard's (axis=, keepdims=) "
                            "arguments; use one spelling", op=standard.__name__)
    if dim is None:
        return standard(x)
    return values_indices(standard(x, axis=dim, keepdims=keepdim),
                          arg(x, axis=dim, keepdims=keepdim))


max = _extremum("max", reduce.max, reduce.argmax, E.maximum)  # noqa: A001
min = _extremum("min", reduce.min, reduce.argmin, E.minimum)  # noqa: A001


def sort(x, *args, **kwargs):
    """Sorted values: `rill.sort(x, axis=-1, descending=False, stable=True)` is the Array API's
    (values); `rill.sort(x, dim)` / `dim=` is PyTorch's ((values, indices))."""
    x = as_tensor(x, "input", "sort")
    if not _is_torch_call(args, kwargs):
        if "axis" not in kwargs and "stable" not in kwargs and "sort" not in _warned:
            _warned.add("sort")
            warnings.warn(
                "rill.sort(x) follows the Array API standard and returns the sorted values; "
                "torch.sort(x) returns (values, indices). Call x.sort() or rill.sort(x, dim) "
                "for PyTorch's, or pass axis= to say you mean the standard's",
                DifferenceWarning, stacklevel=2)
        kwargs.pop("stable", None)  # rill's sort is always stable
        return sorting.sort(x, **kwargs)
    _refuse_out(kwargs, "sort")
    return torch_sort(x, *args, **kwargs)


def torch_sort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """PyTorch's sort: (values, indices) along dim (always stable in rill)."""
    return values_indices(sorting.sort(x, axis=dim, descending=descending),
                          sorting.argsort(x, axis=dim, descending=descending))


_warned: set = set()


def _spread(name: str, standard):
    def spread(x, *args, **kwargs):
        x = as_tensor(x, "input", name)
        if _is_torch_call(args, kwargs):
            _refuse_out(kwargs, name)
            if args and "correction" not in kwargs and "unbiased" not in kwargs and \
                    len(args) < 2 and (name, "positional") not in _warned:
                # rill.std(x, 0) meant axis=0 with correction 0 before rill read positional
                # dims as PyTorch's: say so once where such a call is.
                _warned.add((name, "positional"))
                warnings.warn(
                    f"rill.{name}(x, dim) is read as PyTorch's call: correction=1 (n - 1); "
                    f"the Array API's population {name} is rill.{name}(x, axis=...). Pass "
                    f"correction= to choose", DifferenceWarning, stacklevel=2)
            return _torch_spread(standard, x, *args, **kwargs)
        if "correction" not in kwargs and "axis" not in kwargs and name not in _warned:
            _warned.add(name)
            warnings.warn(
                f"rill.{name}(x) follows the Array API standard: correction=0 (the population "
                f"{name}); torch.{name}(x) uses correction=1. Pass correction= to choose, or "
                f"call x.{name}(), which follows PyTorch", DifferenceWarning, stacklevel=2)
        return standard(x, **kwargs)
    spread.__name__ = spread.__qualname__ = name
    spread.__doc__ = (f"`rill.{name}(x, axis=..., correction=0)` is the Array API's; a PyTorch "
                      f"call (`rill.{name}(x, dim)`, `dim=`, `unbiased=`) defaults to "
                      "correction=1 as torch does.")
    return spread


def _torch_spread(standard, x, dim=None, unbiased=None, keepdim=False, *, correction=None,
                  axis=None, keepdims=None):
    if isinstance(dim, bool):  # torch.std(x, False): the old (input, unbiased) overload
        dim, unbiased = None, dim
    if unbiased is not None and not isinstance(unbiased, bool):
        raise ArgumentError(f"unbiased must be True or False, got {unbiased!r}",
                            op=standard.__name__)
    if unbiased is not None and correction is not None:
        raise ArgumentError("got both unbiased= and correction=; pass one", op=standard.__name__)
    if correction is None:
        correction = 1 if unbiased is None else int(bool(unbiased))
    return standard(x, axis=dim if axis is None else axis, correction=correction,
                    keepdims=keepdim if keepdims is None else keepdims)


std = _spread("std", reduce.std)
var = _spread("var", reduce.var)


# ---- other spellings of rill functions --------------------------------------------------------


def cat(tensors, dim: int = 0):
    """PyTorch's name for `rill.concat`."""
    return shape.concat(tensors, axis=dim)


concatenate = cat


def clamp(input, min=None, max=None):  # noqa: A002 - PyTorch's names
    """PyTorch's name for `rill.clip`."""
    return E.clip(input, min, max)


def unsqueeze(input, dim: int):
    """`input` with a new axis of length 1 at `dim` (rill.expand_dims)."""
    return shape.expand_dims(input, dim)


def chunk(input, chunks: int, dim: int = 0):
    """Split into `chunks` pieces along dim, each of ceil(n / chunks) but the last (fewer
    pieces when that many cover the axis, as PyTorch)."""
    input = as_tensor(input, "input", "chunk")
    chunks = as_int(chunks, "chunks", "chunk", low=1)
    n = input.shape[normalize_axis(as_int(dim, "dim", "chunk"), input.ndim)]
    size = -(-n // chunks) if n else 1
    return shape.split(input, size, dim)


def unbind(input, dim: int = 0):
    """The slices of `input` along dim, as a tuple (rill.unstack)."""
    input = as_tensor(input, "input", "unbind")
    a = normalize_axis(as_int(dim, "dim", "unbind"), input.ndim)
    pieces = shape.split(input, 1, a) if input.shape[a] else []
    return tuple(shape.squeeze(p, a) for p in pieces)


def narrow(input, dim: int, start: int, length: int):
    """input[..., start:start + length, ...] along dim."""
    input = as_tensor(input, "input", "narrow")
    a = normalize_axis(as_int(dim, "dim", "narrow"), input.ndim)
    n = input.shape[a]
    start = as_int(start, "start", "narrow")
    length = as_int(length, "length", "narrow", low=0)
    if start < 0:
        start += n
    if not 0 <= start <= n or start + length > n:
        raise ShapeError(f"narrow({a}, {start}, {length}) runs outside an axis of length {n}",
                         op="narrow")
    return shape.slice_axis(input, a, start, start + length)


def numel(input) -> int:
    """The number of elements."""
    input = as_tensor(input, "input", "numel")
    return int(np.prod(input.shape, dtype=np.int64))


def t(input):
    """The transpose of a tensor of at most 2 dimensions (PyTorch's t)."""
    input = as_tensor(input, "input", "t")
    if input.ndim > 2:
        raise ShapeError(f"t() is for tensors of at most 2 dimensions, got shape {input.shape}; "
                         "use x.transpose(dim0, dim1) or x.mT", op="t")
    return input if input.ndim < 2 else shape.transpose(input, (1, 0))


def _matrix_product(name: str, ndim: tuple):
    def product(input, mat2):
        input, mat2 = as_tensor(input, "input", name), as_tensor(mat2, "mat2", name)
        if input.ndim != ndim[0] or mat2.ndim != ndim[1]:
            raise ShapeError(f"{name} takes {ndim[0]}-d and {ndim[1]}-d tensors, got shapes "
                             f"{input.shape} and {mat2.shape}; rill.matmul broadcasts", op=name)
        return linalg.matmul(input, mat2)
    product.__name__ = product.__qualname__ = name
    product.__doc__ = f"Matrix product of a {ndim[0]}-d and a {ndim[1]}-d tensor (rill.matmul)."
    return product


_dense_mm = _matrix_product("mm", (2, 2))


def mm(input, mat2):
    """Matrix product of two 2-d tensors (rill.matmul); with a sparse first operand, as
    PyTorch's torch.mm(sparse, dense), the sparse product rill.sparse.mm (which a sparse
    tensor's @ runs: the sparse types live above ops)."""
    if not isinstance(input, Tensor) and getattr(input, "layout", strided) is not strided:
        return input @ mat2
    return _dense_mm(input, mat2)


def spmm(input, mat2):
    """Sparse x dense matrix product (torch.spmm): rill.sparse.mm."""
    return mm(input, mat2)


bmm = _matrix_product("bmm", (3, 3))
mv = _matrix_product("mv", (2, 1))


def from_numpy(ndarray) -> Tensor:
    """A tensor on the CPU reading `ndarray`'s memory, without a copy (as torch.from_numpy).

    Writes to the array afterwards show in the tensor (and in results that share its memory,
    such as reshapes), as they would in PyTorch; ops on the tensor never write the array.
    Unlike PyTorch, `clone()` and other value-preserving ops may share that memory too
    (rill assumes buffers never change): copy with `rill.tensor(a)` if the array will.
    """
    if not isinstance(ndarray, np.ndarray):
        raise ArgumentError(f"from_numpy takes a NumPy array, got {describe(ndarray)}",
                            op="from_numpy")
    kind = dt.from_numpy(ndarray.dtype)
    if kind is None:
        raise ArgumentError(f"NumPy dtype {ndarray.dtype} has no rill counterpart",
                            op="from_numpy")
    return _made(new_tensor(cpu.backend.from_host(ndarray, cpu), kind, cpu))


def _like(maker):
    def like(input, *, dtype=None, device=None, requires_grad: bool = False, generator=None):
        input = as_tensor(input, "input", maker.__name__ + "_like")
        out = maker(*input.shape, dtype=dtype or input.dtype, device=device or input.device,
                    generator=generator)
        return out.requires_grad_() if requires_grad else out
    return like


def _random_like():
    from .random import rand, randn
    return _like(rand), _like(randn)


rand_like, randn_like = _random_like()
rand_like.__name__, randn_like.__name__ = "rand_like", "randn_like"
rand_like.__doc__ = "Uniform [0, 1) samples of input's shape, dtype and device."
randn_like.__doc__ = "Standard normal samples of input's shape, dtype and device."


def randint_like(input, low=0, high=None, *, dtype=None, device=None, generator=None):
    """Random integers in [low, high) of input's shape (high alone: [0, high))."""
    from .random import randint
    input = as_tensor(input, "input", "randint_like")
    if high is None:
        low, high = 0, low
    return randint(low, high, input.shape, dtype=dtype or input.dtype,
                   device=device or input.device, generator=generator)


def allclose(input, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
    """True when every |input - other| <= atol + rtol * |other| (a Python bool)."""
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def isclose(input, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
    """Elementwise |input - other| <= atol + rtol * |other| where both are finite; an
    infinity is close only to itself."""
    finite = E.logical_and(E.isfinite(input), E.isfinite(other))
    near = E.less_equal(E.abs(E.subtract(input, other)), atol + rtol * E.abs(other))
    close = E.logical_or(E.logical_and(finite, near), E.equal(input, other))
    if equal_nan:
        close = E.logical_or(close, E.logical_and(E.isnan(input), E.isnan(other)))
    return close


def equal(input, other) -> bool:
    """True when both have the same shape and elements (PyTorch's torch.equal; the standard's
    elementwise comparison is rill.equal)."""
    return input.shape == other.shape and bool(E.equal(input, other).all())


def unique(input, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
           return_counts: bool = False, dim=None):
    """PyTorch's unique: the sorted distinct values, with the inverse indices and counts when
    asked (the standard's unique_all/unique_counts/... are rill.unique_*)."""
    from .sets import unique_all
    input = as_tensor(input, "input", "unique")
    if dim is not None:
        raise ArgumentError("unique(dim=...) is not supported; flatten or use rill.unique_all "
                            "on the rows you need", op="unique")
    found = unique_all(input)
    if not (return_inverse or return_counts):
        return found.values
    out = (found.values,)
    if return_inverse:
        out += (shape.reshape(found.inverse_indices, input.shape),)
    if return_counts:
        out += (found.counts,)
    return out


__all__ = ["max", "min", "sort", "std", "var", "cat", "concatenate", "clamp", "unsqueeze",
           "chunk", "unbind", "narrow", "numel", "t", "mm", "spmm", "bmm", "mv", "from_numpy",
           "rand_like", "randn_like", "randint_like", "allclose", "isclose", "equal",
           "values_indices", "unique"]
