"""Reparameterized samples of Gamma, Beta and Dirichlet (implicit reparameterization).

For a fixed draw x of Gamma(alpha, 1), dx/dalpha must be -(dP/dalpha)(alpha, x) / f(x; alpha),
which is evaluated here independently with scipy (central differences of the regularized
incomplete gamma function in alpha, divided by the density) and, at the range's ends, with
mpmath. Over many draws, the mean gradient of f(rsample) must be the gradient of E[f], known
in closed form, within a few standard errors, for rill and for PyTorch alike. Capture runs
the same draws and gradients as eager mode.
"""
import numpy as np
import pytest
import scipy.special as sp
import scipy.stats
import torch

import rill
import rill.distributions as D
from rill.distributions.implicit import standard_gamma_grad

F64 = rill.float64
TINY = np.finfo(np.float64).tiny


def implicit_reference(alpha, x):
    """-(dP/dalpha) / density by scipy: central differences in alpha with one Richardson
    step, of P below the mean and of Q = 1 - P above it (each where it is accurate)."""
    upper = x > alpha

    def cdf(s):  # -Q has P's derivative in alpha
        return np.where(upper, -sp.gammaincc(s, x), sp.gammainc(s, x))

    def slope(h):
        return (cdf(alpha + h) - cdf(alpha - h)) / (2 * h)

    h = 1e-3 * alpha
    d_cdf = (4 * slope(h / 2) - slope(h)) / 3
    density = np.exp(sp.xlogy(alpha - 1, x) - x - sp.gammaln(alpha))
    return -d_cdf / density


# ---- a fixed draw: dx/dalpha against the implicit formula ------------------------------

ALPHAS = np.array([0.01, 0.03, 0.1, 0.3, 1.0, 2.5, 7.0, 20.0, 50.0, 100.0])
QUANTILES = np.array([1e-3, 0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98, 0.999])


def test_standard_gamma_grad_matches_scipy_across_alphas_and_quantiles():
    a, q = np.meshgrid(ALPHAS, QUANTILES, indexing="ij")
    x = np.maximum(scipy.stats.gamma.ppf(q, a), TINY)  # alpha 0.01's lowest quantile underflows
    got = standard_gamma_grad(rill.tensor(x), rill.tensor(a)).numpy()
    np.testing.assert_allclose(got, implicit_reference(a, x), rtol=1e-6)
    assert (got > 0).all()  # gamma draws grow with alpha


def test_standard_gamma_grad_at_the_ends_of_the_range_matches_mpmath():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30

    def exact(a, x):
        a, x = mpmath.mpf(a), mpmath.mpf(x)
        d_cdf = mpmath.diff(lambda s: mpmath.gammainc(s, 0, x, regularized=True), a)
        return float(-d_cdf * mpmath.gamma(a) / (x ** (a - 1) * mpmath.exp(-x)))

    a = np.repeat([1e-3, 1e3], 5)
    x = np.maximum(scipy.stats.gamma.ppf(np.tile([1e-3, 0.1, 0.5, 0.9, 0.999], 2), a), TINY)
    got = standard_gamma_grad(rill.tensor(x), rill.tensor(a)).numpy()
    np.testing.assert_allclose(got, [exact(ai, xi) for ai, xi in zip(a, x)], rtol=1e-11)


def test_rsample_gradient_of_each_draw_is_the_implicit_derivative():
    rng = np.random.default_rng(0)
    alpha_np = np.repeat(ALPHAS, 20)
    rate_np = rng.uniform(0.5, 3.0, alpha_np.shape)
    alpha = rill.tensor(alpha_np, requires_grad=True)
    rate = rill.tensor(rate_np, requires_grad=True)
    rill.manual_seed(11)
    x = D.Gamma(alpha, rate).rsample()
    x.sum().backward()
    draws = x.detach().numpy()
    standard = draws * rate_np  # the Gamma(alpha, 1) draw behind each sample
    # x = standard / rate: dx/dalpha = (d standard/dalpha) / rate, dx/drate = -x / rate
    np.testing.assert_allclose(alpha.grad.numpy(),
                               implicit_reference(alpha_np, standard) / rate_np, rtol=1e-6)
    np.testing.assert_allclose(rate.grad.numpy(), -draws / rate_np, rtol=1e-12)
    # the draws are sample()'s draws for the same generator state
    rill.manual_seed(11)
    np.testing.assert_array_equal(D.Gamma(alpha, rate).sample().numpy(), draws)


def test_float32_draws_get_float32_gradients_from_the_float64_formula():
    alpha = rill.tensor(np.repeat([0.2, 1.0, 30.0], 50), dtype=rill.float32, requires_grad=True)
    rill.manual_seed(2)
    x = D.Gamma(alpha, 1.0).rsample()
    x.sum().backward()
    assert alpha.grad.dtype == rill.float32
    draws = x.detach().numpy().astype(np.float64)
    reference = implicit_reference(alpha.detach().numpy().astype(np.float64), draws)
    np.testing.assert_allclose(alpha.grad.numpy(), reference, rtol=1e-5)


# ---- many draws: mean gradients against gradients of closed-form expectations ------------

N = 20000


def assert_mean_gradient(per_draw, expected, what):
    """per_draw: (N, ...) gradients of one draw each; their mean within 4.5 standard errors
    of `expected` (fixed seeds: the check is deterministic, not flaky)."""
    per_draw = np.asarray(per_draw, dtype=np.float64)
    mean = per_draw.mean(axis=0)
    error = per_draw.std(axis=0) / np.sqrt(per_draw.shape[0])
    assert (np.abs(mean - expected) < 4.5 * error + 1e-12).all(), (what, mean, expected, error)


GAMMA_ALPHA = np.array([0.3, 2.0, 15.0])
GAMMA_RATE = np.array([1.5, 0.5, 2.0])
# E[x] = a / r; E[log x] = psi(a) - log r
GAMMA_TARGETS = {
    "x": (lambda lib, x: x, 1 / GAMMA_RATE, -GAMMA_ALPHA / GAMMA_RATE ** 2),
    "log x": (lambda lib, x: lib.log(x), sp.polygamma(1, GAMMA_ALPHA), -1 / GAMMA_RATE),
}


def _gamma_leaves(lib, tensor):
    return (tensor(np.broadcast_to(GAMMA_ALPHA, (N, 3)).copy(), requires_grad=True),
            tensor(np.broadcast_to(GAMMA_RATE, (N, 3)).copy(), requires_grad=True))


@pytest.mark.parametrize("name", GAMMA_TARGETS)
def test_gamma_mean_gradients_match_the_expectation_in_rill_and_torch(name):
    f, d_alpha, d_rate = GAMMA_TARGETS[name]
    rill.manual_seed(5)
    alpha, rate = _gamma_leaves(rill, rill.tensor)
    f(rill, D.Gamma(alpha, rate).rsample()).sum().backward()
    assert_mean_gradient(alpha.grad.numpy(), d_alpha, f"rill d/dalpha E[{name}]")
    assert_mean_gradient(rate.grad.numpy(), d_rate, f"rill d/drate E[{name}]")

    torch.manual_seed(5)
    alpha, rate = _gamma_leaves(torch, lambda a, **k: torch.tensor(a, **k))
    f(torch, torch.distributions.Gamma(alpha, rate).rsample()).sum().backward()
    assert_mean_gradient(alpha.grad.numpy(), d_alpha, f"torch d/dalpha E[{name}]")
    assert_mean_gradient(rate.grad.numpy(), d_rate, f"torch d/drate E[{name}]")


def test_beta_mean_gradients_match_the_expectation_in_rill_and_torch():
    a, b = np.array([0.5, 3.0]), np.array([2.0, 0.7])
    d_a, d_b = b / (a + b) ** 2, -a / (a + b) ** 2  # E[X] = a / (a + b)
    for lib, make, dist in ((rill, rill.tensor, D.Beta),
                            (torch, torch.tensor, torch.distributions.Beta)):
        lib.manual_seed(6)
        c1 = make(np.broadcast_to(a, (N, 2)).copy(), requires_grad=True)
        c0 = make(np.broadcast_to(b, (N, 2)).copy(), requires_grad=True)
        x = dist(c1, c0).rsample()
        assert ((x.detach().numpy() > 0) & (x.detach().numpy() < 1)).all()
        x.sum().backward()
        assert_mean_gradient(c1.grad.numpy(), d_a, f"{lib.__name__} d/da E[X]")
        assert_mean_gradient(c0.grad.numpy(), d_b, f"{lib.__name__} d/db E[X]")


def test_dirichlet_mean_gradients_match_the_expectation_in_rill_and_torch():
    c = np.array([0.4, 1.5, 3.0])
    total = c.sum()
    expected = np.array([total - c[0], -c[0], -c[0]]) / total ** 2  # E[X_0] = c_0 / total
    for lib, make, dist in ((rill, rill.tensor, D.Dirichlet),
                            (torch, torch.tensor, torch.distributions.Dirichlet)):
        lib.manual_seed(7)
        conc = make(np.broadcast_to(c, (N, 3)).copy(), requires_grad=True)
        x = dist(conc).rsample()
        np.testing.assert_allclose(x.detach().numpy().sum(-1), 1.0, rtol=1e-12)
        x[:, 0].sum().backward()
        assert_mean_gradient(conc.grad.numpy(), expected, f"{lib.__name__} d/dc E[X_0]")


# ---- capture, second derivatives, errors --------------------------------------------------

def test_captured_rsample_and_its_gradient_agree_with_eager():
    def draw_and_grad(alpha, rate, c1, c0):
        def loss(alpha, rate, c1, c0):
            return (D.Gamma(alpha, rate).rsample((4,)).sum()
                    + (D.Beta(c1, c0).rsample((3,)) ** 2).sum())
        return rill.value_and_grad(loss, argnums=(0, 1, 2, 3))(alpha, rate, c1, c0)

    args = [rill.tensor(v, dtype=F64) for v in ([0.5, 3.0], [2.0, 1.0], [0.3, 4.0], [2.0, 0.8])]
    captured = rill.capture(draw_and_grad)
    for _ in range(2):  # the first call traces, the second reuses the program
        rill.manual_seed(3)
        value, grads = captured(*args)
        rill.manual_seed(3)
        expected_value, expected_grads = draw_and_grad(*args)
        np.testing.assert_allclose(value.numpy(), expected_value.numpy(), rtol=1e-12)
        for got, want in zip(grads, expected_grads):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10)
    assert "standard_gamma_grad" in str(captured.graph_for(*args))


def test_second_derivatives_through_rsample_are_refused():
    second = rill.grad(rill.grad(lambda a: D.Gamma(a, 1.0).rsample().sum()))
    with pytest.raises(rill.GradientError, match="second derivatives .* not implemented"):
        second(rill.tensor([1.5], dtype=F64))


def test_standard_gamma_grad_refuses_mismatched_inputs():
    x = rill.ones(3, dtype=F64)
    with pytest.raises(rill.ShapeError, match="standard_gamma_grad.*same shape"):
        standard_gamma_grad(x, rill.ones(2, dtype=F64))
    with pytest.raises(rill.DTypeError, match="one floating dtype"):
        standard_gamma_grad(x, rill.ones(3, dtype=rill.float32))


def test_the_primitive_says_why_it_is_cpu_only():
    from rill.distributions.implicit import standard_gamma_grad_p
    assert "cpu" in standard_gamma_grad_p.kernels and "gpu" not in standard_gamma_grad_p.kernels
    assert "NumPy on the CPU" in standard_gamma_grad_p.cpu_only


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device (RILL_TRITON_INTERPRET=1 "
                    "makes one)")
def test_gpu_parameters_that_need_gradients_are_refused_with_the_fix():
    alpha = rill.tensor([1.5], dtype=rill.float32, device="gpu", requires_grad=True)
    with pytest.raises(rill.DeviceError, match="CPU only.*cpu device, or use sample"):
        D.Gamma(alpha, 1.0).rsample()
    assert D.Gamma(alpha, 1.0).sample((2,)).shape == (2, 1)  # draws without gradients run
