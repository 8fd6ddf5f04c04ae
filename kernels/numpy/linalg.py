"""Linear-algebra CPU kernels (BLAS through NumPy)."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _einsum(*xs, inputs, output):
    return np.einsum(",".join(inputs) + "->" + output, *xs, optimize=len(xs) > 2)


def _linear(x, w):
    return np.matmul(x, w.T)  # BLAS reads w transposed in place


register_kernels("cpu", {"matmul": np.matmul, "einsum": _einsum, "linear": _linear})
