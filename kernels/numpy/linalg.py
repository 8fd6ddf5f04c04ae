"""Linear-algebra CPU kernels (BLAS through NumPy)."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels

from . import parallel


# GEMMs of this many multiply-adds and up OpenBLAS runs on its threads; below SMALL_GEMM
# those threads gain little and leave a worker spinning that takes a core from the passes
# kernels/numpy/parallel.py splits (measured in parallel.py's note), so they run at one.
_THREADED = 1 << 18


def _gemm(fn, *args, multiply_adds: int):
    if _THREADED <= multiply_adds < parallel.SMALL_GEMM:
        with parallel.blas_at_one_thread():
            return fn(*args)
    return fn(*args)


def _matmul(a, b):
    return _gemm(np.matmul, a, b, multiply_adds=a.size * (b.shape[-1] if b.ndim > 1 else 1))


def _weight_grad(g, x):
    return _gemm(np.matmul, g.T, x, multiply_adds=g.size * x.shape[-1])


def _einsum(*xs, inputs, output):
    return np.einsum(",".join(inputs) + "->" + output, *xs, optimize=len(xs) > 2)


def _linear(x, w, *bias):
    size = x.size * w.shape[0]
    if x.ndim > 2:
        # One 2-d GEMM over all leading axes: NumPy's stacked matmul runs one small GEMM per
        # row of the batch, measured several times slower for (N, T, F) sequences.
        y = _gemm(np.matmul, x.reshape(-1, x.shape[-1]), w.T,
                  multiply_adds=size).reshape(x.shape[:-1] + (w.shape[0],))
    else:
        y = _gemm(np.matmul, x, w.T, multiply_adds=size)  # BLAS reads w transposed in place
    if bias:
        y += bias[0]  # into the fresh product: no second buffer
    return y


register_kernels("cpu", {"matmul": _matmul, "einsum": _einsum, "linear": _linear,
                         "linear_weight_grad": _weight_grad})
