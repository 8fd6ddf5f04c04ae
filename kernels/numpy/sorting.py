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


# Rows at least this long, with k at most a quarter of them, select the top k by partition
# (a few passes) rather than by sorting the row: 200k scores, k 8192: ~27 -> ~4 ms.
PARTIAL_MIN = 1024


def _topk(x, k, axis, largest):
    n = x.shape[axis]
    if n >= PARTIAL_MIN and 0 < 4 * k <= n and x.dtype.kind in "fiu" and \
            not (x.dtype.kind == "f" and np.isnan(x).any()):
        values, idx = _topk_by_partition(np.moveaxis(x, axis, -1), k, largest)
        return np.moveaxis(values, -1, axis), np.moveaxis(idx, -1, axis)
    values, idx = _sort(x, axis, largest)
    take = [slice(None)] * x.ndim
    take[axis] = slice(0, k)
    return values[tuple(take)], idx[tuple(take)]


def _topk_by_partition(x, k, largest):
    """The k best of each row of x (last axis), in the order the stable sort gives them: the
    k-th best value by partition, all better than it and, among those equal to it, the
    lowest indices; then those k sorted stably (NaN-free input)."""
    n = x.shape[-1]
    kth = n - k if largest else k - 1
    bound = np.partition(x, kth, axis=-1)[..., kth:kth + 1]
    better = x > bound if largest else x < bound
    tied = x == bound
    room = k - better.sum(axis=-1, keepdims=True)  # how many tied ones the top k holds
    chosen = better | (tied & (np.cumsum(tied, axis=-1) <= room))
    idx = np.nonzero(chosen.reshape(-1, n))[1].reshape(x.shape[:-1] + (k,))  # ascending
    values = np.take_along_axis(x, idx, -1)
    order = _sort(values, -1, largest)[1]  # stable: equal values keep the lower index first
    idx = np.take_along_axis(idx, order, -1)
    return np.take_along_axis(x, idx, -1), idx.astype(np.int64, copy=False)


register_kernels("cpu", {"sort": _sort, "topk": _topk})
