"""Sorting CPU kernels (stable)."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _sort(x, axis, descending):
    idx = np.argsort(x, axis=axis, kind="stable")
    if descending:
        idx = np.flip(idx, axis=axis)
    return np.take_along_axis(x, idx, axis), idx.astype(np.int64, copy=False)


def _topk(x, k, axis, largest):
    values, idx = _sort(x, axis, largest)
    take = [slice(None)] * x.ndim
    take[axis] = slice(0, k)
    return values[tuple(take)], idx[tuple(take)]


register_kernels("cpu", {"sort": _sort, "topk": _topk})
