"""sort, argsort, topk: values and the indices they came from, along one axis. Stable in
both directions (equal values keep the lower index first, descending too)."""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import ShapeError
from ..errors import reports_as
from ..eager.bind import bind
from . import attrs as A
from . import batching
from .arguments import as_axis, as_bool, as_int
from .primitive import primitive
from .rules import normalize_axis, require


def _sort_infer(x, *, axis, descending):
    require(x, "biuf", "a tensor")
    normalize_axis(axis, x.ndim)
    return [(x.shape, x.dtype), (x.shape, dt.int64)]


def _scatter_back(gs, outs, x, axis):
    from .creation import zeros_like
    from .indexing import scatter_add
    return (scatter_add(zeros_like(x), outs[1], gs[0], axis=axis),)


sort_p = primitive("sort", _sort_infer,
                   lambda gs, outs, x, axis, descending: _scatter_back(gs, outs, x, axis),
                   multiple_results=True, save_output=True,
                   attrs=dict(axis=A.AXIS, descending=A.BOOL), batch=batching.along("axis"))


def _topk_infer(x, *, k, axis, largest):
    require(x, "biuf", "a tensor")
    a = normalize_axis(axis, x.ndim)
    if not 0 <= k <= x.shape[a]:
        raise ShapeError(f"k={k} is out of range for axis {axis} of length {x.shape[a]}")
    shape = tuple(k if i == a else s for i, s in enumerate(x.shape))
    return [(shape, x.dtype), (shape, dt.int64)]


topk_p = primitive("topk", _topk_infer,
                   lambda gs, outs, x, k, axis, largest: _scatter_back(gs, outs, x, axis),
                   multiple_results=True, save_output=True,
                   attrs=dict(k=A.INT, axis=A.AXIS, largest=A.BOOL), batch=batching.along("axis"))


def _axis(x, axis, op):
    if getattr(x, "ndim", 1) == 0:
        raise ShapeError("cannot sort a 0-d tensor", op=op)
    return as_axis(axis, op)


@reports_as("sort")
def sort(x, axis: int = -1, descending: bool = False, *, stable: bool = True):
    """Values sorted along `axis`. Always stable, in both directions: equal values keep
    their order (the lower index first, descending too). `stable` is the Array API's
    keyword; False only allows any order, and the stable one is such an order. NaN sorts
    after every number ascending and before every number descending."""
    as_bool(stable, "stable", "sort")
    return bind(sort_p, x, axis=_axis(x, axis, "sort"),
                descending=as_bool(descending, "descending", "sort"))[0]


@reports_as("argsort")
def argsort(x, axis: int = -1, descending: bool = False, *, stable: bool = True):
    """Indices that sort x along `axis` (stable in both directions, as `sort`).

    >>> argsort(rill.tensor([2, 1, 2, 1]), descending=True)
    tensor([0, 2, 1, 3])
    """
    as_bool(stable, "stable", "argsort")
    return bind(sort_p, x, axis=_axis(x, axis, "argsort"),
                descending=as_bool(descending, "descending", "argsort"))[1]


@reports_as("topk")
def topk(x, k: int, axis: int = -1, largest: bool = True):
    """(values, indices) of the k largest (or smallest) entries along `axis`, in order;
    among equal values the lower index comes first."""
    values, indices = bind(topk_p, x, k=as_int(k, "k", "topk"), axis=_axis(x, axis, "topk"),
                           largest=as_bool(largest, "largest", "topk"))
    return values, indices
