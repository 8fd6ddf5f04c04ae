"""coalesce_rows on the CPU: one row per distinct index, padded to the input's length."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _coalesce_rows(indices, rows):
    n = indices.shape[0]
    if n == 0:
        return indices.astype(np.int64), rows.copy(), np.zeros(0, dtype=bool)
    unique, inverse = np.unique(indices, return_inverse=True)
    k = unique.shape[0]
    out_indices = np.empty(n, dtype=np.int64)
    out_indices[:k] = unique
    out_indices[k:] = unique[0]  # padding repeats a real index (its rows are 0)
    summed = np.zeros_like(rows)
    flat = rows.reshape(n, -1)
    if flat.shape[1]:
        order = np.argsort(inverse, kind="stable")
        starts = np.flatnonzero(np.concatenate(([True], np.diff(inverse[order]) != 0)))
        summed.reshape(n, -1)[:k] = np.add.reduceat(flat[order], starts, axis=0)
    valid = np.zeros(n, dtype=bool)
    valid[:k] = True
    return out_indices, summed, valid


register_kernels("cpu", {"coalesce_rows": _coalesce_rows})
