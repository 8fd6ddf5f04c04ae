"""Linear-algebra CPU kernels (BLAS through NumPy)."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _einsum(*xs, inputs, output):
    return np.einsum(",".join(inputs) + "->" + output, *xs, optimize=len(xs) > 2)


def _linear(x, w, *bias):
    if x.ndim > 2:
        # One 2-d GEMM over all leading axes: NumPy's stacked matmul runs one small GEMM per
        # row of the batch, measured several times slower for (N, T, F) sequences.
        y = np.matmul(x.reshape(-1, x.shape[-1]), w.T).reshape(x.shape[:-1] + (w.shape[0],))
    else:
        y = np.matmul(x, w.T)  # BLAS reads w transposed in place
    if bias:
        y += bias[0]  # into the fresh product: no second buffer
    return y


register_kernels("cpu", {"matmul": np.matmul, "einsum": _einsum, "linear": _linear,
                         "linear_weight_grad": lambda g, x: np.matmul(g.T, x)})
