"""softmax / log_softmax CPU kernels: shift by the max so exp never overflows.

Along the last axis of float32/float64 data (a model's logits, attention scores) a row's
sum is a matrix-vector product, `e @ ones`, and the exponentials are taken in place: NumPy's
sum along a short last axis runs an inner loop per row (at (512, 65) float32, 15 us against
3 us). The sums round differently from NumPy's pairwise ones, within float rounding.
softmax_cross_entropy reads log-probabilities only at the targets (and their row means,
for label smoothing) instead of making the whole log_softmax.

Where a C compiler is at hand, softmax cross-entropy and its gradient over C-contiguous
float32/float64 logits take their row statistics and gradient from kernels/native/softmax.c
(per row, the same operations; exp and log glibc's): at (512, 65) float32, 84 -> 64 us
forward and 116 -> 77 us backward; at (16, 10), 25 -> 18 and 27 -> 14 us (what is left is
the target checks and indexing around it).
"""
from __future__ import annotations

import numpy as np

from rill.errors import ArgumentError
from rill.kernels.native import build as native
from rill.ops.primitive import register_kernels

from . import parallel

# The compiled modules (kernels/native) these kernels may load: built ahead of a captured
# step's first call (build.prefetch).
COMPILED = ('softmax',)


def _shifted(x, axis):
    axis = axis if x.ndim else None
    if x.size == 0:
        return x.astype(x.dtype)
    m = np.max(x, axis=axis, keepdims=True)
    # A row of -inf stays nan (as PyTorch); a row with a finite max shifts safely; a row
    # holding +inf is all NaN (as PyTorch: inf - inf), not NaN at the inf and 0 elsewhere.
    bad = ~np.isfinite(m)
    if bad.any():
        m = np.where(bad, np.where(m > 0, np.nan, 0).astype(m.dtype), m)
    return x - m


def _by_rows(x, axis) -> bool:
    """Whether the fast path applies: the last axis of non-empty float32/float64 data."""
    return (x.ndim >= 1 and x.size > 0 and axis in (-1, x.ndim - 1)
            and x.dtype in (np.float32, np.float64))


def _row_sums(e):
    """Sums along the last axis, as e @ ones (BLAS; see the module docstring)."""
    return e @ np.ones(e.shape[-1], e.dtype)


# Elements from which a compiled row pass is split over the cores (parallel.py): below it the
# hand-off costs what the second core saves (a split of a pass over 2^18 elements measured
# 60-90 us on this 2-core machine, the pass itself 30-120 us on one core).
_SPLIT_FROM = 1 << 19


def _compiled_rows(name, *arrays):
    """Runs the compiled row pass `name` (kernels/native/softmax.c) over arrays of one shape
    and dtype, rows along the last axis, into a new array; None where it cannot."""
    x = arrays[-1]
    if not _by_rows(x, -1) or any(type(a) is not np.ndarray or a.shape != x.shape or
                                  a.dtype != x.dtype for a in arrays):
        return None
    compiled = native.for_arrays("softmax", *arrays)
    if compiled is None:
        return None
    out = np.empty(x.shape, x.dtype)
    c = x.shape[-1]
    rows, kernel, is_double = x.size // c, getattr(compiled, name), x.dtype == np.float64

    def run(lo, hi):
        kernel(*arrays, out, rows, c, lo, hi, is_double)
    if x.size >= _SPLIT_FROM:
        parallel.split(run, rows, x.size)
    else:
        run(0, rows)
    return out


def softmax(x, axis):
    if axis in (-1, x.ndim - 1):
        out = _compiled_rows("softmax", x)
        if out is not None:
            return out
    with np.errstate(invalid="ignore", over="ignore"):
        if _by_rows(x, axis):
            e = _shifted(x, axis)  # a new array: exponentiated and scaled in place
            np.exp(e, out=e)
            e /= _row_sums(e)[..., None]
            return e
        e = np.exp(_shifted(x, axis))
        return e / np.sum(e, axis=axis if x.ndim else None, keepdims=True)


def _log_sum_exp_shifted(z):
    """log of the row sums of exp(z) (z: rows shifted by their max), as (..., 1)."""
    return np.log(_row_sums(np.exp(z)))[..., None]


def softmax_grad(g, y, axis):
    """softmax's gradient from its output: g y - y sum(g y) along `axis`."""
    if axis in (-1, y.ndim - 1):
        out = _compiled_rows("softmax_grad", g, y)
        if out is not None:
            return out
    gy = g * y
    gy -= y * np.sum(gy, axis=axis, keepdims=True)
    return gy


def log_softmax(x, axis):
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        z = _shifted(x, axis)
        if _by_rows(x, axis):
            z -= _log_sum_exp_shifted(z)
            return z
        return z - np.log(np.sum(np.exp(z), axis=axis if x.ndim else None, keepdims=True))




def _valid_targets(target, c, ignore_index):
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    bad = (safe < 0) | (safe >= c)
    if bad.any():
        # As nll_loss's check: a bad label is an argument error, whichever path found it.
        raise ArgumentError(f"target holds class {int(target[bad][0])}, outside [0, {c}) "
                            f"(and not ignore_index={ignore_index})", op="cross_entropy")
    return valid, safe


def _compiled(logits):
    return native.for_arrays("softmax", logits) if _by_rows(logits, 1) else None


def softmax_cross_entropy(logits, target, ignore_index, label_smoothing, reduction):
    n, c = logits.shape
    valid, safe = _valid_targets(target, c, ignore_index)
    compiled = _compiled(logits)
    if compiled is not None:
        shift, lse, zsum = (np.empty(n, logits.dtype) for _ in range(3))
        compiled.row_stats(logits, shift, lse, zsum, n, c, logits.dtype == np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # a row of -inf: nan, as below
            loss = -((logits[np.arange(n), safe] - shift) - lse)
            if label_smoothing:
                loss = (1.0 - label_smoothing) * loss - label_smoothing * (zsum / c - lse)
    elif _by_rows(logits, 1):
        # Only the targets' log-probabilities (and each row's mean, for smoothing)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            z = _shifted(logits, 1)
            lse = _log_sum_exp_shifted(z)[:, 0]
            loss = -(z[np.arange(n), safe] - lse)
            if label_smoothing:
                loss = ((1.0 - label_smoothing) * loss
                        - label_smoothing * (_row_sums(z) / c - lse))
    else:
        lp = log_softmax(logits, 1)
        loss = -lp[np.arange(n), safe]
        if label_smoothing:
            loss = (1.0 - label_smoothing) * loss - label_smoothing * lp.mean(axis=1)
    loss = np.where(valid, loss, 0)
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):  # no counted row: nan, as torch
            loss = loss.sum() / np.count_nonzero(valid)
    return np.asarray(loss, dtype=logits.dtype)


def softmax_cross_entropy_grad(logits, target, g, ignore_index, label_smoothing, reduction):
    n, c = logits.shape
    valid, safe = _valid_targets(target, c, ignore_index)
    scale = g * valid  # g is per row ('none') or one number
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            scale = scale / np.count_nonzero(valid)
    compiled = _compiled(logits)
    if compiled is not None and np.result_type(scale).kind == "f":
        # scale in float64: the product is computed at the wider of the two types and
        # rounded once, as NumPy's in-place multiply by a float64 scale (count_nonzero's
        # integer makes the mean's scale float64) does
        grad = np.empty_like(logits)
        compiled.cross_entropy_grad(logits, np.ascontiguousarray(safe, np.int64),
                                    np.ascontiguousarray(np.broadcast_to(scale, (n,)),
                                                         np.float64), grad,
                                    n, c, float(label_smoothing), logits.dtype == np.float64)
        return grad
    grad = softmax(logits, 1)
    if label_smoothing:
        grad -= label_smoothing / c
    grad[np.arange(n), safe] -= 1.0 - label_smoothing
    grad *= scale[:, None]
    return grad.astype(logits.dtype, copy=False)


register_kernels("cpu", {"softmax": softmax, "softmax_grad": softmax_grad,
                         "log_softmax": log_softmax,
                         "softmax_cross_entropy": softmax_cross_entropy,
                         "softmax_cross_entropy_grad": softmax_cross_entropy_grad})
