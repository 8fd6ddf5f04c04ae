"""Shape primitives and the composites built on them: reshape, transpose, broadcast_to,
concat, split, pad, flip, roll, tril/triu; squeeze, expand_dims, stack, flatten, swapaxes,
moveaxis, tile, repeat; the Array API's broadcast_shapes, broadcast_arrays, meshgrid,
unstack and diff.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentError, IndexingError, ShapeError
from ..errors import reports_as
from ..eager.bind import bind
from . import attrs as A
from . import batching
from .arguments import as_axes, as_axis, as_choice, as_int, as_ints, as_shape, as_tensor, \
    as_tensors, describe
from . import promotion
from .primitive import primitive
from .rules import broadcast_shapes as broadcast_shapes_of
from .rules import normalize_axes, normalize_axis, size_of
from ..tensor import Tensor


def _tensor(x, op: str):
    return as_tensor(x, "x", op)


# ---- reshape -------------------------------------------------------------------------------


def _resolve_shape(old, new) -> tuple:
    new = tuple(int(s) for s in new)
    unknown = [i for i, s in enumerate(new) if s == -1]
    if len(unknown) > 1 or any(s < -1 for s in new):
        raise ShapeError(f"bad target shape {new}: at most one -1 and no other negatives")
    total = size_of(old)
    if unknown:
        rest = size_of(s for s in new if s != -1)
        if rest == 0 or total % rest:
            raise ShapeError(f"cannot reshape {tuple(old)} ({total} elements) into {new}")
        new = tuple(total // rest if s == -1 else s for s in new)
    if size_of(new) != total:
        raise ShapeError(f"cannot reshape {tuple(old)} ({total} elements) into {new}")
    return new


def _reshape_infer(x, *, shape):
    return _resolve_shape(x.shape, shape), x.dtype


reshape_p = primitive("reshape", _reshape_infer,
                      lambda g, out, x, shape: (reshape(g, x.shape),),
                      attrs={"shape": A.TupleOf(A.Int(-1))}, batch=batching.reshape_rule)


def reshape(x, shape=None, *more, copy=None):
    """The same values in a new shape; one entry may be -1. The shape is one sequence (the
    Array API's `reshape(x, shape)`) or several ints (`reshape(x, 2, -1)`). Tensors are
    values, so a reshape never needs a copy; copy=True gives a new tensor even when the shape
    is unchanged.

    >>> rill.arange(6).reshape(2, -1).shape
    (2, 3)
    """
    if shape is None:
        raise ArgumentError("reshape needs a shape", op="reshape")
    if more:
        shape = (shape,) + more
    x = _tensor(x, "reshape")
    shape = as_ints(shape, "shape", "reshape")
    if copy is not None and copy is not True and copy is not False:
        raise ArgumentError(f"copy must be True, False or None, got {describe(copy)}",
                            op="reshape")
    if shape == x.shape:
        if copy:
            from .data_types import fresh
            return fresh(x)
        return x
    return bind(reshape_p, x, shape=shape)


# ---- transpose -----------------------------------------------------------------------------


def _transpose_infer(x, *, axes):
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"axes {axes} are not a permutation of the {x.ndim} axes of {x.shape}")
    return tuple(x.shape[a] for a in axes), x.dtype


def _transpose_vjp(g, out, x, axes):
    inverse = [0] * len(axes)
    for i, a in enumerate(axes):
        inverse[a] = i
    return (transpose(g, tuple(inverse)),)


transpose_p = primitive("transpose", _transpose_infer, _transpose_vjp,
                        attrs={"axes": A.TupleOf(A.INT)}, batch=batching.transpose_rule)


def transpose(x, axes=None, dim1=None):
    """Swap two axes (`transpose(x, 0, 1)`, as PyTorch), permute them (`transpose(x, (2, 0,
    1))`, as NumPy), or reverse them (`transpose(x)`). The forms cannot be confused: PyTorch's
    takes two ints, NumPy's one sequence."""
    x = _tensor(x, "transpose")
    return permuted_value(x, transpose_order(x, axes, dim1))


def permuted_value(x, order: tuple):
    """x with its axes in `order` (a permutation checked by transpose_order and its kin)."""
    if order == tuple(range(x.ndim)):
        return x
    return bind(transpose_p, x, axes=order)


def transpose_order(x, axes=None, dim1=None) -> tuple:
    """The axis order `transpose(x, axes, dim1)` gives (the view rule uses it too)."""
    if dim1 is not None:
        return swapaxes_order(x, axes, dim1)
    if isinstance(axes, int) and not isinstance(axes, bool):
        raise ArgumentError(f"transpose(x, {axes}) names one axis: pass two to swap them "
                            "(PyTorch's transpose(x, dim0, dim1)) or a full permutation",
                            op="transpose")
    if axes is None:
        return tuple(range(x.ndim))[::-1]
    axes = tuple(a % x.ndim if x.ndim and -x.ndim <= a < x.ndim else a
                 for a in as_ints(axes, "axes", "transpose"))
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"axes {axes} are not a permutation of the {x.ndim} axes of {x.shape}",
                         op="transpose")
    return axes


def permute_dims(x, axes):
    """transpose with the axes spelled out (the array-API name)."""
    return transpose(x, axes)


@reports_as("swapaxes")
def swapaxes(x, axis1: int, axis2: int):
    x = _tensor(x, "swapaxes")
    return permuted_value(x, swapaxes_order(x, axis1, axis2))


@reports_as("swapaxes")
def swapaxes_order(x, axis1: int, axis2: int) -> tuple:
    a = normalize_axis(as_axis(axis1, "swapaxes", "axis1"), x.ndim)
    b = normalize_axis(as_axis(axis2, "swapaxes", "axis2"), x.ndim)
    axes = list(range(x.ndim))
    axes[a], axes[b] = axes[b], axes[a]
    return tuple(axes)


@reports_as("moveaxis")
def moveaxis(x, source, destination):
    """Move axes to new positions; the others keep their order."""
    x = _tensor(x, "moveaxis")
    return permuted_value(x, moveaxis_order(x, source, destination))


@reports_as("moveaxis")
def moveaxis_order(x, source, destination) -> tuple:
    src = list(as_ints(source, "source", "moveaxis"))
    dst = list(as_ints(destination, "destination", "moveaxis"))
    if len(src) != len(dst):
        raise ShapeError(f"moveaxis: {len(src)} sources but {len(dst)} destinations", op="moveaxis")
    src = [normalize_axis(a, x.ndim) for a in src]
    dst = [normalize_axis(a, x.ndim) for a in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"moveaxis: repeated axes in source {source} or destination "
                         f"{destination}", op="moveaxis")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return tuple(order)


def moveaxis_many(x, axes):
    """The given axes moved to the end, in order (the others keep theirs)."""
    return transpose(x, [a for a in range(x.ndim) if a not in axes] + list(axes))


# ---- adding and removing unit axes ---------------------------------------------------------


@reports_as("squeeze")
def squeeze(x, axis=None):
    """Remove axes of length one (all of them, or those named, which must have length one)."""
    x = _tensor(x, "squeeze")
    if axis is None:
        axes = tuple(i for i, s in enumerate(x.shape) if s == 1)
    else:
        axes = normalize_axes(as_axes(axis, "squeeze"), x.ndim)
        for a in axes:
            if x.shape[a] != 1:
                raise ShapeError(f"cannot squeeze axis {a} of length {x.shape[a]} "
                                 f"(shape {x.shape})", op="squeeze")
    return reshape(x, tuple(s for i, s in enumerate(x.shape) if i not in axes))


@reports_as("expand_dims")
def expand_dims(x, axis=0):
    """Insert axes of length one at the given positions of the result: an axis in
    [-N-1, N] for an N-d x (-1 appends one, -N-1 prepends one), or a tuple of them.
    An axis outside that range is an IndexingError (an IndexError), as the standard asks."""
    x = _tensor(x, "expand_dims")
    axes = as_ints(axis, "axis", "expand_dims")
    ndim = x.ndim + len(axes)
    for a in axes:
        if not -ndim <= a < ndim:
            raise IndexingError(f"axis {a} is out of range for inserting into a tensor with "
                                f"{x.ndim} dimensions: expected one in [{-ndim}, {ndim - 1}]",
                                op="expand_dims")
    axes = normalize_axes(axes, ndim)
    dims = iter(x.shape)
    return reshape(x, tuple(1 if i in axes else next(dims) for i in range(ndim)))


@reports_as("flatten")
def flatten(x, start_axis: int = 0, end_axis: int = -1):
    """Merge axes start_axis..end_axis (inclusive) into one."""
    x = _tensor(x, "flatten")
    start_axis = as_axis(start_axis, "flatten", "start_axis")
    end_axis = as_axis(end_axis, "flatten", "end_axis")
    if x.ndim == 0:
        return reshape(x, (1,))
    s, e = normalize_axis(start_axis, x.ndim), normalize_axis(end_axis, x.ndim)
    if s > e:
        raise ShapeError(f"start_axis {start_axis} comes after end_axis {end_axis}", op="flatten")
    return reshape(x, x.shape[:s] + (size_of(x.shape[s:e + 1]),) + x.shape[e + 1:])


# ---- broadcast_to --------------------------------------------------------------------------


def _broadcast_to_infer(x, *, shape):
    lead = len(shape) - x.ndim
    if lead < 0 or any(s != 1 and s != shape[lead + i] for i, s in enumerate(x.shape)):
        raise ShapeError(f"cannot broadcast shape {x.shape} to {shape}")
    return shape, x.dtype


def _broadcast_to_vjp(g, out, x, shape):
    from .elementwise import sum_to_shape
    return (sum_to_shape(g, x.shape),)


broadcast_to_p = primitive("broadcast_to", _broadcast_to_infer, _broadcast_to_vjp,
                           attrs={"shape": A.SHAPE}, batch=batching.broadcast_to_rule)


def broadcast_to(x, shape):
    x = _tensor(x, "broadcast_to")
    shape = as_shape(shape, "broadcast_to")
    if shape == x.shape:
        return x
    return bind(broadcast_to_p, x, shape=shape)


# ---- concat, stack, split ------------------------------------------------------------------


def _concat_infer(*xs, axis):
    first = xs[0]
    if first.ndim == 0:
        raise ShapeError("cannot concatenate 0-d tensors; use stack")
    a = normalize_axis(axis, first.ndim)
    for x in xs[1:]:
        if x.ndim != first.ndim or any(s != t for i, (s, t) in enumerate(zip(x.shape, first.shape))
                                       if i != a):
            raise ShapeError(f"shapes {' and '.join(str(x.shape) for x in xs)} differ off "
                             f"axis {axis}")
    shape = list(first.shape)
    shape[a] = sum(x.shape[a] for x in xs)
    return tuple(shape), first.dtype


def _concat_vjp(g, out, *xs, axis):
    a = normalize_axis(axis, xs[0].ndim)
    return split(g, [x.shape[a] for x in xs], axis=a)


concat_p = primitive("concat", _concat_infer, _concat_vjp, normalize=promotion.common,
                     attrs={"axis": A.AXIS}, batch=batching.concat_rule)


def concat(tensors, axis: int | None = 0):
    """Join tensors along an existing axis (dtypes promote); axis=None joins them
    flattened, as the Array API's concat."""
    tensors = as_tensors(tensors, "tensors", "concat")
    if axis is None:
        tensors = [reshape(t, (-1,)) for t in tensors]
        axis = 0
    return bind(concat_p, *tensors, axis=as_axis(axis, "concat"))


@reports_as("stack")
def stack(tensors, axis: int = 0):
    """Join equally shaped tensors along a new axis."""
    tensors = as_tensors(tensors, "tensors", "stack")
    axis = as_axis(axis, "stack")
    normalize_axis(axis, tensors[0].ndim + 1)
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise ShapeError(f"stack needs equal shapes, got {' and '.join(map(str, shapes))}",
                         op="stack")
    return concat([expand_dims(t, axis) for t in tensors], axis=axis)


def _split_infer(x, *, sizes, axis):
    if not 0 <= axis < x.ndim or sum(sizes) != x.shape[axis]:
        raise ShapeError(f"sizes {sizes} along axis {axis} do not split shape {x.shape}")
    shapes = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        shapes.append((tuple(shape), x.dtype))
    return shapes


def _split_vjp(gs, outs, x, sizes, axis):
    return (concat(list(gs), axis=axis),)


split_p = primitive("split", _split_infer, _split_vjp, multiple_results=True,
                    attrs={"sizes": A.TupleOf(A.NonNegInt), "axis": A.NonNegInt},
                    batch=batching.split_rule)


@reports_as("split")
def split(x, split_size_or_sections, axis: int = 0):
    """Split along `axis` into pieces of `split_size` (an int: the last piece may be smaller)
    or of the given sizes (a list), as PyTorch's split. For N equal sections use rill.chunk.

    >>> [p.shape for p in rill.split(rill.zeros(5, 2), 2)]
    [(2, 2), (2, 2), (1, 2)]
    >>> [p.shape for p in rill.split(rill.zeros(5, 2), [2, 3])]
    [(2, 2), (3, 2)]
    """
    x = _tensor(x, "split")
    a = normalize_axis(as_axis(axis, "split"), x.ndim)
    n = x.shape[a]
    sizes = as_ints(split_size_or_sections, "split_size_or_sections", "split")
    if not isinstance(split_size_or_sections, (tuple, list)):
        k = sizes[0]
        if k <= 0:
            raise ShapeError(f"split_size must be positive, got {k}", op="split")
        sizes = (k,) * (n // k) + ((n % k,) if n % k else ())
        if not sizes:  # an empty axis splits into one empty piece, as PyTorch
            sizes = (0,)
    else:
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ShapeError(f"sizes {sizes} do not add up to the length {n} of axis {axis}",
                             op="split")
    return list(bind(split_p, x, sizes=sizes, axis=a))


# ---- pad, flip, roll -----------------------------------------------------------------------

_PAD_MODES = ("constant", "reflect", "edge")


def _pad_infer(x, *, widths, mode, value):
    if len(widths) != x.ndim:
        raise ShapeError(f"{len(widths)} pad widths for a tensor of shape {x.shape}")
    for (lo, hi), n in zip(widths, x.shape):
        if mode == "reflect" and (lo >= n or hi >= n) and (lo or hi):
            raise ShapeError(f"reflect padding ({lo}, {hi}) needs an axis longer than the pad, "
                             f"got length {n}")
        if mode == "edge" and n == 0 and (lo or hi):
            raise ShapeError("edge padding of an empty axis")
    return tuple(n + lo + hi for (lo, hi), n in zip(widths, x.shape)), x.dtype


def _int_tree(value, what: str = "pad_width"):
    """pad_width's nested sequences as nested tuples, every leaf a non-negative int."""
    if isinstance(value, (tuple, list)):
        return tuple(_int_tree(v, f"{what}[{i}]") for i, v in enumerate(value))
    return as_int(value, what, "pad", low=0, error=ShapeError)


def _pad_vjp(g, out, x, widths, mode, value):
    from .indexing import getitem, index_add
    from .creation import tensor, zeros
    for axis, ((lo, hi), n) in enumerate(zip(widths, x.shape)):
        if not (lo or hi):
            continue
        lead = (slice(None),) * axis
        if mode == "constant":
            g = getitem(g, lead + (slice(lo, lo + n),))
        else:
            # Each padded position copies some source position; send its gradient back there.
            source = np.pad(np.arange(n), (lo, hi), mode=mode)
            shape = g.shape[:axis] + (n,) + g.shape[axis + 1:]
            g = index_add(zeros(*shape, dtype=g.dtype, device=g.device),
                          lead + (tensor(source, device=g.device),), g)
    return (g,)


pad_p = primitive("pad", _pad_infer, _pad_vjp,
                  attrs=dict(widths=A.TupleOf(A.TupleOf(A.NonNegInt, length=2)),
                             mode=A.Choice(*_PAD_MODES), value=A.Scalar()), batch=batching.pad_rule)


@reports_as("pad")
def pad(x, pad_width, mode: str = "constant", value=0):
    """Pad with a constant, a reflection (without the edge) or the edge value.

    pad_width: an int, a (before, after) pair for every axis, or one pair per axis.
    """
    x = _tensor(x, "pad")
    mode = as_choice(mode, "mode", "pad", _PAD_MODES)
    if dt.scalar_kind(value) is None:
        raise ArgumentError(f"value must be a bool, int or float, got {describe(value)}",
                            op="pad")
    widths = _int_tree(pad_width)
    try:
        widths = np.broadcast_to(np.asarray(widths, dtype=np.int64), (x.ndim, 2))
    except ValueError:  # ragged, or a shape that does not broadcast to one pair per axis
        raise ShapeError(f"pad_width {pad_width!r} does not fit a tensor with {x.ndim} axes",
                         op="pad") from None
    if (widths < 0).any():
        raise ShapeError(f"pad widths must be non-negative, got {pad_width!r}", op="pad")
    widths = tuple((int(lo), int(hi)) for lo, hi in widths)
    return bind(pad_p, x, widths=widths, mode=mode, value=value)


def _flip_infer(x, *, axes):
    normalize_axes(axes, x.ndim)
    return x.shape, x.dtype


flip_p = primitive("flip", _flip_infer, lambda g, out, x, axes: (flip(g, axes),),
                   attrs={"axes": A.TupleOf(A.INT)}, batch=batching.along("axes"))


@reports_as("flip")
def flip(x, axis=None):
    """Reverse the order of elements along `axis` (all axes by default)."""
    x = _tensor(x, "flip")
    axis = as_axes(axis, "flip")
    return bind(flip_p, x, axes=normalize_axes(axis, x.ndim) if axis is not None else
                tuple(range(x.ndim)))


def _roll_vjp(g, out, x, shift, axes):
    return (roll(g, tuple(-s for s in shift) if isinstance(shift, tuple) else -shift, axes),)


def _roll_infer(x, *, shift, axes):
    if axes is not None:
        normalize_axes(axes, x.ndim)
        if isinstance(shift, tuple) and len(shift) != len(axes):
            raise ShapeError(f"{len(shift)} shifts for {len(axes)} axes")
    return x.shape, x.dtype


roll_p = primitive("roll", _roll_infer, _roll_vjp,
                   attrs=dict(shift=A.OneOf(A.INT, A.TupleOf(A.INT)),
                              axes=A.Optional(A.TupleOf(A.INT))),
                   batch=batching.along("axes", flatten_none=True))


@reports_as("roll")
def roll(x, shift, axis=None):
    """Shift elements cyclically along `axis` (the flattened tensor when axis is None)."""
    shift = as_ints(shift, "shift", "roll") if isinstance(shift, (tuple, list)) else \
        as_int(shift, "shift", "roll")
    axes = None if axis is None else as_ints(axis, "axis", "roll")
    return bind(roll_p, x, shift=shift, axes=axes)


# ---- tile, repeat --------------------------------------------------------------------------


@reports_as("tile")
def tile(x, reps):
    """Repeat the whole tensor `reps` times along each axis (NumPy's tile)."""
    x = _tensor(x, "tile")
    reps = as_ints(reps, "reps", "tile", low=0, error=ShapeError)
    ndim = max(len(reps), x.ndim)
    reps = (1,) * (ndim - len(reps)) + reps
    shape = (1,) * (ndim - x.ndim) + x.shape
    interleaved = reshape(x, tuple(v for s in shape for v in (1, s)))
    big = broadcast_to(interleaved, tuple(v for r, s in zip(reps, shape) for v in (r, s)))
    return reshape(big, tuple(r * s for r, s in zip(reps, shape)))


@reports_as("repeat")
def repeat(x, repeats, axis: int | None = None):
    """Repeat each element `repeats` times (an int, or one count per element) along `axis`."""
    from .creation import tensor
    from .indexing import take
    x = _tensor(x, "repeat")
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    a = normalize_axis(as_axis(axis, "repeat"), x.ndim)
    if isinstance(repeats, Tensor) and repeats.dtype.is_integer and repeats.ndim == 1:
        repeats = repeats.tolist()
    if isinstance(repeats, (tuple, list)):
        counts = np.array(as_ints(repeats, "repeats", "repeat", low=0, error=ShapeError),
                          dtype=np.int64)
        if len(counts) == 1:  # one count for every element, as the standard broadcasts (1,)
            counts = counts[0]
    else:
        counts = np.int64(as_int(repeats, "repeats", "repeat", low=0, error=ShapeError))
    if (counts < 0).any() or counts.ndim > 1 or (counts.ndim == 1 and len(counts) != x.shape[a]):
        raise ShapeError(f"repeats must be a non-negative int or one per element of axis {axis} "
                         f"(length {x.shape[a]}), got {repeats!r}", op="repeat")
    try:
        source = np.repeat(np.arange(x.shape[a]), counts)
    except (ValueError, MemoryError):  # counts of 2**62: no array holds the result
        raise ArgumentError(f"repeats {describe(repeats)} make more elements than an array "
                            "can hold", op="repeat") from None
    return take(x, tensor(source, device=x.device), axis=a)


# ---- triangles -----------------------------------------------------------------------------


def _tri_infer(x, *, k):
    if x.ndim < 2:
        raise ShapeError(f"needs at least 2 dimensions, got shape {x.shape}")
    return x.shape, x.dtype


tril_p = primitive("tril", _tri_infer, lambda g, out, x, k: (tril(g, k),), attrs={"k": A.INT},
                   batch=batching.leading)
triu_p = primitive("triu", _tri_infer, lambda g, out, x, k: (triu(g, k),), attrs={"k": A.INT},
                   batch=batching.leading)


def tril(x, k: int = 0):
    """Lower triangle of the last two axes (entries above the k-th diagonal zeroed)."""
    return bind(tril_p, x, k=as_int(k, "k", "tril"))


def triu(x, k: int = 0):
    """Upper triangle of the last two axes (entries below the k-th diagonal zeroed)."""
    return bind(triu_p, x, k=as_int(k, "k", "triu"))


def slice_axis(x, axis: int, start: int, stop: int):
    """x[..., start:stop, ...] along one axis."""
    from .indexing import getitem
    return getitem(x, (slice(None),) * axis + (slice(start, stop),))


# ---- the Array API's broadcasting, grids, unstack and diff ---------------------------------


def broadcast_shapes(*shapes) -> tuple:
    """The shape that arrays of these shapes broadcast to (a ShapeError if they do not).

    >>> broadcast_shapes((3, 1), (4,), ())
    (3, 4)
    """
    checked = [as_shape(s, "broadcast_shapes", f"shapes[{i}]") for i, s in enumerate(shapes)]
    if not checked:
        return ()
    try:
        return broadcast_shapes_of(*checked)
    except ShapeError as e:
        e.op = "broadcast_shapes"
        raise


@reports_as("broadcast_arrays")
def broadcast_arrays(*arrays) -> list:
    """Each tensor broadcast to the shape they share (a list, as the 2024.12 standard has it;
    each keeps its dtype). Gradients sum back over the broadcast axes."""
    tensors = [as_tensor(a, f"arrays[{i}]", "broadcast_arrays") for i, a in enumerate(arrays)]
    if not tensors:
        return []
    shape = broadcast_shapes_of(*(t.shape for t in tensors))
    return [broadcast_to(t, shape) for t in tensors]


_INDEXING = ("xy", "ij")


@reports_as("meshgrid")
def meshgrid(*arrays, indexing: str = "xy") -> list:
    """Coordinate grids from 1-d coordinate tensors: for lengths N1, N2, N3, ... each result
    has shape (N1, N2, N3, ...) with indexing='ij', and (N2, N1, N3, ...) with the default
    'xy' (Cartesian: the first two axes swapped). Returns a list, as the 2024.12 standard
    (note: the default is 'xy' where torch.meshgrid's is 'ij').

    >>> gx, gy = meshgrid(rill.arange(3), rill.arange(2))
    >>> gx.shape, gy.shape
    ((2, 3), (2, 3))
    """
    indexing = as_choice(indexing, "indexing", "meshgrid", _INDEXING)
    tensors = [as_tensor(a, f"arrays[{i}]", "meshgrid") for i, a in enumerate(arrays)]
    for i, t in enumerate(tensors):
        if t.ndim != 1:
            raise ShapeError(f"arrays[{i}] must be 1-d, got shape {t.shape}", op="meshgrid")
    n = len(tensors)
    # Where each input's values run in the result: axis i, but the first two swap for 'xy'.
    where = list(range(n))
    if indexing == "xy" and n >= 2:
        where[0], where[1] = 1, 0
    shape = [0] * n
    for t, axis in zip(tensors, where):
        shape[axis] = t.shape[0]
    out = []
    for t, axis in zip(tensors, where):
        lined_up = reshape(t, tuple(-1 if a == axis else 1 for a in range(n)))
        out.append(broadcast_to(lined_up, tuple(shape)))
    return out


def unstack(x, /, *, axis: int = 0) -> tuple:
    """The slices of x along `axis`, as a tuple of tensors with that axis removed.

    >>> [t.tolist() for t in unstack(rill.tensor([[1, 2], [3, 4]]), axis=1)]
    [[1, 3], [2, 4]]
    """
    x = _tensor(x, "unstack")
    try:
        a = normalize_axis(as_axis(axis, "unstack"), x.ndim)
    except ShapeError as e:
        e.op = "unstack"
        raise
    n = x.shape[a]
    if n == 0:
        return ()
    rest = x.shape[:a] + x.shape[a + 1:]
    return tuple(reshape(piece, rest) for piece in split(x, [1] * n, axis=a))


def _edge(values, x, axis, what):
    """prepend/append for diff: a tensor, or a number repeated along a length-1 axis."""
    t = as_tensor(values, what, "diff")
    if t.ndim == 0:
        t = broadcast_to(t, tuple(1 if i == axis else s for i, s in enumerate(x.shape)))
    return t


@reports_as("diff")
def diff(x, /, *, axis: int = -1, n: int = 1, prepend=None, append=None):
    """The n-th forward difference along `axis`: out[i] = x[i+1] - x[i], n times, after
    joining `prepend` and `append` to x along the axis (they must match x's shape off it;
    a number stands for a length-1 slice). The axis shrinks by n (to no less than 0). Bool
    tensors give x[i+1] != x[i], as NumPy.

    >>> diff(rill.tensor([1, 4, 9, 16]), n=2)
    tensor([2, 2])
    """
    from .elementwise import not_equal, subtract
    x = _tensor(x, "diff")
    if x.ndim == 0:
        raise ShapeError("diff needs a tensor with at least one axis, got a 0-d tensor",
                         op="diff")
    a = normalize_axis(as_axis(axis, "diff"), x.ndim)
    n = as_int(n, "n", "diff", low=0)
    pieces = [x]
    if prepend is not None:
        pieces.insert(0, _edge(prepend, x, a, "prepend"))
    if append is not None:
        pieces.append(_edge(append, x, a, "append"))
    if len(pieces) > 1:
        x = concat(pieces, axis=a)
    step = not_equal if x.dtype is dt.bool_ else subtract
    for _ in range(n):
        length = x.shape[a]
        if length == 0:
            break
        x = step(slice_axis(x, a, 1, length), slice_axis(x, a, 0, length - 1))
    return x
