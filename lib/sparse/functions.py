"""rill.sparse's functions on sparse tensors (PyTorch's torch.sparse names and meanings):
mm, addmm, sum, softmax. Their heavy parts are the primitives of lib/ops/sparse_ops.py;
the rest is arithmetic on the dense components."""
from __future__ import annotations

import math

from ..errors import ArgumentError, ShapeError, reports_as
from .tensors import SparseCOO, SparseCSR, SparseTensor, _part
from ..tensor import Tensor
from ..ops.sparse_ops import coo_mm, csr_mm, segment_softmax
from ..ops.shape import stack


@reports_as("sparse.mm")
def mm(sparse, dense):
    """sparse [m, k] @ dense [k, n] -> dense [m, n] (a 1-d dense gives [m]), for COO and
    CSR. Gradients reach the dense operand and the sparse tensor's values.

    >>> s = rill.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> rill.sparse.mm(s, rill.tensor([[1.0], [10.0]]))
    tensor([[20.],
            [ 3.]])
    """
    if not isinstance(sparse, SparseTensor):
        if isinstance(sparse, Tensor) and isinstance(dense, Tensor):
            return sparse @ dense  # both dense: PyTorch allows it too
        raise ArgumentError(f"the first operand must be a sparse tensor, got "
                            f"{type(sparse).__name__}")
    if isinstance(dense, SparseTensor):
        raise ArgumentError("sparse @ sparse is not supported; convert the second operand "
                            "with .to_dense()")
    if not isinstance(dense, Tensor):
        raise ArgumentError(f"the second operand must be a dense tensor, got "
                            f"{type(dense).__name__}")
    if sparse.ndim != 2 or sparse._vals.ndim != 1:
        raise ShapeError(f"the sparse operand must be a 2-d matrix without dense dims, got "
                         f"shape {list(sparse.shape)}")
    if dense.ndim not in (1, 2) or dense.shape[0] != sparse.shape[1]:
        raise ShapeError(f"cannot multiply {list(sparse.shape)} by {list(dense.shape)}")
    column = dense.ndim == 1
    d = dense.reshape(dense.shape[0], 1) if column else dense
    if isinstance(sparse, SparseCSR):
        out = csr_mm(_part(sparse, 0), _part(sparse, 1), _part(sparse, 2), d)
    else:
        indices = _part(sparse, 0)
        out = coo_mm(indices[0], indices[1], _part(sparse, 1), d, sparse.shape[0])
    return out.reshape(out.shape[0]) if column else out


@reports_as("sparse.addmm")
def addmm(mat, sparse, dense, *, beta=1.0, alpha=1.0):
    """beta * mat + alpha * (sparse @ dense), as torch.sparse.addmm."""
    product = mm(sparse, dense)
    if alpha != 1.0:
        product = product * alpha
    return product + (mat if beta == 1.0 else mat * beta)


def _as_coo(s) -> SparseCOO:
    return s.to_sparse() if isinstance(s, SparseCSR) else s


def _dims(dim, ndim: int, op: str) -> tuple:
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = []
    for d in dims:
        if not -ndim <= d < ndim:
            raise ShapeError(f"dim {d} out of range for {ndim} dims", op=op)
        out.append(d % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated dim in {dim}", op=op)
    return tuple(sorted(out))


@reports_as("sparse.sum")
def sum(input, dim=None, dtype=None):  # noqa: A001 - torch.sparse.sum's name
    """The sum of a sparse tensor's entries over `dim` (all dims: a 0-d dense tensor).

    Summing every sparse dim gives a dense tensor; summing some of them gives a sparse COO
    tensor over the others that keeps one entry per input entry (uncoalesced: call
    .coalesce() for one per index), so its shape does not depend on the indices and it
    runs inside captured functions. PyTorch returns it coalesced; the values it stands for
    are the same.
    """
    if not isinstance(input, SparseTensor):
        raise ArgumentError(f"input must be a sparse tensor, got {type(input).__name__}")
    s = _as_coo(input)
    values = _part(s, 1) if dtype is None else _part(s, 1).to(dtype)
    if dim is None:
        return values.sum()
    k = s.sparse_dim()
    dims = _dims(dim, s.ndim, "sparse.sum")
    dense_axes = tuple(d - k + 1 for d in dims if d >= k)
    if dense_axes:
        values = values.sum(axis=dense_axes)
    summed = [d for d in dims if d < k]
    if not summed:
        return SparseCOO(_part(s, 0), values, _drop(s.shape, dims), s.is_coalesced())
    if len(summed) == k:
        return values.sum(axis=0)
    indices = _part(s, 0)
    kept = stack([indices[d] for d in range(k) if d not in summed])
    return SparseCOO(kept, values, _drop(s.shape, dims), False)


def _drop(shape, dims):
    return tuple(n for d, n in enumerate(shape) if d not in dims)


@reports_as("sparse.softmax")
def softmax(input, dim: int, dtype=None):
    """Softmax along `dim` over the stored entries only (missing entries are not zeros that
    take part, they are absent), as torch.sparse.softmax: for a matrix and dim=1, each row's
    stored values become a distribution. The result has the input's indices."""
    if not isinstance(input, SparseTensor):
        raise ArgumentError(f"input must be a sparse tensor, got {type(input).__name__}")
    s = _as_coo(input).coalesce()
    values = _part(s, 1) if dtype is None else _part(s, 1).to(dtype)
    k = s.sparse_dim()
    (d,) = _dims(dim, s.ndim, "sparse.softmax")
    if d >= k:  # along a dense dim of the values: an ordinary softmax
        from ..ops.activation import softmax as dense_softmax
        out = dense_softmax(values, d - k + 1)
    else:
        from .tensors import _linear
        others = [i for i in range(k) if i != d]
        indices = _part(s, 0)
        if others:
            from ..ops.shape import stack
            segments = _linear(stack([indices[i] for i in others]),
                               tuple(s.shape[i] for i in others))
        else:
            from ..ops.creation import zeros_like
            segments = zeros_like(indices[0])
        count = math.prod(s.shape[i] for i in others)
        out = segment_softmax(values, segments, count)
    if isinstance(input, SparseCSR):
        return input._with_values(out)
    return s._with_values(out)
