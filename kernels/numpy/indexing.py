"""Indexing CPU kernels: gathers, and scatters that return updated copies."""
from __future__ import annotations

import numpy as np

from rill.ops.indexing import ARRAY, numpy_key
from rill.ops.primitive import register_kernels


def _getitem(x, *arrays, key):
    return x[numpy_key(key, arrays)]


def _index_add(x, values, *arrays, key):
    out = x.copy()
    if ARRAY in key:
        np.add.at(out, numpy_key(key, arrays), values)  # repeated indices accumulate
    else:
        out[numpy_key(key, arrays)] += values
    return out


def _index_set(x, values, *arrays, key):
    out = x.copy()
    out[numpy_key(key, arrays)] = values
    return out


def _scatter_add(x, idx, updates, axis):
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = np.where(idx < 0, idx + x.shape[axis], idx)
    if x.dtype.kind == "f" and x.size:
        # bincount sums repeated targets in float64 and is several times faster than add.at.
        flat = np.ravel_multi_index(np.broadcast_arrays(*grid), x.shape)
        sums = np.bincount(flat.ravel(), weights=updates.ravel(), minlength=x.size)
        return (x + sums.reshape(x.shape)).astype(x.dtype, copy=False)
    out = x.copy()
    np.add.at(out, tuple(grid), updates)
    return out


register_kernels("cpu", {
    "getitem": _getitem,
    "index_add": _index_add,
    "index_set": _index_set,
    "take_along_axis": lambda x, idx, axis: np.take_along_axis(x, idx, axis),
    "scatter_add": _scatter_add,
})
