"""rill.sparse: sparse tensors (COO and CSR layouts, tensors.py) and PyTorch's torch.sparse
functions on them (functions.py: mm, addmm, sum, softmax). SparseRows, the gradient of a
row gather, is an op's result and lives with the ops (ops/sparse_rows.py); it is named here
too, as `rill.sparse.SparseRows`."""
from ..ops.sparse_rows import SparseRows  # noqa: F401
from .functions import addmm, mm, softmax, sum  # noqa: F401,A004 - torch.sparse's names
from .tensors import (SparseCOO, SparseCSR, SparseTensor,  # noqa: F401
                      sparse_coo_tensor, sparse_csr_tensor)
