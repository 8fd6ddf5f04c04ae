"""Linear-algebra CPU kernels (BLAS through NumPy)."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _einsum(*xs, inputs, output):
    return np.einsum(",".join(inputs) + "->" + output, *xs, optimize=len(xs) > 2)


register_kernels("cpu", {"matmul": np.matmul, "einsum": _einsum})
