"""Reductions and scans: sum, mean, prod, max, min, argmax, argmin, var/std, logsumexp,
all, any, norm, cumsum, cumprod.

`axis` is an int, a tuple of ints, or None (all axes); negatives count from the end.
"""
from __future__ import annotations

import builtins as py  # this module defines its own sum/max/min/any/all
import math

from .. import dtypes as dt
from ..errors import ArgumentError, ShapeError
from ..errors import reports_as
from ..eager.bind import bind
from . import attrs as A
from . import promotion
from .arguments import as_axes, as_axis, as_bool, as_float, as_number
from .primitive import primitive
from .rules import normalize_axes, normalize_axis, reduced_shape, require, size_of


def _expand(g, x_shape, axis, keepdims):
    """A reduced cotangent broadcast back to the input's shape."""
    from .shape import broadcast_to, reshape
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


def _extremum(x, *, axis, keepdims):
    axes = normalize_axes(axis, x.ndim)
    _check_nonempty(x, axes, "max/min")
    return reduced_shape(x.shape, axes, keepdims), x.dtype


def _bool_reduce(x, *, axis, keepdims):
    axes = normalize_axes(axis, x.ndim)
    return reduced_shape(x.shape, axes, keepdims), dt.bool_


def _arg_reduce(x, *, axis, keepdims):
    require(x, "biuf", "a tensor")
    if axis is None:
        if x.size == 0:
            raise ShapeError("cannot take argmax/argmin of an empty tensor")
        return ((1,) * x.ndim if keepdims else ()), dt.int64
    a = normalize_axis(axis, x.ndim)
    _check_nonempty(x, (a,), "argmax/argmin")
    return reduced_shape(x.shape, (a,), keepdims), dt.int64


def _var_infer(x, *, axis, keepdims, correction):
    return _float_reduce(x, axis=axis, keepdims=keepdims)


def _scan_infer(x, *, axis):
    out = dt.int64 if x.dtype.kind in "biu" else x.dtype
    if axis is None:
        return (x.size,), out
    normalize_axis(axis, x.ndim)
    return x.shape, out


def _norm_infer(x, *, ord, axis, keepdims):
    return _float_reduce(x, axis=axis, keepdims=keepdims)


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
    from .elementwise import exp
    return (_expand(g, x.shape, axis, keepdims) * exp(x - _expand(out, x.shape, axis, keepdims)),)


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

sum_p = primitive("sum", _sum_like, _sum_vjp, attrs=R)
mean_p = primitive("mean", _float_reduce, _mean_vjp, normalize=F, attrs=R)
prod_p = primitive("prod", _sum_like, _prod_vjp, attrs=R)
max_p = primitive("max", _extremum, _extremum_vjp, save_output=True, attrs=R)
min_p = primitive("min", _extremum, _extremum_vjp, save_output=True, attrs=R)
argmax_p = primitive("argmax", _arg_reduce, attrs=dict(ONE, keepdims=A.BOOL))
argmin_p = primitive("argmin", _arg_reduce, attrs=dict(ONE, keepdims=A.BOOL))
var_p = primitive("var", _var_infer, _var_vjp, normalize=F, attrs=dict(R, correction=A.FLOAT))
logsumexp_p = primitive("logsumexp", _float_reduce, _logsumexp_vjp, normalize=F,
                        save_output=True, attrs=R)
all_p = primitive("all", _bool_reduce, attrs=R)
any_p = primitive("any", _bool_reduce, attrs=R)
cumsum_p = primitive("cumsum", _scan_infer, _cumsum_vjp, attrs=ONE)
cumprod_p = primitive("cumprod", _scan_infer, _cumprod_vjp, save_output=True, attrs=ONE)
norm_p = primitive("norm", _norm_infer, _norm_vjp, normalize=F, save_output=True,
                   attrs=dict(R, ord=A.FLOAT))


def _one_axis(axis, op):
    return None if axis is None else as_axis(axis, op)


def sum(x, axis=None, keepdims: bool = False):  # noqa: A001
    """Sum over `axis` (all axes by default). Bool and integer sums are int64.

    >>> rill.sum(rill.tensor([[1., 2.], [3., 4.]]), axis=0)
    tensor([4., 6.])
    """
    return bind(sum_p, x, axis=as_axes(axis, "sum"),
                keepdims=as_bool(keepdims, "keepdims", "sum"))


def mean(x, axis=None, keepdims: bool = False):
    return bind(mean_p, x, axis=as_axes(axis, "mean"),
                keepdims=as_bool(keepdims, "keepdims", "mean"))


def prod(x, axis=None, keepdims: bool = False):
    return bind(prod_p, x, axis=as_axes(axis, "prod"),
                keepdims=as_bool(keepdims, "keepdims", "prod"))


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


def cumsum(x, axis: int | None = None):
    """Running sum along `axis` (over the flattened tensor when axis is None)."""
    return bind(cumsum_p, x, axis=_one_axis(axis, "cumsum"))


def cumprod(x, axis: int | None = None):
    return bind(cumprod_p, x, axis=_one_axis(axis, "cumprod"))


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
