"""Indexing: x[key], x[key] = v, take, take_along_axis, scatter_add, index_add, one_hot, and
PyTorch's family: gather, scatter, scatter_reduce, index_select, masked_fill, masked_select.

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
from ..errors import reports_as, ArgumentError, CaptureError, DTypeError, IndexingError, ShapeError
from ..eager.bind import bind
from ..tensor import Tensor
from . import attrs as A
from . import batching
from . import promotion
from . import creation as _creation, shape as _shape  # used at call time
from .arguments import as_axis, as_index, as_int, as_tensor
from .attrs import INT64_MAX, INT64_MIN
from .primitive import primitive
from .rules import broadcast_shapes, normalize_axis, require
from ..eager.context import current

ARRAY = ("array",)
NEW = ("new",)
ELLIPSIS = ("...",)


def _nonzero(mask: Tensor):
    host = np.asarray(mask.device.backend.to_host(mask._data))
    from .creation import tensor
    return [tensor(i.astype(np.int64), device=mask.device) for i in np.nonzero(host)]


def _mask_starts(x, key):
    """{position in key: the first axis of x it indexes} for the boolean masks in `key`
    (after an Ellipsis, axes are counted from the end)."""
    def width(k):
        if k is None:
            return 0
        if isinstance(k, Tensor) and k.dtype is dt.bool_:
            return k.ndim
        return 1
    starts, axis = {}, 0
    for i, k in enumerate(key):
        if k is Ellipsis:
            axis = x.ndim - sum(width(r) for r in key[i + 1:] if r is not Ellipsis)
            continue
        if isinstance(k, Tensor) and k.dtype is dt.bool_:
            starts[i] = axis
        axis += width(k)
    return starts


def _basic(key):
    """The static key of a key of Python ints, slices of ints, None and Ellipsis (what most
    indexing is: x[..., None], x[:, 0], x[1:]) without parse_key's general passes; None for
    any other key (parse_key's passes check it and say what is wrong)."""
    static = []
    for k in key:
        kind = type(k)
        if kind is int and INT64_MIN <= k <= INT64_MAX:
            static.append(("int", k))
        elif k is None:
            static.append(NEW)
        elif k is Ellipsis:
            static.append(ELLIPSIS)
        elif kind is slice and k.step != 0 and all(
                p is None or type(p) is int and INT64_MIN <= p <= INT64_MAX
                for p in (k.start, k.stop, k.step)):
            static.append(("slice", k.start, k.stop, k.step))
        else:
            return None
    return tuple(static)


def parse_key(x, key, op: str = "getitem"):
    """(static key, index tensors) for x[key]; IndexingError naming `op` for a bad key."""
    if not isinstance(key, tuple):
        key = (key,)
    static = _basic(key)
    if static is not None:
        return static, []
    key = tuple(_index_tensor(k, x, op) if isinstance(k, (list, np.ndarray)) else k
                for k in key)
    mask_starts = _mask_starts(x, key)
    static, arrays = [], []
    for position, k in enumerate(key):
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
                    raise IndexingError("a 0-d boolean index is not supported; use "
                                        "x[None] (True) or x[None][:0] (False)", op=op)
                start = mask_starts[position]
                covered = x.shape[start:start + t.ndim]
                if covered != t.shape:
                    raise IndexingError(f"a boolean index of shape {t.shape} does not match "
                                        f"the axes {start}..{start + t.ndim - 1} of shape "
                                        f"{covered} it indexes", op=op)
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
    # == rather than is: a key loaded from a saved graph is made of new, equal tuples
    consumed = sum(1 for k in static if k != NEW and k != ELLIPSIS)
    if consumed > ndim:
        raise IndexingError(f"too many indices ({consumed}) for a tensor with {ndim} dimensions")
    if sum(1 for k in static if k == ELLIPSIS) > 1:
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
        if k == NEW:
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
    has_arrays = any(k == ARRAY for k in key)  # equal, not identical: a loaded key is a new tuple
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
        if k == NEW:
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
        from .sparse_rows import SparseRows
        from .shape import reshape
        from .elementwise import where
        idx = reshape(arrays[0], (-1,))
        idx = where(idx < 0, idx + x.shape[0], idx)  # one spelling per row, for coalescing
        rows = reshape(g, (idx.size,) + x.shape[1:])
        return (SparseRows(idx, rows, x.shape),) + (None,) * len(arrays)
    return (bind(index_add_p, zeros_like(x), g, *arrays, key=key),) + (None,) * len(arrays)


getitem_p = primitive("getitem", _getitem_infer, _getitem_vjp, attrs={"key": A.INDEX_KEY},
                      batch=batching.getitem_rule)


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
                        attrs={"key": A.INDEX_KEY}, batch=batching.index_update_rule)
index_set_p = primitive("index_set", _update_infer, _index_set_vjp, normalize=_values_like_x,
                        attrs={"key": A.INDEX_KEY}, batch=batching.index_update_rule)


def getitem(x, key):
    """x[key] for ints, slices, None, Ellipsis, integer arrays and boolean masks."""
    x, key = _zero_d_masks(x, key)
    static, arrays = parse_key(x, key)
    return bind(getitem_p, x, *arrays, key=static)


def _is_zero_d_mask(k) -> bool:
    return isinstance(k, Tensor) and k.dtype is dt.bool_ and k.ndim == 0


def _zero_d_masks(x, key, kept=None):
    """A 0-d boolean index adds an axis of length 1 (True) or 0 (False), as NumPy and the
    standard say: x gets a new axis there, indexed by the integer array [0] or []. With
    `kept` set, every such axis is indexed by [0], as if the mask were True (the caller
    applies the masks' values itself)."""
    parts = key if isinstance(key, tuple) else (key,)
    if not any(_is_zero_d_mask(k) for k in parts):
        return x, key
    from .creation import tensor
    from .shape import expand_dims
    starts = _mask_starts(x, parts)
    out = []
    for position, k in enumerate(parts):
        if _is_zero_d_mask(k):
            axis = starts[position] + sum(1 for other in parts[:position]
                                          if _is_zero_d_mask(other))
            x = expand_dims(x, axis)
            k = tensor([0] if kept or bool(k) else [], dtype=dt.int64, device=x.device)
        out.append(k)
    return x, tuple(out)


def _update_zero_d_masks(x, key, values, op: str):
    """x[key] updated by index_add/index_set (`op`) where the key holds 0-d boolean masks,
    as getitem reads them: a new axis indexed by [0] (True) or [] (False), removed after.
    A captured graph cannot read a mask on the host: there every mask is taken as True and
    the update kept where all of them are (a False mask with an index that broadcasts only
    with length 1 is then accepted, where NumPy and PyTorch refuse it)."""
    from .shape import reshape
    parts = key if isinstance(key, tuple) else (key,)
    capturing = current().interpreter.capturing
    grown, grown_key = _zero_d_masks(x, parts, kept=capturing)
    static, arrays = parse_key(grown, grown_key, op)
    primitive_p = index_add_p if op == "index_add" else index_set_p
    updated = reshape(bind(primitive_p, grown, values, *arrays, key=static), x.shape)
    if not capturing:
        return updated
    from .elementwise import logical_and, where
    masks = [k for k in parts if _is_zero_d_mask(k)]
    keep = masks[0]
    for m in masks[1:]:
        keep = logical_and(keep, m)
    return where(keep, updated, x)


@reports_as("index_add")
def index_add(x, key, values):
    """A copy of x with `values` added at x[key]; repeated indices add up."""
    x = as_tensor(x, "x", "index_add")
    if any(_is_zero_d_mask(k) for k in (key if isinstance(key, tuple) else (key,))):
        return _update_zero_d_masks(x, key, values, "index_add")
    static, arrays = parse_key(x, key, "index_add")
    return bind(index_add_p, x, values, *arrays, key=static)


@reports_as("index_set")
def index_set(x, key, values):
    """A copy of x with x[key] replaced by `values` (the functional form of x[key] = values)."""
    x = as_tensor(x, "x", "index_set")
    if any(_is_zero_d_mask(k) for k in (key if isinstance(key, tuple) else (key,))):
        return _update_zero_d_masks(x, key, values, "index_set")
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
    a = normalize_axis(axis, x.ndim)
    if idx.shape != g.shape:
        idx = _shape.broadcast_to(idx, g.shape)
    return scatter_add(_creation.zeros_like(x), idx, g, axis=a), None


take_along_axis_p = primitive("take_along_axis", _take_along_infer, _take_along_vjp,
                              attrs={"axis": A.AXIS}, batch=batching.gather_along_rule)


def take_along_axis(x, indices, axis: int = -1):
    """out[..., i, ...] = x[..., indices[..., i, ...], ...] along `axis` (the last by
    default, as the Array API); x and indices broadcast off that axis; negative indices
    count from the end."""
    return bind(take_along_axis_p, x, indices, axis=as_axis(axis, "take_along_axis"))


def _scatter_add_infer(x, idx, updates, *, axis):
    """The rule of every scatter along an axis: x's shape, with one update per index."""
    a = _along_axis_check(x, idx, axis, "scatter")
    if idx.shape != updates.shape:
        raise ShapeError(f"indices {idx.shape} and updates {updates.shape} must have one shape")
    if any(i != a and s > t for i, (s, t) in enumerate(zip(idx.shape, x.shape))):
        raise ShapeError(f"indices {idx.shape} exceed x {x.shape} off axis {axis}")
    return x.shape, x.dtype


def _scatter_add_vjp(g, out, x, idx, updates, axis):
    return g, None, _gather_along(g, idx, axis)


def _updates_like_x(args):
    x, idx, updates = promotion.lift(args)
    if updates.dtype is not x.dtype:
        updates = promotion.cast(updates, x.dtype)
    return x, idx, updates


scatter_add_p = primitive("scatter_add", _scatter_add_infer, _scatter_add_vjp,
                          normalize=_updates_like_x, attrs={"axis": A.AXIS},
                          batch=batching.gather_along_rule)


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


# ---- PyTorch's gather / scatter family -----------------------------------------------------
# PyTorch lets an index be smaller than its tensor on the axes it does not index (only its
# leading block is used), where take_along_axis would broadcast. These functions cut the
# tensor to the index first, so the along-axis primitives see equal shapes.


def _leading_block(x, shape, axis=None):
    """x[:shape[0], :shape[1], ...] on every axis but `axis` (a no-op when it already fits)."""
    if axis is not None:
        axis %= len(shape)  # a negative axis names the same axis (scatter_add's vjp passes -1)
    if all(i == axis or s == t for i, (s, t) in enumerate(zip(shape, x.shape))):
        return x
    return getitem(x, tuple(slice(None) if i == axis else slice(0, s)
                            for i, s in enumerate(shape)))


def _gather_along(x, idx, axis):
    """torch.gather on checked operands: x's leading block, then take_along_axis."""
    return take_along_axis(_leading_block(x, idx.shape, axis), idx, axis)


def _torch_index(input, dim, index, op, src=None):
    """(input, axis, index[, src]) checked as torch's gather/scatter want them."""
    x = as_tensor(input, "input", op)
    idx = as_tensor(index, "index", op)
    if not idx.dtype.is_integer:
        from ..errors import DTypeError
        raise DTypeError(f"index must be an integer tensor, got {idx.dtype}", op=op)
    axis = normalize_axis(as_axis(dim, op, "dim"), x.ndim)
    if idx.ndim != x.ndim:
        raise ShapeError(f"index must have as many dimensions as input: index {idx.shape}, "
                         f"input {x.shape}", op=op)
    if any(i != axis and s > t for i, (s, t) in enumerate(zip(idx.shape, x.shape))):
        raise ShapeError(f"index {idx.shape} is larger than input {x.shape} off dim {axis}; "
                         f"only dim may be longer", op=op)
    if src is None:
        return x, axis, idx
    src = as_tensor(src, "src", op)
    if src.ndim != x.ndim or any(s > t for s, t in zip(idx.shape, src.shape)):
        raise ShapeError(f"src {src.shape} must have input's dimensions and be at least as "
                         f"large as index {idx.shape} in each", op=op)
    return x, axis, idx, _leading_block(src, idx.shape)


@reports_as("gather")
def gather(input, dim: int, index, *, sparse_grad: bool = False):
    """out[i][j][k] = input[index[i][j][k]][j][k] for dim 0 (and likewise for other dims), as
    torch.gather: index has input's dimensions and may be smaller off `dim`; the result has
    index's shape. `sparse_grad` is accepted for PyTorch's signature and changes nothing.

    >>> gather(rill.tensor([[1, 2], [3, 4]]), 1, rill.tensor([[0, 0], [1, 0]]))
    tensor([[1, 1],
            [4, 3]])
    """
    x, axis, idx = _torch_index(input, dim, index, "gather")
    return _gather_along(x, idx, axis)


@reports_as("index_select")
def index_select(input, dim: int, index):
    """The entries of input at the 1-d integer `index` along `dim` (torch.index_select)."""
    from .shape import reshape
    x = as_tensor(input, "input", "index_select")
    idx = as_tensor(index, "index", "index_select")
    if idx.ndim > 1:
        raise ShapeError(f"index must be 1-d (or 0-d), got shape {idx.shape}", op="index_select")
    if not idx.dtype.is_integer:
        from ..errors import DTypeError
        raise DTypeError(f"index must be an integer tensor, got {idx.dtype}", op="index_select")
    return take(x, reshape(idx, (-1,)), axis=as_axis(dim, "index_select", "dim"))


# scatter: out = input, then out[..., index[p], ...] = src[p] along dim. Its own primitive
# because the gradient follows PyTorch: every src entry gets the cotangent at its target,
# duplicates included (index_set gives it only to the write that survived).

def _scatter_vjp(g, out, x, idx, src, axis):
    from .creation import zeros_like
    return bind(scatter_p, g, idx, zeros_like(src), axis=axis), None, _gather_along(g, idx, axis)


scatter_p = primitive("scatter", _scatter_add_infer, _scatter_vjp, normalize=_updates_like_x,
                      attrs={"axis": A.AXIS}, batch=batching.gather_along_rule)

_SCATTER_MODES = {"add": "sum", "multiply": "prod"}


@reports_as("scatter")
def scatter(input, dim: int, index, src=None, reduce: str | None = None, *, value=None):
    """A copy of input with src[p] written at index[p] along dim (torch.scatter); `value` (or a
    number as src) writes one number. With duplicate indices one of the writes lands (the
    last on the CPU). reduce='add'/'multiply' is scatter_reduce's 'sum'/'prod'.

    >>> scatter(rill.zeros(2, 3), 1, rill.tensor([[2], [0]]), 5.0)
    tensor([[0., 0., 5.],
            [5., 0., 0.]])
    """
    from .creation import full
    if (src is None) == (value is None):
        raise ArgumentError("give src (a tensor) or value (a number), exactly one", op="scatter")
    if value is None and not isinstance(src, Tensor) and np.ndim(src) == 0:
        src, value = None, src  # torch.scatter(x, dim, index, 2.0) writes a number
    if value is not None:
        from .arguments import as_number
        x, axis, idx = _torch_index(input, dim, index, "scatter")
        src = full(idx.shape, as_number(value, "value", "scatter"), dtype=x.dtype,
                   device=x.device)
    else:
        x, axis, idx, src = _torch_index(input, dim, index, "scatter", src)
    if reduce is not None:
        from .arguments import as_choice
        mode = _SCATTER_MODES[as_choice(reduce, "reduce", "scatter", tuple(_SCATTER_MODES))]
        return scatter_reduce(x, axis, idx, src, mode)
    return bind(scatter_p, x, idx, src, axis=axis)


# scatter_reduce: sum and mean are scatter_add composites; prod, amax and amin have a
# primitive (NumPy's ufunc.at on the CPU, atomics on the gpu) whose gradient is PyTorch's:
# prod's is the product of every other contributor (zeros counted apart, never 0/0); amax's
# and amin's go evenly to every contributor equal to the result. As in PyTorch, that count
# includes input's entry when it equals the result even with include_self=False.

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _hits(x, idx, axis):
    """How many index entries land on each position of x (int64, x's shape)."""
    from .creation import ones, zeros
    return scatter_add(zeros(x.shape, dtype=dt.int64, device=x.device), idx,
                       ones(idx.shape, dtype=dt.int64, device=x.device), axis=axis)


def _scatter_reduce_infer(x, idx, src, *, axis, reduce, include_self):
    require(x, "biuf", "a numeric tensor")
    return _scatter_add_infer(x, idx, src, axis=axis)


def _scatter_reduce_vjp(g, out, x, idx, src, *, axis, reduce, include_self):
    from .elementwise import equal, where
    hit = None if include_self else _hits(x, idx, axis) > 0
    if reduce == "prod":
        gx, gs = _prod_grads(g, x, idx, src, axis, include_self, hit)
    else:
        x_tie = equal(x, out).astype(g.dtype)
        src_tie = equal(src, _gather_along(out, idx, axis)).astype(g.dtype)
        share = g / scatter_add(x_tie, idx, src_tie, axis=axis)
        gx, gs = share * x_tie, _gather_along(share, idx, axis) * src_tie
    if hit is not None:
        gx = where(hit, 0.0, gx)
    return gx, None, gs


def _prod_grads(g, x, idx, src, axis, include_self, hit):
    """Cotangents of a scattered product: g times the product of the other contributors."""
    from .elementwise import equal, where
    def nonzero(v):
        return where(equal(v, 0), 1, v)
    def zero(v):
        return equal(v, 0).astype(dt.int64)
    x_zero = zero(x) if hit is None else where(hit, 0, zero(x))
    nonzero_prod = bind(scatter_reduce_p, nonzero(x), idx, nonzero(src), axis=axis,
                        reduce="prod", include_self=include_self)
    zeros = scatter_add(x_zero, idx, zero(src), axis=axis)
    def others(prods, counts, v):  # the product of the rest; 0 if a zero is among them
        return where(equal(counts - zero(v), 0), prods / nonzero(v), 0)
    gx = g * others(nonzero_prod, zeros, x)
    gs = _gather_along(g, idx, axis) * others(_gather_along(nonzero_prod, idx, axis),
                                              _gather_along(zeros, idx, axis), src)
    return gx, gs


scatter_reduce_p = primitive(
    "scatter_reduce", _scatter_reduce_infer, _scatter_reduce_vjp, normalize=_updates_like_x,
    save_output=True, attrs={"axis": A.AXIS, "reduce": A.Choice("prod", "amax", "amin"),
                             "include_self": A.BOOL}, batch=batching.gather_along_rule)


@reports_as("scatter_reduce")
def scatter_reduce(input, dim: int, index, src, reduce: str, *, include_self: bool = True):
    """Reduce src into a copy of input along dim (torch.scatter_reduce): out[..., index[p],
    ...] combines src[p] with every other src entry aimed there, and with input's own entry
    unless include_self=False. reduce: 'sum', 'prod', 'mean', 'amax' or 'amin'; positions no
    index names keep input. 'mean' divides by the number of contributors (floor division for
    integers).

    >>> x = rill.tensor([1., 2., 3.])
    >>> scatter_reduce(x, 0, rill.tensor([0, 0, 2]), rill.tensor([5., 7., 1.]), "amax")
    tensor([7., 2., 3.])
    """
    from .arguments import as_bool, as_choice
    from .elementwise import floor_divide, maximum, where
    x, axis, idx, src = _torch_index(input, dim, index, "scatter_reduce", src)
    reduce = as_choice(reduce, "reduce", "scatter_reduce", REDUCTIONS)
    include_self = as_bool(include_self, "include_self", "scatter_reduce")
    if reduce not in ("sum", "mean"):
        return bind(scatter_reduce_p, x, idx, src, axis=axis, reduce=reduce,
                    include_self=include_self)
    hits = _hits(x, idx, axis)
    base = x if include_self else where(hits > 0, 0, x)
    total = scatter_add(base, idx, src, axis=axis)
    if reduce == "sum":
        return total
    count = hits + 1 if include_self else maximum(hits, 1)  # untouched positions keep input
    if x.dtype.is_floating:
        return total / count.astype(x.dtype)
    return floor_divide(total, count).astype(x.dtype)


@reports_as("masked_fill")
def masked_fill(input, mask, value):
    """A copy of input with `value` (a number or a 0-d tensor, cast to input's dtype) where
    the boolean `mask`, broadcast to input's shape, is true (torch.masked_fill)."""
    from .arguments import as_number
    from .elementwise import where
    x = as_tensor(input, "input", "masked_fill")
    mask = _bool_mask(mask, x, "masked_fill")
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise ShapeError(f"value must be a number or a 0-d tensor, got shape {value.shape}",
                             op="masked_fill")
        value = value.astype(x.dtype) if value.dtype is not x.dtype else value
    else:
        from .creation import tensor
        value = tensor(as_number(value, "value", "masked_fill"), device=x.device).astype(x.dtype)
    return where(mask, value, x)


def _bool_mask(mask, x, op):
    mask = as_tensor(mask, "mask", op)
    if mask.dtype is not dt.bool_:
        from ..errors import DTypeError
        raise DTypeError(f"mask must be a bool tensor, got {mask.dtype}", op=op)
    if broadcast_shapes(x.shape, mask.shape) != tuple(x.shape):
        raise ShapeError(f"mask {mask.shape} does not broadcast to input's shape {x.shape}",
                         op=op)
    return mask


@reports_as("masked_select")
def masked_select(input, mask):
    """The 1-d tensor of input's entries where the bool `mask` is true (both broadcast
    together; torch.masked_select). Its length is data, so a captured graph cannot hold it:
    under capture it raises CaptureError; use masked_fill or rill.where there."""
    from .shape import broadcast_to
    x = as_tensor(input, "input", "masked_select")
    mask = as_tensor(mask, "mask", "masked_select")
    if mask.dtype is not dt.bool_:
        raise DTypeError(f"mask must be a bool tensor, got {mask.dtype}", op="masked_select")
    if current().interpreter.capturing:
        raise CaptureError("masked_select's length depends on the mask's values, which a "
                           "captured graph (fixed shapes) cannot hold; use masked_fill or "
                           "rill.where to keep the shape, or call it outside the capture",
                           op="masked_select")
    shape = broadcast_shapes(x.shape, mask.shape)
    return getitem(broadcast_to(x, shape), broadcast_to(mask, shape))
