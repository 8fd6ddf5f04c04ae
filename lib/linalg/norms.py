"""vector_norm and matrix_norm, composites of rill's norm and reductions (matrix_norm's 2, -2
and 'nuc' go through the singular values, so they run on the CPU only)."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentError, reports_as
from ..ops.arguments import as_axes, as_bool, as_tensor, describe
from .primitives import floating, matrices
from ..ops.elementwise import abs as abs_
from ..ops.reduce import max as max_, min as min_, norm, sum as sum_

def _number_ord(ord, op: str):
    if isinstance(ord, (bool, np.bool_)) or not isinstance(ord, (int, float, np.number)) or \
            isinstance(ord, np.complexfloating):
        raise ArgumentError(f"ord must be a number, inf or -inf, got {describe(ord)}", op=op)
    return float(ord) if isinstance(ord, np.floating) else int(ord) if isinstance(
        ord, np.integer) else ord


@reports_as("vector_norm")
def vector_norm(x, /, *, axis=None, keepdims: bool = False, ord=2):
    """The p-norm (sum |x|^ord)^(1/ord) over `axis` (an int, a tuple of axes taken as one
    flattened vector, or None for all): ord inf is max |x|, -inf min |x|, 0 the count of
    non-zeros; any other real ord, negative ones too. Real for complex x (|x| the modulus).

    >>> rill.linalg.vector_norm(rill.tensor([3., -4.]))
    tensor(5.)
    """
    x = as_tensor(x, "x", "vector_norm")
    floating(x)
    ord = _number_ord(ord, "vector_norm")
    if x.dtype.kind == "c":  # the norm of the moduli, real (float64 for complex128)
        x = abs_(x)
    return norm(x, ord=ord, axis=as_axes(axis, "vector_norm"),
                keepdims=as_bool(keepdims, "keepdims", "vector_norm"))


@reports_as("matrix_norm")
def matrix_norm(x, /, *, keepdims: bool = False, ord="fro"):
    """The norm of each matrix in the last two axes: 'fro' (Frobenius), 'nuc' (sum of
    singular values), 1 / -1 (largest / smallest column sum of |x|), inf / -inf (rows), 2 /
    -2 (largest / smallest singular value). Real for complex x (|x| the modulus).

    >>> rill.linalg.matrix_norm(rill.tensor([[1., -2.], [3., 4.]]), ord=1)
    tensor(6.)
    """
    from .decompositions import svdvals
    x = as_tensor(x, "x", "matrix_norm")
    keepdims = as_bool(keepdims, "keepdims", "matrix_norm")
    if isinstance(ord, str):
        known = ord in ("fro", "nuc")
    else:
        known = isinstance(ord, (int, float)) and not isinstance(ord, bool) and \
            ord in (1, -1, 2, -2, math.inf, -math.inf)
    if not known:
        raise ArgumentError("ord must be one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf, got "
                            f"{describe(ord)}", op="matrix_norm")
    floating(x)
    matrices(x)
    if ord == "fro":
        return norm(abs_(x) if x.dtype.kind == "c" else x, ord=2, axis=(-2, -1),
                    keepdims=keepdims)
    if ord in ("nuc", 2, -2):
        s = svdvals(x)
        out = sum_(s, axis=-1) if ord == "nuc" else (max_ if ord == 2 else min_)(s, axis=-1)
    else:
        # 1 / -1: sums down each column; inf / -inf: along each row.
        sums = sum_(abs_(x), axis=-2 if abs(ord) == 1 else -1)
        out = (max_ if ord > 0 else min_)(sums, axis=-1)
    return out[..., None, None] if keepdims else out
