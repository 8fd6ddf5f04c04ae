"""Indexing CPU kernels: gathers, and scatters that return updated copies."""
from __future__ import annotations

import numpy as np

from rill.kernels.native import build as native
from rill.ops.indexing import ARRAY, _is_row_gather, numpy_key
from rill.ops.primitive import register_kernels

# The compiled modules these kernels may load (build.prefetch): the row sums of index_add.
COMPILED = ('reduce',)


def _getitem(x, *arrays, key):
    return x[numpy_key(key, arrays)]


# Rows added by one index array from this many: by sorted runs (np.add.at adds an element at
# a time: 0.3 ms for 512 rows of 64, an embedding's gradient, against ~0.05 ms).
ROWS_BY_RUNS_MIN = 64


def _add_rows_by_runs(out, idx, values) -> bool:
    """out[idx] += values with repeated rows summed: the rows sorted (stably) by index, each
    run of one index summed by np.add.reduceat, then added once. False where it does not
    apply (it leaves the result to np.add.at, whose errors name bad indices)."""
    n = out.shape[0]
    if idx.ndim != 1 or idx.size < ROWS_BY_RUNS_MIN or out.dtype.kind != "f" or \
            values.dtype != out.dtype or idx.dtype.kind not in "iu" or \
            values.shape != idx.shape + out.shape[1:] or idx.min() < -n or idx.max() >= n:
        return False
    idx = np.where(idx < 0, idx + n, idx)
    order = np.argsort(idx, kind="stable")
    ordered = idx[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    flat = values.reshape(idx.size, -1)
    compiled = native.for_arrays("reduce", flat, out)
    if compiled is not None:  # the same sums in the same order, a row at a time
        compiled.row_runs(flat, order.astype(np.int64, copy=False), starts.astype(np.int64),
                          ordered[starts].astype(np.int64), out, idx.size, starts.size, n,
                          flat.shape[1], out.dtype == np.float64)
        return True
    sums = np.add.reduceat(flat[order], starts, axis=0)
    out.reshape(n, -1)[ordered[starts]] += sums
    return True


def add_into(out, values, *arrays, key):
    """out[key] += values in place, repeated indices accumulating: index_add's arithmetic,
    also run on a variable's own buffer when a captured step updates rows of a table
    (lib/capture/executor.py) and by rill.ops.rows.add_rows_ eagerly."""
    if _is_row_gather(key, out.ndim) and len(arrays) == 1 and \
            _add_rows_by_runs(out, np.asarray(arrays[0]), np.asarray(values)):
        return out
    if ARRAY in key:
        np.add.at(out, numpy_key(key, arrays), values)  # repeated indices accumulate
    else:
        out[numpy_key(key, arrays)] += values
    return out


def _index_add(x, values, *arrays, key):
    return add_into(x.copy(), values, *arrays, key=key)


def _index_set(x, values, *arrays, key):
    out = x.copy()
    out[numpy_key(key, arrays)] = values
    return out


def _along_grid(x, idx, axis):
    """The NumPy key of x's positions that idx names along `axis` (negatives count from the
    end); IndexError (an IndexingError for the user) for an index out of range."""
    n = x.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = idx.max() if idx.max() >= n else idx.min()
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = np.where(idx < 0, idx + n, idx)
    return tuple(grid)


def _scatter_add(x, idx, updates, axis):
    grid = _along_grid(x, idx, axis)
    if x.dtype.kind == "f" and x.size:
        # bincount sums repeated targets in float64 and is several times faster than add.at.
        flat = np.ravel_multi_index(np.broadcast_arrays(*grid), x.shape)
        sums = np.bincount(flat.ravel(), weights=updates.ravel(), minlength=x.size)
        return (x + sums.reshape(x.shape)).astype(x.dtype, copy=False)
    out = x.copy()
    np.add.at(out, grid, updates)
    return out


def _scatter(x, idx, src, axis):
    out = x.copy()
    out[_along_grid(x, idx, axis)] = src  # of repeated targets the last write lands
    return out


_UFUNCS = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def _identity(reduce, dtype):
    """The value that leaves `reduce` unchanged, in dtype (where input's own entry is left out)."""
    if reduce == "prod":
        return 1
    if dtype.kind == "b":
        return reduce == "amin"
    if dtype.kind == "f":
        return -np.inf if reduce == "amax" else np.inf
    info = np.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


def _scatter_reduce(x, idx, src, axis, reduce, include_self):
    grid = _along_grid(x, idx, axis)
    out = x.copy()
    if not include_self:
        out[grid] = _identity(reduce, x.dtype)
    _UFUNCS[reduce].at(out, grid, src)  # repeated targets combine in index order
    return out


register_kernels("cpu", {
    "getitem": _getitem,
    "index_add": _index_add,
    "index_set": _index_set,
    "take_along_axis": lambda x, idx, axis: np.take_along_axis(x, idx, axis),
    "scatter_add": _scatter_add,
    "scatter": _scatter,
    "scatter_reduce": _scatter_reduce,
})
