"""Reductions and scans: sum, mean, prod, max, min, argmax, argmin, var/std, logsumexp,
all, any, norm, cumsum, cumprod (exclusive, reverse), cumulative_sum, cumulative_prod (the
Array API's), cummax, cummin, logcumsumexp.

`axis` is an int, a tuple of ints, or None (all axes); negatives count from the end.
"""
from __future__ import annotations

import builtins as py  # this module defines its own sum/max/min/any/all
import math

from .. import dtypes as dt
from ..errors import ArgumentError, ShapeError
from ..errors import reports_as
from ..eager.bind import bind
from ..eager.context import detached_value
from . import attrs as A
from . import batching
from . import promotion
from . import elementwise as _elementwise, shape as _shape  # used at call time
from .arguments import as_axes, as_axis, as_bool, as_float, as_number
from .primitive import primitive
from .rules import normalize_axes, normalize_axis, reduced_shape, require, size_of


def _expand(g, x_shape, axis, keepdims):
    """A reduced cotangent broadcast back to the input's shape."""
    broadcast_to, reshape = _shape.broadcast_to, _shape.reshape
    axes = normalize_axes(axis, len(x_shape))
    if not keepdims:
        g = reshape(g, reduced_shape(x_shape, axes, True))
    return broadcast_to(g, x_shape)


def _count(x_shape, axis):
    return size_of(x_shape[a] for a in normalize_axes(axis, len(x_shape)))


def _check_nonempty(x, axes, what):
    if py.any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"cannot take the {what} over an empty axis of shape {x.shape}")


# ---- rules ---------------------------------------------------------------------------------


def _sum_like(x, *, axis, keepdims):
    axes = normalize_axes(axis, x.ndim)
    out = dt.int64 if x.dtype.kind in "biu" else x.dtype
    return reduced_shape(x.shape, axes, keepdims), out


def _float_reduce(x, *, axis, keepdims):
    axes = normalize_axes(axis, x.ndim)
    return reduced_shape(x.shape, axes, keepdims), x.dtype


_UNORDERED = "a real tensor (complex numbers have no order; compare rill.abs(z) or rill.real(z))"


def _extremum(x, *, axis, keepdims):
    require(x, "biuf", _UNORDERED)
    axes = normalize_axes(axis, x.ndim)
    _check_nonempty(x, axes, "max/min")
    return reduced_shape(x.shape, axes, keepdims), x.dtype


def _bool_reduce(x, *, axis, keepdims):
    axes = normalize_axes(axis, x.ndim)
    return reduced_shape(x.shape, axes, keepdims), dt.bool_


def _arg_reduce(x, *, axis, keepdims):
    require(x, "biuf", _UNORDERED)
    if axis is None:
        if x.size == 0:
            raise ShapeError("cannot take argmax/argmin of an empty tensor")
        return ((1,) * x.ndim if keepdims else ()), dt.int64
    a = normalize_axis(axis, x.ndim)
    _check_nonempty(x, (a,), "argmax/argmin")
    return reduced_shape(x.shape, (a,), keepdims), dt.int64


def _real_reduce(x, *, axis, keepdims):
    require(x, "biuf", "a real tensor (for complex z reduce rill.abs(z) or the parts)")
    return _float_reduce(x, axis=axis, keepdims=keepdims)


def _var_infer(x, *, axis, keepdims, correction):
    return _real_reduce(x, axis=axis, keepdims=keepdims)


def _scan_infer(x, *, axis):
    out = dt.int64 if x.dtype.kind in "biu" else x.dtype
    if axis is None:
        return (x.size,), out
    normalize_axis(axis, x.ndim)
    return x.shape, out


def _norm_infer(x, *, ord, axis, keepdims):
    return _real_reduce(x, axis=axis, keepdims=keepdims)


# ---- gradient rules ------------------------------------------------------------------------


def _sum_vjp(g, out, x, axis, keepdims):
    return (_expand(g, x.shape, axis, keepdims),)


def _mean_vjp(g, out, x, axis, keepdims):
    return (_expand(g, x.shape, axis, keepdims) / py.max(_count(x.shape, axis), 1),)


def _extremum_vjp(g, out, x, axis, keepdims):
    # Ties share the gradient evenly, as PyTorch's amax/amin do.
    from .elementwise import equal
    hit = equal(x, _expand(out, x.shape, axis, keepdims)).astype(x.dtype)
    count = _expand(sum(hit, axis=axis, keepdims=keepdims), x.shape, axis, keepdims)
    return (_expand(g, x.shape, axis, keepdims) * hit / count,)


def _var_vjp(g, out, x, axis, keepdims, correction):
    n = _count(x.shape, axis)
    centered = x - mean(x, axis=axis, keepdims=True)
    return (_expand(g, x.shape, axis, keepdims) * centered * (2.0 / py.max(n - correction, 0)),)


def _logsumexp_vjp(g, out, x, axis, keepdims):
    reshape = _shape.reshape
    if not keepdims:  # the reduced axes back as 1s; the arithmetic broadcasts them to x's
        kept = reduced_shape(x.shape, normalize_axes(axis, x.ndim), True)
        g, out = reshape(g, kept), reshape(out, kept)
    return (g * _elementwise.exp(x - out),)


def _exclusive_products(x, axis):
    """prod of every element along `axis` but the one at each position (no division)."""
    from .shape import concat, flip, slice_axis
    from .creation import ones
    ones_ = ones(*(1 if a == axis else s for a, s in enumerate(x.shape)), dtype=x.dtype,
                 device=x.device)
    n = x.shape[axis]
    left = cumprod(concat([ones_, slice_axis(x, axis, 0, n - 1)], axis=axis), axis=axis)
    rx = flip(x, axis=axis)
    right = flip(cumprod(concat([ones_, slice_axis(rx, axis, 0, n - 1)], axis=axis), axis=axis),
                 axis=axis)
    return left * right


def _prod_vjp(g, out, x, axis, keepdims):
    from .shape import moveaxis_many, reshape
    axes = normalize_axes(axis, x.ndim)
    if not axes or x.size == 0:
        return (_expand(g, x.shape, axis, keepdims),)
    moved = moveaxis_many(x, axes)  # reduced axes last
    kept = moved.shape[:x.ndim - len(axes)]
    flat = reshape(moved, kept + (-1,))
    others = reshape(_exclusive_products(flat, flat.ndim - 1), moved.shape)
    from .shape import transpose
    inverse = _inverse_of_move(x.ndim, axes)
    return (_expand(g, x.shape, axis, keepdims) * transpose(others, inverse),)


def _inverse_of_move(ndim, axes):
    order = [a for a in range(ndim) if a not in axes] + list(axes)
    inverse = [0] * ndim
    for i, a in enumerate(order):
        inverse[a] = i
    return tuple(inverse)


def _scan_grad_input(x, axis):
    """Shape the cotangent of a scan like its input (axis=None scans the flattened input)."""
    from .shape import reshape
    if axis is None:
        return reshape(x, (-1,)), 0
    return x, normalize_axis(axis, x.ndim)


def _cumsum_vjp(g, out, x, axis):
    from .shape import flip, reshape
    _, a = _scan_grad_input(x, axis)
    return (reshape(flip(cumsum(flip(g, axis=a), axis=a), axis=a), x.shape),)


def _cumprod_vjp(g, out, x, axis):
    # d out_k / d x_i = prod_{j<=k, j!=i} x_j. Without zeros that is out_k / x_i; the first zero
    # along the axis gets the products with itself replaced by one, and later entries get 0.
    from .elementwise import equal, where
    from .shape import flip, reshape
    original_shape = x.shape
    x, a = _scan_grad_input(x, axis)
    zero = equal(x, 0)
    zeros_so_far = cumsum(zero, axis=a)
    first_zero = zero & equal(zeros_so_far, 1)
    before = equal(zeros_so_far, 0)
    def rev_cumsum(t):
        return flip(cumsum(flip(t, axis=a), axis=a), axis=a)
    safe_x = where(before, x, 1.0)
    grad_before = rev_cumsum(g * out) / safe_x
    out_one = cumprod(where(first_zero, 1.0, x), axis=a)
    grad_first = rev_cumsum(g * where(zeros_so_far <= 1, out_one, 0.0))
    grad = where(before, grad_before, where(first_zero, grad_first, 0.0))
    return (reshape(grad, original_shape),)


def _norm_vjp(g, out, x, ord, axis, keepdims):
    from .elementwise import abs as _abs, equal, power, sign, where
    ge = _expand(g, x.shape, axis, keepdims)
    oe = _expand(out, x.shape, axis, keepdims)
    if ord == 2:
        return (ge * x / where(equal(oe, 0), 1.0, oe),)
    if ord == 1:
        return (ge * sign(x),)
    if ord in (math.inf, -math.inf):
        hit = equal(_abs(x), oe).astype(x.dtype)
        count = _expand(sum(hit, axis=axis, keepdims=keepdims), x.shape, axis, keepdims)
        return (ge * sign(x) * hit / count,)
    if ord == 0:
        return (ge * 0.0,)
    safe = where(equal(oe, 0), 1.0, oe)
    return (ge * sign(x) * power(_abs(x), ord - 1) / power(safe, ord - 1),)


F = promotion.floating
R = dict(axis=A.AXES, keepdims=A.BOOL)  # the attrs of every reduction
ONE = dict(axis=A.Optional(A.AXIS))      # argmax/argmin and the scans: one axis or all
_B = batching.along("axis")  # vmap: the batch axis first, reduced axes shifted past it
_FLAT = batching.along("axis", flatten_none=True)  # axis None: over the flattened member

sum_p = primitive("sum", _sum_like, _sum_vjp, attrs=R, batch=_B)
mean_p = primitive("mean", _float_reduce, _mean_vjp, normalize=F, attrs=R, batch=_B)
prod_p = primitive("prod", _sum_like, _prod_vjp, attrs=R, batch=_B)
max_p = primitive("max", _extremum, _extremum_vjp, save_output=True, attrs=R, batch=_B)
min_p = primitive("min", _extremum, _extremum_vjp, save_output=True, attrs=R, batch=_B)
argmax_p = primitive("argmax", _arg_reduce, attrs=dict(ONE, keepdims=A.BOOL), batch=_FLAT)
argmin_p = primitive("argmin", _arg_reduce, attrs=dict(ONE, keepdims=A.BOOL), batch=_FLAT)
var_p = primitive("var", _var_infer, _var_vjp, normalize=F, attrs=dict(R, correction=A.FLOAT),
                  batch=_B)
logsumexp_p = primitive("logsumexp", _real_reduce, _logsumexp_vjp, normalize=F,
                        save_output=True, attrs=R, batch=_B)
all_p = primitive("all", _bool_reduce, attrs=R, batch=_B)
any_p = primitive("any", _bool_reduce, attrs=R, batch=_B)
cumsum_p = primitive("cumsum", _scan_infer, _cumsum_vjp, attrs=ONE, batch=_FLAT)
cumprod_p = primitive("cumprod", _scan_infer, _cumprod_vjp, save_output=True, attrs=ONE,
                      batch=_FLAT)
norm_p = primitive("norm", _norm_infer, _norm_vjp, normalize=F, save_output=True,
                   attrs=dict(R, ord=A.FLOAT), batch=_B)


def _one_axis(axis, op):
    return None if axis is None else as_axis(axis, op)


def _accumulated(prim, op, x, axis, keepdims, dtype):
    """sum/prod in `dtype` (x cast first) or in the standard's default for x: bool and signed
    integers in int64, unsigned integers in uint64, floats and complex in their own type.

    The primitive accumulates integers in int64; for unsigned inputs that is the same sum
    modulo 2**64, so it is reinterpreted as uint64 afterwards."""
    if dtype is not None:
        dtype = dt.as_dtype(dtype, op)
        x = promotion.cast(x, dtype)
    out = bind(prim, x, axis=as_axes(axis, op), keepdims=as_bool(keepdims, "keepdims", op))
    if dtype is None and getattr(x, "dtype", None) is not None and x.dtype.kind == "u":
        dtype = dt.uint64
    return out if dtype is None or out.dtype is dtype else promotion.cast(out, dtype)


def sum(x, axis=None, keepdims: bool = False, *, dtype=None):  # noqa: A001
    """Sum over `axis` (all axes by default), in `dtype` if given. Bool and signed integer
    sums are int64, unsigned ones uint64 (the Array API's rule).

    >>> rill.sum(rill.tensor([[1., 2.], [3., 4.]]), axis=0)
    tensor([4., 6.])
    """
    return _accumulated(sum_p, "sum", x, axis, keepdims, dtype)


def mean(x, axis=None, keepdims: bool = False):
    return bind(mean_p, x, axis=as_axes(axis, "mean"),
                keepdims=as_bool(keepdims, "keepdims", "mean"))


def prod(x, axis=None, keepdims: bool = False, *, dtype=None):
    """Product over `axis`, in `dtype` if given (integer dtypes as `sum`)."""
    return _accumulated(prod_p, "prod", x, axis, keepdims, dtype)


def max(x, axis=None, keepdims: bool = False):  # noqa: A001
    """Largest value over `axis`; ties share the gradient."""
    return bind(max_p, x, axis=as_axes(axis, "max"),
                keepdims=as_bool(keepdims, "keepdims", "max"))


def min(x, axis=None, keepdims: bool = False):  # noqa: A001
    return bind(min_p, x, axis=as_axes(axis, "min"),
                keepdims=as_bool(keepdims, "keepdims", "min"))


def argmax(x, axis: int | None = None, keepdims: bool = False):
    """Index of the largest value (of the flattened tensor when axis is None). Not differentiable."""
    return bind(argmax_p, x, axis=_one_axis(axis, "argmax"),
                keepdims=as_bool(keepdims, "keepdims", "argmax"))


def argmin(x, axis: int | None = None, keepdims: bool = False):
    return bind(argmin_p, x, axis=_one_axis(axis, "argmin"),
                keepdims=as_bool(keepdims, "keepdims", "argmin"))


def var(x, axis=None, correction: float = 0, keepdims: bool = False):
    """Variance; `correction=1` divides by N-1 (Bessel), the default 0 by N."""
    return bind(var_p, x, axis=as_axes(axis, "var"), keepdims=as_bool(keepdims, "keepdims", "var"),
                correction=as_float(correction, "correction", "var"))


@reports_as("std")
def std(x, axis=None, correction: float = 0, keepdims: bool = False):
    """Standard deviation, sqrt(var(x, axis, correction))."""
    from .elementwise import sqrt
    return sqrt(var(x, axis=axis, correction=correction, keepdims=keepdims))


def logsumexp(x, axis=None, keepdims: bool = False):
    """log(sum(exp(x))) computed without overflow."""
    return bind(logsumexp_p, x, axis=as_axes(axis, "logsumexp"),
                keepdims=as_bool(keepdims, "keepdims", "logsumexp"))


def all(x, axis=None, keepdims: bool = False):  # noqa: A001
    return bind(all_p, x, axis=as_axes(axis, "all"),
                keepdims=as_bool(keepdims, "keepdims", "all"))


def any(x, axis=None, keepdims: bool = False):  # noqa: A001
    return bind(any_p, x, axis=as_axes(axis, "any"),
                keepdims=as_bool(keepdims, "keepdims", "any"))


# ---- scans ---------------------------------------------------------------------------------
# cumsum and cumprod are primitives; the options and the other scans are built on them and
# on elementwise ops, so gradients, capture and the gpu come with them.


def _shifted(x, axis, steps, fill):
    """x moved `steps` places along `axis`, `fill` entering at the front (length kept)."""
    from .creation import full
    from .shape import concat, slice_axis
    n = x.shape[axis]
    steps = py.min(steps, n)
    front = full(tuple(steps if a == axis else s for a, s in enumerate(x.shape)), fill,
                 dtype=x.dtype, device=x.device)
    return concat([front, slice_axis(x, axis, 0, n - steps)], axis=axis)


def _scan(prim, identity, x, axis, dtype, exclusive, reverse, op):
    """prim along one axis, on x cast to `dtype`, after shifting in the identity (exclusive)
    and / or reading from the end (reverse)."""
    from .arguments import as_dtype, as_tensor
    from .shape import flip, reshape
    x = as_tensor(x, "x", op)
    dtype = None if dtype is None else as_dtype(dtype, op)
    if dtype is not None and x.dtype is not dtype:
        x = x.astype(dtype)
    axis = _one_axis(axis, op)
    if as_bool(exclusive, "exclusive", op) or as_bool(reverse, "reverse", op):
        if axis is None:
            x, axis = reshape(x, (-1,)), 0
        axis = normalize_axis(axis, x.ndim)
        if reverse:
            x = flip(x, axis=axis)
        if exclusive and x.shape[axis]:
            x = _shifted(x, axis, 1, identity)
    out = bind(prim, x, axis=axis)
    if reverse:
        out = flip(out, axis=axis)
    return out if dtype is None or out.dtype is dtype else out.astype(dtype)


@reports_as("cumsum")
def cumsum(x, axis: int | None = None, *, dtype=None, exclusive: bool = False,
           reverse: bool = False):
    """Running sum along `axis` (over the flattened tensor when axis is None). `dtype` casts
    x first (bool and integer sums are otherwise int64); exclusive=True sums the entries
    before each one (0 first); reverse=True runs from the end.

    >>> rill.cumsum(rill.tensor([1, 2, 3]), 0, exclusive=True, reverse=True)
    tensor([5, 3, 0])
    """
    return _scan(cumsum_p, 0, x, axis, dtype, exclusive, reverse, "cumsum")


@reports_as("cumprod")
def cumprod(x, axis: int | None = None, *, dtype=None, exclusive: bool = False,
            reverse: bool = False):
    """Running product; the options are cumsum's (exclusive starts from 1)."""
    return _scan(cumprod_p, 1, x, axis, dtype, exclusive, reverse, "cumprod")


def _cumulative(scan, identity, x, axis, dtype, include_initial, op):
    """The Array API's cumulative_sum/prod: axis only for 1-d x; include_initial prepends the
    identity (the scan's length is then n + 1)."""
    from .arguments import as_tensor
    from .shape import concat
    x = as_tensor(x, "x", op)
    if axis is None:
        if x.ndim != 1:
            raise ArgumentError(f"axis is required for a {x.ndim}-d tensor (it may be left out "
                                f"only for 1-d input)", op=op)
        axis = 0
    axis = normalize_axis(as_axis(axis, op), x.ndim)
    if dtype is None and x.dtype.kind == "u":
        dtype = dt.uint64  # the standard's default for unsigned input (cumsum's is int64)
    out = scan(x, axis, dtype=dtype)
    if as_bool(include_initial, "include_initial", op):
        from .creation import full
        first = full(tuple(1 if a == axis else s for a, s in enumerate(out.shape)), identity,
                     dtype=out.dtype, device=out.device)
        out = concat([first, out], axis=axis)
    return out


@reports_as("cumulative_sum")
def cumulative_sum(x, /, *, axis: int | None = None, dtype=None, include_initial: bool = False):
    """Running sum along `axis` (Array API 2024.12): axis may be left out only for 1-d x;
    include_initial=True puts a 0 before the sums.

    >>> cumulative_sum(rill.tensor([1, 2, 3]), include_initial=True)
    tensor([0, 1, 3, 6])
    """
    return _cumulative(cumsum, 0, x, axis, dtype, include_initial, "cumulative_sum")


@reports_as("cumulative_prod")
def cumulative_prod(x, /, *, axis: int | None = None, dtype=None,
                    include_initial: bool = False):
    """Running product along `axis` (Array API 2024.12); include_initial puts a 1 first."""
    return _cumulative(cumprod, 1, x, axis, dtype, include_initial, "cumulative_prod")


def _running_extreme_index(x, axis, largest):
    """Where the running max (min) of x along `axis` sits: a ladder scan (log2 n steps, each
    combining a position with the one 2**k before it); ties and NaN go to the latest entry,
    as PyTorch's cummax/cummin do."""
    import numpy as np
    from .creation import arange
    from .elementwise import greater, isnan, less, logical_and, logical_not, logical_or, where
    from .shape import broadcast_to, reshape
    n = x.shape[axis]
    v = detached_value(x)
    if v.dtype is dt.bool_:
        v = v.astype(dt.int8)
    if v.dtype.is_floating:
        fill = -math.inf if largest else math.inf
    else:
        info = np.iinfo(v.dtype.storage)
        fill = int(info.min if largest else info.max)
    at = reshape(arange(n, device=x.device), tuple(n if a == axis else 1 for a in range(x.ndim)))
    i = broadcast_to(at, x.shape)
    step = 1
    while step < n:
        before_v, before_i = _shifted(v, axis, step, fill), _shifted(i, axis, step, 0)
        earlier_wins = (greater if largest else less)(before_v, v)
        if v.dtype.is_floating:  # a NaN beats any number
            earlier_wins = logical_or(earlier_wins,
                                      logical_and(isnan(before_v), logical_not(isnan(v))))
        v, i = where(earlier_wins, before_v, v), where(earlier_wins, before_i, i)
        step *= 2
    return i


def _running_extreme(x, dim, largest, op):
    from .arguments import as_tensor
    from .indexing import take_along_axis
    x = as_tensor(x, "input", op)
    axis = normalize_axis(as_axis(dim, op, "dim"), x.ndim)
    indices = _running_extreme_index(x, axis, largest)
    # Gathering the values makes the gradient PyTorch's: each goes to the entry it came from.
    return take_along_axis(x, indices, axis), indices


@reports_as("cummax")
def cummax(input, dim: int):
    """(values, indices): the running maximum along `dim` and where each was found (the latest
    of equal values; NaN propagates), as torch.cummax. The gradient flows to those entries.

    >>> cummax(rill.tensor([1, 3, 2, 3]), 0)
    (tensor([1, 3, 3, 3]), tensor([0, 1, 1, 3]))
    """
    return _running_extreme(input, dim, True, "cummax")


@reports_as("cummin")
def cummin(input, dim: int):
    """(values, indices): the running minimum along `dim` (torch.cummin)."""
    return _running_extreme(input, dim, False, "cummin")


def _logaddexp(a, b):
    """log(exp(a) + exp(b)), shifted by the larger (held constant: it cancels in the result)."""
    from .elementwise import exp, isfinite, log, maximum, where
    m = maximum(detached_value(a), detached_value(b))
    m = where(isfinite(m), m, 0.0)
    return m + log(exp(a - m) + exp(b - m))


@reports_as("logcumsumexp")
def logcumsumexp(input, dim: int):
    """log(cumsum(exp(input))) along `dim` without overflow or underflow (torch.logcumsumexp):
    a ladder scan of log-add-exp, so entries far below the running maximum still count."""
    from .arguments import as_tensor
    x = promotion.floating((as_tensor(input, "input", "logcumsumexp"),))[0]
    axis = normalize_axis(as_axis(dim, "logcumsumexp", "dim"), x.ndim)
    step = 1
    while step < x.shape[axis]:
        x = _logaddexp(_shifted(x, axis, step, -math.inf), x)
        step *= 2
    return x


@reports_as("norm")
def norm(x, ord=None, axis=None, keepdims: bool = False):
    """Vector p-norm over `axis` (all axes by default): ord 2 (default, also 'fro'), 1,
    inf, -inf, 0 (count of non-zeros) or any p > 0."""
    if ord is None or (isinstance(ord, str) and ord == "fro"):
        ord = 2
    if isinstance(ord, str):
        raise ArgumentError(f"ord must be a number, inf, -inf or 'fro', got {ord!r}", op="norm")
    return bind(norm_p, x, ord=as_number(ord, "ord", "norm"), axis=as_axes(axis, "norm"),
                keepdims=as_bool(keepdims, "keepdims", "norm"))
