"""Indexing: x[key], x[key] = v, take, take_along_axis, scatter_add, index_add, one_hot.

A key is split into a static part (ints, slices, None, Ellipsis, kept as hashable tuples)
and integer index tensors (boolean masks become integer indices first). The static part is
an attribute, the index tensors are inputs, so one primitive covers every kind of key and a
captured graph can hold it. NumPy's indexing rules decide the result shape.

The gradient of a gather by one integer index along the first axis (x[idx], take(x, idx),
embedding lookups) is sparse: a `SparseRows` of (indices, rows) that becomes dense only
when something needs it.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..errors import IndexingError, ShapeError
from ..errors import reports_as
from ..eager.bind import bind
from ..tensor import Tensor
from . import attrs as A
from . import promotion
from .arguments import as_axis, as_index, as_int, as_tensor
from .primitive import primitive
from .rules import broadcast_shapes, normalize_axis, require

ARRAY = ("array",)
NEW = ("new",)
ELLIPSIS = ("...",)


def _nonzero(mask: Tensor):
    host = np.asarray(mask.device.backend.to_host(mask._data))
    from .creation import tensor
    return [tensor(i.astype(np.int64), device=mask.device) for i in np.nonzero(host)]


def parse_key(x, key, op: str = "getitem"):
    """(static key, index tensors) for x[key]; IndexingError naming `op` for a bad key."""
    if not isinstance(key, tuple):
        key = (key,)
    static, arrays = [], []
    for k in key:
        if k is None:
            static.append(NEW)
        elif k is Ellipsis:
            static.append(ELLIPSIS)
        elif isinstance(k, slice):
            step = as_index(k.step, "slice step", op)
            if step == 0:
                raise IndexingError("slice step must not be zero", op=op)
            static.append(("slice", as_index(k.start, "slice start", op),
                           as_index(k.stop, "slice stop", op), step))
        elif isinstance(k, (bool, np.bool_)):
            raise IndexingError("a bare True/False index is not supported; use a mask tensor",
                                op=op)
        elif isinstance(k, (int, np.integer)):
            static.append(("int", as_index(k, "index", op)))
        else:
            t = k if isinstance(k, Tensor) else _index_tensor(k, x, op)
            if t.dtype is dt.bool_:
                if t.ndim == 0:
                    raise IndexingError("a 0-d boolean index is not supported", op=op)
                pieces = _nonzero(t)
                static.extend([ARRAY] * len(pieces))
                arrays.extend(pieces)
            elif t.dtype.is_integer:
                static.append(ARRAY)
                arrays.append(t)
            else:
                raise IndexingError(f"index tensors must be integer or bool, got {t.dtype}",
                                    op=op)
    return tuple(static), arrays


def _index_tensor(k, x, op):
    from .creation import tensor
    from .arguments import describe
    try:
        t = tensor(k, device=x.device)
    except Exception:  # noqa: BLE001 - strings, None in a list, ragged lists ...
        raise IndexingError(f"unsupported index {describe(k)}", op=op) from None
    if t.size == 0 and t.dtype.is_floating:  # x[[]] means an empty integer index
        t = t.astype(dt.int64)
    return t


def _expand_key(static, ndim):
    """The key with Ellipsis expanded and trailing full slices added."""
    consumed = sum(1 for k in static if k is not NEW and k is not ELLIPSIS)
    if consumed > ndim:
        raise IndexingError(f"too many indices ({consumed}) for a tensor with {ndim} dimensions")
    if sum(1 for k in static if k is ELLIPSIS) > 1:
        raise IndexingError("an index can hold only one Ellipsis")
    full = ("slice", None, None, None)
    if ELLIPSIS in static:
        i = static.index(ELLIPSIS)
        return static[:i] + (full,) * (ndim - consumed) + static[i + 1:]
    return static + (full,) * (ndim - consumed)


def key_shape(shape, static, array_shapes):
    """The shape of x[key] by NumPy's rules, without touching data."""
    key = _expand_key(static, len(shape))
    arrays = iter(array_shapes)
    basic_before, basic_after, advanced, positions = [], [], [], []
    dim = 0
    for pos, k in enumerate(key):
        if k is NEW:
            (basic_after if advanced else basic_before).append(1)
            continue
        n = shape[dim]
        dim += 1
        kind = k[0]
        if kind == "slice":
            (basic_after if advanced else basic_before).append(len(range(*slice(*k[1:]).indices(n))))
        elif kind == "int":
            if not -n <= k[1] < n:
                raise IndexingError(f"index {k[1]} is out of bounds for axis {dim - 1} with size {n}")
            advanced.append(())
            positions.append(pos)
        else:
            advanced.append(next(arrays))
            positions.append(pos)
    has_arrays = any(k is ARRAY for k in key)
    if not has_arrays:  # ints alone just drop their axes
        return tuple(basic_before + basic_after)
    try:
        adv_shape = broadcast_shapes(*advanced)
    except ShapeError:
        raise IndexingError("index arrays of shapes " + ", ".join(map(str, advanced)) +
                            " do not broadcast together") from None
    contiguous = positions == list(range(positions[0], positions[0] + len(positions)))
    if contiguous:
        return tuple(basic_before) + adv_shape + tuple(basic_after)
    return adv_shape + tuple(basic_before + basic_after)


def numpy_key(static, arrays):
    """Rebuild a NumPy key from the static part and index buffers (used by kernels)."""
    arrays = iter(arrays)
    out = []
    for k in static:
        if k is NEW or k == NEW:
            out.append(None)
        elif k == ELLIPSIS:
            out.append(Ellipsis)
        elif k[0] == "slice":
            out.append(slice(*k[1:]))
        elif k[0] == "int":
            out.append(k[1])
        else:
            out.append(next(arrays))
    return tuple(out)


def _is_row_gather(static, x_ndim):
    """x[idx] with one integer tensor on the first axis and nothing else (gradient is sparse)."""
    full = ("slice", None, None, None)
    return (len(static) >= 1 and static[0] == ARRAY and
            all(k == full or k == ELLIPSIS for k in static[1:]) and x_ndim >= 1)


# ---- primitives ----------------------------------------------------------------------------


def _getitem_infer(x, *arrays, key):
    _check_arrays(key, arrays)
    for a in arrays:
        require(a, "iu", "integer index tensors")
    return key_shape(x.shape, key, [a.shape for a in arrays]), x.dtype


def _getitem_vjp(g, out, x, *arrays, key):
    from .creation import zeros_like
    if _is_row_gather(key, x.ndim):
        from ..sparse import SparseRows
        from .shape import reshape
        from .elementwise import where
        idx = reshape(arrays[0], (-1,))
        idx = where(idx < 0, idx + x.shape[0], idx)  # one spelling per row, for coalescing
        rows = reshape(g, (idx.size,) + x.shape[1:])
        return (SparseRows(idx, rows, x.shape),) + (None,) * len(arrays)
    return (bind(index_add_p, zeros_like(x), g, *arrays, key=key),) + (None,) * len(arrays)


getitem_p = primitive("getitem", _getitem_infer, _getitem_vjp, attrs={"key": A.INDEX_KEY})


def _check_arrays(key, arrays):
    """One index tensor per ('array',) entry of the key (a saved graph could say otherwise)."""
    if sum(1 for k in key if k == ARRAY) != len(arrays):
        raise IndexingError(f"the key {key} does not match {len(arrays)} index tensors")


def _update_infer(x, values, *arrays, key):
    _check_arrays(key, arrays)
    for a in arrays:
        require(a, "iu", "integer index tensors")
    target = key_shape(x.shape, key, [a.shape for a in arrays])
    try:
        broadcast_shapes(target, values.shape)
        if len(values.shape) > len(target) and any(s != 1 for s in
                                                   values.shape[:len(values.shape) - len(target)]):
            raise ShapeError("")
        if broadcast_shapes(target, values.shape) != tuple(target):
            raise ShapeError("")
    except ShapeError:
        raise ShapeError(f"values of shape {values.shape} do not fit the indexed region of "
                         f"shape {target}") from None
    return x.shape, x.dtype


def _index_add_vjp(g, out, x, values, *arrays, key):
    from .elementwise import sum_to_shape
    return (g, sum_to_shape(bind(getitem_p, g, *arrays, key=key), values.shape)) + \
        (None,) * len(arrays)


def _index_set_vjp(g, out, x, values, *arrays, key):
    from .elementwise import sum_to_shape, where, equal
    from .creation import arange, full, zeros_like
    from .shape import reshape
    picked = bind(getitem_p, g, *arrays, key=key)
    cleared = bind(index_set_p, g, zeros_like(picked), *arrays, key=key)
    if ARRAY in key:
        # A position indexed twice keeps one write: only that entry of `values` gets its
        # gradient. Stamp each entry's ordinal through the same set to see which survived.
        ordinal = reshape(arange(picked.size, device=g.device), picked.shape)
        stamp = bind(index_set_p, full(x.shape, -1, device=g.device), ordinal, *arrays, key=key)
        survived = equal(bind(getitem_p, stamp, *arrays, key=key), ordinal)
        picked = where(survived, picked, 0.0)
    return (cleared, sum_to_shape(picked, values.shape)) + (None,) * len(arrays)


def _values_like_x(args):
    """index_add/index_set: values take x's dtype; index tensors stay as they are."""
    x, values, *arrays = promotion.lift(args)
    if values.dtype is not x.dtype:
        values = promotion.cast(values, x.dtype)
    return (x, values, *arrays)


index_add_p = primitive("index_add", _update_infer, _index_add_vjp, normalize=_values_like_x,
                        attrs={"key": A.INDEX_KEY})
index_set_p = primitive("index_set", _update_infer, _index_set_vjp, normalize=_values_like_x,
                        attrs={"key": A.INDEX_KEY})


def getitem(x, key):
    """x[key] for ints, slices, None, Ellipsis, integer arrays and boolean masks."""
    static, arrays = parse_key(x, key)
    return bind(getitem_p, x, *arrays, key=static)


@reports_as("index_add")
def index_add(x, key, values):
    """A copy of x with `values` added at x[key]; repeated indices add up."""
    x = as_tensor(x, "x", "index_add")
    static, arrays = parse_key(x, key, "index_add")
    return bind(index_add_p, x, values, *arrays, key=static)


@reports_as("index_set")
def index_set(x, key, values):
    """A copy of x with x[key] replaced by `values` (the functional form of x[key] = values)."""
    x = as_tensor(x, "x", "index_set")
    static, arrays = parse_key(x, key, "index_set")
    return bind(index_set_p, x, values, *arrays, key=static)


@reports_as("take")
def take(x, indices, axis: int | None = None):
    """Elements of x at integer `indices` along `axis` (of the flattened x when None).

    >>> rill.take(rill.tensor([10, 20, 30]), rill.tensor([2, 0]))
    tensor([30, 10])
    """
    from .shape import reshape
    x = as_tensor(x, "x", "take")
    indices = as_tensor(indices, "indices", "take")
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    a = normalize_axis(as_axis(axis, "take"), x.ndim)
    return getitem(x, (slice(None),) * a + (indices,))


# ---- along an axis -------------------------------------------------------------------------


def _along_axis_check(x, idx, axis, what):
    require(idx, "iu", "integer indices")
    if idx.ndim != x.ndim:
        raise ShapeError(f"{what} needs indices with as many axes as x: {idx.shape} vs {x.shape}")
    a = normalize_axis(axis, x.ndim)
    return a


def _take_along_infer(x, idx, *, axis):
    a = _along_axis_check(x, idx, axis, "take_along_axis")
    try:
        shape = broadcast_shapes(tuple(1 if i == a else s for i, s in enumerate(x.shape)),
                                 tuple(1 if i == a else s for i, s in enumerate(idx.shape)))
    except ShapeError:
        raise ShapeError(f"indices {idx.shape} do not broadcast with x {x.shape} off axis "
                         f"{axis}") from None
    return tuple(idx.shape[a] if i == a else s for i, s in enumerate(shape)), x.dtype


def _take_along_vjp(g, out, x, idx, axis):
    from .creation import zeros_like
    from .shape import broadcast_to
    a = normalize_axis(axis, x.ndim)
    if idx.shape != g.shape:
        idx = broadcast_to(idx, g.shape)
    return scatter_add(zeros_like(x), idx, g, axis=a), None


take_along_axis_p = primitive("take_along_axis", _take_along_infer, _take_along_vjp,
                              attrs={"axis": A.AXIS})


def take_along_axis(x, indices, axis: int):
    """out[..., i, ...] = x[..., indices[..., i, ...], ...] along `axis` (NumPy's)."""
    return bind(take_along_axis_p, x, indices, axis=as_axis(axis, "take_along_axis"))


def _scatter_add_infer(x, idx, updates, *, axis):
    a = _along_axis_check(x, idx, axis, "scatter_add")
    if idx.shape != updates.shape:
        raise ShapeError(f"indices {idx.shape} and updates {updates.shape} must have one shape")
    if any(i != a and s > t for i, (s, t) in enumerate(zip(idx.shape, x.shape))):
        raise ShapeError(f"indices {idx.shape} exceed x {x.shape} off axis {axis}")
    return x.shape, x.dtype


def _scatter_add_vjp(g, out, x, idx, updates, axis):
    return g, None, take_along_axis(g, idx, axis)


def _updates_like_x(args):
    x, idx, updates = promotion.lift(args)
    if updates.dtype is not x.dtype:
        updates = promotion.cast(updates, x.dtype)
    return x, idx, updates


scatter_add_p = primitive("scatter_add", _scatter_add_infer, _scatter_add_vjp,
                          normalize=_updates_like_x, attrs={"axis": A.AXIS})


def scatter_add(x, indices, updates, axis: int):
    """A copy of x with updates[..., i, ...] added at x[..., indices[..., i, ...], ...]."""
    return bind(scatter_add_p, x, indices, updates, axis=as_axis(axis, "scatter_add"))


@reports_as("one_hot")
def one_hot(indices, num_classes: int, dtype=None):
    """A trailing axis of length num_classes with a one at each index."""
    from .creation import arange
    from .elementwise import cast, equal
    from .shape import expand_dims
    from .arguments import as_dtype
    indices = as_tensor(indices, "indices", "one_hot")
    if not indices.dtype.is_integer:
        from ..errors import DTypeError
        raise DTypeError(f"one_hot needs integer indices, got {indices.dtype}", op="one_hot")
    num_classes = as_int(num_classes, "num_classes", "one_hot", 0)
    dtype = as_dtype(dtype, "one_hot", dt.default_float)
    hits = equal(expand_dims(indices, -1), arange(num_classes, device=indices.device))
    return cast(hits, dtype)
