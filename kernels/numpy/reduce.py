"""Reduction and scan CPU kernels. float16 accumulates in float32; integers in int64."""
from __future__ import annotations

import math

import numpy as np

from rill.kernels.native import build as native
from rill.ops.primitive import register_kernels

from .elementwise import quiet
from .parallel import blas_at_one_thread

# The compiled modules (kernels/native) these kernels may load: built ahead of a captured
# step's first call (build.prefetch).
COMPILED = ('reduce',)


def _accumulator(x):
    if x.dtype.kind in "biu":
        return np.int64
    return np.float32 if x.dtype == np.float16 else x.dtype


def _result(value, like_dtype):
    return np.asarray(value).astype(like_dtype, copy=False)


# Sums over every axis but one (a bias's gradient: (N, C, H, W) summed to (C,)) from this
# many elements run as two matrix-vector products.
KEEP_ONE_AXIS_MIN = 1 << 16
# ... and sums over every axis but the last from this many by the compiled kernel, where there
# is one (kernels/native/reduce.c; a linear layer's (512, 64) bias gradient: 12 -> 4 us).
KEEP_ONE_AXIS_NATIVE_MIN = 1 << 10


def _sum_keeping_one_axis(x, axis):
    """x summed over every axis but one, for float32/float64 C-contiguous x, as BLAS
    matrix-vector products; None where that does not apply. NumPy's sum over axes (0, 2, 3)
    walks short strided runs (at (32, 32, 32, 32) float32: 120 us against 35 us); BLAS sums
    with vector accumulators, as accurate as NumPy's pairwise sums along a row."""
    if x.dtype not in (np.float32, np.float64) or x.size < KEEP_ONE_AXIS_NATIVE_MIN or \
            not x.flags.c_contiguous or axis is None:
        return None
    axes = _axes_of(axis, x.ndim)
    kept = set(range(x.ndim)) - axes
    if len(kept) != 1 or len(axes) != x.ndim - 1:
        return None
    k = kept.pop()
    outer, inner = math.prod(x.shape[:k]), math.prod(x.shape[k + 1:])
    compiled = native.for_arrays("reduce", x) if inner == 1 else None
    if compiled is not None:
        sums = np.empty(x.shape[k])
        compiled.column_sums(x, sums, outer, x.shape[k], x.dtype == np.float64)
        return sums.astype(x.dtype, copy=False)
    if x.size < KEEP_ONE_AXIS_MIN:
        return None
    rows = x.reshape(outer * x.shape[k], inner)
    # At one BLAS thread: a threaded GEMV's workers keep spinning after it and take a core
    # from the kernels that follow (measured in the eager CNN step: 24.6 -> 35.6 ms).
    with blas_at_one_thread():
        if inner > 1:
            rows = rows @ np.ones(inner, x.dtype)
        return np.ones(outer, x.dtype) @ rows.reshape(outer, x.shape[k])


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _sum(x, axis, keepdims):
    if x.size < KEEP_ONE_AXIS_NATIVE_MIN and x.dtype in _FLOATS:
        # a small float sum (a rule's sum_to_shape, a bias gradient, a loss): the reduction
        # alone, in its own dtype (the checks below cost as much as it does)
        out = np.add.reduce(x, axis=axis, keepdims=keepdims)
        return out if type(out) is np.ndarray else np.asarray(out)
    fast = _sum_keeping_one_axis(x, axis)
    if fast is not None:
        if keepdims:
            fast = fast.reshape([s if a not in _axes_of(axis, x.ndim) else 1
                                 for a, s in enumerate(x.shape)])
        return fast
    acc = _accumulator(x)
    # np.sum's own reduction, without its dispatch layer (~0.9 us: a small op's whole cost)
    out = np.add.reduce(x, axis=axis, keepdims=keepdims, dtype=acc)
    return _result(out, np.int64 if x.dtype.kind in "biu" else x.dtype)


def _axes_of(axis, ndim):
    return {a % ndim for a in (axis if isinstance(axis, tuple) else (axis,))}


def _prod(x, axis, keepdims):
    acc = _accumulator(x)
    out = np.multiply.reduce(x, axis=axis, keepdims=keepdims, dtype=acc)
    return _result(out, np.int64 if x.dtype.kind in "biu" else x.dtype)


def _mean(x, axis, keepdims):
    return _result(np.mean(x, axis=axis, keepdims=keepdims, dtype=_accumulator(x)), x.dtype)


def _var(x, axis, keepdims, correction):
    return _result(np.var(x, axis=axis, keepdims=keepdims, ddof=correction,
                          dtype=_accumulator(x)), x.dtype)


def _logsumexp(x, axis, keepdims):
    work = x.astype(_accumulator(x), copy=False)
    m = np.max(work, axis=axis, keepdims=True) if work.size else np.zeros(
        [1] * work.ndim, work.dtype)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(work - m), axis=axis, keepdims=True)) + m
    if not keepdims:
        out = np.squeeze(out, axis=axis if axis is not None else tuple(range(x.ndim)))
    return _result(out, x.dtype)


def _arg(fn):
    def run(x, axis, keepdims):
        if axis is None:
            flat = fn(x.reshape(-1))
            return np.full((1,) * x.ndim if keepdims else (), flat, dtype=np.int64)
        return _result(fn(x, axis=axis, keepdims=keepdims), np.int64)
    return run


def _scan(fn):
    def run(x, axis):
        out_dtype = np.int64 if x.dtype.kind in "biu" else x.dtype
        return _result(fn(x, axis=axis, dtype=_accumulator(x)), out_dtype)
    return run


def _norm(x, ord, axis, keepdims):
    a = np.abs(x.astype(_accumulator(x), copy=False))
    if ord == 2:
        out = np.sqrt(np.sum(a * a, axis=axis, keepdims=keepdims))
    elif ord == 1:
        out = np.sum(a, axis=axis, keepdims=keepdims)
    elif ord == math.inf:
        out = np.max(a, axis=axis, keepdims=keepdims, initial=0)
    elif ord == -math.inf:
        out = np.min(a, axis=axis, keepdims=keepdims, initial=np.inf)
    elif ord == 0:
        out = np.sum(a != 0, axis=axis, keepdims=keepdims)
    else:
        out = np.sum(a ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)
    return _result(out, x.dtype)


register_kernels("cpu", {
    "sum": _sum, "prod": _prod, "mean": quiet(_mean), "var": quiet(_var),
    "max": lambda x, axis, keepdims: _result(np.max(x, axis=axis, keepdims=keepdims), x.dtype),
    "min": lambda x, axis, keepdims: _result(np.min(x, axis=axis, keepdims=keepdims), x.dtype),
    "argmax": _arg(np.argmax), "argmin": _arg(np.argmin),
    "logsumexp": quiet(_logsumexp),
    "all": lambda x, axis, keepdims: np.asarray(np.all(x, axis=axis, keepdims=keepdims)),
    "any": lambda x, axis, keepdims: np.asarray(np.any(x, axis=axis, keepdims=keepdims)),
    "cumsum": _scan(np.cumsum), "cumprod": _scan(np.cumprod),
    "norm": quiet(_norm),
})
