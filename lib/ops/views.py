"""The one view rule: which results are views of their input, and what writing one does.

PyTorch's view ops share their input's memory, and programs write through them:
`w.data.normal_()`, `x[:, 0].zero_()`, `x.T[0] = 1`, an Array API library's
`xp.permute_dims(a, ...)[...] = ...`. rill tensors are values (an op never writes its
inputs' buffers), so a view here is a tensor that remembers its base and how to put a changed
value back: `_alias = (base, write_back, detached, strides)`. An in-place write to it (the
in-place methods, augmented assignment, item assignment: methods.write) writes the view,
then its base with `write_back(base, new_view)`, recursively up the chain, with gradients.

The rule (docs/DESIGN.md, "Names and meanings"):
- A function or method returns a view exactly when PyTorch's namesake does; for the Array
  API's own names, when the PyTorch function they stand for does (`permute_dims` is
  `permute`, `matrix_transpose` is `mT`, `expand_dims` is `unsqueeze`, `unstack` is `unbind`).
  view_spellings.py lists every such spelling; each is made by one of the kinds below.
- `reshape`, `flatten`, `ravel` and `contiguous` are views exactly when PyTorch's would be.
  That depends on PyTorch's strides, which rill does not have; `strides_of` simulates them
  (every non-view tensor is contiguous; each kind says how it maps strides), and
  `view_strides` is PyTorch's rule for when a reshape can keep them.
- Writing a view whose elements overlap (an expanded axis) is refused, as in PyTorch; so is
  writing a complex tensor's `real` or `imag` (rill cannot yet put one part back exactly).
- A later write to the base does not show in a view taken before (that needs shared
  buffers; docs/COMING_FROM_PYTORCH.md says so).
"""
from __future__ import annotations

import functools

from ..eager.context import is_grad_enabled
from ..tensor import Tensor
from ..eager.context import detached_value
from . import indexing, shape
from .methods import snapshot

EXPANDED = ("an in-place change of an expanded tensor would write one element many times; "
            "clone() it first")


# ---- PyTorch's strides, simulated ------------------------------------------------------------


# Both are pure functions of tuples, asked the same few questions on every step (a model's
# reshapes): remembered.
@functools.lru_cache(maxsize=1024)
def contiguous_strides(shape_: tuple) -> tuple:
    """The strides, in elements, of a row-major tensor of this shape (PyTorch's)."""
    strides, step = [], 1
    for size in reversed(shape_):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def strides_of(t: Tensor) -> tuple:
    """The strides PyTorch would give t: a view's from its kind, any other tensor's
    contiguous."""
    alias = t._alias
    return alias[3] if alias is not None else contiguous_strides(t.shape)


def is_contiguous(t: Tensor) -> bool:
    """PyTorch's is_contiguous: row-major, axes of length 1 being free."""
    expected = 1
    for size, stride in reversed(tuple(zip(t.shape, strides_of(t)))):
        if size == 0:
            return True
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


@functools.lru_cache(maxsize=1024)
def view_strides(old_shape: tuple, old_strides: tuple, new_shape: tuple):
    """The strides of `new_shape` as a view of a tensor with these shape and strides, or None
    when no view can hold it (then PyTorch's reshape copies). Each run of old axes laid out
    contiguously in memory must be covered by a run of new axes of the same element count."""
    if not old_shape:
        return (1,) * len(new_shape)
    numel = 1
    for s in old_shape:
        numel *= s
    if numel == 0:
        return tuple(old_strides) if tuple(old_shape) == tuple(new_shape) else \
            contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    base = old_strides[-1]  # the stride of the innermost axis of the current run
    run_numel = view_numel = 1
    for d in range(len(old_shape) - 1, -1, -1):
        run_numel *= old_shape[d]
        if d == 0 or (old_shape[d - 1] != 1 and old_strides[d - 1] != run_numel * base):
            while view_d >= 0 and (view_numel < run_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != run_numel:
                return None
            if d > 0:
                base, run_numel, view_numel = old_strides[d - 1], 1, 1
    return tuple(new_strides) if view_d == -1 else None


def _index_strides(shape_: tuple, strides: tuple, key) -> tuple:
    """The strides of x[key] for a basic key (ints, slices, None, Ellipsis)."""
    parts = key if isinstance(key, tuple) else (key,)
    named = sum(1 for k in parts if k is not None and k is not Ellipsis)
    out, d = [], 0
    for k in parts:
        if k is Ellipsis:
            for _ in range(len(shape_) - named):
                out.append(strides[d])
                d += 1
        elif k is None:
            out.append(1)
        elif isinstance(k, slice):
            out.append(strides[d] * k.indices(shape_[d])[2])
            d += 1
        else:
            d += 1
    return tuple(out) + tuple(strides[d:])


def _expand_strides(shape_: tuple, strides: tuple, target: tuple) -> tuple:
    """PyTorch's expand: an axis stretched from length 1 has stride 0."""
    lead = len(target) - len(shape_)
    out = [0] * len(target)
    for i in range(len(target) - 1, -1, -1):
        d = i - lead
        size = shape_[d] if d >= 0 else 1
        stride = strides[d] if d >= 0 else (target[i + 1] * out[i + 1] if i + 1 < len(target)
                                            else 1)
        out[i] = 0 if size != target[i] else stride
    return tuple(out)


def overlaps(t: Tensor) -> bool:
    """True when two elements of t are one element of memory (an expanded axis)."""
    return any(size > 1 and stride == 0 for size, stride in zip(t.shape, strides_of(t)))


# ---- making a view -------------------------------------------------------------------------


def make_view(out: Tensor, base: Tensor, write_back, strides: tuple,
              detached: bool = False) -> Tensor:
    """Mark `out` as a view of `base`. write_back(base_value, new_out) -> new base value, or a
    string: why writing it is refused."""
    if out is base:  # the tensor itself (an identity permutation, a reshape to its shape)
        return out
    out._alias = (base, write_back, detached, tuple(strides))
    return out


def refusal(t: Tensor):
    """Why an in-place write to t, or to a view it is taken from, is refused (None: it is not)."""
    while t._alias is not None:
        base, write_back = t._alias[:2]
        if isinstance(write_back, str):
            return write_back
        t = base
    return None


def source(base: Tensor) -> Tensor:
    """What a view op reads: a second handle on base's value when the tape records it, so
    that writing base through the view later does not look, to backward, like a change of
    the view op's input after its use."""
    if base._node is not None and is_grad_enabled():  # (a leaf's gradient goes to the leaf)
        return snapshot(base)
    return base


# ---- the kinds of view ---------------------------------------------------------------------


def _permute_back(inverse, base, new):
    return shape.permuted_value(new, inverse)


@functools.lru_cache(maxsize=256)
def _inverse(order: tuple) -> tuple:
    inverse = [0] * len(order)
    for i, a in enumerate(order):
        inverse[a] = i
    return tuple(inverse)


def permuted(x: Tensor, order: tuple) -> Tensor:
    """x's axes in `order` (transposes of every spelling)."""
    order = tuple(order)
    strides = strides_of(x)
    return make_view(shape.permuted_value(source(x), order), x,
                     functools.partial(_permute_back, _inverse(order)),
                     tuple([strides[a] for a in order]))


def _reshape_back(base, new):
    return shape.reshape(new, base.shape)


def reshaped(x: Tensor, make, copy_if_needed: bool = True) -> Tensor:
    """make(x's value) reshaped: a view when PyTorch's strides allow one; otherwise a copy
    (PyTorch's reshape, flatten) or, with copy_if_needed False (view, squeeze, unsqueeze,
    reshape(copy=False)), a view all the same: rill can always put a reshape back."""
    out = make(source(x))
    strides = view_strides(x.shape, strides_of(x), out.shape)
    if strides is None:
        if copy_if_needed:
            return out
        strides = contiguous_strides(out.shape)
    return make_view(out, x, _reshape_back, strides)


def _index_back(key, base, new):
    return indexing.index_set(base, key, new)


def basic_key(key) -> bool:
    """Ints, slices, None and Ellipsis only: the keys that make a view in PyTorch."""
    parts = key if isinstance(key, tuple) else (key,)
    for k in parts:
        if not (k is None or k is Ellipsis or isinstance(k, slice) or
                (isinstance(k, int) and not isinstance(k, bool))):
            return False
    return True


def indexed(x: Tensor, key) -> Tensor:
    """x[key] for a basic key (indexing, narrow, select)."""
    return piece_of(x, key, indexing.getitem(source(x), key))


def piece_of(x: Tensor, key, out: Tensor) -> Tensor:
    """Mark out, computed as x[key] (basic key), as that view (the pieces of split, chunk,
    unbind, computed together by one op)."""
    return make_view(out, x, functools.partial(_index_back, key),
                     _index_strides(x.shape, strides_of(x), key))


def _diagonal_back(offset, dims, base, new):
    moved = shape.moveaxis(base, dims, (-2, -1))
    n, m = moved.shape[-2:]
    flat = shape.reshape(moved, moved.shape[:-2] + (n * m,))
    if new.shape[-1]:
        start = offset if offset >= 0 else -offset * m
        step = slice(start, start + (new.shape[-1] - 1) * (m + 1) + 1, m + 1)
        flat = indexing.index_set(flat, (Ellipsis, step), new)
    return shape.moveaxis(shape.reshape(flat, moved.shape), (-2, -1), dims)


def diagonal(x: Tensor, offset: int, dim1: int, dim2: int) -> Tensor:
    """The diagonal of the matrices in axes dim1, dim2 (normalized, distinct), as a last
    axis."""
    from .matrices import diagonal as matrix_diagonal
    out = matrix_diagonal(shape.moveaxis(source(x), (dim1, dim2), (-2, -1)), offset=offset)
    strides = strides_of(x)
    kept = tuple(s for d, s in enumerate(strides) if d not in (dim1, dim2))
    return make_view(out, x, functools.partial(_diagonal_back, offset, (dim1, dim2)),
                     kept + (strides[dim1] + strides[dim2],))


def expanded_of(out: Tensor, x: Tensor, strides: tuple | None = None) -> Tensor:
    """Mark out, x broadcast (expand, broadcast_to, broadcast_arrays; meshgrid gives its own
    strides), as a view of x: writable where no element repeats, refused where one does
    (PyTorch refuses too)."""
    if strides is None:
        strides = _expand_strides(x.shape, strides_of(x), out.shape)
    repeats = any(size > 1 and stride == 0 for size, stride in zip(out.shape, strides))
    return make_view(out, x, EXPANDED if repeats else _reshape_back, strides)


def spread_strides(x: Tensor, ndim: int, axis: int) -> tuple:
    """The strides of 1-d x laid along `axis` of an ndim grid and repeated along the others
    (meshgrid)."""
    return tuple(strides_of(x)[0] if a == axis else 0 for a in range(ndim))


def _conj_back(base, new):
    from .elementwise import conj
    return conj(new)


def conjugated(x: Tensor) -> Tensor:
    """The complex conjugate, as a view (PyTorch's conj bit); a real tensor itself."""
    from .elementwise import conj
    if not x.dtype.is_complex:
        return conj(x)
    return make_view(conj(source(x)), x, _conj_back, strides_of(x))


def part_of(x: Tensor, which) -> Tensor:
    """real or imag of x: of a complex tensor a view that refuses writes; of a real one what
    rill.real / rill.imag give (x itself; zeros)."""
    out = which(source(x) if x.dtype.is_complex else x)
    if not x.dtype.is_complex:
        return out
    return make_view(out, x, f"an in-place change of {which.__name__} of a complex tensor "
                     f"would write that tensor's {which.__name__} part, which rill does "
                     "not do; build the new tensor out of place "
                     "(re + 1j * im)", tuple(2 * s for s in strides_of(x)))


def _take_new(base, new):
    return new


def same_values(x: Tensor, detached: bool) -> Tensor:
    """x's values in a new tensor that is a view of x (`.data` and `detach()` when detached:
    cut from the tape, and writes through them are not recorded; `rill.Tensor(x)` keeps
    the tape)."""
    if detached:
        out = detached_value(x)
    else:
        from .data_types import fresh
        out = fresh(source(x))
    return make_view(out, x, _take_new, strides_of(x), detached=detached)
