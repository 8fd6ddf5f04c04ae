"""CPU kernels of the sparse primitives (lib/ops/sparse_ops.py).

Sparse x dense products run through SciPy's compiled sparse kernels when SciPy is installed
(the optional extra `rill[sparse]`) and through NumPy otherwise. Measured on this project's
CPU for a Cora-sized graph (2708 nodes, 13k entries, 16 columns) and its 49k-entry feature
matrix: SciPy's coo/csr matvecs take 0.1-0.3 ms; the best NumPy forms 0.7-3 ms (bincount
over flattened (row, column) positions for COO, np.add.reduceat over row segments for CSR;
np.add.at 3-8 ms). So SciPy when present; NumPy so that rill needs nothing beyond it.
SciPy is imported on the first product, never by `import rill`.

Float16 (and bfloat16, whose carrier is float32) is computed in float32 and rounded back:
SciPy's sparse matrices have no float16.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels

_scipy_sparse = None  # the module, False when SciPy is not installed, None before the first look


def scipy_sparse():
    """scipy.sparse, or None without SciPy (looked up once)."""
    global _scipy_sparse
    if _scipy_sparse is None:
        try:
            import scipy.sparse as module
        except ImportError:
            module = False
        _scipy_sparse = module
    return _scipy_sparse or None


def _computable(a):
    return a.astype(np.float32) if a.dtype == np.float16 else a


def _by_positions(rows, cols, values, dense, n_rows):
    """NumPy: each entry's products summed into its (row, column) cells by one bincount."""
    n = dense.shape[1]
    products = (values[:, None] * dense[cols]).ravel()
    cells = (rows[:, None] * n + np.arange(n)).ravel()
    return np.bincount(cells, weights=products, minlength=n_rows * n).reshape(n_rows, n)


def sparse_coo_mm(rows, cols, values, dense, n_rows):
    """out[r] = sum over entries (r, c, v) of v * dense[c]; entries in any order, repeats add."""
    out_dtype = dense.dtype
    values, dense = _computable(values), _computable(dense)
    sp = scipy_sparse()
    if sp is not None and values.dtype.kind == "f":
        matrix = sp.coo_matrix((values, (rows, cols)), shape=(n_rows, dense.shape[0]))
        out = matrix @ dense
    else:
        out = _by_positions(rows, cols, values, dense, n_rows)
    return np.asarray(out).astype(out_dtype, copy=False)


def csr_rows(crow, nnz):
    """The row of each stored entry of a CSR matrix (its compressed rows, expanded)."""
    counts = np.diff(crow)
    if crow[0] != 0 or crow[-1] != nnz or (counts < 0).any():
        raise ValueError(f"crow_indices must rise from 0 to nnz={nnz}; got {crow[0]} .. "
                         f"{crow[-1]}")
    return np.repeat(np.arange(len(crow) - 1, dtype=np.int64), counts)


def sparse_csr_mm(crow, col, values, dense):
    """out[r] = sum over the entries of row r (crow[r] .. crow[r+1]) of value * dense[col]."""
    out_dtype = dense.dtype
    values, dense = _computable(values), _computable(dense)
    n_rows = len(crow) - 1
    sp = scipy_sparse()
    if sp is not None and values.dtype.kind == "f":
        out = sp.csr_matrix((values, col, crow), shape=(n_rows, dense.shape[0])) @ dense
    else:
        out = _by_positions(csr_rows(crow, len(col)), col, values, dense, n_rows)
    return np.asarray(out).astype(out_dtype, copy=False)


def segment_softmax(values, segments, num_segments):
    """Softmax over the entries that share a segment id (and, for values with trailing dense
    axes, separately along each of those), as torch.sparse.softmax over stored entries."""
    out_dtype = values.dtype
    values = _computable(values)
    if values.shape[0] == 0:
        return values.astype(out_dtype)
    order = np.argsort(segments, kind="stable")
    grouped, ids = values[order], segments[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    counts = np.diff(np.r_[starts, len(ids)])
    peak = np.repeat(np.maximum.reduceat(grouped, starts, axis=0), counts, axis=0)
    exps = np.exp(grouped - peak)
    totals = np.repeat(np.add.reduceat(exps, starts, axis=0), counts, axis=0)
    out = np.empty_like(exps)
    out[order] = exps / totals
    return out.astype(out_dtype, copy=False)


register_kernels("cpu", {"sparse_coo_mm": sparse_coo_mm, "sparse_csr_mm": sparse_csr_mm,
                         "csr_rows": csr_rows, "segment_softmax": segment_softmax})
