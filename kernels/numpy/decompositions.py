"""Decomposition CPU kernels (LAPACK through numpy.linalg), batched over leading axes.

numpy.linalg has no float16 routines: float16 computes in float32 and rounds back (bfloat16
is stored as float32 already and rounded by the caller). complex64/complex128 go to LAPACK's
complex routines; the real results (eigenvalues, singular values, logabsdet) come back in the
matching real dtype, as the primitives' rules declare. A matrix LAPACK cannot factor (a
singular one for inv/solve, one that is not positive definite for cholesky) is an
ArgumentError naming the op and, in a batch, the first such matrix.
"""
from __future__ import annotations

import numpy as np

from rill.errors import ArgumentError
from rill.linalg import primitives as _declared  # noqa: F401  (declares the primitives)
from rill.ops.primitive import register_kernels


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _real(dtype) -> np.dtype:
    """The dtype of a real result computed from `dtype` data (float64 for complex128)."""
    return np.empty(0, dtype).real.dtype


def _first_failing(x: np.ndarray, factor) -> str:
    """' (matrix [i, j] of the batch)' for the first matrix `factor` refuses, or ''."""
    if x.ndim == 2:
        return ""
    for index in np.ndindex(*x.shape[:-2]):
        try:
            factor(x[index])
        except np.linalg.LinAlgError:
            return f" (matrix {list(index)} of the batch)"
    return ""


def _cholesky(x):
    w = _wide(x)
    try:
        return np.linalg.cholesky(w).astype(x.dtype, copy=False)
    except np.linalg.LinAlgError:
        where = _first_failing(w, np.linalg.cholesky)
        kind = "Hermitian" if np.iscomplexobj(x) else "symmetric"
        raise ArgumentError(f"the matrix is not {kind} positive definite{where}; cholesky "
                            "needs one (check for a negative or zero eigenvalue)",
                            op="cholesky") from None


def _singular(x, op):
    where = _first_failing(x, np.linalg.inv)
    return ArgumentError(f"the matrix is singular{where}; {op} needs an invertible matrix "
                         "(rill.linalg.pinv handles singular ones)",
                         op=op)


def _inv(x):
    w = _wide(x)
    try:
        return np.linalg.inv(w).astype(x.dtype, copy=False)
    except np.linalg.LinAlgError:
        raise _singular(w, "inv") from None


def _solve(a, b):
    wa, wb = _wide(a), _wide(b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    try:
        out = np.linalg.solve(np.broadcast_to(wa, batch + a.shape[-2:]),
                              np.broadcast_to(wb, batch + b.shape[-2:]))
    except np.linalg.LinAlgError:
        raise _singular(wa, "solve") from None
    return out.astype(a.dtype, copy=False)


def _eigh(x):
    values, vectors = np.linalg.eigh(_wide(x))  # reads the lower triangle
    return values.astype(_real(x.dtype), copy=False), vectors.astype(x.dtype, copy=False)


def _qr(x, *, mode):
    q, r = np.linalg.qr(_wide(x), mode=mode)
    return q.astype(x.dtype, copy=False), r.astype(x.dtype, copy=False)


def _svd(x, *, full_matrices):
    u, s, vh = np.linalg.svd(_wide(x), full_matrices=full_matrices)
    return (u.astype(x.dtype, copy=False), s.astype(_real(x.dtype), copy=False),
            vh.astype(x.dtype, copy=False))


def _det(x):
    return np.asarray(np.linalg.det(_wide(x))).astype(x.dtype, copy=False)


def _slogdet(x):
    sign, logabsdet = np.linalg.slogdet(_wide(x))
    return (np.asarray(sign).astype(x.dtype, copy=False),
            np.asarray(logabsdet).astype(_real(x.dtype), copy=False))


register_kernels("cpu", {"cholesky": _cholesky, "eigh": _eigh, "qr": _qr, "svd": _svd,
                         "inv": _inv, "solve": _solve, "det": _det, "slogdet": _slogdet})
