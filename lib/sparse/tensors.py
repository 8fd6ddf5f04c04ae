"""Sparse tensors: COO and CSR layouts, each a structure of dense tensors.

A sparse tensor is its components, ordinary rill Tensors, plus its static shape: COO is
(indices [sparse_dim, nnz] int64, values [nnz, *dense_dims], size, coalesced); CSR is
(crow_indices [rows + 1], col_indices [nnz], values [nnz], size). Ops on it are ops on the
components (the products and the softmax are primitives, lib/ops/sparse_ops.py), so the
tape, capture and saved graphs see only dense values, as JAX's BCOO does. Gradients reach
the values: `rill.sparse_coo_tensor(i, v, size)` with `v.requires_grad` gives `v.grad`.

The value is a tuple of those components (a subclass whose indexing, length, arithmetic and
comparisons are a sparse tensor's): a captured function flattens tuples, so a sparse
argument becomes its component tensors, and a sparse result is rebuilt around the graph's
outputs. Iterating one walks its components.

What depends on the values' contents (converting a dense tensor, coalescing, sizes left to
be inferred) runs eagerly only: the number of stored entries is a shape, which a captured
graph fixes. Everything else runs inside captures too.

>>> import rill
>>> s = rill.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
>>> s.to_dense()
tensor([[0., 0., 3.],
        [4., 0., 5.]])
>>> (s @ rill.ones(3, 1)).flatten()
tensor([3., 9.])
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentError, CaptureError, ShapeError
from ..hints import NameError_
from ..layouts import sparse_coo, sparse_csr, strided  # noqa: F401 - strided re-exported
from ..tensor import ElementCount, Tensor
from ..eager.context import current
from ..ops.arguments import as_tensor
from ..ops.creation import tensor, zeros
from ..ops.indexing import index_add, take
from ..ops.shape import concat, flip, stack
from ..ops.sparse_ops import csr_rows

_part = tuple.__getitem__


def _capturing() -> bool:
    """True under any interpreter but eager's (a capture, vmap): index values are not data
    there, so nothing may read them."""
    interpreter = current().interpreter
    return interpreter.capturing or getattr(interpreter, "reruns_python", False)


def _refuse_in_capture(op: str, instead: str) -> None:
    if _capturing():
        raise CaptureError(f"{op} depends on the sparse tensor's index values (the number of "
                           f"stored entries is a shape, fixed in a captured graph and the "
                           f"same for every member of a vmap); {instead}", op=op)


def dense_only(value, what: str, error=ArgumentError):
    """The error for a dense-only op or method given a sparse tensor (a method the class
    lacks raises it as an AttributeError too, so hasattr() stays truthful)."""
    return error(f"{what} needs a dense tensor and got a {value.layout.name} tensor of "
                 f"shape {list(value.shape)}; convert it with .to_dense() first (or use "
                 "rill.sparse.mm / rill.sparse.sum / rill.sparse.softmax, which keep it "
                 "sparse)")


def _host(t: Tensor) -> np.ndarray:
    return np.asarray(t.device.backend.to_host(t._data))


def _int_tensor(x, like_device, what: str, op: str) -> Tensor:
    x = as_tensor(x, what, op)  # a rill error for what is not numbers (callers move it)
    if not x.dtype.is_integer:
        raise ArgumentError(f"{what} must be integers, got {x.dtype}", op=op)
    return x


def _values_tensor(v, dtype, device, op: str) -> Tensor:
    if not isinstance(v, Tensor):
        v = tensor(as_tensor(v, "values", op), dtype=dtype, device=device)
    elif dtype is not None:
        v = v.to(dtype)
    if device is not None:
        v = v.to(device)
    return v


def _leaf(values: Tensor, requires_grad: bool) -> Tensor:
    """values, as a new leaf requiring grad when asked (PyTorch: the sparse tensor is the
    leaf; here its values are)."""
    if not requires_grad:
        return values
    return values.detach().requires_grad_()


def _linear(indices: Tensor, size: tuple) -> Tensor:
    """Row-major positions over the sparse dims of each entry (int64 [nnz])."""
    k = indices.shape[0]
    if k == 1:
        return indices[0]
    out = indices[k - 1]
    stride = 1
    for d in range(k - 2, -1, -1):
        stride *= size[d + 1]
        out = out + indices[d] * stride
    return out


class SparseTensor(tuple):
    """Shared by both layouts: shape, dtype, device, grad, arithmetic and the refusals."""

    __slots__ = ()
    layout = None
    is_sparse = False  # PyTorch's: True for COO only

    def dense_operand(self):
        """What it is in a dense op (ops/promotion.py: as_input): refused, with the way out."""
        raise dense_only(self, "this op")
    _VALUES = 0  # where the values sit in the tuple

    # ---- what every tensor answers -------------------------------------------------------

    @property
    def shape(self) -> tuple:
        return _part(self, self._SIZE)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    @property
    def size(self) -> ElementCount:
        """The element count, which called, `s.size()` / `s.size(dim)`, is PyTorch's shape."""
        return ElementCount(math.prod(self.shape), self.shape)

    @property
    def dtype(self):
        return self._vals.dtype

    @property
    def device(self):
        return self._vals.device

    @property
    def _vals(self) -> Tensor:
        return _part(self, self._VALUES)

    @property
    def nnz(self) -> int:
        """The number of stored entries."""
        return self._vals.shape[0]

    def _nnz(self) -> int:
        return self.nnz

    @property
    def requires_grad(self) -> bool:
        return self._vals.requires_grad

    def requires_grad_(self, requires_grad: bool = True):
        """Make the values require grad (they, not the sparse value, are the leaf)."""
        self._vals.requires_grad_(requires_grad)
        return self

    @property
    def grad(self):
        """The gradient of the values, as a sparse tensor with this one's indices."""
        g = self._vals.grad
        return None if g is None else self._with_values(g)

    def detach(self):
        return self._with_values(self._vals.detach())

    def to(self, target):
        """A dtype converts the values; a device moves every component."""
        from .. import dtypes as dt
        if isinstance(target, (dt.DType, type)) or \
                (isinstance(target, str) and target in dt._BY_NAME):
            return self._with_values(self._vals.to(target))
        return self._map(lambda t: t.to(target))

    def to_sparse_coo(self):
        return self.to_sparse()

    # ---- arithmetic that keeps sparsity (as PyTorch's) -----------------------------------

    def __neg__(self):
        return self._with_values(-self._vals)

    def __mul__(self, other):
        if isinstance(other, SparseTensor):
            raise ArgumentError("sparse * sparse is not supported; convert one with "
                                ".to_dense()", op="multiply")
        if isinstance(other, Tensor) and other.ndim > 0:
            return self._times_dense(other)
        return self._with_values(self._vals * other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, (Tensor, SparseTensor)) and other.ndim > 0:
            raise ArgumentError("a sparse tensor divides by a number or a 0-d tensor only "
                                "(dividing by a tensor would divide its zeros too); convert "
                                "with .to_dense()", op="divide")
        return self._with_values(self._vals / other)

    def __add__(self, other):
        if isinstance(other, SparseTensor):
            if other.layout is not self.layout or other.shape != self.shape:
                raise ShapeError(f"adding sparse tensors needs one layout and one shape, got "
                                 f"{self.layout.name}{list(self.shape)} and "
                                 f"{other.layout.name}{list(other.shape)}", op="add")
            return self._plus_sparse(other)
        if isinstance(other, Tensor):  # sparse + dense is dense, as in PyTorch
            return self.to_dense() + other
        raise ArgumentError("a sparse tensor adds to a tensor of its shape only (adding a "
                            "number would fill its zeros); convert with .to_dense()", op="add")

    __radd__ = __add__

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __matmul__(self, other):
        from .functions import mm
        return mm(self, other)

    def __rmatmul__(self, other):
        raise dense_only(self, "dense @ sparse")

    # ---- what a sparse tensor is not -----------------------------------------------------

    def __getitem__(self, key):
        if isinstance(key, slice):  # code that walks tuples (capture's) sees the components
            return _part(self, key)
        raise dense_only(self, "indexing")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __eq__(self, other):
        raise dense_only(self, "==")

    __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __eq__
    __hash__ = object.__hash__

    def __bool__(self):
        raise dense_only(self, "bool()")

    def __array__(self, dtype=None, copy=None):
        raise dense_only(self, "a NumPy conversion")

    def numpy(self):
        raise dense_only(self, "numpy()")

    def __getattr__(self, name: str):
        # Only reached for names the class lacks: every dense Tensor method.
        if name.startswith("__") or name.startswith("_"):
            raise AttributeError(name)
        if hasattr(Tensor, name):
            raise dense_only(self, f"{name}()", NameError_)
        raise NameError_(f"a {self.layout.name} tensor has no attribute {name!r}")

    def __deepcopy__(self, memo):
        import copy
        return type(self)(*(copy.deepcopy(p, memo) for p in tuple.__iter__(self)))

    def __reduce__(self):
        return (type(self), tuple(tuple.__iter__(self)))


class SparseCOO(SparseTensor):
    """A COO sparse tensor: `indices` [sparse_dim, nnz], `values` [nnz, *dense_dims].
    Made by rill.sparse_coo_tensor or x.to_sparse()."""

    __slots__ = ()
    layout = sparse_coo
    is_sparse = True
    _VALUES, _SIZE = 1, 2

    def __new__(cls, indices, values, size, coalesced):
        return tuple.__new__(cls, (indices, values, tuple(size), bool(coalesced)))

    def _with_values(self, values, coalesced=None):
        keep = _part(self, 3) if coalesced is None else coalesced
        return SparseCOO(_part(self, 0), values, self.shape, keep)

    def _map(self, fn):
        return SparseCOO(fn(_part(self, 0)), fn(_part(self, 1)), self.shape, _part(self, 3))

    def is_coalesced(self) -> bool:
        return _part(self, 3)

    def sparse_dim(self) -> int:
        return _part(self, 0).shape[0]

    def dense_dim(self) -> int:
        return self.ndim - self.sparse_dim()

    def _indices(self) -> Tensor:
        return _part(self, 0)

    def _values(self) -> Tensor:
        return _part(self, 1)

    def indices(self) -> Tensor:
        """The indices, [sparse_dim, nnz] (a coalesced tensor's only, as in PyTorch)."""
        self._need_coalesced("indices")
        return _part(self, 0)

    def values(self) -> Tensor:
        """The values, [nnz, *dense_dims] (a coalesced tensor's only, as in PyTorch)."""
        self._need_coalesced("values")
        return _part(self, 1)

    def _need_coalesced(self, what: str) -> None:
        if not _part(self, 3):
            raise ArgumentError(f"{what}() of an uncoalesced sparse tensor (repeated indices "
                                "may be stored); call .coalesce() first, or ._" + what +
                                "() for the stored entries as they are", op=what)

    def to_dense(self) -> Tensor:
        """The dense tensor (repeated indices add up); differentiable in the values."""
        indices, values = _part(self, 0), _part(self, 1)
        k = indices.shape[0]
        rows = math.prod(self.shape[:k])
        base = zeros((rows,) + tuple(values.shape[1:]), dtype=values.dtype, device=values.device)
        return index_add(base, (_linear(indices, self.shape),), values).reshape(self.shape)

    def coalesce(self):
        """One entry per distinct index, in row-major order, repeats summed (eager only,
        unless already coalesced: the number of entries depends on the indices)."""
        if _part(self, 3):
            return self
        _refuse_in_capture("coalesce", "coalesce it before the captured function and pass "
                                       "the coalesced tensor in")
        indices, values = _part(self, 0), _part(self, 1)
        k, shape = indices.shape[0], self.shape
        host = _host(indices).astype(np.int64)
        linear = np.ravel_multi_index(tuple(host), shape[:k]) if host.size else \
            np.zeros(0, np.int64)
        unique, inverse = np.unique(linear, return_inverse=True)
        merged = zeros((len(unique),) + tuple(values.shape[1:]), dtype=values.dtype,
                       device=values.device)
        merged = index_add(merged, (tensor(inverse.reshape(-1).astype(np.int64),
                                           device=values.device),), values)
        new_indices = np.stack(np.unravel_index(unique, shape[:k])).astype(np.int64) \
            if k else np.zeros((0, len(unique)), np.int64)
        return SparseCOO(tensor(new_indices.reshape(k, len(unique)), device=indices.device),
                         merged, shape, True)

    def to_sparse(self):
        return self

    def to_sparse_csr(self):
        """The CSR form of a 2-d COO tensor (coalesced first; eager only)."""
        if self.ndim != 2 or self.dense_dim():
            raise ShapeError(f"to_sparse_csr needs a 2-d tensor with no dense dims, got "
                             f"shape {list(self.shape)}", op="to_sparse_csr")
        _refuse_in_capture("to_sparse_csr", "convert before the captured function")
        s = self.coalesce()
        rows = _host(_part(s, 0)[0]).astype(np.int64)
        crow = np.r_[0, np.cumsum(np.bincount(rows, minlength=self.shape[0]))]
        return SparseCSR(tensor(crow.astype(np.int64), device=self.device), _part(s, 0)[1],
                         _part(s, 1), self.shape)

    def t(self):
        """The transpose of a 2-d COO tensor (its indices' rows swapped; not coalesced)."""
        if self.sparse_dim() != 2 or self.dense_dim():
            raise ShapeError(f"t() of a sparse tensor needs 2 sparse dims, got shape "
                             f"{list(self.shape)}", op="t")
        return SparseCOO(flip(_part(self, 0), axis=0), _part(self, 1), self.shape[::-1],
                         False)

    def _times_dense(self, other):
        if tuple(other.shape) != self.shape:
            raise ShapeError(f"sparse * dense needs the dense tensor in the sparse one's shape "
                             f"{list(self.shape)}, got {list(other.shape)}", op="multiply")
        indices, values = _part(self, 0), _part(self, 1)
        k = indices.shape[0]
        flat = other.reshape((math.prod(self.shape[:k]),) + tuple(self.shape[k:]))
        return self._with_values(values * take(flat, _linear(indices, self.shape), 0))

    def _plus_sparse(self, other):
        return SparseCOO(concat([_part(self, 0), _part(other, 0)], axis=1),
                         concat([_part(self, 1), _part(other, 1)]), self.shape, False)

    def __repr__(self) -> str:
        pad = " " * len("tensor(indices=")
        ind = repr(_part(self, 0)).replace("\n", "\n" + pad)
        val = repr(_part(self, 1)).replace("\n", "\n" + " " * len("       values="))
        return (f"tensor(indices={ind},\n       values={val},\n       size={self.shape}, "
                f"nnz={self.nnz}, layout=rill.sparse_coo)")


class SparseCSR(SparseTensor):
    """A CSR sparse matrix: row r's entries are col_indices[crow[r]:crow[r + 1]] and the
    values there. Made by rill.sparse_csr_tensor or x.to_sparse_csr()."""

    __slots__ = ()
    layout = sparse_csr
    _VALUES, _SIZE = 2, 3

    def __new__(cls, crow_indices, col_indices, values, size):
        return tuple.__new__(cls, (crow_indices, col_indices, values, tuple(size)))

    def _with_values(self, values, coalesced=None):
        return SparseCSR(_part(self, 0), _part(self, 1), values, self.shape)

    def _map(self, fn):
        return SparseCSR(fn(_part(self, 0)), fn(_part(self, 1)), fn(_part(self, 2)),
                         self.shape)

    def crow_indices(self) -> Tensor:
        return _part(self, 0)

    def col_indices(self) -> Tensor:
        return _part(self, 1)

    def values(self) -> Tensor:
        return _part(self, 2)

    def _rows(self) -> Tensor:
        return csr_rows(_part(self, 0), self.nnz)

    def to_sparse(self):
        """The COO form (coalesced: CSR's columns are sorted and distinct in each row)."""
        return SparseCOO(stack([self._rows(), _part(self, 1)]), _part(self, 2), self.shape,
                         True)

    def to_dense(self) -> Tensor:
        return self.to_sparse().to_dense()

    def to_sparse_csr(self):
        return self

    def _times_dense(self, other):
        coo = self.to_sparse()._times_dense(other)
        return self._with_values(_part(coo, 1))

    def _plus_sparse(self, other):
        _refuse_in_capture("add", "add them as COO tensors (s.to_sparse()), whose sum keeps "
                                  "both sets of entries")
        return (self.to_sparse() + other.to_sparse()).to_sparse_csr()

    def __repr__(self) -> str:
        return (f"tensor(crow_indices={_part(self, 0)!r},\n       col_indices="
                f"{_part(self, 1)!r},\n       values={_part(self, 2)!r},\n       size="
                f"{self.shape}, nnz={self.nnz}, layout=rill.sparse_csr)")


# ---- making sparse tensors ---------------------------------------------------------------

def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None,
                      requires_grad: bool = False, check_invariants: bool | None = None,
                      is_coalesced: bool | None = None) -> SparseCOO:
    """A COO sparse tensor with values[i] at indices[:, i] (PyTorch's arguments).

    Repeated indices are allowed (they add up); the tensor is then uncoalesced. `size`
    defaults to the smallest that holds the indices (eagerly only). Indices are checked
    against `size` eagerly unless check_invariants=False.

    >>> s = rill.sparse_coo_tensor([[0, 0], [1, 1]], [1.0, 2.0], (1, 2))
    >>> s.coalesce().values()
    tensor([3.])
    """
    op = "sparse_coo_tensor"
    values = _values_tensor(values, dtype, device, op)
    indices = _int_tensor(indices, values.device, "indices", op)
    if values.ndim == 0 or indices.ndim != 2 or indices.shape[1] != values.shape[0]:
        raise ShapeError(f"indices must be [sparse_dim, nnz] and values [nnz, ...], got "
                         f"indices {list(indices.shape)} and values {list(values.shape)}",
                         op=op)
    if indices.device is not values.device:
        indices = indices.to(values.device)
    k = indices.shape[0]
    if size is None:
        _refuse_in_capture(op, "pass size=")
        host = _host(indices)
        size = tuple(int(m) + 1 if host.size else 0 for m in
                     (host.max(axis=1) if host.size else [0] * k)) + tuple(values.shape[1:])
    size = tuple(int(n) for n in size)
    if len(size) != k + values.ndim - 1 or size[k:] != tuple(values.shape[1:]):
        raise ShapeError(f"size {list(size)} does not fit {k} sparse dims and values of shape "
                         f"{list(values.shape)} (size = sparse sizes + values.shape[1:])",
                         op=op)
    if indices.dtype.name != "int64":
        indices = indices.to("int64")
    if check_invariants is not False and not _capturing():
        host = _host(indices)
        bounds = np.asarray(size[:k], dtype=np.int64).reshape(k, 1)
        if host.size and ((host < 0) | (host >= bounds)).any():
            raise ShapeError(f"indices out of range for size {list(size)}", op=op)
        if is_coalesced:
            linear = np.ravel_multi_index(tuple(host), size[:k]) if host.size else host
            if (np.diff(linear) <= 0).any():
                raise ArgumentError("is_coalesced=True but the indices are not sorted and "
                                    "distinct", op=op)
    coalesced = bool(is_coalesced) or values.shape[0] <= 1
    return SparseCOO(indices, _leaf(values, requires_grad), size, coalesced)


def sparse_csr_tensor(crow_indices, col_indices, values, size=None, *, dtype=None, device=None,
                      requires_grad: bool = False,
                      check_invariants: bool | None = None) -> SparseCSR:
    """A CSR sparse matrix (PyTorch's arguments): row r holds col_indices and values
    [crow_indices[r] : crow_indices[r + 1]], its columns sorted and distinct (checked
    eagerly unless check_invariants=False)."""
    op = "sparse_csr_tensor"
    values = _values_tensor(values, dtype, device, op)
    crow = _int_tensor(crow_indices, values.device, "crow_indices", op).to(values.device)
    col = _int_tensor(col_indices, values.device, "col_indices", op).to(values.device)
    if crow.ndim != 1 or col.ndim != 1 or values.ndim != 1 or \
            col.shape[0] != values.shape[0] or crow.shape[0] < 1:
        raise ShapeError(f"expected crow_indices [rows + 1], col_indices [nnz] and values "
                         f"[nnz], got {list(crow.shape)}, {list(col.shape)}, "
                         f"{list(values.shape)} (batched and hybrid CSR are not supported)",
                         op=op)
    if size is None:
        _refuse_in_capture(op, "pass size=")
        cols = _host(col)
        size = (crow.shape[0] - 1, int(cols.max()) + 1 if cols.size else 0)
    size = tuple(int(n) for n in size)
    if len(size) != 2 or size[0] != crow.shape[0] - 1:
        raise ShapeError(f"size {list(size)} must be (rows, cols) with rows = "
                         f"len(crow_indices) - 1 = {crow.shape[0] - 1}", op=op)
    if check_invariants is not False and not _capturing():
        _check_csr(_host(crow), _host(col), size, op)
    crow, col = crow.to("int64"), col.to("int64")
    return SparseCSR(crow, col, _leaf(values, requires_grad), size)


def _check_csr(crow, col, size, op):
    counts = np.diff(crow)
    if crow[0] != 0 or crow[-1] != len(col) or (counts < 0).any():
        raise ShapeError(f"crow_indices must rise from 0 to nnz = {len(col)}", op=op)
    if col.size and (col.min() < 0 or col.max() >= size[1]):
        raise ShapeError(f"col_indices out of range for {size[1]} columns", op=op)
    rows = np.repeat(np.arange(size[0]), counts)
    if col.size > 1 and ((np.diff(rows) == 0) & (np.diff(col) <= 0)).any():
        raise ArgumentError("col_indices must be sorted and distinct within each row", op=op)


def to_sparse(x: Tensor, sparse_dim: int | None = None, *, layout=None):
    """x's non-zero entries as a COO tensor (`layout=rill.sparse_csr`: CSR); its values
    are gathered from x, so gradients reach x. Eager only."""
    if layout is sparse_csr:
        return to_sparse_csr(x)
    if layout not in (None, sparse_coo):
        raise ArgumentError(f"to_sparse makes rill.sparse_coo or rill.sparse_csr, got "
                            f"{layout!r}", op="to_sparse")
    k = x.ndim if sparse_dim is None else int(sparse_dim)
    if not 0 < k <= x.ndim:
        raise ShapeError(f"sparse_dim must be in [1, {x.ndim}], got {k}", op="to_sparse")
    _refuse_in_capture("to_sparse", "convert before the captured function and pass the "
                                    "sparse tensor in")
    host = _host(x).reshape((math.prod(x.shape[:k]),) + tuple(x.shape[k:]))
    stored = np.flatnonzero(host.reshape(host.shape[0], -1).any(axis=1)) if host.size else \
        np.zeros(0, np.int64)
    indices = np.stack(np.unravel_index(stored, x.shape[:k])).reshape(k, -1).astype(np.int64)
    position = tensor(stored.astype(np.int64), device=x.device)
    values = take(x.reshape((host.shape[0],) + tuple(x.shape[k:])), position, 0)
    return SparseCOO(tensor(indices, device=x.device), values, x.shape, True)


def to_sparse_csr(x: Tensor):
    """A 2-d tensor's non-zero entries as a CSR matrix (eager only)."""
    if x.ndim != 2:
        raise ShapeError(f"to_sparse_csr needs a 2-d tensor, got shape {list(x.shape)}",
                         op="to_sparse_csr")
    return to_sparse(x).to_sparse_csr()


def _to_sparse_method(self, sparse_dim=None, *, layout=None):
    """The non-zero entries as a COO sparse tensor (eager only; see rill.sparse_coo_tensor)."""
    return to_sparse(self, sparse_dim, layout=layout)


def _to_sparse_coo_method(self):
    """The non-zero entries as a COO sparse tensor (eager only): `to_sparse()`."""
    return to_sparse(self)


def _to_sparse_csr_method(self):
    """A 2-d tensor's non-zero entries as a CSR sparse matrix (eager only)."""
    return to_sparse_csr(self)


# Tensor's conversions to the sparse layouts, installed here (this module sits above tensor.py)
Tensor.to_sparse = _to_sparse_method
Tensor.to_sparse_coo = _to_sparse_coo_method
Tensor.to_sparse_csr = _to_sparse_csr_method
