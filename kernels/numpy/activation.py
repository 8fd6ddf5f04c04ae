"""softmax / log_softmax CPU kernels: shift by the max so exp never overflows."""
from __future__ import annotations

import numpy as np

from rill.errors import ArgumentError
from rill.ops.primitive import register_kernels


def _shifted(x, axis):
    axis = axis if x.ndim else None
    if x.size == 0:
        return x.astype(x.dtype)
    m = np.max(x, axis=axis, keepdims=True)
    # A row of -inf stays nan (as PyTorch); a row with a finite max shifts safely.
    m = np.where(np.isfinite(m), m, 0)
    return x - m


def softmax(x, axis):
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(_shifted(x, axis))
        return e / np.sum(e, axis=axis if x.ndim else None, keepdims=True)


def log_softmax(x, axis):
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        z = _shifted(x, axis)
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


def softmax_cross_entropy(logits, target, ignore_index, label_smoothing, reduction):
    n, c = logits.shape
    valid, safe = _valid_targets(target, c, ignore_index)
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
    grad = softmax(logits, 1)
    if label_smoothing:
        grad -= label_smoothing / c
    grad[np.arange(n), safe] -= 1.0 - label_smoothing
    scale = g * valid  # g is per row ('none') or one number
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            scale = scale / np.count_nonzero(valid)
    grad *= scale[:, None]
    return grad.astype(logits.dtype, copy=False)


register_kernels("cpu", {"softmax": softmax, "log_softmax": log_softmax,
                         "softmax_cross_entropy": softmax_cross_entropy,
                         "softmax_cross_entropy_grad": softmax_cross_entropy_grad})
