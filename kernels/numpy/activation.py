"""softmax / log_softmax CPU kernels: shift by the max so exp never overflows."""
from __future__ import annotations

import numpy as np

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


register_kernels("cpu", {"softmax": softmax, "log_softmax": log_softmax})
