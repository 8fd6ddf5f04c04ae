"""The Array API's searching functions rill did not have: nonzero, searchsorted,
count_nonzero (argmax, argmin and where live with their families).

searchsorted is a binary search written in rill ops (log2(n) rounds of a gather and a
compare over every query), so it runs on every device, inside captured graphs, with fixed
shapes. nonzero's length is data: it reads the tensor on the host, and a captured graph,
whose shapes are fixed, refuses it.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import CaptureError, ShapeError, reports_as
from ..tensor import Tensor
from ..eager.context import current, detached_value
from .arguments import as_axes, as_bool, as_choice, as_tensor
from .rules import require


def refuse_in_capture(op: str, instead: str) -> None:
    """A CaptureError for a function whose result's shape depends on values."""
    if current().interpreter.capturing:
        raise CaptureError(f"{op}'s result has a length that depends on the tensor's values, "
                           f"which a captured graph (fixed shapes) cannot hold; {instead}, or "
                           "call it outside the capture", op=op)


def host_values(x: Tensor):
    """x's values as a NumPy array on the host (bfloat16 as its float32 storage)."""
    import numpy as np
    return np.asarray(x.device.backend.to_host(x._data))


def nonzero(x, /) -> tuple:
    """The indices of x's non-zero (True) entries: one int64 tensor per axis, in row-major
    order. A 0-d x is refused, as the standard says (index it with x[None] first).

    >>> nonzero(rill.tensor([[0, 3], [4, 0]]))
    (tensor([0, 1]), tensor([1, 0]))
    """
    import numpy as np
    from .creation import tensor
    x = as_tensor(x, "x", "nonzero")
    if x.ndim == 0:
        raise ShapeError("nonzero needs a tensor with at least one axis, got a 0-d tensor; "
                         "use rill.nonzero(x[None]) for a 0-d one", op="nonzero")
    refuse_in_capture("nonzero", "use rill.where(x != 0, ...) to keep the shape")
    return tuple(tensor(i.astype(np.int64), device=x.device)
                 for i in np.nonzero(host_values(x)))


@reports_as("nonzero")
def torch_nonzero(input, *, as_tuple: bool = False):  # noqa: A002 - PyTorch's name
    """PyTorch's nonzero: an (n, ndim) int64 tensor of the indices of input's non-zero
    entries, or with as_tuple=True one 1-d tensor per axis (a 0-d input counts as 1-d)."""
    from .shape import reshape, stack
    x = as_tensor(input, "input", "nonzero")
    if as_bool(as_tuple, "as_tuple", "nonzero"):
        return nonzero(reshape(x, (1,)) if x.ndim == 0 else x)
    if x.ndim == 0:
        refuse_in_capture("nonzero", "use rill.where(x != 0, ...) to keep the shape")
        count = int(bool(host_values(x)))
        from .creation import zeros
        return zeros((count, 0), dtype=dt.int64, device=x.device)
    return stack(list(nonzero(x)), axis=1)


@reports_as("count_nonzero")
def count_nonzero(x, /, *, axis=None, keepdims: bool = False):
    """How many entries of x are non-zero (True for bool), over `axis` (all axes by
    default; an int or a tuple); an int64 tensor.

    >>> count_nonzero(rill.tensor([[0, 1], [2, 3]]), axis=1)
    tensor([1, 2])
    """
    from .elementwise import not_equal
    from .reduce import sum as _sum
    x = as_tensor(x, "x", "count_nonzero")
    hits = x if x.dtype is dt.bool_ else not_equal(x, 0)
    return _sum(hits, axis=as_axes(axis, "count_nonzero"),
                keepdims=as_bool(keepdims, "keepdims", "count_nonzero"))


def _before(a, b):
    """a sorts before b, with NaN after every number (the order sort gives)."""
    from .elementwise import isnan, less, logical_and, logical_not, logical_or
    if not (a.dtype.is_floating or b.dtype.is_floating):
        return less(a, b)
    return logical_or(less(a, b), logical_and(isnan(b), logical_not(isnan(a))))


_SIDES = ("left", "right")


@reports_as("searchsorted")
def searchsorted(x1, x2, /, *, side: str = "left", sorter=None):
    """Where each value of x2 would go in the ascending 1-d x1 to keep it sorted: the first
    such place (side='left': x1[i-1] < v <= x1[i]) or the last (side='right':
    x1[i-1] <= v < x1[i]). `sorter` holds the indices that sort x1 when x1 is not sorted
    itself. NaN counts as larger than every number, as in sort. int64, x2's shape.

    >>> searchsorted(rill.tensor([1, 2, 2, 3]), rill.tensor([2, 5]), side="right")
    tensor([3, 4])
    """
    from .creation import full, zeros
    from .elementwise import clip, floor_divide, less, logical_and, logical_not, where
    from .indexing import take
    side = as_choice(side, "side", "searchsorted", _SIDES)
    x1 = as_tensor(x1, "x1", "searchsorted")
    if x1.ndim != 1:
        raise ShapeError(f"x1 must be 1-d, got shape {x1.shape}", op="searchsorted")
    x2 = as_tensor(x2, "x2", "searchsorted")
    require(x1, "biuf", "real numbers")
    require(x2, "biuf", "real numbers")
    if sorter is not None:
        sorter = as_tensor(sorter, "sorter", "searchsorted")
        if sorter.shape != x1.shape or not sorter.dtype.is_integer:
            raise ShapeError(f"sorter must be integer indices of x1's shape {x1.shape}, got a "
                             f"{sorter.dtype}{list(sorter.shape)} tensor", op="searchsorted")
        x1 = take(x1, sorter)
    x1, x2 = detached_value(x1), detached_value(x2)
    n = x1.shape[0]
    lo = zeros(x2.shape, dtype=dt.int64, device=x2.device)
    hi = full(x2.shape, n, dtype=dt.int64, device=x2.device)
    # Invariant: the answer is in [lo, hi]. Each round halves hi - lo.
    for _ in range(n.bit_length()):
        mid = floor_divide(lo + hi, 2)
        probe = take(x1, clip(mid, 0, max(n - 1, 0)))
        if side == "left":
            right_of = _before(probe, x2)           # x1[mid] < v: the answer is after mid
        else:
            right_of = logical_not(_before(x2, probe))  # x1[mid] <= v
        right_of = logical_and(right_of, less(mid, hi))
        lo, hi = where(right_of, mid + 1, lo), where(right_of, hi, mid)
    return lo
