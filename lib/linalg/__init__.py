"""rill.linalg: the Array API standard's linear-algebra extension (version 2024.12).

Every function acts on the last axes and batches over the leading ones. Products, views and
norms (matmul, matrix_transpose, vecdot, outer, tensordot, cross, diagonal, trace,
vector_norm, matrix_norm 'fro'/1/-1/inf/-inf, matrix_power) are composites of rill ops and run
wherever those do. The decompositions (cholesky, eigh, eigvalsh, qr, svd, svdvals, inv,
solve, det, slogdet, and pinv, matrix_rank, matrix_norm 2/-2/'nuc' over the SVD) are
primitives with NumPy (LAPACK) kernels: CPU only, a DeviceError on the gpu. They take real
floating and complex dtypes; float16 computes in float32 and rounds back, bfloat16 likewise.
For complex input the standard's real results stay real (eigenvalues, singular values,
logabsdet, the norms), eigh/eigvalsh/cholesky read Hermitian matrices, slogdet's sign has
modulus 1 and vecdot conjugates x1; gradients follow PyTorch's complex convention. A
singular matrix for inv/solve, or one that is not positive definite for cholesky, is an
ArgumentError naming the function.
"""
from .decompositions import (EighResult, QRResult, SVDResult, cholesky, eigh, eigvalsh, qr,
                             svd, svdvals)
from .inverses import SlogdetResult, det, inv, matrix_power, matrix_rank, pinv, slogdet, solve
from .norms import matrix_norm, vector_norm
from .products import cross, matmul, outer, tensordot, trace, vecdot
# Views of their input, under the one view rule (ops/views.py):
from ..ops.view_spellings import matrix_transpose, linalg_diagonal as diagonal

__all__ = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
           "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv",
           "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot",
           "vector_norm"]
