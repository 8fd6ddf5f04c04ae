"""cholesky, eigh, eigvalsh, qr, svd, svdvals: the public functions over the decomposition
primitives (lib/linalg/primitives.py), with the standard's signatures and named results."""
from __future__ import annotations

from typing import NamedTuple

from ..errors import reports_as
from ..eager.bind import bind
from ..ops.arguments import as_bool, as_choice, as_tensor
from ..tensor import Tensor
from .primitives import adjoint, cholesky_p, eigh_p, qr_p, require_kernel, svd_p


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


def _input(x, prim, op: str):
    x = as_tensor(x, "x", op)
    require_kernel(prim, x, op)
    return x


@reports_as("cholesky")
def cholesky(x, /, *, upper: bool = False):
    """L with x = L L^H for Hermitian (real: symmetric) positive-definite x (only its lower
    triangle is read; L's diagonal is real and positive); U = L^H with x = U^H U when
    `upper`. An ArgumentError if x is not positive definite.

    >>> rill.linalg.cholesky(rill.tensor([[4., 2.], [2., 2.]]))
    tensor([[2., 0.],
            [1., 1.]])
    """
    upper = as_bool(upper, "upper", "cholesky")
    lower = bind(cholesky_p, _input(x, cholesky_p, "cholesky"))
    return adjoint(lower) if upper else lower


@reports_as("eigh")
def eigh(x, /):
    """(eigenvalues, eigenvectors) of Hermitian (real: symmetric) x, its lower triangle read:
    real values in ascending order, vectors as columns, each fixed up to its sign (a phase
    for complex x) which a differentiated loss must not depend on. The gradient assumes
    distinct eigenvalues (a loss depending on the basis of a repeated one has none).

    >>> rill.linalg.eigh(rill.tensor([[2., 0.], [0., 1.]])).eigenvalues
    tensor([1., 2.])
    """
    return EighResult(*bind(eigh_p, _input(x, eigh_p, "eigh")))


@reports_as("eigvalsh")
def eigvalsh(x, /):
    """The real eigenvalues of Hermitian x, ascending (see `eigh`)."""
    return bind(eigh_p, _input(x, eigh_p, "eigvalsh"))[0]


@reports_as("qr")
def qr(x, /, *, mode: str = "reduced"):
    """(Q, R) with x = Q R, Q's columns orthonormal (unitary for complex x) and R upper
    triangular with a real diagonal: Q (..., M, K) and
    R (..., K, N), K = min(M, N), for mode 'reduced'; Q (..., M, M), R (..., M, N) for
    'complete'. Differentiable for M >= N ('reduced', or square).

    >>> [tuple(t.shape) for t in rill.linalg.qr(rill.ones(4, 2))]
    [(4, 2), (2, 2)]
    """
    mode = as_choice(mode, "mode", "qr", ("reduced", "complete"))
    return QRResult(*bind(qr_p, _input(x, qr_p, "qr"), mode=mode))


@reports_as("svd")
def svd(x, /, *, full_matrices: bool = True):
    """(U, S, Vh) with x = U diag(S) Vh, S real and descending, K = min(M, N): U (..., M, M),
    Vh (..., N, N) when `full_matrices`, else U (..., M, K), Vh (..., K, N). Each singular
    vector pair is fixed up to a sign (a phase for complex x), so a differentiated loss
    must not depend on it; the gradient needs full_matrices=False for non-square x and
    assumes distinct values.

    >>> rill.linalg.svd(rill.tensor([[3., 0.], [0., -2.]])).S
    tensor([3., 2.])
    """
    full_matrices = as_bool(full_matrices, "full_matrices", "svd")
    return SVDResult(*bind(svd_p, _input(x, svd_p, "svd"), full_matrices=full_matrices))


@reports_as("svdvals")
def svdvals(x, /):
    """The singular values of x, real and descending: (..., min(M, N))."""
    return bind(svd_p, _input(x, svd_p, "svdvals"), full_matrices=False)[1]
