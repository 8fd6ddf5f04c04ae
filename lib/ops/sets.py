"""The Array API's set functions: unique_all, unique_counts, unique_inverse, unique_values,
and isin.

Uniqueness is by value equality, as the standard asks: every NaN is distinct (each has a
count of one) and -0.0 equals 0.0 (one entry, counted together). Unique values come sorted
ascending, NaNs last, over the flattened input. How many there are is data, so the unique_*
functions read the tensor on the host and a captured graph refuses them; the values are
then gathered from x on its own device (so they keep its dtype, bfloat16 included). isin is
a sort and a binary search in rill ops, with fixed shapes, and runs everywhere (complex
tensors, which have no order, compare every pair instead).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import dtypes as dt
from ..errors import reports_as
from ..eager.context import detached_value
from .arguments import as_bool, as_tensor
from .searching import host_values, refuse_in_capture

UniqueAllResult = namedtuple("UniqueAllResult", "values indices inverse_indices counts")
UniqueCountsResult = namedtuple("UniqueCountsResult", "values counts")
UniqueInverseResult = namedtuple("UniqueInverseResult", "values inverse_indices")


def _unique(x, op: str, inverse: bool = False, counts: bool = False):
    """(values, first indices[, inverse][, counts]) of the flattened x, as rill tensors."""
    from .creation import tensor
    from .indexing import take
    from .shape import reshape
    x = as_tensor(x, "x", op)
    refuse_in_capture(op, "a graph cannot hold it")
    flat = reshape(x, (-1,))
    found = np.unique(host_values(flat), return_index=True, return_inverse=inverse,
                      return_counts=counts, equal_nan=False)
    first = tensor(found[1].astype(np.int64), device=x.device)
    out = [take(detached_value(flat), first), first]
    if inverse:
        out.append(tensor(found[2].astype(np.int64).reshape(x.shape), device=x.device))
    if counts:
        out.append(tensor(found[-1].astype(np.int64), device=x.device))
    return out


@reports_as("unique_all")
def unique_all(x, /) -> UniqueAllResult:
    """(values, indices, inverse_indices, counts) of the flattened x: the sorted unique
    values, where each first occurs, which value each entry of x is (x's shape), and how
    often each occurs. Each NaN is its own value.

    >>> unique_all(rill.tensor([3, 1, 3]))
    UniqueAllResult(values=tensor([1, 3]), indices=tensor([1, 0]),
                    inverse_indices=tensor([1, 0, 1]), counts=tensor([1, 2]))
    """
    return UniqueAllResult(*_unique(x, "unique_all", inverse=True, counts=True))


@reports_as("unique_counts")
def unique_counts(x, /) -> UniqueCountsResult:
    """(values, counts): the sorted unique values of the flattened x and how often each
    occurs (each NaN once)."""
    values, _, counts = _unique(x, "unique_counts", counts=True)
    return UniqueCountsResult(values, counts)


@reports_as("unique_inverse")
def unique_inverse(x, /) -> UniqueInverseResult:
    """(values, inverse_indices): the sorted unique values of the flattened x, and for each
    entry of x (in x's shape) the index of its value: values[inverse_indices] equals x."""
    values, _, inverse = _unique(x, "unique_inverse", inverse=True)
    return UniqueInverseResult(values, inverse)


@reports_as("unique_values")
def unique_values(x, /):
    """The sorted unique values of the flattened x (each NaN kept: NaN != NaN).

    >>> unique_values(rill.tensor([[2, 1], [2, 5]]))
    tensor([1, 2, 5])
    """
    return _unique(x, "unique_values")[0]


@reports_as("isin")
def isin(x1, x2, /, *, invert: bool = False):
    """For each entry of x1, whether it equals some entry of x2 (NaN equals nothing); with
    invert=True, whether it equals none. A bool tensor of x1's shape.

    >>> isin(rill.tensor([1, 2, 3]), rill.tensor([3, 1]))
    tensor([ True, False,  True])
    """
    from .elementwise import clip, equal, logical_not
    from .indexing import take
    from .searching import searchsorted
    from .shape import reshape
    from .sorting import sort
    x1 = as_tensor(x1, "x1", "isin")
    x2 = as_tensor(x2, "x2", "isin")
    invert = as_bool(invert, "invert", "isin")
    if x2.size == 0:
        from .creation import full
        return full(x1.shape, invert, dtype=dt.bool_, device=x1.device)
    pool = reshape(detached_value(x2), (-1,))
    if x1.dtype.kind == "c" or x2.dtype.kind == "c":
        # Complex numbers have no order to search in: compare each entry with every one.
        from .reduce import any as _any
        from .shape import expand_dims
        found = _any(equal(expand_dims(detached_value(x1), -1), pool), axis=-1)
    else:
        pool = sort(pool)
        at = searchsorted(pool, detached_value(x1))
        found = equal(take(pool, clip(at, 0, pool.shape[0] - 1)), detached_value(x1))
    return logical_not(found) if invert else found
