"""The linalg extension's products and views of matrices, all composites of rill ops (so they
differentiate, capture and run on the gpu): matmul, matrix_transpose, vecdot, outer,
tensordot, cross, diagonal, trace.

`matrix_transpose`, `vecdot`, `tensordot` and `matmul` are also functions of the standard's
main namespace, with these signatures.
"""
from __future__ import annotations

from ..errors import ShapeError, reports_as
from ..ops import linalg as _ops
from ..ops.arguments import as_dtype, as_int, as_tensor
from ..ops.matrices import diagonal, stack_of_matrices as _stack_of_matrices
from ..ops.rules import require
from ..ops.shape import moveaxis, stack, swapaxes
from ..ops.elementwise import cast, conj
from ..ops.reduce import sum as sum_


# The standard's numeric dtypes: integers, real floating and complex (not bool).
_NUMERIC = "iufc"
_NUMERIC_WHAT = "numeric (integer, floating-point or complex) tensors"


def _trailing_axis(axis, x1, x2, op: str) -> int:
    """The standard counts the vector axis from the end (the leading axes broadcast), so it
    must lie in [-N, -1] with N the smaller ndim; a non-negative axis means the same thing
    only when both have the same ndim."""
    axis = as_int(axis, "axis", op)
    n = min(x1.ndim, x2.ndim)
    if axis >= 0 and x1.ndim == x2.ndim:
        axis -= x1.ndim
    if not -n <= axis <= -1:
        raise ShapeError(f"axis={axis} must be in [-{n}, -1] (counted from the last axis) for "
                         f"shapes {tuple(x1.shape)} and {tuple(x2.shape)}", op=op)
    return axis


@reports_as("matmul")
def matmul(x1, x2, /):
    """Matrix product: batches broadcast; a 1-d operand is a vector (the standard's matmul).

    >>> rill.linalg.matmul(rill.ones(2, 3), rill.ones(3)).shape
    (2,)
    """
    return _ops.matmul(as_tensor(x1, "x1", "matmul"), as_tensor(x2, "x2", "matmul"))


@reports_as("matrix_transpose")
def matrix_transpose(x, /):
    """The last two axes swapped: (..., M, N) -> (..., N, M).

    >>> rill.linalg.matrix_transpose(rill.ones(5, 2, 3)).shape
    (5, 3, 2)
    """
    x = as_tensor(x, "x", "matrix_transpose")
    _stack_of_matrices(x, "matrix_transpose")
    return swapaxes(x, -1, -2)


@reports_as("vecdot")
def vecdot(x1, x2, /, *, axis: int = -1):
    """Dot products of the vectors along `axis` (counted from the end), the other axes
    broadcast: sum(conj(x1) * x2, axis) in the promoted dtype (x1 is conjugated when complex).

    >>> rill.linalg.vecdot(rill.tensor([[1., 2.], [3., 4.]]), rill.tensor([1., 1.]))
    tensor([3., 7.])
    """
    x1, x2 = as_tensor(x1, "x1", "vecdot"), as_tensor(x2, "x2", "vecdot")
    for x in (x1, x2):
        require(x, _NUMERIC, _NUMERIC_WHAT)
        if x.ndim == 0:
            raise ShapeError("expected tensors of at least 1 dimension, got a 0-d tensor",
                             op="vecdot")
    axis = _trailing_axis(axis, x1, x2, "vecdot")
    if x1.shape[axis] != x2.shape[axis]:
        raise ShapeError(f"the vectors differ in length along axis {axis}: "
                         f"{tuple(x1.shape)} and {tuple(x2.shape)}", op="vecdot")
    product = (conj(x1) if x1.dtype.kind == "c" else x1) * x2
    out = sum_(product, axis=axis)
    return out if out.dtype is product.dtype else cast(out, product.dtype)  # ints: not int64


@reports_as("outer")
def outer(x1, x2, /):
    """x1[i] * x2[j] for two vectors (the standard takes 1-d inputs only).

    >>> rill.linalg.outer(rill.ones(2), rill.ones(3)).shape
    (2, 3)
    """
    x1, x2 = as_tensor(x1, "x1", "outer"), as_tensor(x2, "x2", "outer")
    if x1.ndim != 1 or x2.ndim != 1:
        raise ShapeError(f"expected two 1-d tensors, got shapes {tuple(x1.shape)} and "
                         f"{tuple(x2.shape)}", op="outer")
    return _ops.outer(x1, x2)


@reports_as("tensordot")
def tensordot(x1, x2, /, *, axes=2):
    """Sum over the last `axes` axes of x1 and the first `axes` of x2, or over two explicit
    sequences of axes (the standard's tensordot).

    >>> rill.linalg.tensordot(rill.ones(2, 3, 4), rill.ones(3, 4, 5)).shape
    (2, 5)
    """
    return _ops.tensordot(as_tensor(x1, "x1", "tensordot"), as_tensor(x2, "x2", "tensordot"),
                          axes)


@reports_as("cross")
def cross(x1, x2, /, *, axis: int = -1):
    """Cross products of 3-vectors along `axis` (counted from the end), the other axes
    broadcast.

    >>> rill.linalg.cross(rill.tensor([1., 0., 0.]), rill.tensor([0., 1., 0.]))
    tensor([0., 0., 1.])
    """
    x1, x2 = as_tensor(x1, "x1", "cross"), as_tensor(x2, "x2", "cross")
    for x in (x1, x2):
        require(x, _NUMERIC, _NUMERIC_WHAT)
        if x.ndim == 0:
            raise ShapeError("expected tensors of at least 1 dimension, got a 0-d tensor",
                             op="cross")
    axis = _trailing_axis(axis, x1, x2, "cross")
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ShapeError(f"axis {axis} must have length 3 in both, got shapes "
                         f"{tuple(x1.shape)} and {tuple(x2.shape)}", op="cross")
    a, b = moveaxis(x1, axis, -1), moveaxis(x2, axis, -1)
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    c = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return moveaxis(c, -1, axis)


@reports_as("trace")
def trace(x, /, *, offset: int = 0, dtype=None):
    """Sum of each matrix's diagonal (see `diagonal`), in `dtype` if given; integer and bool
    tensors sum to int64 (the default integer), floating ones keep their dtype.

    >>> rill.linalg.trace(rill.tensor([[1., 2.], [3., 4.]]))
    tensor(5.)
    """
    d = diagonal(x, offset=as_int(offset, "offset", "trace"))
    dtype = None if dtype is None else as_dtype(dtype, "trace")
    if dtype is not None and dtype is not d.dtype:
        d = cast(d, dtype)
    out = sum_(d, axis=-1)
    return out if dtype is None or out.dtype is dtype else cast(out, dtype)
