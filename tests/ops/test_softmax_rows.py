"""softmax along the last axis and its gradient as one C pass each (kernels/native/softmax.c),
and `softmax_grad`, the primitive softmax's gradient binds on the CPU (issue 31: attention's
scores in the GPT step).

Forward against float64 NumPy and torch; the gradient against finite differences and torch;
softmax_grad's own rule (softmax's second derivative) against torch's double backward and
finite differences; the compiled and the NumPy kernels alike (RILL_NATIVE=0); rows of -inf,
NaN and infinities; eager equals captured; vmap; bad operands raise rill errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from kernel_paths import PATHS, compiled_or_numpy, needs_compiler
from rill.eager.bind import bind
from rill.kernels.native import build
from rill.kernels.numpy import activation as kernels
from rill.ops.activation import softmax_grad_p

F = rill.nn.functional


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """Each test on the compiled kernels and on the NumPy ones (as RILL_NATIVE=0 runs)."""
    return compiled_or_numpy(request, monkeypatch, "softmax")


def _softmax64(x, axis=-1):
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _draw(shape, dtype, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


# shapes: attention's scores, one row, rows of one, a long row (past one vector), 2^19 and up
# (split over the cores)
SHAPES = [(16, 4, 64, 64), (7,), (5, 1), (3, 1000), (2, 512, 512)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-6), (np.float64, 1e-14)])
def test_forward_against_float64(path, shape, dtype, rtol):
    x = _draw(shape, dtype)
    got = F.softmax(rill.tensor(x), dim=-1).numpy()
    assert got.dtype == dtype and got.shape == shape
    np.testing.assert_allclose(got, _softmax64(x.astype(np.float64)), rtol=rtol, atol=1e-30)


# Offsets below each row's max across exp's whole tail: the vector exp's fast path (above
# -87.3 / -708), the band the C pass redoes with the scalar exp, where exp rounds to 0, and a
# causal mask's -inf (kernels/native/softmax.c: FAST_LOW, ZERO_BELOW).
TAIL = {np.float32: [0.0, -1.5, -50.0, -86.9, -87.0, -87.2, -90.0, -100.0, -103.9, -104.0,
                     -104.1, -120.0, -np.inf],
        np.float64: [0.0, -1.5, -600.0, -699.9, -700.0, -700.1, -708.5, -730.0, -745.0,
                     -745.2, -746.0, -800.0, -np.inf]}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [13, 40])  # one vector's tail, and several vectors
def test_far_tail_and_masked_lanes_against_float64(path, dtype, width):
    offsets = np.array(TAIL[dtype] * 4)[:width]
    rows = np.stack([np.roll(offsets, k) for k in range(width)]) + 2.5  # every lane, each row
    rows[1:7, ::2] = -np.inf  # mask half of some rows, as a causal mask does
    x = rows.astype(dtype)
    got = F.softmax(rill.tensor(x), dim=-1).numpy()
    with np.errstate(under="ignore"):
        want = _softmax64(x.astype(np.float64))
    tiny = np.finfo(dtype).smallest_subnormal
    # subnormal results carry an absolute rounding of the last subnormal place
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == np.float32 else 1e-14,
                               atol=float(tiny))
    assert (got[np.isneginf(x)] == 0).all()  # masked lanes: exact zeros
    assert (got[want > 4 * float(tiny)] > 0).all()  # nothing representable is flushed


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_over_the_far_tail_and_masked_logits(dtype, smoothing):
    """cross-entropy's row statistics (the same C module) over exp's whole tail and -inf
    logits (a masked vocabulary, invalid actions): the loss and its gradient against float64."""
    width = 300  # past one 256-entry stage of the statistics pass
    offsets = np.resize(np.array(TAIL[dtype]), width)
    rows = np.stack([np.roll(offsets, k) for k in range(12)]) + 1.5
    rows[2:6, 1::3] = -np.inf
    target = np.array([int(np.argmax(r)) for r in rows])  # a finite logit
    x = rows.astype(dtype)
    xr = rill.tensor(x, requires_grad=True)
    loss = F.cross_entropy(xr, rill.tensor(target), label_smoothing=smoothing)
    loss.backward()
    x64 = x.astype(np.float64)
    with np.errstate(under="ignore", invalid="ignore"):
        z = x64 - x64.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        picked = -logp[np.arange(12), target]
        if smoothing:
            # torch's rule: the uniform part sums log-probabilities, -inf where a logit is
            uniform = -np.where(np.isneginf(logp), -np.inf, logp).mean(axis=1)
            picked = (1 - smoothing) * picked + smoothing * uniform
    want = picked.mean()
    xt = torch.tensor(x, requires_grad=True)
    lt = torch.nn.functional.cross_entropy(xt, torch.tensor(target), label_smoothing=smoothing)
    lt.backward()
    if np.isfinite(want):
        np.testing.assert_allclose(float(loss), want, rtol=2e-6 if dtype == np.float32 else 1e-13)
    assert np.isnan(float(loss)) == np.isnan(float(lt)) and \
        np.isinf(float(loss)) == np.isinf(float(lt))
    grad = xr.grad.numpy()
    assert (grad[np.isneginf(x)] == 0).all() or smoothing  # masked lanes get no gradient
    finite = np.isfinite(xt.grad.numpy())
    np.testing.assert_allclose(grad[finite], xt.grad.numpy()[finite],
                               rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=float(np.finfo(dtype).tiny))


@pytest.mark.parametrize("shape", SHAPES[:4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_against_torch(path, shape, dtype):
    x, g = _draw(shape, dtype, 1), _draw(shape, dtype, 2, scale=1.0)
    xr = rill.tensor(x, requires_grad=True)
    F.softmax(xr, dim=-1).backward(rill.tensor(g))
    xt = torch.tensor(x, requires_grad=True)
    torch.softmax(xt, -1).backward(torch.tensor(g))
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=tol, atol=tol)


def test_gradient_against_finite_differences(path):
    x = _draw((3, 6), np.float64, 3, scale=1.0)
    w = _draw((3, 6), np.float64, 4, scale=1.0)
    got = rill.grad(lambda t: (F.softmax(t, dim=-1) * rill.tensor(w)).sum())(rill.tensor(x))
    h, fd = 1e-6, np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        fd[i] = ((_softmax64(up) * w).sum() - (_softmax64(down) * w).sum()) / (2 * h)
    np.testing.assert_allclose(got.numpy(), fd, rtol=1e-7, atol=1e-9)


def test_one_primitive_on_the_cpu_for_the_last_axis_and_others(path):
    for dtype, axis, fused in (("float32", -1, True), ("float64", 1, True),
                               ("float64", 0, True), ("float16", -1, False)):
        x = rill.tensor(_draw((4, 5), np.float64), dtype=dtype, requires_grad=True)
        y = F.softmax(x, dim=axis)
        with rill.profiler.profile() as prof:
            y.backward(rill.ones_like(y) * rill.arange(5, dtype=dtype))
        names = {e.name for e in prof.events()}
        assert ("softmax_grad" in names) is fused, names
        xt = torch.tensor(_draw((4, 5), np.float64), requires_grad=True)
        torch.softmax(xt, axis).backward(torch.ones(4, 5, dtype=torch.float64) *
                                         torch.arange(5))
        tol = 2e-3 if dtype == "float16" else 1e-6
        np.testing.assert_allclose(x.grad.numpy().astype(np.float64), xt.grad.numpy(),
                                   rtol=tol, atol=tol)


def test_second_derivative_against_torch_and_finite_differences(path):
    """softmax_grad's own rule: the gradient of a function of softmax's gradient."""
    x = _draw((3, 7), np.float64, 5, scale=1.0)
    g = _draw((3, 7), np.float64, 6, scale=1.0)

    def first(t):
        return rill.grad(lambda u: (F.softmax(u, dim=-1) * rill.tensor(g)).sum())(t)

    got = rill.grad(lambda t: (first(t) ** 2).sum())(rill.tensor(x)).numpy()
    xt = torch.tensor(x, requires_grad=True)
    (gx,) = torch.autograd.grad((torch.softmax(xt, -1) * torch.tensor(g)).sum(), xt,
                                create_graph=True)
    (want,) = torch.autograd.grad((gx ** 2).sum(), xt)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)

    def first64(v):
        y = _softmax64(v)
        gy = g * y
        return gy - y * gy.sum(axis=-1, keepdims=True)
    h, i = 1e-6, (1, 2)
    up, down = x.copy(), x.copy()
    up[i] += h
    down[i] -= h
    fd = ((first64(up) ** 2).sum() - (first64(down) ** 2).sum()) / (2 * h)
    assert abs(got[i] - fd) < 1e-7


def test_cotangent_gradient_of_softmax_grad_is_itself(path):
    """d/dg of softmax_grad(g, y) applied to h is softmax_grad(h, y): linear in g."""
    y = F.softmax(rill.tensor(_draw((4, 6), np.float64, 7)), dim=-1).detach()
    g = rill.tensor(_draw((4, 6), np.float64, 8))
    h = _draw((4, 6), np.float64, 9)
    got = rill.grad(lambda t: (bind(softmax_grad_p, t, y, axis=1) * rill.tensor(h)).sum())(g)
    yn = y.numpy()
    hy = h * yn
    np.testing.assert_allclose(got.numpy(), hy - yn * hy.sum(-1, keepdims=True), rtol=1e-13)


def test_special_rows(path):
    x = np.array([[-np.inf] * 4,                      # no finite entry: NaN, as torch
                  [0.0, np.nan, 1.0, 2.0],            # NaN spreads over its row
                  [np.inf, 0.0, 1.0, 2.0],            # +inf: NaN (inf - inf), as torch
                  [-np.inf, 0.0, 0.0, -np.inf],       # masked entries: exact zeros
                  [1e30, -1e30, 0.0, 3.0]], np.float32)
    got = F.softmax(rill.tensor(x), dim=-1).numpy()
    want = torch.softmax(torch.tensor(x), -1).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=0)
    assert (got[3] == [0.0, 0.5, 0.5, 0.0]).all()


@needs_compiler
def test_compiled_and_numpy_kernels_agree(monkeypatch):
    results = {}
    for enabled in (True, False):
        monkeypatch.setattr(build, "ENABLED", enabled)
        for dtype in (np.float32, np.float64):
            x, g = _draw((64, 100), dtype, 10), _draw((64, 100), dtype, 11)
            y = kernels.softmax(x, 1)
            results[enabled, dtype] = (y, kernels.softmax_grad(g, y, 1))
    for dtype in (np.float32, np.float64):
        eps = np.finfo(dtype).eps
        for native, numpy in zip(results[True, dtype], results[False, dtype]):
            assert native.dtype == numpy.dtype == dtype
            np.testing.assert_allclose(native, numpy, rtol=64 * eps, atol=64 * eps)


def test_strided_operands_take_the_numpy_kernel(path):
    x = _draw((6, 8), np.float64, 12).T  # a transposed view: not C-contiguous
    y = kernels.softmax(x, 1)
    np.testing.assert_allclose(y, _softmax64(x), rtol=1e-14)
    g = _draw((8, 6), np.float64, 13)
    got = kernels.softmax_grad(g, y, 1)
    np.testing.assert_allclose(got, g * y - y * (g * y).sum(1, keepdims=True), rtol=1e-13)


def test_captured_step_equals_eager(path):
    x0 = _draw((4, 2, 16, 16), np.float32, 14)
    w0 = _draw((16, 16), np.float32, 15, scale=0.3)

    def loss(w, x):
        att = F.softmax(x @ w, dim=-1)
        return (att @ x).pow(2).sum()

    step = rill.value_and_grad(loss)
    eager = [t.numpy() for t in step(rill.tensor(w0), rill.tensor(x0))]
    captured = [t.numpy() for t in rill.capture(step)(rill.tensor(w0), rill.tensor(x0))]
    for e, c in zip(eager, captured):
        np.testing.assert_allclose(c, e, rtol=1e-5, atol=1e-6)


def test_vmap_of_the_gradient(path):
    x = _draw((3, 4, 5), np.float64, 16)
    got = rill.vmap(rill.grad(lambda t: (F.softmax(t, dim=-1) ** 2).sum()))(rill.tensor(x))
    for i in range(3):
        xt = torch.tensor(x[i], requires_grad=True)
        (torch.softmax(xt, -1) ** 2).sum().backward()
        np.testing.assert_allclose(got.numpy()[i], xt.grad.numpy(), rtol=1e-12)


def test_vmap_of_softmax_grad_on_a_negative_axis(path):
    """softmax_grad's batch rule: a negative axis still names the same axis per member."""
    g, y = _draw((3, 4, 5), np.float64, 17), _draw((3, 4, 5), np.float64, 18)
    got = rill.vmap(lambda a, b: bind(softmax_grad_p, a, b, axis=-2))(rill.tensor(g),
                                                                       rill.tensor(y))
    gy = g * y
    np.testing.assert_allclose(got.numpy(), gy - y * gy.sum(axis=1, keepdims=True),
                               rtol=1e-13)


def test_softmax_grad_checks_its_operands():
    y = rill.ones(3)
    with pytest.raises(rill.ShapeError, match="one shape"):
        bind(softmax_grad_p, rill.ones(4), y, axis=0)
    with pytest.raises(rill.DTypeError, match="one dtype"):
        bind(softmax_grad_p, rill.ones(3, dtype="float64"), y, axis=0)
    with pytest.raises(rill.Error):
        bind(softmax_grad_p, rill.ones(3), y, axis=2)
