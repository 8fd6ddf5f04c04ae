"""Sorting CPU kernels (stable in both directions; NaN after every number ascending, before
every number descending)."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _sort(x, axis, descending):
    if descending:
        # Stable descending: equal values keep their order (lower index first, as ONNX and
        # PyTorch). Sorting the reversed row ascending and reversing the result gives that.
        n = x.shape[axis]
        idx = (n - 1) - np.flip(np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable"),
                                axis=axis)
    else:
        idx = np.argsort(x, axis=axis, kind="stable")
    return np.take_along_axis(x, idx, axis), idx.astype(np.int64, copy=False)


def _topk(x, k, axis, largest):
    values, idx = _sort(x, axis, largest)
    take = [slice(None)] * x.ndim
    take[axis] = slice(0, k)
    return values[tuple(take)], idx[tuple(take)]


register_kernels("cpu", {"sort": _sort, "topk": _topk})
