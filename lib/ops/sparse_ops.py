"""The sparse primitives: products and a softmax over a sparse tensor's stored entries.

A sparse tensor (lib/sparse/tensors.py) is its dense components, so these primitives take
the components, not a sparse value: the tape, capture and saved graphs see dense tensors.

    sparse_coo_mm(rows, cols, values, dense, n_rows)   [n_rows, n]: A @ dense, A's entries
                                                       (rows[i], cols[i], values[i]) in any
                                                       order, repeats adding up
    sparse_csr_mm(crow, col, values, dense)            [len(crow) - 1, n]: the same for CSR
    csr_rows(crow, nnz)                                int64 [nnz]: each CSR entry's row
    segment_softmax(values, segments, num_segments)    softmax over the entries sharing a
                                                       segment id (along each dense axis)

Gradients: A @ dense is linear in dense (A^T g: the COO product with rows and columns
swapped, so the transpose needs no sorting) and in the values (g[row] . dense[col] per
entry). Index inputs get none. There are CPU kernels only (kernels/numpy/sparse.py).
vmap over the dense operand (or the softmax's values) folds the members into columns; a
batched index input runs once per member.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..eager.bind import bind
from ..errors import DTypeError, ShapeError
from . import attrs as A
from . import batching
from .primitive import PRIMITIVES, primitive

_CPU = ("sparse tensors have CPU kernels only (SciPy or NumPy); move the sparse tensor and "
        "the dense operand with .to('cpu'), or use s.to_dense() on the gpu")


def _indices(x, what: str):
    if not x.dtype.is_integer or x.ndim != 1:
        raise DTypeError(f"{what} must be a 1-d integer tensor, got {x.dtype}{list(x.shape)}")


def _entries(values, dense, nnz: int):
    if not values.dtype.is_floating:
        raise DTypeError(f"values must be floating point, got {values.dtype}")
    if values.dtype is not dense.dtype:
        raise DTypeError(f"the sparse values ({values.dtype}) and the dense operand "
                         f"({dense.dtype}) must have one dtype; cast one of them")
    if values.shape != (nnz,):
        raise ShapeError(f"values must have shape ({nnz},) (one per index), got "
                         f"{list(values.shape)}")
    if dense.ndim != 2:
        raise ShapeError(f"the dense operand must be 2-d, got shape {list(dense.shape)}")


def _coo_mm_infer(rows, cols, values, dense, *, n_rows):
    _indices(rows, "rows")
    _indices(cols, "cols")
    if rows.shape != cols.shape:
        raise ShapeError(f"rows {list(rows.shape)} and cols {list(cols.shape)} differ")
    _entries(values, dense, rows.shape[0])
    return (n_rows, dense.shape[1]), dense.dtype


def _csr_mm_infer(crow, col, values, dense):
    _indices(crow, "crow_indices")
    _indices(col, "col_indices")
    if crow.shape[0] < 1:
        raise ShapeError("crow_indices needs at least one entry (rows + 1)")
    _entries(values, dense, col.shape[0])
    return (crow.shape[0] - 1, dense.shape[1]), dense.dtype


def _csr_rows_infer(crow, *, nnz):
    _indices(crow, "crow_indices")
    if crow.shape[0] < 1:
        raise ShapeError("crow_indices needs at least one entry (rows + 1)")
    return (nnz,), dt.int64


def _softmax_infer(values, segments, *, num_segments):
    if not values.dtype.is_floating:
        raise DTypeError(f"softmax needs floating values, got {values.dtype}")
    _indices(segments, "segments")
    if values.ndim < 1 or values.shape[0] != segments.shape[0]:
        raise ShapeError(f"values {list(values.shape)} need one segment id per entry, got "
                         f"{segments.shape[0]}")
    return values.shape, values.dtype


def _per_entry(g, dense, rows, cols):
    """d(sum g * (A @ dense)) / d(values): g[row] . dense[col] for each entry."""
    from .indexing import take
    from .reduce import sum as sum_
    return sum_(take(g, rows, 0) * take(dense, cols, 0), axis=1)


def _coo_mm_vjp(g, out, rows, cols, values, dense, *, n_rows):
    d_values = _per_entry(g, dense, rows, cols) if values.requires_grad else None
    d_dense = coo_mm(cols, rows, values, g, dense.shape[0]) if dense.requires_grad else None
    return None, None, d_values, d_dense


def _csr_mm_vjp(g, out, crow, col, values, dense):
    rows = csr_rows(crow, col.shape[0])
    d_values = _per_entry(g, dense, rows, col) if values.requires_grad else None
    d_dense = coo_mm(col, rows, values, g, dense.shape[0]) if dense.requires_grad else None
    return None, None, d_values, d_dense


def _softmax_vjp(g, y, values, segments, *, num_segments):
    # y_i = e_i / S: dv_i = y_i (g_i - sum over i's segment of g_j y_j)
    from .creation import zeros
    from .indexing import index_add, take
    gy = g * y
    totals = index_add(zeros((num_segments,) + tuple(values.shape[1:]), dtype=gy.dtype,
                             device=gy.device), (segments,), gy)
    return y * (g - take(totals, segments, 0)), None


def _batched_only(position: int, fold):
    """A vmap rule for when only input `position` is batched (else the loop): its batch
    axis moved to axis 1, where `fold` lets the op treat the members as more columns."""
    def rule(prim, size, args, dims, attrs):
        if any(d is not None for i, d in enumerate(dims) if i != position):
            return batching.loop(prim, size, args, dims, attrs)
        x = batching.to_front(args[position], dims[position])
        x = bind(PRIMITIVES["transpose"], x, axes=(1, 0) + tuple(range(2, x.ndim)))
        return fold(prim, size, list(args[:position]) + [x] + list(args[position + 1:]),
                    attrs), 1
    return rule


def _as_columns(prim, size, args, attrs):
    # dense [k, B, n] -> [k, B*n]: one product for every member; the result [m, B, n]
    dense = args[-1]
    flat = bind(PRIMITIVES["reshape"], dense, shape=(dense.shape[0], size * dense.shape[2]))
    out = bind(prim, *args[:-1], flat, **attrs)
    return bind(PRIMITIVES["reshape"], out, shape=(out.shape[0], size, dense.shape[2]))


def _as_dense_axis(prim, size, args, attrs):
    # values [nnz, B, ...]: a trailing axis, along which the softmax is separate already
    return bind(prim, *args, **attrs)


sparse_coo_mm_p = primitive("sparse_coo_mm", _coo_mm_infer, _coo_mm_vjp, cpu_only=_CPU,
                            attrs={"n_rows": A.Int(0)}, batch=_batched_only(3, _as_columns))
sparse_csr_mm_p = primitive("sparse_csr_mm", _csr_mm_infer, _csr_mm_vjp, cpu_only=_CPU,
                            attrs={}, batch=_batched_only(3, _as_columns))
csr_rows_p = primitive("csr_rows", _csr_rows_infer, None, cpu_only=_CPU,
                       attrs={"nnz": A.Int(0)}, batch=batching.loop)
segment_softmax_p = primitive("segment_softmax", _softmax_infer, _softmax_vjp, cpu_only=_CPU,
                              save_output=True, attrs={"num_segments": A.Int(0)},
                              batch=_batched_only(0, _as_dense_axis))


def coo_mm(rows, cols, values, dense, n_rows: int):
    """The [n_rows, n] product of the COO matrix (rows, cols, values) and dense [k, n]."""
    return bind(sparse_coo_mm_p, rows, cols, values, dense, n_rows=int(n_rows))


def csr_mm(crow, col, values, dense):
    """The product of the CSR matrix (crow, col, values) and dense [k, n]."""
    return bind(sparse_csr_mm_p, crow, col, values, dense)


def csr_rows(crow, nnz: int):
    """The row of each of a CSR matrix's nnz entries (int64)."""
    return bind(csr_rows_p, crow, nnz=int(nnz))


def segment_softmax(values, segments, num_segments: int):
    """Softmax over the entries of `values` that share an id in `segments`."""
    return bind(segment_softmax_p, values, segments, num_segments=int(num_segments))


from ..kernels.numpy import sparse as _kernels  # noqa: E402,F401 - registers the CPU kernels
