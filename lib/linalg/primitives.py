"""The decompositions as primitives: cholesky, eigh, qr, svd, inv, solve, det, slogdet.

Each is declared once here with its shape/dtype rule and its gradient rule (in rill ops, so
higher orders, capture and the gradient of a captured function come free); the CPU kernels
are kernels/numpy/decompositions.py. There is no gpu kernel yet: the public functions
(lib/linalg/) say so by name before binding (`require_kernel`).

All act on the last two axes and batch over the rest. They take real floating and complex
dtypes; eigenvalues, singular values and slogdet's logabsdet are real (complex inputs give
their real counterpart, float64 for complex128). Complex gradients follow PyTorch's
convention (lib/autodiff/backward.py: the cotangent G of a real loss with dL = Re tr(G^H dA)).
None of these maps is holomorphic in the sense the automatic conjugation assumes (eigh, svd,
qr and cholesky work on Hermitian or unitary structure, slogdet takes |det|), so every rule
is written with its conjugates explicit (`adjoint` is the conjugate transpose) and all are
registered in COMPLEX_RULES; for real dtypes the conjugates are no-ops.
"""
from __future__ import annotations

from ..dtypes import real_of
from ..ops.primitive import COMPLEX_RULES
from ..eager.bind import bind
from ..errors import DeviceError, DTypeError, GradientError, ShapeError
from ..ops import attrs as A
from ..ops import batching
from ..ops import promotion
from ..ops.primitive import primitive
from ..ops.rules import broadcast_shapes
from ..ops.shape import swapaxes, tril
from ..ops.elementwise import (abs as magnitude, conj as conj_, less_equal, real, sum_to_shape,
                               where)
from ..ops.creation import eye
from ..ops.reduce import cumprod, max as largest

# ---- shared pieces -------------------------------------------------------------------------


def floating(x, what: str = "a floating-point or complex tensor") -> None:
    """The decompositions take float16/bfloat16/float32/float64 and complex64/complex128."""
    if x.dtype.kind not in "fc":
        raise DTypeError(f"expected {what}, got {x.dtype}; cast first, e.g. "
                         f"x.astype(rill.float64)")


def matrices(x, square: bool = False) -> None:
    """x is a stack of matrices (..., M, N), square when asked."""
    if x.ndim < 2:
        raise ShapeError(f"expected a matrix or a stack of matrices (at least 2-d), got shape "
                         f"{tuple(x.shape)}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"expected square matrices (..., n, n), got shape {tuple(x.shape)}")


def require_kernel(prim, x, op: str) -> None:
    """A DeviceError naming the function when x's device has no kernel for `prim` (the gpu:
    there is no Triton decomposition), with the way round it."""
    kind = x.device.kind
    if kind not in prim.kernels:
        raise DeviceError(f"rill.linalg.{op} has no {kind} kernel (decompositions run on the "
                          f"CPU only); compute it there: rill.linalg.{op}(x.to('cpu')), then "
                          f".to('{x.device}') the result", op=op)


def mT(x):
    return swapaxes(x, -1, -2)


def conj(x):
    """The complex conjugate; x itself for real dtypes (no node on the tape)."""
    return conj_(x) if x.dtype.kind == "c" else x


def adjoint(x):
    """The conjugate transpose (the transpose for real dtypes)."""
    return conj(mT(x))


def _saved(outs, prim, x, **attrs):
    """The outputs a rule reads. The tape holds a multiple-result primitive's outputs weakly
    (they point back at it), so one the caller dropped (eigvalsh drops the eigenvectors) is
    gone by the time of backward: compute them again (LAPACK is deterministic, so they are
    the same factors)."""
    if outs is None or any(o is None for o in outs):
        return bind(prim, x, **attrs)
    return outs


def _diag_embed(v):
    """(..., k) -> (..., k, k) with v on the diagonal."""
    return v[..., None] * eye(v.shape[-1], dtype=v.dtype, device=v.device)


def _safe_reciprocal_gaps(values):
    """F[..., i, j] = 1 / (values[j] - values[i]), and 0 where the two are equal (i == j, and
    ties: a repeated eigenvalue or singular value). Dropping the ties is exact for a loss that
    does not depend on the basis chosen inside a repeated eigenspace (eigvalsh, svdvals, a
    projector); otherwise the gradient there is undefined and this gives the finite part."""
    import numpy as np
    gaps = values[..., None, :] - values[..., :, None]
    # LAPACK returns a repeated eigenvalue as values some ulps apart (2e-15 seen for a 2 in
    # a 4x4): a gap within the spectrum's rounding, generously taken as 1000 * n * eps times
    # its largest magnitude, is a tie (a gap that small would give a 1/gap of 1e12 anyway).
    n = values.shape[-1]
    eps = float(np.finfo(values.dtype.storage).eps)
    scale = largest(magnitude(values), axis=-1, keepdims=True)[..., None] if n else 0.0
    tie = less_equal(magnitude(gaps), 1000 * n * eps * scale)
    return where(tie, 0.0, 1.0 / where(tie, 1.0, gaps))


# ---- cholesky ------------------------------------------------------------------------------


def _cholesky_infer(x):
    floating(x)
    matrices(x, square=True)
    return x.shape, x.dtype


def _phi(m):
    """The lower triangle with the diagonal halved (Murray 2016's Phi)."""
    return tril(m) - 0.5 * m * eye(m.shape[-1], dtype=m.dtype, device=m.device)


def _cholesky_vjp(g, lower, x):
    # dL = L Phi(L^-1 dA L^-H) gives <G, dL> = <L^-H Phi(L^H G) L^-1, dA>; dA is symmetric,
    # so the gradient is that matrix's symmetric part (what PyTorch reports too).
    p = _phi(adjoint(lower) @ g)
    s = adjoint(solve_matrix(adjoint(lower), adjoint(solve_matrix(adjoint(lower), p))))
    return (0.5 * (s + adjoint(s)),)


# LAPACK's factorizations have no Triton counterpart here; the public functions say so.
_LAPACK = "a LAPACK factorization; rill runs it on the CPU"

cholesky_p = primitive("cholesky", _cholesky_infer, _cholesky_vjp, save_output=True,
                       cpu_only=_LAPACK, attrs={}, batch=batching.leading)

# ---- eigh ----------------------------------------------------------------------------------


def _eigh_infer(x):
    floating(x)
    matrices(x, square=True)
    return [(x.shape[:-1], real_of(x.dtype)), (x.shape, x.dtype)]


def _eigh_vjp(gs, outs, x):
    # dV = V (F o (V^H dA V)) with F[i, j] = 1 / (l[j] - l[i]); dl = diag(V^H dA V). The
    # skew-Hermitian part of V^H gV is what a Hermitian dA can reach (F is real, the
    # eigenvalues being real), so the gradient is Hermitian. Complex eigenvectors are fixed
    # up to a phase each, which a differentiated loss must not depend on; the imaginary
    # diagonal of that skew part (the phases' direction) is dropped with F's zero diagonal.
    g_values, g_vectors = gs
    values, vectors = _saved(outs, eigh_p, x)
    k = adjoint(vectors) @ g_vectors
    inner = _safe_reciprocal_gaps(values) * (0.5 * (k - adjoint(k))) + _diag_embed(g_values)
    return (vectors @ inner @ adjoint(vectors),)


eigh_p = primitive("eigh", _eigh_infer, _eigh_vjp, multiple_results=True, save_output=True,
                   cpu_only=_LAPACK, attrs={}, batch=batching.leading)

# ---- qr ------------------------------------------------------------------------------------


def _qr_infer(x, *, mode):
    floating(x)
    matrices(x)
    *batch, m, n = x.shape
    k = min(m, n) if mode == "reduced" else m
    return [(tuple(batch) + (m, k), x.dtype), (tuple(batch) + (k, n), x.dtype)]


def _copy_lower_to_upper(m):
    """The Hermitian matrix with m's strict lower triangle and the real part of its diagonal.
    (LAPACK's R has a real diagonal, so Q^H dQ's imaginary diagonal is pinned by dA and the
    imaginary part of diag(m) cancels out of the gradient.)"""
    lower = tril(m, -1)
    diag = (real(m) if m.dtype.kind == "c" else m) * eye(m.shape[-1], dtype=real_of(m.dtype),
                                                          device=m.device)
    return lower + adjoint(lower) + diag


def _qr_vjp(gs, outs, x, mode):
    g_q, g_r = gs
    q, r = _saved(outs, qr_p, x, mode=mode)
    m, n = x.shape[-2:]
    if m < n or (mode == "complete" and m != n):
        raise GradientError(f"the gradient of qr is implemented for matrices with rows >= "
                            f"columns (mode='reduced', or square), got shape {tuple(x.shape)}",
                            op="qr")
    # A = QR, Q^H Q = I, R upper: gA = (gQ + Q copyltu(R gR^H - gQ^H Q)) R^-H.
    m_ = r @ adjoint(g_r) - adjoint(g_q) @ q
    b = g_q + q @ _copy_lower_to_upper(m_)
    return (adjoint(solve_matrix(r, adjoint(b))),)


qr_p = primitive("qr", _qr_infer, _qr_vjp, multiple_results=True, save_output=True,
                 cpu_only=_LAPACK, attrs=dict(mode=A.Choice("reduced", "complete")),
                 batch=batching.leading)

# ---- svd -----------------------------------------------------------------------------------


def _svd_infer(x, *, full_matrices):
    floating(x)
    matrices(x)
    *batch, m, n = x.shape
    k = min(m, n)
    batch = tuple(batch)
    u_cols, v_rows = (m, n) if full_matrices else (k, k)
    return [(batch + (m, u_cols), x.dtype), (batch + (k,), real_of(x.dtype)),
            (batch + (v_rows, n), x.dtype)]


def _svd_vjp(gs, outs, x, full_matrices):
    g_u, g_s, g_vh = gs
    u, s, vh = _saved(outs, svd_p, x, full_matrices=full_matrices)
    m, n = x.shape[-2:]
    if full_matrices and m != n:
        raise GradientError("the gradient of svd with full_matrices=True is defined only for "
                            f"square matrices, got shape {tuple(x.shape)}; use "
                            "full_matrices=False", op="svd")
    # U and V are fixed up to a sign per column pair (real) or a phase e^{i t} (complex),
    # which a differentiated loss may not depend on (as PyTorch documents).
    v, g_v = adjoint(vh), adjoint(g_vh)
    f = _safe_reciprocal_gaps(s * s)  # F[i, j] = 1 / (s[j]^2 - s[i]^2)
    uhgu, vhgv = adjoint(u) @ g_u, adjoint(v) @ g_v
    j = f * uhgu
    kk = f * vhgv
    inner = ((j + adjoint(j)) * s[..., None, :] + s[..., :, None] * (kk + adjoint(kk))
             + _diag_embed(g_s))
    if x.dtype.kind == "c":
        # Im diag(U^H dA V) = s (Im diag(U^H dU) - Im diag(V^H dV)): only the difference of
        # the two phase velocities is fixed by dA. Split it evenly between U and V; for a
        # phase-invariant loss Im diag(U^H gU) = -Im diag(V^H gV) and the split is exact.
        from ..ops.elementwise import imag
        from .products import diagonal
        phase = (imag(diagonal(uhgu)) - imag(diagonal(vhgv))) / (2 * s)
        inner = inner + 1j * _diag_embed(phase)
    g_a = u @ inner @ vh
    k = s.shape[-1]
    # The parts of gU, gV outside the spans of U, V (a tall or wide matrix).
    if m > k:
        g_a = g_a + ((eye(m, dtype=x.dtype, device=x.device) - u @ adjoint(u)) @ g_u
                     / s[..., None, :]) @ vh
    if n > k:
        g_a = g_a + u @ (adjoint(g_v) @ (eye(n, dtype=x.dtype, device=x.device)
                                          - v @ vh) / s[..., :, None])
    return (g_a,)


svd_p = primitive("svd", _svd_infer, _svd_vjp, multiple_results=True, save_output=True,
                  cpu_only=_LAPACK, attrs=dict(full_matrices=A.BOOL), batch=batching.leading)

# ---- inv, solve (LU) -----------------------------------------------------------------------


def _inv_infer(x):
    floating(x)
    matrices(x, square=True)
    return x.shape, x.dtype


def _inv_vjp(g, out, x):
    # d(A^-1) = -A^-1 dA A^-1.
    return (-(adjoint(out) @ g @ adjoint(out)),)


inv_p = primitive("inv", _inv_infer, _inv_vjp, save_output=True, cpu_only=_LAPACK, attrs={},
                  batch=batching.leading)


def _solve_infer(a, b):
    floating(a)
    floating(b)
    matrices(a, square=True)
    if b.ndim < 2:
        raise ShapeError(f"expected b of shape (..., n, k), got {tuple(b.shape)}")
    if b.shape[-2] != a.shape[-1]:
        raise ShapeError(f"a is {tuple(a.shape)} but b has {b.shape[-2]} rows; expected "
                         f"{a.shape[-1]}")
    try:
        batch = broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    except ShapeError:
        raise ShapeError(f"batch dimensions of {tuple(a.shape)} and {tuple(b.shape)} do not "
                         "broadcast") from None
    return batch + tuple(b.shape[-2:]), a.dtype


def _solve_vjp(g, out, a, b):
    # X = A^-1 B: gB = A^-H g, gA = -gB X^H (summed over broadcast batch axes).
    g_b = solve_matrix(adjoint(a), g)
    g_a = -(g_b @ adjoint(out)) if a.requires_grad else None
    return (None if g_a is None else sum_to_shape(g_a, a.shape),
            sum_to_shape(g_b, b.shape) if b.requires_grad else None)


solve_p = primitive("solve", _solve_infer, _solve_vjp, normalize=promotion.common,
                    save_output=True, cpu_only=_LAPACK, attrs={}, batch=batching.leading)


def solve_matrix(a, b):
    """A^-1 B for (..., n, n) and (..., n, k), batches broadcast (the gradients' solver)."""
    return bind(solve_p, a, b)


# ---- det, slogdet --------------------------------------------------------------------------


def _det_infer(x):
    floating(x)
    matrices(x, square=True)
    return x.shape[:-2], x.dtype


def _det_vjp(g, out, x):
    # d det(A) = tr(adj(A) dA) = <adj(A)^H, dA>, so G = g adj(A)^H. From the SVD A = U S V^H,
    # adj(A)^H is conj(det(U) det(V^H)) U diag(product of the other s) V^H: finite for a
    # singular A as well, where conj(det(A)) A^-H is not.
    u, s, vh = bind(svd_p, x, full_matrices=False)
    others = (cumprod(s, axis=-1, exclusive=True)
              * cumprod(s, axis=-1, exclusive=True, reverse=True))
    sign = bind(det_p, u) * bind(det_p, vh)
    adj_h = (u * others[..., None, :]) @ vh
    return ((g * conj(sign))[..., None, None] * adj_h,)


det_p = primitive("det", _det_infer, _det_vjp, cpu_only=_LAPACK, attrs={}, batch=batching.leading)


def _slogdet_infer(x):
    floating(x)
    matrices(x, square=True)
    return [(x.shape[:-2], x.dtype), (x.shape[:-2], real_of(x.dtype))]


def _slogdet_vjp(gs, outs, x):
    # d log|det A| = Re tr(A^-1 dA) = Re<A^-H, dA>. A real sign is piecewise constant; a
    # complex one, sign = e^{i t}, moves with dt = Im tr(A^-1 dA), which gives gA the extra
    # i Im(g_sign conj(sign)) A^-H.
    g_sign, g_logabs = gs
    coefficient = g_logabs
    if x.dtype.kind == "c":
        from ..ops.elementwise import imag
        sign = _saved(outs, slogdet_p, x)[0]
        coefficient = g_logabs + 1j * imag(g_sign * conj(sign))
    return (coefficient[..., None, None] * adjoint(bind(inv_p, x)),)


slogdet_p = primitive("slogdet", _slogdet_infer, _slogdet_vjp, multiple_results=True,
                      save_output=True, cpu_only=_LAPACK, attrs={}, batch=batching.leading)

# Every rule above writes its conjugates itself (see the module docstring).
COMPLEX_RULES.update({"cholesky", "eigh", "qr", "svd", "inv", "solve", "det", "slogdet"})
