"""Row updates of tables: what a sparse gradient (an embedding's) needs to touch only its rows.

coalesce_rows(indices[n], rows[n, ...]) -> (indices[n], rows[n, ...], valid[n]): one row per
distinct index, in the first k slots (k distinct indices, ascending), repeated indices'
rows summed; the other n - k slots are padding, valid False, with zero rows and an index
that repeats a real one. The shapes are the batch's, whatever k is, so a captured graph
(fixed shapes) holds it: an update written as `table[indices] += delta`, with delta zero
where not valid, is exact whatever the padding's index. Not differentiable (optimizers run
it under no_grad).

add_rows_(t, indices, rows): t[indices] += rows (repeats accumulate), in t's own buffer when
no one else holds it, as an optimizer's update of 32 rows of a large table must be: a copy of
the table per step would cost more than the step. Inside a capture it records index_add and
assign, which the executor runs in the variable's buffer under the same condition.
"""
from __future__ import annotations

import sys

import numpy as np

from .. import dtypes as dt
from ..eager.bind import bind
from ..eager.context import current
from ..eager.interpreter import EAGER
from ..errors import ShapeError
from .primitive import primitive
from .rules import require


def _coalesce_infer(indices, rows):
    require(indices, "iu", "integer indices")
    if indices.ndim != 1 or rows.ndim < 1 or rows.shape[0] != indices.shape[0]:
        raise ShapeError(f"expects indices (n,) and rows (n, ...), got {indices.shape} and "
                         f"{rows.shape}")
    n = indices.shape[0]
    return [((n,), dt.int64), (tuple(rows.shape), rows.dtype), ((n,), dt.bool_)]


coalesce_rows_p = primitive("coalesce_rows", _coalesce_infer, multiple_results=True, attrs={},
                            cpu_only="a CPU kernel (np.unique); on other devices optimizers "
                                     "coalesce eagerly and captured steps keep gradients dense")


def coalesce_rows(indices, rows):
    """(indices, rows, valid): one row per distinct index, padded to the input's length."""
    return bind(coalesce_rows_p, indices, rows)


def per_row(valid, rows):
    """valid (n,) shaped to broadcast against rows (n, ...)."""
    from .shape import reshape
    return reshape(valid, (valid.shape[0],) + (1,) * (rows.ndim - 1))


def add_rows_(t, indices, rows):
    """t[indices] += rows along t's first axis, in place (repeated indices accumulate)."""
    from .indexing import index_add
    from .methods import assign
    ctx = current()
    if ctx.interpreter is EAGER and not (ctx.grad_enabled and t.requires_grad) and \
            t.device.kind == "cpu" and rows.dtype is t.dtype and t.dtype.kind == "f" and \
            t.dtype is not dt.bfloat16 and _own_buffer(t):
        from rill.kernels.numpy.indexing import add_into
        add_into(t._data, rows._data, indices._data, key=(("array",),))
        t._version += 1
        return t
    return assign(t, index_add(t, (indices,), rows))


def _own_buffer(t) -> bool:
    """Whether t's buffer is t's alone (no view, no other tensor, no saved value holds it),
    writable and C-ordered: then writing it in place is invisible to everyone else."""
    data = t._data
    return (type(data) is np.ndarray and sys.getrefcount(data) == _ONE_SLOT and
            data.base is None and data.flags.writeable and data.flags.c_contiguous)


def _held_by_one_slot() -> int:
    """The count _own_buffer sees for a buffer one object's slot holds, measured (as the
    executor's donation does): interpreters count references to arguments differently."""
    class Holder:
        __slots__ = ("_data",)
    h = Holder()
    h._data = np.empty(1)
    data = h._data
    count = sys.getrefcount(data)
    del data
    return count


_ONE_SLOT = _held_by_one_slot()
