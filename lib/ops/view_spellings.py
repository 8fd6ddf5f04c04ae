"""Every public spelling that returns a view, each made by one kind of ops/views.py.

PyTorch's view functions and methods, and the Array API's names for the same operations,
all live here, so that the view rule (ops/views.py, docs/DESIGN.md "Names and meanings")
holds for every spelling: `rill.permute_dims(x, ...)`, `x.permute(...)`, `x.T` and
`rill.matrix_transpose(x)` write through alike. FUNCTIONS, LINALG, METHODS and PROPERTIES
list them (tests/eager/test_view_rule.py checks each against PyTorch); rill's namespace,
rill.linalg and Tensor take them from here. Library code inside rill calls the value ops of
ops/shapes.py, which make no views.
"""
from __future__ import annotations

from ..errors import ArgumentError, ShapeError
from ..tensor import Tensor
from . import elementwise as E
from . import indexing
from . import shape as shapes
from . import torch_functions as T
from . import views as V
from .arguments import as_int, as_ints, as_tensor
from .matrices import stack_of_matrices
from .rules import normalize_axis


def _tensor(x, op: str) -> Tensor:
    return as_tensor(x, "x", op)


# ---- reshapes ------------------------------------------------------------------------------


def reshape(x, shape=None, *more, copy=None):
    """The same values in a new shape (one entry may be -1), as one sequence or as several
    ints. A view of x when PyTorch's reshape gives one (x contiguous, as every tensor that is
    not a transposed or sliced view is), else a copy; copy=True always copies, copy=False
    always gives a view (rill can put any reshape back).

    >>> x = rill.zeros(2, 3)
    >>> rill.reshape(x, (-1,))[4] = 1.0
    >>> x.tolist()
    [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    x = _tensor(x, "reshape")
    if copy is not None and copy is not False:
        return shapes.reshape(x, shape, *more, copy=copy)
    return V.reshaped(x, lambda v: shapes.reshape(v, shape, *more), copy_if_needed=copy is None)


def squeeze(x, axis=None):
    """x without axes of length one (all, or those named): a view of x."""
    x = _tensor(x, "squeeze")
    return V.reshaped(x, lambda v: shapes.squeeze(v, axis), copy_if_needed=False)


def expand_dims(x, axis=0):
    """x with axes of length one inserted at `axis` (the result's positions): a view of x."""
    x = _tensor(x, "expand_dims")
    return V.reshaped(x, lambda v: shapes.expand_dims(v, axis), copy_if_needed=False)


def unsqueeze(input, dim: int):  # noqa: A002 - PyTorch's names
    """`input` with a new axis of length 1 at `dim` (rill.expand_dims): a view."""
    input = as_tensor(input, "input", "unsqueeze")
    return V.reshaped(input, lambda v: shapes.expand_dims(v, as_int(dim, "dim", "unsqueeze")),
                      copy_if_needed=False)


def flatten(x, start_axis: int = 0, end_axis: int = -1):
    """Axes start_axis..end_axis merged into one: a view when PyTorch's would be, else a
    copy."""
    x = _tensor(x, "flatten")
    return V.reshaped(x, lambda v: shapes.flatten(v, start_axis, end_axis))


def ravel(input):  # noqa: A002
    """The elements in one axis (PyTorch's ravel): a view when possible, else a copy."""
    input = as_tensor(input, "input", "ravel")
    return V.reshaped(input, lambda v: shapes.reshape(v, (-1,)))


def unflatten(input, dim: int, sizes):  # noqa: A002
    """Axis `dim` split into axes of `sizes` (one may be -1): a view."""
    input = as_tensor(input, "input", "unflatten")
    d = normalize_axis(as_int(dim, "dim", "unflatten"), input.ndim)
    sizes = as_ints(sizes, "sizes", "unflatten")
    if not sizes:
        raise ShapeError("unflatten needs at least one size", op="unflatten")
    target = input.shape[:d] + tuple(sizes) + input.shape[d + 1:]
    try:
        shapes._resolve_shape((input.shape[d],), sizes)
    except ShapeError:
        raise ShapeError(f"sizes {tuple(sizes)} do not make the length {input.shape[d]} of "
                         f"axis {d}", op="unflatten") from None
    return V.reshaped(input, lambda v: shapes.reshape(v, target), copy_if_needed=False)


# ---- transposes ----------------------------------------------------------------------------


def transpose(x, axes=None, dim1=None):
    """Swap two axes (`transpose(x, 0, 1)`, PyTorch), permute them (`transpose(x, (2, 0,
    1))`, NumPy) or reverse them (`transpose(x)`): a view of x."""
    x = _tensor(x, "transpose")
    return V.permuted(x, shapes.transpose_order(x, axes, dim1))


def permute_dims(x, axes):
    """x with its axes in the order `axes` (the Array API's name; PyTorch's permute): a view."""
    x = _tensor(x, "permute_dims")
    return V.permuted(x, shapes.transpose_order(x, axes))


def swapaxes(x, axis1: int, axis2: int):
    """Two axes swapped: a view."""
    x = _tensor(x, "swapaxes")
    return V.permuted(x, shapes.swapaxes_order(x, axis1, axis2))


def swapdims(input, dim0: int, dim1: int):  # noqa: A002
    """PyTorch's name for swapaxes."""
    return swapaxes(input, dim0, dim1)


def moveaxis(x, source, destination):
    """Axes moved to new positions, the others keeping their order: a view."""
    x = _tensor(x, "moveaxis")
    return V.permuted(x, shapes.moveaxis_order(x, source, destination))


def movedim(input, source, destination):  # noqa: A002
    """PyTorch's name for moveaxis."""
    return moveaxis(input, source, destination)


def matrix_transpose(x, /):
    """The last two axes swapped, (..., M, N) -> (..., N, M): a view (PyTorch's x.mT)."""
    x = _tensor(x, "matrix_transpose")
    stack_of_matrices(x, "matrix_transpose")
    return V.permuted(x, shapes.swapaxes_order(x, -1, -2))


def t(input):  # noqa: A002
    """The transpose of a tensor of at most 2 dimensions (PyTorch's t): a view."""
    input = as_tensor(input, "input", "t")
    if input.ndim > 2:
        raise ShapeError(f"t() is for tensors of at most 2 dimensions, got shape {input.shape}; "
                         "use x.transpose(dim0, dim1) or x.mT", op="t")
    return V.permuted(input, tuple(range(input.ndim))[::-1])


def adjoint(input):  # noqa: A002
    """The conjugate transpose of the last two axes (x.mH): a view."""
    return conj(matrix_transpose(input))


def conj(x):
    """The complex conjugate: a view of a complex x (writing it writes x conjugated); a real
    x itself."""
    return V.conjugated(_tensor(x, "conj"))


def real(x):
    """The real part: of a complex x a view that refuses in-place writes; a real x itself."""
    return V.part_of(_tensor(x, "real"), E.real)


def imag(x):
    """The imaginary part: of a complex x a view that refuses in-place writes; zeros for a
    real x."""
    return V.part_of(_tensor(x, "imag"), E.imag)


# ---- slices and pieces ---------------------------------------------------------------------


def narrow(input, dim: int, start: int, length: int):  # noqa: A002
    """input[..., start:start + length, ...] along dim: a view."""
    input = as_tensor(input, "input", "narrow")
    out = T.narrow(V.source(input), dim, start, length)
    a = normalize_axis(as_int(dim, "dim", "narrow"), input.ndim)
    start = as_int(start, "start", "narrow")
    begin = start + input.shape[a] if start < 0 else start
    return V.piece_of(input, (slice(None),) * a + (slice(begin, begin + length),), out)


def select(input, dim: int, index: int):  # noqa: A002
    """input[..., index, ...] along dim, that axis removed: a view."""
    input = as_tensor(input, "input", "select")
    a = normalize_axis(as_int(dim, "dim", "select"), input.ndim)
    i = as_int(index, "index", "select")
    if not -input.shape[a] <= i < input.shape[a]:
        raise ShapeError(f"select index {i} is out of range for axis {a} of length "
                         f"{input.shape[a]}", op="select")
    return V.indexed(input, (slice(None),) * a + (i % input.shape[a],))


def _pieces(x, pieces, a: int) -> list:
    out, at = [], 0
    for p in pieces:
        n = p.shape[a]
        out.append(V.piece_of(x, (slice(None),) * a + (slice(at, at + n),), p))
        at += n
    return out


def split(x, split_size_or_sections, axis: int = 0):
    """Pieces of `split_size` along axis (the last may be smaller) or of the given sizes, as
    PyTorch's split; each a view of x.

    >>> [p.shape for p in rill.split(rill.zeros(5, 2), 2)]
    [(2, 2), (2, 2), (1, 2)]
    """
    x = _tensor(x, "split")
    pieces = shapes.split(V.source(x), split_size_or_sections, axis)
    return _pieces(x, pieces, normalize_axis(as_int(axis, "axis", "split"), x.ndim))


def chunk(input, chunks: int, dim: int = 0):  # noqa: A002
    """`chunks` pieces along dim, each of ceil(n / chunks) but the last (fewer when fewer
    cover the axis, as PyTorch); each a view."""
    input = as_tensor(input, "input", "chunk")
    pieces = T.chunk(V.source(input), chunks, dim)
    return _pieces(input, pieces, normalize_axis(as_int(dim, "dim", "chunk"), input.ndim))


def _slices(x, pieces, a: int) -> tuple:
    return tuple(V.piece_of(x, (slice(None),) * a + (i,), p) for i, p in enumerate(pieces))


def unbind(input, dim: int = 0):  # noqa: A002
    """The slices along dim, that axis removed, as a tuple of views."""
    input = as_tensor(input, "input", "unbind")
    pieces = T.unbind(V.source(input), dim)
    return _slices(input, pieces, normalize_axis(as_int(dim, "dim", "unbind"), input.ndim))


def unstack(x, /, *, axis: int = 0) -> tuple:
    """The slices of x along `axis` (the Array API's unbind), as a tuple of views.

    >>> [t.tolist() for t in rill.unstack(rill.tensor([[1, 2], [3, 4]]), axis=1)]
    [[1, 3], [2, 4]]
    """
    x = _tensor(x, "unstack")
    pieces = shapes.unstack(V.source(x), axis=axis)
    return _slices(x, pieces, normalize_axis(as_int(axis, "axis", "unstack"), x.ndim))


def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1):  # noqa: A002
    """The diagonal of the matrices in axes dim1, dim2, as a last axis (offset > 0 above the
    main diagonal): a view, as PyTorch's."""
    input = as_tensor(input, "input", "diagonal")
    a = normalize_axis(as_int(dim1, "dim1", "diagonal"), input.ndim)
    b = normalize_axis(as_int(dim2, "dim2", "diagonal"), input.ndim)
    if a == b:
        raise ShapeError(f"diagonal needs two different axes, got {dim1} and {dim2}",
                         op="diagonal")
    return V.diagonal(input, as_int(offset, "offset", "diagonal"), a, b)


def linalg_diagonal(x, /, *, offset: int = 0):
    """The diagonal of each matrix in the last two axes (..., M, N) -> (..., K): a view."""
    x = _tensor(x, "diagonal")
    stack_of_matrices(x, "diagonal")
    return V.diagonal(x, as_int(offset, "offset", "diagonal"), x.ndim - 2, x.ndim - 1)


# ---- broadcasts: views whose repeated elements cannot be written ---------------------------


def broadcast_to(x, shape):
    """x broadcast to `shape`: a view; writing it is refused where an element repeats."""
    x = _tensor(x, "broadcast_to")
    return V.expanded_of(shapes.broadcast_to(V.source(x), shape), x)


def broadcast_arrays(*arrays) -> list:
    """Each tensor broadcast to the shape they share (a list), each a view of its input."""
    tensors = [as_tensor(a, f"arrays[{i}]", "broadcast_arrays") for i, a in enumerate(arrays)]
    outs = shapes.broadcast_arrays(*(V.source(t) for t in tensors))
    return [V.expanded_of(o, t) for o, t in zip(outs, tensors)]


def meshgrid(*arrays, indexing: str = "xy") -> list:
    """Coordinate grids from 1-d tensors (the Array API's: a list, 'xy' by default where
    torch.meshgrid's is 'ij'); each grid a view of its input.

    >>> gx, gy = rill.meshgrid(rill.arange(3), rill.arange(2))
    >>> gx.shape, gy.shape
    ((2, 3), (2, 3))
    """
    tensors = [as_tensor(a, f"arrays[{i}]", "meshgrid") for i, a in enumerate(arrays)]
    outs = shapes.meshgrid(*(V.source(t) for t in tensors), indexing=indexing)
    where = list(range(len(outs)))  # the axis each input's values run along
    if indexing == "xy" and len(outs) >= 2:
        where[0], where[1] = 1, 0
    return [V.expanded_of(o, t, V.spread_strides(t, o.ndim, a))
            for o, t, a in zip(outs, tensors, where)]


# ---- methods -------------------------------------------------------------------------------


def _sizes(args) -> tuple:
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def _getitem(self, key):
    if not V.basic_key(key):
        return indexing.getitem(self, key)  # advanced indexing copies, in PyTorch too
    return V.indexed(self, key)


def view(self, *shape_or_dtype):
    """The same elements in a new shape (-1 inferred), a view: in-place changes of it change
    this tensor too."""
    if len(shape_or_dtype) == 1 and not isinstance(shape_or_dtype[0], (int, tuple, list)):
        raise ArgumentError("view(dtype) reinterprets bits, which rill does not do; use "
                            ".to(dtype) to convert values", op="view")
    return V.reshaped(self, lambda v: shapes.reshape(v, *shape_or_dtype), copy_if_needed=False)


def view_as(self, other):
    return view(self, other.shape)


def _reshape_method(self, *new_shape):
    """The same elements in a new shape: a view when PyTorch's would be one, else a copy."""
    return V.reshaped(self, lambda v: shapes.reshape(v, *new_shape))


def reshape_as(self, other):
    return _reshape_method(self, other.shape)


def _flatten_method(self, start_dim: int = 0, end_dim: int = -1):
    return flatten(self, start_dim, end_dim)


def _squeeze_method(self, dim=None):
    return squeeze(self, dim)


def _transpose_method(self, *axes):
    """`x.transpose(dim0, dim1)` swaps two axes (PyTorch); `x.transpose((2, 0, 1))`
    permutes; `x.transpose()` reverses."""
    if len(axes) == 2:
        return V.permuted(self, shapes.swapaxes_order(self, *axes))
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        return V.permuted(self, shapes.transpose_order(self, axes[0]))
    if not axes:
        return V.permuted(self, shapes.transpose_order(self))
    raise ArgumentError(f"transpose takes two axes to swap or one permutation, got {axes}",
                        op="transpose")


def _permute_method(self, *dims):
    """The axes in the given order (`x.permute(2, 0, 1)` or `x.permute((2, 0, 1))`)."""
    dims = _sizes(dims)
    order = [as_int(d, "dims", "permute") for d in dims]
    if len(order) != self.ndim or sorted(normalize_axis(d, self.ndim) for d in order) != \
            list(range(self.ndim)):
        raise ShapeError(f"permute needs each of the {self.ndim} axes once, got {dims}",
                         op="permute")
    return V.permuted(self, tuple(normalize_axis(d, self.ndim) for d in order))


def _split_method(self, split_size, dim: int = 0):
    return split(self, split_size, dim)


def expand(self, *sizes):
    """Broadcast to `sizes` (-1 keeps an axis): a view whose in-place changes are refused
    where elements repeat, as they would write one element many times."""
    sizes = _sizes(sizes)
    lead = len(sizes) - self.ndim
    if lead < 0:
        raise ShapeError(f"expand to {len(sizes)} axes cannot drop axes of shape {self.shape}",
                         op="expand")
    target = tuple(self.shape[i - lead] if s == -1 and i >= lead else s
                   for i, s in enumerate(sizes))
    return V.expanded_of(shapes.broadcast_to(V.source(self), target), self)


def expand_as(self, other):
    return expand(self, other.shape)


def contiguous(self, memory_format=None):
    """The tensor itself when PyTorch's would be contiguous; else a copy (no view)."""
    if V.is_contiguous(self):
        return self
    from .data_types import fresh
    return fresh(self)


def is_contiguous(self, memory_format=None) -> bool:
    """PyTorch's answer: False for a transposed, strided or expanded view."""
    return V.is_contiguous(self)


def _data(self) -> Tensor:
    """The values without autodiff history, a view: in-place methods on it change this
    tensor, as PyTorch's `.data` (under no_grad)."""
    return V.same_values(self, detached=True)


def detach(self) -> Tensor:
    """The same values cut from the tape, a view (PyTorch's detach): an in-place change of
    it changes this tensor too, unrecorded, and a backward through an op that took this
    tensor before the change refuses, as PyTorch's does.

    >>> x = rill.zeros(2)
    >>> _ = x.detach().add_(1.0)
    >>> x.tolist()
    [1.0, 1.0]
    """
    return V.same_values(self, detached=True)


def _set_data(self, value) -> None:
    from .torch_methods import _set_data as set_data
    set_data(self, value)


def _T(self):
    """The transpose of a matrix (at most 2 dimensions): a view. For more dimensions the
    standard asks for an error and PyTorch has deprecated reversing them: say which axes
    (`x.mT`, `x.permute(...)`, `rill.permute_dims`)."""
    if self.ndim > 2:
        raise ShapeError(f"x.T is for tensors of at most 2 dimensions, got shape "
                         f"{self.shape}; use x.mT (the last two axes) or "
                         f"rill.permute_dims(x, axes)", op="T")
    return V.permuted(self, tuple(range(self.ndim))[::-1])


def _H(self):
    """The conjugate transpose of a matrix (2 dimensions): a view."""
    if self.ndim != 2:
        raise ShapeError(f"x.H is for matrices (2 dimensions), got shape {self.shape}; use "
                         "x.mH for a stack of matrices", op="H")
    return conj(_T(self))


FUNCTIONS = {  # rill.<name>
    "reshape": reshape, "squeeze": squeeze, "expand_dims": expand_dims,
    "unsqueeze": unsqueeze, "flatten": flatten, "ravel": ravel, "unflatten": unflatten,
    "transpose": transpose, "permute_dims": permute_dims, "permute": permute_dims,
    "swapaxes": swapaxes, "swapdims": swapdims, "moveaxis": moveaxis, "movedim": movedim,
    "matrix_transpose": matrix_transpose, "t": t, "adjoint": adjoint, "conj": conj,
    "real": real, "imag": imag, "narrow": narrow, "select": select, "split": split,
    "chunk": chunk, "unbind": unbind, "unstack": unstack, "diagonal": diagonal,
    "broadcast_to": broadcast_to, "broadcast_arrays": broadcast_arrays, "meshgrid": meshgrid,
}

LINALG = {"matrix_transpose": matrix_transpose, "diagonal": linalg_diagonal}  # rill.linalg.<name>

METHODS = {  # x.<name>(...)
    "__getitem__": _getitem, "view": view, "view_as": view_as, "reshape": _reshape_method,
    "reshape_as": reshape_as, "flatten": _flatten_method, "ravel": ravel,
    "unflatten": unflatten, "squeeze": _squeeze_method, "unsqueeze": unsqueeze,
    "expand_dims": expand_dims, "transpose": _transpose_method, "permute": _permute_method,
    "permute_dims": permute_dims, "swapaxes": swapaxes, "swapdims": swapdims,
    "moveaxis": moveaxis, "movedim": movedim, "t": t, "adjoint": adjoint, "conj": conj,
    "narrow": narrow, "select": select, "diagonal": diagonal, "split": _split_method,
    "chunk": chunk, "unbind": unbind, "expand": expand, "expand_as": expand_as,
    "broadcast_to": broadcast_to, "contiguous": contiguous, "detach": detach,
}

PROPERTIES = {  # x.<name>
    "T": property(_T), "mT": property(matrix_transpose, doc="The last two axes swapped: a view."),
    "H": property(_H),
    "mH": property(adjoint, doc="The conjugate transpose of the last two axes: a view."),
    "data": property(_data, _set_data), "real": property(real, doc=real.__doc__),
    "imag": property(imag, doc=imag.__doc__),
}

# Not views, listed so that the census is complete: they return the tensor itself when it
# is already what they ask for, in PyTorch as here (contiguous, above, is the one that
# copies otherwise).
SAME_TENSOR = ("x.to(x.dtype)", "x.float() on float32 (and each cast method on its own "
               "dtype)", "x.type(x.dtype)", "x.cpu() on the cpu", "rill.asarray(x)",
               "rill.as_tensor(x)", "rill.positive(x)", "+x", "x.requires_grad_()")


def install() -> None:
    from .keywords import accept_torch_keywords
    for name, fn in METHODS.items():
        setattr(Tensor, name, fn if name.startswith("__") else accept_torch_keywords(fn))
    for name, prop in PROPERTIES.items():
        setattr(Tensor, name, prop)
    Tensor.is_contiguous = is_contiguous
