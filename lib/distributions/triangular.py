"""Cholesky factors and lower-triangular solves as rill composites, for MultivariateNormal.

rill has no linear-algebra decompositions yet; these loop over the d columns (rows) of a
batch of d x d matrices with matmuls and masks, so autodiff, capture and the gpu come from
the ops used. Each step is O(d^2) per matrix: meant for the small event sizes of
distributions, not for large solves.
"""
from __future__ import annotations

import numpy as np

from ..ops import elementwise as E, reduce as R
from ..ops.creation import tensor


def _unit(d, i, dtype, device):
    e = np.zeros((d, 1))
    e[i] = 1.0
    return tensor(e, dtype=dtype, device=device)


def cholesky(a):
    """The lower-triangular L with L @ L^T == a, for a batch (..., d, d) of symmetric
    positive-definite matrices (only the lower triangle of a is read)."""
    d = a.shape[-1]
    rows = tensor(np.arange(d)[:, None], device=a.device)
    low = a * 0.0
    for j in range(d):
        e = _unit(d, j, a.dtype, a.device)
        # column j of a, less what the columns already found contribute: low @ low[j]^T
        column = a @ e - low @ (low.mT @ e)
        pivot = E.sqrt(R.sum(column * e, axis=-2, keepdims=True))
        column = E.where(rows >= j, column / pivot, 0.0)
        low = low + column @ e.mT
    return low


def solve_lower(low, b):
    """x with low @ x == b for lower-triangular `low` (..., d, d) and b (..., d, m),
    batch dimensions broadcast; forward substitution one row at a time."""
    d = low.shape[-1]
    x = None
    for i in range(d):
        e = _unit(d, i, low.dtype, low.device)
        row = e.mT @ b if x is None else e.mT @ b - (e.mT @ low) @ x
        diag = (e.mT @ low) @ e
        step = e @ (row / diag)
        x = step if x is None else x + step
    return x


def diagonal(a):
    """The diagonal (..., d) of a batch of square matrices (..., d, d)."""
    d = a.shape[-1]
    return R.sum(a * tensor(np.eye(d), dtype=a.dtype, device=a.device), axis=-1)
