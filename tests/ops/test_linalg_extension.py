"""rill.linalg, the Array API standard's (2024.12) linear-algebra extension: values against
numpy.linalg in float64 and complex128 (invariant quantities where eigen- and singular vectors
are fixed only up to sign or phase), gradients against PyTorch's autograd and finite
differences in float64 and complex128 (PyTorch's complex convention), the standard's
signatures, float32/float16/complex64 results, capture, the gpu device (a DeviceError for the
decompositions) and bad input."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import rill

L = rill.linalg
TL = torch.linalg


def rand(rng, *shape):
    return rng.standard_normal(shape)


def spd(rng, *shape):
    """Symmetric positive-definite matrices, well conditioned."""
    b = rand(rng, *shape)
    return b @ np.swapaxes(b, -1, -2) + shape[-1] * np.eye(shape[-1])


def sym(t):
    """The symmetric part: functions that read one triangle are differentiated through it,
    so finite differences, PyTorch and rill all see the same function of all entries."""
    return (t + t.swapaxes(-1, -2) if isinstance(t, torch.Tensor) else
            t + L.matrix_transpose(t)) * 0.5


def close(got, expected, tol=1e-10):
    got = got.numpy() if isinstance(got, rill.Tensor) else np.asarray(got)
    assert got.shape == np.shape(expected), (got.shape, np.shape(expected))
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


# ---- values against numpy.linalg (float64) -------------------------------------------------

R = np.random.default_rng(1)
A = rand(R, 2, 4, 4)           # a batch of square matrices
T = rand(R, 2, 5, 3)           # tall
W = rand(R, 3, 5)              # wide
P = spd(R, 2, 4, 4)
V3 = rand(R, 2, 4, 3)

VALUES = [
    ("cholesky", lambda x: L.cholesky(x), lambda x: np.linalg.cholesky(x), [P]),
    ("cholesky_upper", lambda x: L.cholesky(x, upper=True),
     lambda x: np.linalg.cholesky(x, upper=True), [P]),
    ("eigvalsh", L.eigvalsh, np.linalg.eigvalsh, [P - 5]),
    ("inv", L.inv, np.linalg.inv, [A]),
    ("det", L.det, np.linalg.det, [A]),
    ("det_2d", L.det, np.linalg.det, [A[0]]),
    ("solve", L.solve, np.linalg.solve, [A, rand(R, 2, 4, 3)]),
    ("solve_broadcast", L.solve, lambda a, b: np.linalg.solve(a, np.broadcast_to(b, (2, 4, 2))),
     [A, rand(R, 4, 2)]),
    ("solve_vector", L.solve, np.linalg.solve, [A, rand(R, 4)]),
    ("svdvals", L.svdvals, np.linalg.svdvals, [T]),
    ("svdvals_wide", L.svdvals, np.linalg.svdvals, [W]),
    ("pinv", L.pinv, np.linalg.pinv, [T]),
    ("pinv_wide_rtol", lambda x: L.pinv(x, rtol=0.3), lambda x: np.linalg.pinv(x, rtol=0.3), [W]),
    ("matrix_rank", L.matrix_rank, np.linalg.matrix_rank, [np.stack([T[0], T[0] @ np.diag(
        [1.0, 1.0, 0.0])])]),
    ("matrix_rank_rtol", lambda x: L.matrix_rank(x, rtol=0.5),
     lambda x: np.linalg.matrix_rank(x, rtol=0.5), [T]),
    ("matrix_power_5", lambda x: L.matrix_power(x, 5), lambda x: np.linalg.matrix_power(x, 5),
     [A]),
    ("matrix_power_0", lambda x: L.matrix_power(x, 0), lambda x: np.linalg.matrix_power(x, 0),
     [A]),
    ("matrix_power_-3", lambda x: L.matrix_power(x, -3),
     lambda x: np.linalg.matrix_power(x, -3), [A]),
    ("matrix_transpose", L.matrix_transpose, np.linalg.matrix_transpose, [T]),
    ("matmul", L.matmul, np.linalg.matmul, [T, rand(R, 3)]),
    ("outer", L.outer, np.linalg.outer, [rand(R, 3), rand(R, 4)]),
    ("tensordot", L.tensordot, np.linalg.tensordot, [rand(R, 2, 3, 4), rand(R, 3, 4, 5)]),
    ("tensordot_axes", lambda a, b: L.tensordot(a, b, axes=((0, 2), (1, 0))),
     lambda a, b: np.linalg.tensordot(a, b, axes=((0, 2), (1, 0))),
     [rand(R, 2, 3, 4), rand(R, 4, 2, 5)]),
    ("vecdot", L.vecdot, np.linalg.vecdot, [V3, rand(R, 3)]),
    ("vecdot_axis", lambda a, b: L.vecdot(a, b, axis=-2),
     lambda a, b: np.linalg.vecdot(a, b, axis=-2), [V3, rand(R, 4, 1)]),
    ("cross", L.cross, np.linalg.cross, [V3, rand(R, 3)]),
    ("cross_axis", lambda a, b: L.cross(a, b, axis=-2),
     lambda a, b: np.cross(a, b, axis=-2), [rand(R, 2, 3, 4), rand(R, 3, 4)]),
    ("diagonal", L.diagonal, np.linalg.diagonal, [T]),
    *[(f"diagonal_{k}", lambda x, k=k: L.diagonal(x, offset=k),
       lambda x, k=k: np.linalg.diagonal(x, offset=k), [T]) for k in (1, -1, -4, 3, 7)],
    *[(f"trace_{k}", lambda x, k=k: L.trace(x, offset=k),
       lambda x, k=k: np.linalg.trace(x, offset=k), [T]) for k in (0, 2, -3)],
    *[(f"vector_norm_{o}", lambda x, o=o: L.vector_norm(x, ord=o, axis=(0, 2)),
       lambda x, o=o: np.linalg.vector_norm(x, ord=o, axis=(0, 2)), [T])
      for o in (2, 1, 3.5, 0, -1, np.inf, -np.inf)],
    ("vector_norm_all_keepdims", lambda x: L.vector_norm(x, keepdims=True),
     lambda x: np.linalg.vector_norm(x, keepdims=True), [T]),
    *[(f"matrix_norm_{o}", lambda x, o=o: L.matrix_norm(x, ord=o),
       lambda x, o=o: np.linalg.matrix_norm(x, ord=o), [T])
      for o in ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)],
    ("matrix_norm_keepdims", lambda x: L.matrix_norm(x, ord=1, keepdims=True),
     lambda x: np.linalg.matrix_norm(x, ord=1, keepdims=True), [W]),
]


@pytest.mark.parametrize("fn, ref, arrays", [v[1:] for v in VALUES], ids=[v[0] for v in VALUES])
def test_values_match_numpy(fn, ref, arrays):
    got = fn(*[rill.tensor(a) for a in arrays])
    expected = ref(*arrays)
    close(got, expected)
    assert got.dtype == rill.as_tensor(np.asarray(expected)).dtype


def test_slogdet_values_and_singular():
    a = np.concatenate([A, np.zeros((1, 4, 4))])
    got = L.slogdet(rill.tensor(a))
    sign, logabs = np.linalg.slogdet(a)
    close(got.sign, sign)
    close(got.logabsdet, logabs)
    assert got.sign is got[0] and got.logabsdet is got[1]


def test_eigh_is_a_decomposition_with_numpys_eigenvalues():
    x = P - 5
    values, vectors = L.eigh(rill.tensor(x))
    v = vectors.numpy()
    close(values, np.linalg.eigvalsh(x))
    close((v * values.numpy()[..., None, :]) @ np.swapaxes(v, -1, -2), x)
    close(np.abs(v), np.abs(np.linalg.eigh(x).eigenvectors))  # the same up to sign
    assert np.all(np.diff(values.numpy()) > 0)


def test_eigh_reads_the_lower_triangle():
    x = np.tril(P[0]) + np.triu(rand(R, 4, 4), 1)
    close(L.eigvalsh(rill.tensor(x)), np.linalg.eigvalsh(P[0]))
    close(L.cholesky(rill.tensor(x)), np.linalg.cholesky(P[0]))


@pytest.mark.parametrize("x", [T, W, A], ids=["tall", "wide", "square"])
@pytest.mark.parametrize("full", [True, False])
def test_svd_reconstructs_with_numpys_shapes(x, full):
    u, s, vh = L.svd(rill.tensor(x), full_matrices=full)
    nu, ns, nvh = np.linalg.svd(x, full_matrices=full)
    assert (u.shape, s.shape, vh.shape) == (nu.shape, ns.shape, nvh.shape)
    close(s, ns)
    k = s.shape[-1]
    close((u.numpy()[..., :, :k] * s.numpy()[..., None, :]) @ vh.numpy()[..., :k, :], x)
    close(np.abs(u.numpy()[..., :k]), np.abs(nu[..., :k]))
    close(np.abs(vh.numpy()[..., :k, :]), np.abs(nvh[..., :k, :]))
    eye_u = np.swapaxes(u.numpy(), -1, -2) @ u.numpy()
    close(eye_u, np.broadcast_to(np.eye(u.shape[-1]), eye_u.shape))


@pytest.mark.parametrize("x", [T, W, A], ids=["tall", "wide", "square"])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_reconstructs_with_numpys_shapes(x, mode):
    q, r = L.qr(rill.tensor(x), mode=mode)
    nq, nr = np.linalg.qr(x, mode=mode)
    assert (q.shape, r.shape) == (nq.shape, nr.shape)
    close(q.numpy() @ r.numpy(), x)
    close(np.abs(q.numpy()), np.abs(nq))
    close(r.numpy(), np.triu(r.numpy()))
    assert L.qr(rill.tensor(x)).Q.shape == np.linalg.qr(x).Q.shape


def test_trace_dtype_and_integer_products():
    i = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    t = L.trace(rill.tensor(i))
    assert t.dtype == rill.int64
    close(t, np.trace(i, axis1=-2, axis2=-1))
    assert L.trace(rill.tensor(T), dtype=rill.float32).dtype == rill.float32
    v = L.vecdot(rill.tensor(i), rill.tensor(i))
    assert v.dtype == rill.int32  # the promoted dtype, not the sum's int64
    close(v, np.sum(i * i, axis=-1))
    assert L.matrix_power(rill.tensor(i[:, :3, :3]), 2).dtype == rill.int32


# ---- gradients against PyTorch and finite differences (float64) ---------------------------


def weights(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def wsum(out, seed, lib):
    """A fixed random linear functional of `out` (different per output)."""
    w = weights(tuple(out.shape), seed)
    return (out * (rill.tensor(w) if lib is rill else torch.tensor(w))).sum()


def invariant_svd(u, s, vh, lib):
    """A loss of the SVD that no sign flip of a singular pair changes."""
    k = s.shape[-1]
    u, vh = u[..., :k], vh[..., :k, :]
    w = weights((k,), 7)
    w = rill.tensor(w) if lib is rill else torch.tensor(w)
    return (wsum((u * w) @ vh, 1, lib) + wsum(u * u, 2, lib) + wsum(vh * vh, 3, lib)
            + wsum(s, 4, lib))


def _eigh_loss(lib, x):
    values, vectors = (L.eigh if lib is rill else TL.eigh)(sym(x))
    return wsum(values, 1, lib) + wsum(vectors * vectors, 2, lib)


def _qr_loss(mode):
    def loss(lib, x):
        q, r = (L.qr if lib is rill else TL.qr)(x, mode=mode)
        return wsum(q, 1, lib) + wsum(r, 2, lib)
    return loss


def _svd_loss(full):
    def loss(lib, x):
        return invariant_svd(*(L.svd if lib is rill else TL.svd)(x, full_matrices=full), lib)
    return loss


def _solve_loss(lib, a, b):
    if lib is rill:
        return wsum(L.solve(a, b), 1, lib)
    return wsum(TL.solve(a, b.expand(a.shape[:-2] + b.shape)), 1, lib)


def _on(name):
    """name applied with the same call in both libraries."""
    return lambda lib, *xs, **kw: getattr(L if lib is rill else TL, name)(*xs, **kw)


def _single(fn, seed=1):
    return lambda lib, *xs: wsum(fn(lib, *xs), seed, lib)


RG = np.random.default_rng(2)
A3 = rand(RG, 2, 3, 3)
SINGULAR = np.stack([A3[0], A3[0] @ np.diag([1.0, 1.0, 0.0])])  # rank 3 and rank 2

GRADS = [
    ("cholesky", _single(lambda lib, x: _on("cholesky")(lib, sym(x))), [spd(RG, 2, 3, 3)]),
    ("cholesky_upper", _single(lambda lib, x: _on("cholesky")(lib, sym(x), upper=True)),
     [spd(RG, 3, 3)]),
    ("eigh", _eigh_loss, [rand(RG, 2, 3, 3)]),
    ("eigvalsh", _single(lambda lib, x: _on("eigvalsh")(lib, sym(x))), [rand(RG, 3, 3)]),
    ("qr_tall", _qr_loss("reduced"), [rand(RG, 2, 4, 3)]),
    ("qr_square_complete", _qr_loss("complete"), [rand(RG, 3, 3)]),
    ("svd_tall", _svd_loss(False), [rand(RG, 2, 4, 3)]),
    ("svd_wide", _svd_loss(False), [rand(RG, 3, 5)]),
    ("svd_square_full", _svd_loss(True), [rand(RG, 3, 3)]),
    ("svdvals", _single(_on("svdvals")), [rand(RG, 2, 4, 3)]),
    ("inv", _single(_on("inv")), [A3]),
    ("solve", _solve_loss, [A3, rand(RG, 3, 2)]),
    ("solve_vector", _single(_on("solve")), [A3[0], rand(RG, 3)]),
    ("det", _single(_on("det")), [A3]),
    ("det_singular", _single(_on("det")), [SINGULAR]),
    ("slogdet", lambda lib, x: wsum(_on("slogdet")(lib, x)[1], 1, lib)
     + wsum(_on("slogdet")(lib, x)[0], 2, lib), [A3]),
    ("pinv", _single(_on("pinv")), [rand(RG, 2, 4, 3)]),
    ("matrix_power", _single(lambda lib, x: _on("matrix_power")(lib, x, 3)), [A3]),
    ("matrix_power_neg", _single(lambda lib, x: _on("matrix_power")(lib, x, -2)), [A3]),
    *[(f"matrix_norm_{o}", _single(lambda lib, x, o=o: _on("matrix_norm")(lib, x, ord=o)),
       [rand(RG, 2, 4, 3)]) for o in ("fro", "nuc", 2, -2, 1, np.inf)],
    ("vector_norm_3", _single(lambda lib, x: _on("vector_norm")(lib, x, ord=3)),
     [rand(RG, 2, 3)]),
    ("cross", _single(lambda lib, a, b: L.cross(a, b, axis=-2) if lib is rill else
                      TL.cross(a, b.expand(a.shape), dim=-2)),
     [rand(RG, 2, 3, 2), rand(RG, 3, 2)]),
    ("vecdot", _single(lambda lib, a, b: _on("vecdot")(lib, a, b)), [rand(RG, 2, 3),
                                                                      rand(RG, 3)]),
    ("trace", _single(lambda lib, x: L.trace(x, offset=1) if lib is rill else
                      torch.diagonal(x, 1, -2, -1).sum(-1)), [rand(RG, 2, 3, 4)]),
    ("diagonal", _single(lambda lib, x: L.diagonal(x, offset=-1) if lib is rill else
                         torch.diagonal(x, -1, -2, -1)), [rand(RG, 2, 3, 4)]),
    ("matrix_transpose", _single(lambda lib, x: L.matrix_transpose(x) if lib is rill else
                                 x.mT), [rand(RG, 2, 3, 4)]),
    ("tensordot", _single(lambda lib, a, b: L.tensordot(a, b, axes=1) if lib is rill else
                          torch.tensordot(a, b, dims=1)), [rand(RG, 2, 3), rand(RG, 3, 2)]),
    ("outer", _single(lambda lib, a, b: L.outer(a, b) if lib is rill else
                      torch.outer(a, b)), [rand(RG, 2), rand(RG, 3)]),
]


def finite_differences(loss, arrays, eps=1e-6):
    """Central differences of a real loss; for a complex array, dL/dRe + i dL/dIm per entry
    (PyTorch's convention for the gradient of a real function of complex inputs)."""
    def value(arrs):
        return float(loss(rill, *[rill.tensor(a) for a in arrs]).numpy())
    grads = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a)
        directions = (1.0, 1j) if np.iscomplexobj(a) else (1.0,)
        for index in np.ndindex(a.shape):
            for direction in directions:
                step = np.zeros_like(a)
                step[index] = eps * direction
                plus = [b + step if j == i else b for j, b in enumerate(arrays)]
                minus = [b - step if j == i else b for j, b in enumerate(arrays)]
                g[index] += direction * (value(plus) - value(minus)) / (2 * eps)
        grads.append(g)
    return grads


# At a singular matrix PyTorch's det gradient is 0 (torch 2.x); the derivative is the
# adjugate, which finite differences confirm and rill gives: compared with those only.
TORCH_DIFFERS = {"det_singular"}


@pytest.mark.parametrize("name, loss, arrays", GRADS, ids=[g[0] for g in GRADS])
def test_gradients_match_torch_and_finite_differences(name, loss, arrays):
    argnums = tuple(range(len(arrays)))
    got = rill.grad(lambda *xs: loss(rill, *xs), argnums=argnums)(
        *[rill.tensor(a) for a in arrays])
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    loss(torch, *ts).backward()
    for g, t, fd in zip(got, ts, finite_differences(loss, arrays)):
        if name not in TORCH_DIFFERS:
            close(g, t.grad.resolve_conj().numpy(), tol=1e-8)
        else:
            assert not np.allclose(t.grad.numpy(), fd, atol=1e-3)
        close(g, fd, tol=1e-5)


@pytest.mark.parametrize("name", ["eigh", "cholesky"])
def test_gradients_of_symmetric_inputs_are_symmetric_as_torchs(name):
    """Without the symmetrizing wrapper: the rule itself reports the symmetric gradient
    (PyTorch's convention), not one supported on the triangle LAPACK reads."""
    x = spd(RG, 2, 3, 3)

    def loss(lib, x):
        out = getattr(L if lib is rill else TL, name)(x)
        return wsum(out[1] * out[1], 2, lib) + wsum(out[0], 1, lib) if name == "eigh" else \
            wsum(out, 1, lib)
    got = rill.grad(lambda x: loss(rill, x))(rill.tensor(x)).numpy()
    t = torch.tensor(x, requires_grad=True)
    loss(torch, t).backward()
    close(got, t.grad.numpy(), tol=1e-8)
    close(got, np.swapaxes(got, -1, -2))


def test_second_order_gradient_of_inv_and_slogdet_through_the_rules():
    def f(x):
        return L.slogdet(x).logabsdet.sum() + L.inv(x).sum()
    x = rill.tensor(A3[0])
    ggrad = rill.grad(lambda x: (rill.grad(f)(x) ** 2).sum())(x)
    t = torch.tensor(A3[0], requires_grad=True)
    (g,) = torch.autograd.grad(TL.slogdet(t)[1].sum() + TL.inv(t).sum(), t, create_graph=True)
    (g ** 2).sum().backward()
    close(ggrad, t.grad.numpy(), tol=1e-8)


def test_repeated_eigenvalues_and_singular_values_give_finite_value_gradients():
    x = rill.tensor(np.diag([2.0, 2.0, 1.0]))
    g = rill.grad(lambda x: (L.eigvalsh(x) * rill.tensor([1.0, 2.0, 3.0])).sum())(x)
    assert np.all(np.isfinite(g.numpy()))
    g = rill.grad(lambda x: L.svdvals(x).sum())(x)  # nuclear norm: d/dx = U V^T = I here
    close(g, np.eye(3))


def test_gradients_that_are_not_defined_raise():
    with pytest.raises(rill.GradientError, match="full_matrices=False"):
        rill.grad(lambda x: L.svd(x).S.sum())(rill.tensor(T[0]))
    with pytest.raises(rill.GradientError, match="qr.*rows >= columns"):
        rill.grad(lambda x: L.qr(x).R.sum())(rill.tensor(W))


# ---- complex64 / complex128 ------------------------------------------------------------------


def crand(rng, *shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def hpd(rng, *shape):
    """Hermitian positive-definite matrices, well conditioned."""
    b = crand(rng, *shape)
    return b @ np.conj(np.swapaxes(b, -1, -2)) + shape[-1] * np.eye(shape[-1])


def mH(t):
    return t.mH if isinstance(t, torch.Tensor) else rill.conj(L.matrix_transpose(t))


def herm(t):
    """The Hermitian part (what `sym` is for real inputs)."""
    return (t + mH(t)) * 0.5


RC = np.random.default_rng(3)
CA = crand(RC, 2, 4, 4)
CT = crand(RC, 2, 5, 3)
CW = crand(RC, 3, 5)
CP = hpd(RC, 2, 4, 4)

COMPLEX_VALUES = [
    ("c_cholesky", L.cholesky, np.linalg.cholesky, [CP]),
    ("c_cholesky_upper", lambda x: L.cholesky(x, upper=True),
     lambda x: np.linalg.cholesky(x, upper=True), [CP]),
    ("c_eigvalsh", L.eigvalsh, np.linalg.eigvalsh, [CP - 5]),
    ("c_inv", L.inv, np.linalg.inv, [CA]),
    ("c_det", L.det, np.linalg.det, [CA]),
    ("c_solve", L.solve, np.linalg.solve, [CA, crand(RC, 2, 4, 2)]),
    ("c_solve_real_vector", L.solve, np.linalg.solve, [CA, rand(RC, 4)]),
    ("c_svdvals", L.svdvals, np.linalg.svdvals, [CT]),
    ("c_svdvals_wide", L.svdvals, np.linalg.svdvals, [CW]),
    ("c_pinv", L.pinv, np.linalg.pinv, [CT]),
    ("c_pinv_wide_rtol", lambda x: L.pinv(x, rtol=0.3), lambda x: np.linalg.pinv(x, rtol=0.3),
     [CW]),
    ("c_matrix_rank", L.matrix_rank, np.linalg.matrix_rank,
     [np.stack([CT[0], CT[0] @ np.diag([1.0, 1j, 0.0])])]),
    ("c_matrix_power_-3", lambda x: L.matrix_power(x, -3),
     lambda x: np.linalg.matrix_power(x, -3), [CA]),
    ("c_vecdot", L.vecdot, np.linalg.vecdot, [crand(RC, 2, 3), crand(RC, 3)]),
    ("c_vecdot_real_x2", L.vecdot, np.linalg.vecdot, [crand(RC, 2, 3), rand(RC, 3)]),
    ("c_vecdot_real_x1", L.vecdot, np.linalg.vecdot, [rand(RC, 2, 3), crand(RC, 3)]),
    ("c_cross", L.cross, np.linalg.cross, [crand(RC, 2, 3), crand(RC, 3)]),
    ("c_trace", L.trace, np.linalg.trace, [CA]),
    *[(f"c_vector_norm_{o}", lambda x, o=o: L.vector_norm(x, ord=o, axis=(0, 2)),
       lambda x, o=o: np.linalg.vector_norm(x, ord=o, axis=(0, 2)), [CT])
      for o in (2, 1, 3.5, 0, -1, np.inf, -np.inf)],
    *[(f"c_matrix_norm_{o}", lambda x, o=o: L.matrix_norm(x, ord=o),
       lambda x, o=o: np.linalg.matrix_norm(x, ord=o), [CT])
      for o in ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)],
]


@pytest.mark.parametrize("fn, ref, arrays", [v[1:] for v in COMPLEX_VALUES],
                         ids=[v[0] for v in COMPLEX_VALUES])
def test_complex_values_and_dtypes_match_numpy(fn, ref, arrays):
    test_values_match_numpy(fn, ref, arrays)


def test_complex_slogdet_sign_has_modulus_one_and_logabsdet_is_real():
    a = np.concatenate([CA, np.zeros((1, 4, 4), complex)])
    got = L.slogdet(rill.tensor(a))
    sign, logabs = np.linalg.slogdet(a)
    assert (got.sign.dtype, got.logabsdet.dtype) == (rill.complex128, rill.float64)
    close(got.sign, sign)
    close(got.logabsdet, logabs)
    close(np.abs(got.sign.numpy()[:2]), np.ones(2))
    close(got.sign.numpy()[:2] * np.exp(got.logabsdet.numpy()[:2]), np.linalg.det(CA))


def test_complex_eigh_decomposes_a_hermitian_matrix_read_from_its_lower_triangle():
    x = CP - 5
    junk = np.tril(x) + np.triu(crand(RC, 4, 4), 1)  # only the lower triangle is read
    for given in (x, junk):
        values, vectors = L.eigh(rill.tensor(given))
        assert (values.dtype, vectors.dtype) == (rill.float64, rill.complex128)
        v = vectors.numpy()
        close(values, np.linalg.eigvalsh(x))
        close((v * values.numpy()[..., None, :]) @ np.conj(np.swapaxes(v, -1, -2)), x)
        close(np.abs(v), np.abs(np.linalg.eigh(x).eigenvectors))  # equal up to a phase
    close(L.cholesky(rill.tensor(np.tril(CP) + np.triu(crand(RC, 4, 4), 1))),
          np.linalg.cholesky(CP))


@pytest.mark.parametrize("x", [CT, CW, CA], ids=["tall", "wide", "square"])
def test_complex_svd_and_qr_reconstruct_with_unitary_factors(x):
    for full in (True, False):
        u, s, vh = L.svd(rill.tensor(x), full_matrices=full)
        nu, ns, nvh = np.linalg.svd(x, full_matrices=full)
        assert (u.shape, s.shape, vh.shape) == (nu.shape, ns.shape, nvh.shape)
        assert (u.dtype, s.dtype, vh.dtype) == (rill.complex128, rill.float64, rill.complex128)
        close(s, ns)
        k = s.shape[-1]
        close((u.numpy()[..., :, :k] * s.numpy()[..., None, :]) @ vh.numpy()[..., :k, :], x)
        close(np.abs(u.numpy()[..., :k]), np.abs(nu[..., :k]))
        eye_u = mH(u).numpy() @ u.numpy()
        close(eye_u, np.broadcast_to(np.eye(u.shape[-1]), eye_u.shape))
    for mode in ("reduced", "complete"):
        q, r = L.qr(rill.tensor(x), mode=mode)
        nq, nr = np.linalg.qr(x, mode=mode)
        close(q.numpy() @ r.numpy(), x)
        close(np.abs(q.numpy()), np.abs(nq))
        close(np.diagonal(r.numpy(), axis1=-2, axis2=-1).imag, np.zeros(nr.shape[:-2] + (
            min(nr.shape[-2:]),)))


def test_complex64_gives_float32_real_results_and_complex64_factors():
    x = rill.tensor(CP[0] / 4).astype(rill.complex64)
    exact = CP[0] / 4
    real_results = [(L.eigvalsh, np.linalg.eigvalsh), (L.svdvals, np.linalg.svdvals),
                    (lambda x: L.slogdet(x).logabsdet, lambda x: np.linalg.slogdet(x)[1]),
                    (L.vector_norm, np.linalg.vector_norm),
                    (lambda x: L.matrix_norm(x, ord=2), lambda x: np.linalg.matrix_norm(x, ord=2)),
                    (lambda x: L.vecdot(x, x), lambda x: np.linalg.vecdot(x, x).real)]
    for fn, ref in real_results:
        got = fn(x)
        assert got.dtype == (rill.complex64 if fn is real_results[-1][0] else rill.float32)
        np.testing.assert_allclose(got.numpy(), ref(exact), rtol=1e-4, atol=1e-4)
    for fn, ref in [(L.inv, np.linalg.inv), (L.cholesky, np.linalg.cholesky),
                    (L.det, np.linalg.det), (lambda x: L.slogdet(x).sign,
                                             lambda x: np.linalg.slogdet(x)[0])]:
        got = fn(x)
        assert got.dtype == rill.complex64
        np.testing.assert_allclose(got.numpy(), ref(exact), rtol=1e-4, atol=1e-4)


def cweights(shape, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def csum(out, seed, lib):
    """Re of a fixed random complex linear functional of `out`: a real loss."""
    w = cweights(tuple(out.shape), seed)
    total = (out * (rill.tensor(w) if lib is rill else torch.tensor(w))).sum()
    return rill.real(total) if lib is rill else total.real


def modulus2(t, lib):
    return rill.real(t * rill.conj(t)) if lib is rill else (t * t.conj()).real


def _scaled_projector(u, vh, lib):
    """u diag(w) vh: unchanged by u -> u D, vh -> D^* vh for any diagonal phases D."""
    w = weights((u.shape[-1],), 7)
    return (u * (rill.tensor(w) if lib is rill else torch.tensor(w))) @ vh


def _c_eigh_loss(lib, x):
    values, vectors = (L.eigh if lib is rill else TL.eigh)(herm(x))
    return (csum(values, 1, lib) + csum(modulus2(vectors, lib), 2, lib)
            + csum(_scaled_projector(vectors, mH(vectors), lib), 3, lib))


def _c_svd_loss(full):
    """Invariant under each singular pair's phase, as the gradient requires."""
    def loss(lib, x):
        u, s, vh = (L.svd if lib is rill else TL.svd)(x, full_matrices=full)
        k = s.shape[-1]
        u, vh = u[..., :k], vh[..., :k, :]
        return (csum(s, 1, lib) + csum(modulus2(u, lib), 2, lib)
                + csum(modulus2(vh, lib), 3, lib) + csum(_scaled_projector(u, vh, lib), 4, lib))
    return loss


def _c_qr_loss(mode):
    def loss(lib, x):
        q, r = (L.qr if lib is rill else TL.qr)(x, mode=mode)
        return csum(q, 1, lib) + csum(r, 2, lib)
    return loss


def _c_single(fn, seed=1):
    return lambda lib, *xs: csum(fn(lib, *xs), seed, lib)


def _mixed(name):
    """name on a complex and a real operand: rill promotes; PyTorch's linalg wants one dtype,
    so the real one is cast there (its gradient is the real part, as rill's is)."""
    def call(lib, *xs):
        if lib is torch:
            xs = [t if t.is_complex() else t.to(torch.complex128) for t in xs]
        return _on(name)(lib, *xs)
    return call


RCG = np.random.default_rng(4)
CA3 = crand(RCG, 2, 3, 3)

COMPLEX_GRADS = [
    ("inv", _c_single(_on("inv")), [CA3]),
    ("solve", _c_single(_on("solve")), [CA3, crand(RCG, 2, 3, 2)]),
    ("solve_real_b", _c_single(_mixed("solve")), [CA3[0], rand(RCG, 3, 2)]),
    ("det", _c_single(_on("det")), [CA3]),
    ("slogdet", lambda lib, x: csum(_on("slogdet")(lib, x)[0], 1, lib)
     + csum(_on("slogdet")(lib, x)[1], 2, lib), [CA3]),
    ("cholesky", _c_single(lambda lib, x: _on("cholesky")(lib, herm(x))), [hpd(RCG, 2, 3, 3)]),
    ("cholesky_upper", _c_single(lambda lib, x: _on("cholesky")(lib, herm(x), upper=True)),
     [hpd(RCG, 3, 3)]),
    ("eigh", _c_eigh_loss, [CA3]),
    ("eigvalsh", _c_single(lambda lib, x: _on("eigvalsh")(lib, herm(x))), [CA3[0]]),
    ("svd_tall", _c_svd_loss(False), [crand(RCG, 2, 4, 3)]),
    ("svd_wide", _c_svd_loss(False), [crand(RCG, 3, 4)]),
    ("svd_square_full", _c_svd_loss(True), [CA3[0]]),
    ("svdvals", _c_single(_on("svdvals")), [crand(RCG, 4, 3)]),
    ("qr_tall", _c_qr_loss("reduced"), [crand(RCG, 2, 4, 3)]),
    ("qr_square_complete", _c_qr_loss("complete"), [CA3[0]]),
    ("pinv", _c_single(_on("pinv")), [crand(RCG, 4, 3)]),
    *[(f"vector_norm_{o}", _c_single(lambda lib, x, o=o: _on("vector_norm")(lib, x, ord=o)),
       [crand(RCG, 2, 3)]) for o in (2, 3, np.inf)],
    *[(f"matrix_norm_{o}", _c_single(lambda lib, x, o=o: _on("matrix_norm")(lib, x, ord=o)),
       [crand(RCG, 4, 3)]) for o in ("fro", "nuc", 2, -2, 1, np.inf)],
    ("vecdot", _c_single(_on("vecdot")), [crand(RCG, 2, 3), crand(RCG, 3)]),
    ("vecdot_real_x1", _c_single(_mixed("vecdot")), [rand(RCG, 2, 3), crand(RCG, 2, 3)]),
    ("cross", _c_single(lambda lib, a, b: _on("cross")(lib, a, b)),
     [crand(RCG, 2, 3), crand(RCG, 2, 3)]),
]


@pytest.mark.parametrize("name, loss, arrays", COMPLEX_GRADS, ids=[g[0] for g in COMPLEX_GRADS])
def test_complex_gradients_match_torch_and_finite_differences(name, loss, arrays):
    test_gradients_match_torch_and_finite_differences(name, loss, arrays)


def test_complex_gradients_of_hermitian_inputs_are_hermitian():
    """eigh's rule reports the Hermitian gradient, as PyTorch's does. PyTorch's complex
    cholesky gradient is not Hermitian (an imaginary diagonal of L^H gL leaks a
    skew-Hermitian part); rill's is, and agrees with it on the Hermitian part, the only
    directions in which a Hermitian input can move."""
    x = hpd(RCG, 2, 3, 3)

    def eigh_loss(lib, x):
        values, vectors = (L.eigh if lib is rill else TL.eigh)(x)
        return csum(values, 1, lib) + csum(modulus2(vectors, lib), 2, lib)

    for loss in (eigh_loss, _c_single(_on("cholesky"))):
        got = rill.grad(lambda x, loss=loss: loss(rill, x))(rill.tensor(x)).numpy()
        t = torch.tensor(x, requires_grad=True)
        loss(torch, t).backward()
        expected = t.grad.resolve_conj().numpy()
        close(got, np.conj(np.swapaxes(got, -1, -2)))
        close(got, (expected + np.conj(np.swapaxes(expected, -1, -2))) / 2, tol=1e-8)


def test_complex_second_order_gradient_of_slogdet_and_inv():
    def f(lib, x):
        return csum(_on("slogdet")(lib, x)[1], 1, lib) + csum(_on("slogdet")(lib, x)[0], 2,
                                                                lib) + csum(_on("inv")(lib, x),
                                                                            3, lib)
    x = CA3[0]
    ggrad = rill.grad(lambda x: modulus2(rill.grad(lambda x: f(rill, x))(x), rill).sum())(
        rill.tensor(x))
    t = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(f(torch, t), t, create_graph=True)
    modulus2(g, torch).sum().backward()
    close(ggrad, t.grad.numpy(), tol=1e-8)


def test_complex_decompositions_and_their_gradients_capture_and_agree_with_eager():
    def f(a, b):
        values, vectors = L.eigh(a)
        grad = rill.grad(lambda a: csum(L.solve(a, b), 1, rill) + L.slogdet(a).logabsdet.sum()
                         + L.svdvals(a).sum())(a)
        return values, modulus2(vectors, rill), L.slogdet(a).sign, grad

    a, b = rill.tensor(CP[0]), rill.tensor(crand(RCG, 4, 2))
    captured = rill.capture(f)
    ops = {node.op for node in captured.graph_for(a, b).nodes}
    assert {"eigh", "solve", "slogdet", "svd", "inv"} <= ops
    for c, e in zip(captured(a, b), f(a, b)):
        assert c.dtype == e.dtype
        close(c, e.numpy(), tol=1e-12)


# ---- signatures, dtypes ---------------------------------------------------------------------

SIGNATURES = {
    "cholesky": "(x, /, *, upper=False)", "cross": "(x1, x2, /, *, axis=-1)",
    "det": "(x, /)", "diagonal": "(x, /, *, offset=0)", "eigh": "(x, /)",
    "eigvalsh": "(x, /)", "inv": "(x, /)", "matmul": "(x1, x2, /)",
    "matrix_norm": "(x, /, *, keepdims=False, ord='fro')", "matrix_power": "(x, n, /)",
    "matrix_rank": "(x, /, *, rtol=None)", "matrix_transpose": "(x, /)",
    "outer": "(x1, x2, /)", "pinv": "(x, /, *, rtol=None)", "qr": "(x, /, *, mode='reduced')",
    "slogdet": "(x, /)", "solve": "(x1, x2, /)", "svd": "(x, /, *, full_matrices=True)",
    "svdvals": "(x, /)", "tensordot": "(x1, x2, /, *, axes=2)",
    "trace": "(x, /, *, offset=0, dtype=None)", "vecdot": "(x1, x2, /, *, axis=-1)",
    "vector_norm": "(x, /, *, axis=None, keepdims=False, ord=2)",
}


def test_signatures_are_the_standards():
    assert sorted(L.__all__) == sorted(SIGNATURES)
    for name, expected in SIGNATURES.items():
        sig = inspect.signature(getattr(L, name))
        plain = sig.replace(parameters=[p.replace(annotation=p.empty) for p in
                                        sig.parameters.values()], return_annotation=sig.empty)
        assert str(plain) == expected, name


def test_named_results():
    x = rill.tensor(A3)
    assert L.eigh(sym(x))._fields == ("eigenvalues", "eigenvectors")
    assert L.qr(x)._fields == ("Q", "R")
    assert L.svd(x)._fields == ("U", "S", "Vh")
    assert L.slogdet(x)._fields == ("sign", "logabsdet")


@pytest.mark.parametrize("dtype, tol", [(rill.float32, 1e-4), (rill.float16, 2e-2),
                                        (rill.bfloat16, 5e-2)])
def test_low_precision_computes_and_keeps_the_dtype(dtype, tol):
    x = rill.tensor(P[0] / 4).astype(dtype)
    exact = P[0] / 4
    for fn, ref in [(L.inv, np.linalg.inv), (L.cholesky, np.linalg.cholesky),
                    (L.det, np.linalg.det), (L.eigvalsh, np.linalg.eigvalsh),
                    (L.svdvals, np.linalg.svdvals),
                    (lambda x: rill.abs(L.qr(x).R), lambda x: np.abs(np.linalg.qr(x).R))]:
        got = fn(x)
        assert got.dtype == dtype
        value = got.astype(rill.float64).numpy()
        np.testing.assert_allclose(value, ref(exact), rtol=tol, atol=tol)


# ---- capture ---------------------------------------------------------------------------------


def test_solve_and_slogdet_capture_as_graph_nodes_and_agree_with_eager():
    def f(a, b):
        sign, logabs = L.slogdet(a)
        x = L.solve(a, b)
        grad = rill.grad(lambda a: (L.solve(a, b) ** 2).sum() + L.slogdet(a).logabsdet.sum())(a)
        return x, sign * logabs, grad

    a, b = rill.tensor(A3), rill.tensor(rand(RG, 3, 2))
    captured = rill.capture(f)
    ops = {node.op for node in captured.graph_for(a, b).nodes}
    assert {"solve", "slogdet", "inv"} <= ops
    for c, e in zip(captured(a, b), f(a, b)):
        close(c, e.numpy(), tol=1e-12)


def test_a_singular_matrix_in_a_captured_graph_is_named():
    captured = rill.capture(lambda a: L.inv(a) * 2.0)
    captured(rill.tensor(A3))
    with pytest.raises(rill.Error, match=r"inv.*singular \(matrix \[1\] of the batch\)"):
        captured(rill.tensor(SINGULAR))


# ---- the gpu device ----------------------------------------------------------------------------

GPU_REFUSED = ["cholesky", "eigh", "eigvalsh", "qr", "svd", "svdvals", "inv", "det", "slogdet",
               "pinv", "matrix_rank"]


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device")
def test_gpu_composites_run_and_decompositions_name_themselves():
    x = rill.tensor(A3).to("gpu")
    close(L.matrix_norm(x, ord=1).to("cpu"), np.linalg.matrix_norm(A3, ord=1))
    close(L.trace(x).to("cpu"), np.linalg.trace(A3))
    close(L.vecdot(x, x).to("cpu"), np.linalg.vecdot(A3, A3))
    for name in GPU_REFUSED:
        with pytest.raises(rill.DeviceError, match=rf"rill\.linalg\.{name} has no gpu "
                           r"kernel.*\.to\('cpu'\)"):
            getattr(L, name)(x)
    for call in (lambda: L.solve(x, x), lambda: L.matrix_norm(x, ord=2),
                 lambda: L.matrix_power(x, -1)):
        with pytest.raises(rill.DeviceError, match="no gpu kernel"):
            call()


def test_a_missing_kernel_is_a_device_error_naming_the_function(monkeypatch):
    from rill.linalg.primitives import svd_p
    monkeypatch.delitem(svd_p.kernels, "cpu")
    with pytest.raises(rill.DeviceError, match=r"svdvals: rill\.linalg\.svdvals has no cpu "
                       r"kernel.*svdvals\(x\.to\('cpu'\)\)"):
        L.svdvals(rill.tensor(A3))


# ---- bad input --------------------------------------------------------------------------------

ERRORS = [
    (lambda: L.inv(rill.ones(2, 3)), rill.ShapeError, r"inv: expected square matrices"),
    (lambda: L.det(rill.ones(3)), rill.ShapeError, r"det: expected a matrix"),
    (lambda: L.cholesky(rill.ones(2, 3, 4)), rill.ShapeError, "cholesky: expected square"),
    (lambda: L.eigh(rill.ones(3, 2)), rill.ShapeError, "eigh: expected square"),
    (lambda: L.svd(rill.ones(3)), rill.ShapeError, "svd: expected a matrix"),
    (lambda: L.qr(rill.ones(3, 3), mode="r"), rill.ArgumentError, "qr: mode must be one of"),
    (lambda: L.inv(rill.ones(2, 2, dtype=rill.int64)), rill.DTypeError,
     r"inv: expected a floating-point or complex tensor, got int64; cast first"),
    (lambda: L.inv(rill.tensor([[1.0, 2.0], [2.0, 4.0]])), rill.ArgumentError,
     "inv: the matrix is singular; inv needs an invertible matrix"),
    (lambda: L.solve(rill.tensor(SINGULAR), rill.ones(3)), rill.ArgumentError,
     r"solve: the matrix is singular \(matrix \[1\] of the batch\)"),
    (lambda: L.cholesky(rill.tensor([[1.0, 2.0], [2.0, 1.0]])), rill.ArgumentError,
     "cholesky: the matrix is not symmetric positive definite"),
    (lambda: L.solve(rill.ones(3, 3), rill.ones(2)), rill.ShapeError, "solve: a is"),
    (lambda: L.solve(rill.ones(2, 3, 3), rill.ones(4, 3, 1)), rill.ShapeError,
     "solve: batch dimensions"),
    (lambda: L.matrix_power(rill.ones(2, 3), 2), rill.ShapeError, "matrix_power: expected sq"),
    (lambda: L.matrix_power(rill.ones(2, 2), 1.5), rill.ArgumentError,
     "matrix_power: n must be an int"),
    (lambda: L.matrix_norm(rill.ones(2, 2), ord=3), rill.ArgumentError,
     "matrix_norm: ord must be one of"),
    (lambda: L.matrix_norm(rill.ones(2, 2), ord=True), rill.ArgumentError, "ord must be one"),
    (lambda: L.matrix_norm(rill.ones(2), ord=1), rill.ShapeError, "matrix_norm: expected a m"),
    (lambda: L.vector_norm(rill.ones(2), ord="fro"), rill.ArgumentError,
     "vector_norm: ord must be a number"),
    (lambda: L.vector_norm(rill.ones(2, dtype=rill.int32)), rill.DTypeError,
     "vector_norm: expected a floating-point or complex tensor"),
    (lambda: L.vecdot(rill.ones(3, dtype=rill.bool), rill.ones(3)), rill.DTypeError,
     r"vecdot: expected numeric \(integer, floating-point or complex\) tensors, got bool"),
    (lambda: L.cross(rill.ones(3), rill.ones(3, dtype=rill.bool)), rill.DTypeError,
     "cross: expected numeric"),
    (lambda: L.cholesky(rill.tensor([[1.0 + 0j, 2.0], [2.0, 1.0]])), rill.ArgumentError,
     "cholesky: the matrix is not Hermitian positive definite"),
    (lambda: L.cross(rill.ones(2, 4), rill.ones(2, 4)), rill.ShapeError,
     "cross: axis -1 must have length 3"),
    (lambda: L.cross(rill.ones(3), rill.ones(2, 3), axis=0), rill.ShapeError,
     r"cross: axis=0 must be in \[-1, -1\]"),
    (lambda: L.vecdot(rill.ones(3), rill.ones(4)), rill.ShapeError, "vecdot: the vectors differ"),
    (lambda: L.outer(rill.ones(2, 2), rill.ones(2)), rill.ShapeError, "outer: expected two 1-d"),
    (lambda: L.diagonal(rill.ones(3)), rill.ShapeError, "diagonal: expected a matrix"),
    (lambda: L.trace(rill.ones(3, 3), offset=0.5), rill.ArgumentError, "trace: offset must be"),
    (lambda: L.matrix_transpose(rill.ones(3)), rill.ShapeError, "matrix_transpose: expected"),
    (lambda: L.pinv(rill.ones(2, 2), rtol="x"), rill.ArgumentError, "pinv: rtol must be"),
    (lambda: L.svd(rill.ones(2, 2), full_matrices=1), rill.ArgumentError,
     "svd: full_matrices must be True or False"),
]


@pytest.mark.parametrize("call, cls, message", ERRORS, ids=[e[2][:30] for e in ERRORS])
def test_bad_input_raises_a_rill_error(call, cls, message):
    with pytest.raises(cls, match=message) as info:
        call()
    assert isinstance(info.value, rill.Error)
