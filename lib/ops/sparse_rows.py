"""SparseRows: a gradient that touches only some rows of a tensor.

The gradient of a gather along the first axis (x[idx], take, embedding lookups) is the
gathered rows and their indices, not a dense tensor of the table's size: the paper's
sparse parameter updates depend on it. Optimizers update only `indices`; anything else
that needs a dense value calls `to_dense()` (repeated indices add up).
"""
from __future__ import annotations
from ..dtypes import bool_


class SparseRows:
    """rows[i] belongs at row indices[i] of a dense tensor of `shape`.

    >>> import rill
    >>> w = rill.ones(5, 2, requires_grad=True)
    >>> w[rill.tensor([1, 1, 3])].sum().backward()
    >>> w.grad.indices, w.grad.to_dense()[1]
    (tensor([1, 1, 3]), tensor([2., 2.]))
    """

    __slots__ = ("indices", "rows", "shape")

    def __init__(self, indices, rows, shape):
        self.indices = indices  # int64 [n]
        self.rows = rows        # [n, *shape[1:]]
        self.shape = tuple(shape)

    @property
    def dtype(self):
        return self.rows.dtype

    @property
    def device(self):
        return self.rows.device

    @property
    def ndim(self):
        return len(self.shape)

    def dense_operand(self):
        """What it is in a dense op (ops/promotion.py: as_input): its dense tensor (p - lr * g)."""
        return self.to_dense()

    def to_dense(self):
        from .creation import zeros
        from .indexing import index_add
        base = zeros(*self.shape, dtype=self.rows.dtype, device=self.rows.device)
        return index_add(base, (self.indices,), self.rows)

    def coalesce(self) -> "SparseRows":
        """One row per distinct index (rows of repeated indices summed)."""
        import numpy as np
        from .creation import tensor, zeros
        from .indexing import index_add
        host = np.asarray(self.indices.numpy())
        unique, inverse = np.unique(host, return_inverse=True)
        rows = zeros(len(unique), *self.shape[1:], dtype=self.rows.dtype, device=self.rows.device)
        rows = index_add(rows, (tensor(inverse.astype(np.int64), device=self.rows.device),),
                         self.rows)
        return SparseRows(tensor(unique.astype(np.int64), device=self.rows.device), rows,
                          self.shape)

    def coalesced(self):
        """(indices, rows, valid) of the batch's length: one row per distinct index in the
        first slots, padding after them with zero rows (rill.ops.rows.coalesce_rows), so a
        captured step's shapes do not depend on how many rows repeat. On devices without
        that kernel, the exact coalesce (all valid), eagerly."""
        if self.rows.device.kind == "cpu":
            from .rows import coalesce_rows
            return coalesce_rows(self.indices, self.rows)
        from .creation import ones
        exact = self.coalesce()
        valid = ones(exact.indices.shape[0], dtype=bool_, device=exact.rows.device)
        return exact.indices, exact.rows, valid

    def __add__(self, other):
        if isinstance(other, SparseRows):
            from .shape import concat
            return SparseRows(concat([self.indices, other.indices]),
                              concat([self.rows, other.rows]), self.shape)
        return other + self.to_dense()

    __radd__ = __add__

    def __mul__(self, scalar):
        return SparseRows(self.indices, self.rows * scalar, self.shape)

    __rmul__ = __mul__

    def numpy(self):
        return self.to_dense().numpy()

    def __array__(self, dtype=None, copy=None):
        return self.to_dense().__array__(dtype)

    def __repr__(self) -> str:
        return (f"SparseRows(indices={self.indices!r}, rows of shape {self.rows.shape}, "
                f"dense shape {self.shape})")
