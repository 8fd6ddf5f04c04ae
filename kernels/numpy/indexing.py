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
    out = x.copy()
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    np.add.at(out, tuple(grid), updates)
    return out


register_kernels("cpu", {
    "getitem": _getitem,
    "index_add": _index_add,
    "index_set": _index_set,
    "take_along_axis": lambda x, idx, axis: np.take_along_axis(x, idx, axis),
    "scatter_add": _scatter_add,
})
