"""inv, solve, det, slogdet, matrix_power, and pinv and matrix_rank over the SVD."""
from __future__ import annotations

from typing import NamedTuple

from ..dtypes import finfo, real_of
from ..errors import ArgumentError, reports_as
from ..eager.bind import bind
from ..ops.arguments import as_int, as_number, as_tensor, describe
from ..tensor import Tensor
from .primitives import (adjoint, det_p, floating, inv_p, matrices, require_kernel,
                         slogdet_p, solve_p, svd_p)
from ..ops.creation import eye, zeros
from ..ops.shape import broadcast_to
from ..ops.reduce import max as max_, sum as sum_
from ..ops.elementwise import where


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


def _input(x, prim, op: str, what: str = "x"):
    x = as_tensor(x, what, op)
    require_kernel(prim, x, op)
    return x


@reports_as("inv")
def inv(x, /):
    """The inverse of each square matrix (LU); an ArgumentError naming the first singular
    matrix of the batch.

    >>> rill.linalg.inv(rill.tensor([[2., 0.], [0., 4.]]))
    tensor([[0.5 , 0.  ],
            [0.  , 0.25]])
    """
    return bind(inv_p, _input(x, inv_p, "inv"))


@reports_as("solve")
def solve(x1, x2, /):
    """X with x1 @ X = x2, for square x1 (..., M, M). x2 of shape (M,) is one vector (the
    result is (..., M)); otherwise x2 is (..., M, K), its batch broadcasting against x1's.
    An ArgumentError if x1 is singular.

    >>> rill.linalg.solve(rill.tensor([[2., 0.], [0., 4.]]), rill.tensor([2., 2.]))
    tensor([1. , 0.5])
    """
    a, b = _input(x1, solve_p, "solve", "x1"), _input(x2, solve_p, "solve", "x2")
    if b.ndim == 1:  # the standard: a 1-d x2 only is a vector
        return bind(solve_p, a, b[:, None])[..., 0]
    return bind(solve_p, a, b)


@reports_as("det")
def det(x, /):
    """The determinant of each square matrix: (..., M, M) -> (...)."""
    return bind(det_p, _input(x, det_p, "det"))


@reports_as("slogdet")
def slogdet(x, /):
    """(sign, logabsdet) with det = sign * exp(logabsdet), without over- or underflow; a
    singular matrix gives (0, -inf). For complex x the sign is complex of modulus 1 and
    logabsdet is real (float64 for complex128).

    >>> rill.linalg.slogdet(rill.tensor([[-2., 0.], [0., 1.]])).sign
    tensor(-1.)
    """
    return SlogdetResult(*bind(slogdet_p, _input(x, slogdet_p, "slogdet")))


@reports_as("matrix_power")
def matrix_power(x, n, /):
    """x multiplied by itself n times (repeated squaring): the identity for n = 0, powers of
    inv(x) for n < 0.

    >>> rill.linalg.matrix_power(rill.tensor([[1., 1.], [0., 1.]]), 3)
    tensor([[1., 3.],
            [0., 1.]])
    """
    x = as_tensor(x, "x", "matrix_power")
    n = as_int(n, "n", "matrix_power")
    matrices(x, square=True)
    if n == 0:
        return broadcast_to(eye(x.shape[-1], dtype=x.dtype, device=x.device), x.shape)
    base = inv(x) if n < 0 else x
    n = abs(n)
    result = None
    while True:
        if n & 1:
            result = base if result is None else result @ base
        n >>= 1
        if not n:
            return result
        base = base @ base


def _cutoff(s, x, rtol, op: str):
    """rtol * the largest singular value, shaped (..., 1) to compare with s; the standard's
    default rtol is max(M, N) * eps of x's dtype. rtol may be a number or a tensor that
    broadcasts against x's batch shape."""
    if rtol is None:
        rtol = max(x.shape[-2:]) * finfo(real_of(x.dtype)).eps
    elif isinstance(rtol, Tensor):
        if rtol.dtype.kind not in "iuf":
            raise ArgumentError(f"rtol must be a real tensor, got {rtol.dtype}", op=op)
        rtol = rtol[..., None]
    else:
        try:
            rtol = as_number(rtol, "rtol", op)
        except ArgumentError:
            raise ArgumentError(f"rtol must be None, a number or a tensor, got "
                                f"{describe(rtol)}", op=op) from None
    return rtol * max_(s, axis=-1, keepdims=True)


@reports_as("pinv")
def pinv(x, /, *, rtol=None):
    """The Moore-Penrose pseudo-inverse (..., N, M) from the SVD (V diag(1/S) U^H), singular
    values at or below
    rtol * the largest treated as zero (see `matrix_rank` for rtol's default).

    >>> rill.linalg.pinv(rill.tensor([[2., 0.], [0., 0.]]))
    tensor([[0.5, 0. ],
            [0. , 0. ]])
    """
    x = _input(x, svd_p, "pinv")
    floating(x)
    matrices(x)
    u, s, vh = bind(svd_p, x, full_matrices=False)
    if s.shape[-1] == 0:
        return adjoint(x)
    keep = s > _cutoff(s, x, rtol, "pinv")
    # where(keep, 1 / s, 0) with a safe divisor, so a dropped zero sends no nan back.
    s_inv = where(keep, 1.0 / where(keep, s, 1.0), 0.0)
    return (adjoint(vh) * s_inv[..., None, :]) @ adjoint(u)


@reports_as("matrix_rank")
def matrix_rank(x, /, *, rtol=None):
    """How many singular values exceed rtol * the largest, per matrix (int64); rtol defaults
    to max(M, N) * eps of x's dtype.

    >>> rill.linalg.matrix_rank(rill.tensor([[1., 2.], [2., 4.]]))
    tensor(1)
    """
    x = _input(x, svd_p, "matrix_rank")
    floating(x)
    matrices(x)
    if min(x.shape[-2:]) == 0:
        from ..dtypes import int64
        return zeros(*x.shape[:-2], dtype=int64, device=x.device)
    s = bind(svd_p, x, full_matrices=False)[1]
    return sum_(s > _cutoff(s, x, rtol, "matrix_rank"), axis=-1)
