"""erf, exact GELU and its gradient as one C pass each, and x @ W with a batched x as one GEMM
(issue 31: the GPT step's time).

erf against math.erf (float64) and the float64 value rounded (float32); GELU against
0.5 x erfc(-x / sqrt 2) from scipy in float64 and against torch, its gradient against finite
differences and torch, its second derivative (gelu_grad's own rule) against finite
differences; NaN, infinities and signed zeros; the NumPy kernels (RILL_NATIVE=0) give the same
results; eager equals captured. matmul: a (B, T, C) @ (C, D) product and its gradients against
NumPy and torch, for every shape the single-GEMM path takes or refuses, and the weight's
gradient computed as one 2-D product."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special as sp

import rill
from kernel_paths import PATHS, compiled_or_numpy, needs_compiler
from rill.kernels.native import build
from rill.kernels.numpy import linalg as numpy_linalg
from rill.kernels.numpy import special


pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """Each test on the compiled kernels and on the NumPy ones (as RILL_NATIVE=0 runs)."""
    return compiled_or_numpy(request, monkeypatch, "special")


def _points(dtype, n=200_000, seed=0):
    """Normal and wide draws, tiny and subnormal values, and the edges of erf's pieces."""
    rng = np.random.default_rng(seed)
    edges = [0.0, -0.0, 2.0 ** -28, 0.84375, 1.25, 1 / 0.35, 6.0, 27.9, 28.0, 40.0,
             np.finfo(dtype).tiny, np.finfo(dtype).tiny / 4, np.finfo(dtype).max]
    edges = np.array(edges + [np.nextafter(e, 0) for e in edges[2:10]], dtype)
    x = np.concatenate([rng.standard_normal(n) * 2, rng.uniform(-12, 12, n),
                        np.logspace(-40, 1, 2000), edges, -edges]).astype(dtype)
    return x


def _ulps(got, want, dtype):
    """|got - want| in units of the last place of `want` rounded to dtype."""
    with np.errstate(over="ignore"):
        spacing = np.spacing(np.abs(want.astype(dtype))).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


def _gelu64(x):
    return 0.5 * x * sp.erfc(-x / math.sqrt(2.0))


def _gelu_grad64(x):
    return 0.5 * sp.erfc(-x / math.sqrt(2.0)) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


# ---- erf -----------------------------------------------------------------------------------

def test_erf_float64_matches_math_erf(path):
    x = _points(np.float64)
    got = rill.erf(rill.tensor(x)).numpy()
    want = np.array([math.erf(v) for v in x.tolist()])
    assert _ulps(got, want, np.float64).max() <= 4
    nonzero = want != 0
    assert np.max(np.abs(got[nonzero] - want[nonzero]) / np.abs(want[nonzero])) < 1e-15


def test_erf_float32_is_the_float64_value_rounded(path):
    x = _points(np.float32)
    got = rill.erf(rill.tensor(x)).numpy()
    assert got.dtype == np.float32
    assert _ulps(got, sp.erf(x.astype(np.float64)), np.float32).max() <= 0.5 + 1e-6


def test_erf_special_values(path):
    for dtype in (np.float32, np.float64):
        x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 50.0, -50.0], dtype)
        got = rill.erf(rill.tensor(x)).numpy()
        assert np.isnan(got[0])
        np.testing.assert_array_equal(got[1:], [1, -1, 0, 0, 1, -1])
        assert not np.signbit(got[3]) and np.signbit(got[4])


def test_erf_of_any_layout_and_size(path):
    """Strided views, 0-d and empty arrays, float16, and arrays split over the cores (chunk
    edges) all give what the elementwise definition gives."""
    x = _points(np.float32, n=60_000)
    whole = special.erf(x)
    pieces = np.concatenate([special.erf(x[i:i + 1000]) for i in range(0, x.size, 1000)])
    np.testing.assert_array_equal(whole, pieces)
    grid = x[:40_000].reshape(200, 200)
    np.testing.assert_array_equal(special.erf(grid.T), special.erf(grid.T.copy()))
    assert special.erf(np.float32(0.5) * np.ones((), np.float32)).shape == ()
    assert special.erf(np.zeros((0, 3), np.float64)).shape == (0, 3)
    half = special.erf(np.array([0.5, -2.0], np.float16))
    assert half.dtype == np.float16
    np.testing.assert_allclose(half, [math.erf(0.5), math.erf(-2.0)], rtol=1e-3)


# ---- gelu forward --------------------------------------------------------------------------

def test_gelu_forward_against_erfc_in_float64(path):
    x = _points(np.float64)
    x = x[np.abs(x) < 30]
    got = rill.nn.functional.gelu(rill.tensor(x)).numpy()
    want = _gelu64(x)
    nonzero = want != 0
    relative = np.abs(got[nonzero] - want[nonzero]) / np.abs(want[nonzero])
    # erfc(t) moves by 2 t^2 ulps when t moves by one (so does scipy's, from -x / sqrt 2)
    assert np.all(relative < 1e-15 * (4 + x[nonzero] ** 2))
    # the left tail keeps its value (1 + erf would cancel it to 0)
    assert got[np.argmin(np.abs(x + 10))] < 0


def test_gelu_forward_float32_within_an_ulp(path):
    x = _points(np.float32)
    got = rill.nn.functional.gelu(rill.tensor(x)).numpy()
    want = _gelu64(x.astype(np.float64))
    finite = np.isfinite(want)
    assert _ulps(got[finite], want[finite], np.float32).max() <= 1


@needs_compiler
def test_float32_gelu_and_gradient_within_an_ulp_across_the_range(monkeypatch):
    """The compiled float32 kernel computes Phi to ~2^-34, not in full double: every 997th
    float32 of magnitude in [2^-24, 16], both signs (~940 k values; bench/gelu_ulps.py checks
    all 470 M), within an ulp of the float64 value; the gradient within an ulp of the size
    of its two terms, which cancel near -0.75."""
    monkeypatch.setattr(build, "ENABLED", True)
    bits = np.arange(0x33800000, 0x41800000, 997, dtype=np.uint32)
    x = np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)
    x64 = x.astype(np.float64)
    phi = 0.5 * sp.erfc(-x64 / math.sqrt(2.0))
    density = x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)
    assert _ulps(special.gelu(x), x64 * phi, np.float32).max() <= 1
    grad = special.gelu_grad(np.ones_like(x), x).astype(np.float64)
    size = np.spacing((phi + np.abs(density)).astype(np.float32)).astype(np.float64)
    assert (np.abs(grad - (phi + density)) / size).max() <= 1


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-13), (torch.float32, 2e-6)])
def test_gelu_forward_and_gradient_match_torch(path, dtype, rtol):
    # torch computes 1 + erf, which cancels left of -5: compared where both keep digits
    x = torch.linspace(-5, 6, 20001, dtype=dtype)
    g = torch.cos(x * 3)
    xt = x.clone().requires_grad_(True)
    yt = torch.nn.functional.gelu(xt, approximate="none")
    yt.backward(g)
    xr = rill.tensor(x.numpy(), requires_grad=True)
    yr = rill.nn.functional.gelu(xr)
    yr.backward(rill.tensor(g.numpy()))
    # float32 1 + erf keeps 6e-8 absolute: near x = -5 that is 5 * 6e-8 in gelu
    atol = 1e-13 if dtype == torch.float64 else 1e-6
    np.testing.assert_allclose(yr.numpy(), yt.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=rtol, atol=atol)


def test_gelu_special_values(path):
    for dtype in (np.float32, np.float64):
        x = rill.tensor(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -60.0], dtype),
                        requires_grad=True)
        y = rill.nn.functional.gelu(x)
        y.backward(rill.ones_like(y))
        out, grad = y.numpy(), x.grad.numpy()
        assert np.isnan(out[0]) and out[1] == np.inf and np.isnan(out[2])
        assert out[3] == 0 and np.signbit(out[3]) and not np.signbit(out[4])
        assert out[5] == 0  # underflows (|gelu(-60)| < 1e-780)
        assert np.isnan(grad[:3]).all()
        np.testing.assert_array_equal(grad[3:], [0.5, 0.5, 0.0])


# ---- gelu gradient -------------------------------------------------------------------------

def test_gelu_gradient_against_finite_differences(path):
    x = np.linspace(-9, 9, 3001)
    xr = rill.tensor(x, requires_grad=True)
    rill.nn.functional.gelu(xr).sum().backward()
    h = 1e-6
    fd = (_gelu64(x + h) - _gelu64(x - h)) / (2 * h)
    np.testing.assert_allclose(xr.grad.numpy(), fd, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(xr.grad.numpy(), _gelu_grad64(x), rtol=1e-14, atol=4e-16)  # a zero at -0.75


def test_gelu_grad_is_one_primitive_on_the_cpu_and_a_composite_elsewhere(path):
    for dtype, fused in (("float32", True), ("float64", True), ("float16", False)):
        x = rill.tensor(np.linspace(-3, 3, 7), dtype=dtype, requires_grad=True)
        y = rill.nn.functional.gelu(x)
        with rill.profiler.profile() as prof:
            y.backward(rill.ones_like(y))
        names = {e.name for e in prof.events()}
        assert ("gelu_grad" in names) is fused, names
        np.testing.assert_allclose(x.grad.numpy().astype(np.float64),
                                   _gelu_grad64(np.linspace(-3, 3, 7)), rtol=2e-3, atol=2e-3)


def test_second_derivative_through_gelu_grad(path):
    """gelu_grad's own rule: d/dx (g gelu'(x)) = g phi(x) (2 - x^2) and d/dg = gelu'(x)."""
    x = np.linspace(-6, 6, 241)
    first = rill.grad(lambda t: rill.nn.functional.gelu(t).sum())
    second = rill.grad(lambda t: (first(t) * first(t)).sum())(rill.tensor(x))
    h = 1e-6
    fd = ((_gelu_grad64(x + h) ** 2) - (_gelu_grad64(x - h) ** 2)) / (2 * h)
    np.testing.assert_allclose(second.numpy(), fd, rtol=1e-6, atol=1e-9)


def test_gelu_grad_checks_its_operands():
    from rill.ops.elementwise import gelu_grad_p
    from rill.eager.bind import bind
    x = rill.ones(3)
    with pytest.raises(rill.ShapeError, match="one shape"):
        bind(gelu_grad_p, rill.ones(4), x)
    with pytest.raises(rill.DTypeError, match="one dtype"):
        bind(gelu_grad_p, rill.ones(3, dtype="float64"), x)


@needs_compiler
def test_native_and_numpy_kernels_agree(monkeypatch):
    results = {}
    for enabled in (True, False):
        monkeypatch.setattr(build, "ENABLED", enabled)
        for dtype in (np.float32, np.float64):
            x = _points(dtype, n=50_000)
            g = np.cos(x).astype(dtype)
            results[enabled, dtype] = (special.erf(x), special.gelu(x), special.gelu_grad(g, x))
    for dtype, tolerance in ((np.float32, 1), (np.float64, 8)):
        x = _points(dtype, n=50_000)
        g = np.cos(x).astype(dtype)
        # gelu' = Phi(x) + x phi(x) cancels left of 0 (to 0 at -0.75): its error is counted
        # in ulps of the terms' size
        x64 = x.astype(np.float64)
        with np.errstate(over="ignore", under="ignore"):
            terms = np.abs(g) * (0.5 * sp.erfc(-x64 / math.sqrt(2)) +
                                 np.abs(x64) * np.exp(-0.5 * x64 * x64) / math.sqrt(2 * math.pi))
        scales = (None, None, terms.astype(dtype))
        for native, numpy, scale in zip(results[True, dtype], results[False, dtype], scales):
            assert native.dtype == numpy.dtype == dtype
            np.testing.assert_array_equal(np.isnan(native), np.isnan(numpy))
            both = ~np.isnan(numpy) & (numpy != 0)
            error = np.abs(native[both].astype(np.float64) - numpy[both])
            with np.errstate(over="ignore"):
                unit = np.spacing(np.abs(numpy if scale is None else scale)[both])
            assert (error / unit).max() <= tolerance
            np.testing.assert_array_equal(native[numpy == 0], 0)


def test_captured_gelu_step_equals_eager(path):
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((4, 16, 64)).astype(np.float32)
    w0 = (rng.standard_normal((64, 64)) * 0.1).astype(np.float32)

    def loss(w, x):
        y = rill.nn.functional.gelu(x @ w)
        return (y * y).sum() + rill.erf(y).sum()

    _assert_captured_equals_eager(rill.value_and_grad(loss), w0, x0)


def _assert_captured_equals_eager(step, *arrays):
    def run(fn):
        value, grad = fn(*(rill.tensor(a) for a in arrays))
        return value.numpy(), grad.numpy()

    eager = run(step)
    captured = rill.capture(step)
    run(captured)  # traces
    for a, b in zip(eager, run(captured)):
        np.testing.assert_array_equal(a, b)


# ---- x @ W as one GEMM ---------------------------------------------------------------------

MATMUL_SHAPES = [((16, 64, 32), (32, 24)),        # x @ W of a GPT
                 ((2, 3, 5, 8), (8, 4)),          # 4-d activations
                 ((4, 6, 8), (8,)),               # matrix @ vector
                 ((4, 6, 8), (1, 8, 5)),          # a weight with a batch of 1
                 ((2, 6, 8), (1, 1, 8, 5)),       # ... of higher rank than x
                 ((0, 6, 8), (8, 5)), ((3, 6, 0), (0, 5)), ((3, 0, 8), (8, 5))]


@pytest.mark.parametrize("xs, ws", MATMUL_SHAPES)
def test_batched_x_at_w_forward_and_gradients(xs, ws):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    xr, wr = rill.tensor(x, requires_grad=True), rill.tensor(w, requires_grad=True)
    yr = xr @ wr
    g = rng.standard_normal(yr.shape)
    yr.backward(rill.tensor(g))
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    yt = xt @ wt
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(yr.numpy(), np.matmul(x, w), rtol=1e-12, atol=1e-12)
    assert yr.shape == tuple(yt.shape)
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(wr.grad.numpy(), wt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_one_gemm_where_the_rows_are_one_matrix_and_batched_matmul_elsewhere():
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    w = np.ones((4, 5), np.float32)
    rows, w2, shape = numpy_linalg._as_one_gemm(x, w)
    assert rows.shape == (6, 4) and np.shares_memory(rows, x) and shape == (2, 3, 5)
    view = x.transpose(1, 0, 2)  # its rows are not one strided matrix
    assert numpy_linalg._as_one_gemm(view, w) is None
    np.testing.assert_array_equal(numpy_linalg._matmul(view, w), np.matmul(view, w))
    assert numpy_linalg._as_one_gemm(x, np.ones((2, 4, 5), np.float32)) is None  # a true batch
    ints = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(numpy_linalg._matmul(ints, np.ones((4, 2), np.int64)),
                                  np.matmul(ints, np.ones((4, 2), np.int64)))


def test_weight_gradient_is_one_2d_product():
    x = rill.tensor(np.ones((4, 8, 16), np.float32), requires_grad=True)
    w = rill.tensor(np.ones((16, 32), np.float32), requires_grad=True)
    y = x @ w
    with rill.profiler.profile(record_shapes=True) as prof:
        y.backward(rill.ones_like(y))
    products = sorted((e.name, tuple(map(tuple, e.shapes))) for e in prof.events()
                      if e.name in ("matmul", "linear", "linear_weight_grad"))
    # x's gradient g @ W^T (one GEMM in the kernel, W read transposed), W's x^T g over all
    # 32 rows (one GEMM in the kernel): not four (16, 8) @ (8, 32) products then their sum,
    # and no transpose or reshape op
    assert products == [("linear", ((4, 8, 32), (16, 32))),
                        ("linear_weight_grad", ((4, 8, 16), (4, 8, 32)))], products
    assert not {"sum", "transpose", "reshape"} & {e.name for e in prof.events()}
    np.testing.assert_array_equal(w.grad.numpy(), np.full((16, 32), 32, np.float32))


def test_captured_batched_matmul_step_equals_eager():
    rng = np.random.default_rng(5)
    x0 = rng.standard_normal((3, 7, 16)).astype(np.float32)
    w0 = rng.standard_normal((16, 8)).astype(np.float32)

    _assert_captured_equals_eager(rill.value_and_grad(lambda w, x: ((x @ w) ** 2).sum()),
                                  w0, x0)


@pytest.mark.parametrize("lead", [(5,), (2, 3), (2, 0), (1, 2, 3)])
def test_linear_weight_grad_sums_over_every_leading_axis(lead):
    """g^T x over all leading axes, as the primitive the vjps of x @ W and linear bind."""
    from rill.eager.bind import bind
    from rill.ops.linalg import linear_weight_grad_p
    rng = np.random.default_rng(3)
    g, x = rng.standard_normal(lead + (4,)), rng.standard_normal(lead + (6,))
    got = bind(linear_weight_grad_p, rill.tensor(g), rill.tensor(x))
    want = np.tensordot(g, x, axes=(list(range(len(lead))), list(range(len(lead)))))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(rill.ShapeError, match="same leading axes"):
        bind(linear_weight_grad_p, rill.tensor(g), rill.tensor(rng.standard_normal((7, 6))))


def test_second_order_and_vmap_through_the_product_of_a_3d_activation():
    """The gradient of x @ W is itself differentiable (linear and linear_weight_grad's own
    rules) and batches under vmap, matching PyTorch."""
    rng = np.random.default_rng(4)
    x0, w0 = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))

    def loss(fw, x, w):
        return ((x @ w).tanh() ** 2).sum()

    def outer(fw, grad):
        return lambda x, w: (grad(lambda w2: loss(fw, x, w2))(w) ** 2).sum()

    hx = rill.grad(outer(rill, rill.grad))(rill.tensor(x0), rill.tensor(w0))
    hxt = torch.func.grad(outer(torch, torch.func.grad))(torch.tensor(x0), torch.tensor(w0))
    np.testing.assert_allclose(hx.numpy(), hxt.numpy(), rtol=1e-10, atol=1e-12)
    per_sample = rill.vmap(rill.grad(lambda w, x: loss(rill, x, w)),
                                in_dims=(None, 0))(rill.tensor(w0), rill.tensor(x0))
    want = torch.func.vmap(torch.func.grad(lambda w, x: loss(torch, x, w)),
                           in_dims=(None, 0))(torch.tensor(w0), torch.tensor(x0))
    np.testing.assert_allclose(per_sample.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("xs, out", [((2, 4, 3), 0), ((3,), 2), ((2, 0, 3), 4)])
def test_linear_gradients_at_edge_shapes_match_pytorch(xs, out):
    """A layer of no outputs, one sample (a 1-d x), no rows: the weight's and bias's
    gradients as PyTorch's (a layer of 0 outputs on a 3-d x failed to reshape before)."""
    rng = np.random.default_rng(6)
    x0, w0, b0 = rng.standard_normal(xs), rng.standard_normal((out, 3)), rng.standard_normal(out)
    got = [rill.tensor(a, requires_grad=True) for a in (x0, w0, b0)]
    want = [torch.tensor(a, requires_grad=True) for a in (x0, w0, b0)]
    (rill.nn.functional.linear(*got) ** 2).sum().backward()
    (torch.nn.functional.linear(*want) ** 2).sum().backward()
    for r, t in zip(got, want):
        assert r.grad.shape == tuple(t.grad.shape)
        np.testing.assert_allclose(r.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-12)
