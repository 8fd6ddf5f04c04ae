"""rill.distributions against torch.distributions on the same float64 parameters: log_prob,
entropy, mean, variance and their gradients, KL divergences, sample shapes and statistics,
reparameterized samples, validation errors, and capture."""
import math

import numpy as np
import pytest
import scipy.special
import torch

import rill
import rill.distributions as D
from rill.distributions.special import digamma, lgamma

TD = torch.distributions
R = np.random.default_rng(7)


def _pos(*shape):
    return R.uniform(0.5, 3.0, shape)


def _lower(batch, d):
    a = R.normal(size=batch + (d, d))
    return a @ np.swapaxes(a, -1, -2) + d * np.eye(d)


_COV = _lower((2,), 3)
_TRIL = np.linalg.cholesky(_lower((2,), 3))
_SIMPLEX = R.dirichlet([1.5, 2.0, 3.0], size=(4, 2))
_UNIFORM_LOW = R.normal(size=3)


def _independent_normal(lib):
    def make(loc, scale):
        return lib.Independent(lib.Normal(loc, scale), 1)
    return make


def _case(name, make, params, value, matrix_params=()):
    return pytest.param(make, params, value, matrix_params, id=name)


# (constructor taking keyword tensors from either library, parameters, a valid value)
CASES = [
    _case("Normal", lambda lib: lib.Normal, dict(loc=R.normal(size=3), scale=_pos(3)),
          R.normal(size=(2, 3))),
    _case("Uniform", lambda lib: lib.Uniform,
          dict(low=_UNIFORM_LOW, high=_UNIFORM_LOW + _pos(3)),
          _UNIFORM_LOW + R.uniform(0, 0.5, (2, 3))),
    _case("Bernoulli-probs", lambda lib: lib.Bernoulli, dict(probs=R.uniform(0.1, 0.9, 4)),
          R.integers(0, 2, (3, 4)).astype(float)),
    _case("Bernoulli-logits", lambda lib: lib.Bernoulli, dict(logits=R.normal(size=4)),
          R.integers(0, 2, (3, 4)).astype(float)),
    _case("Categorical-probs", lambda lib: lib.Categorical, dict(probs=_pos(2, 4)),
          R.integers(0, 4, (5, 2))),
    _case("Categorical-logits", lambda lib: lib.Categorical, dict(logits=R.normal(size=(2, 4))),
          R.integers(0, 4, (5, 2))),
    _case("Gamma", lambda lib: lib.Gamma, dict(concentration=_pos(3), rate=_pos(3)),
          _pos(2, 3)),
    _case("Beta", lambda lib: lib.Beta, dict(concentration1=_pos(3), concentration0=_pos(3)),
          R.uniform(0.05, 0.95, (2, 3))),
    _case("Dirichlet", lambda lib: lib.Dirichlet, dict(concentration=_pos(2, 3)), _SIMPLEX),
    _case("MVN-covariance", lambda lib: lib.MultivariateNormal,
          dict(loc=R.normal(size=(2, 3)), covariance_matrix=_COV), R.normal(size=(4, 2, 3)),
          ("covariance_matrix",)),
    _case("MVN-scale_tril", lambda lib: lib.MultivariateNormal,
          dict(loc=R.normal(size=(2, 3)), scale_tril=_TRIL), R.normal(size=(4, 2, 3))),
    _case("MVN-precision", lambda lib: lib.MultivariateNormal,
          dict(loc=R.normal(size=(2, 3)), precision_matrix=_COV), R.normal(size=(4, 2, 3)),
          ("precision_matrix",)),
    _case("Independent-Normal", _independent_normal,
          dict(loc=R.normal(size=(2, 3)), scale=_pos(2, 3)), R.normal(size=(4, 2, 3))),
]


def _both(make, params, requires_grad=False):
    ours = {k: rill.tensor(v, requires_grad=requires_grad) for k, v in params.items()}
    theirs = {k: torch.tensor(v, requires_grad=requires_grad) for k, v in params.items()}
    return make(D)(**ours), make(TD)(**theirs), ours, theirs


def _value(value):
    return rill.tensor(value), torch.tensor(value)


def _close(ours, theirs, tol=1e-9):
    np.testing.assert_allclose(np.asarray(ours.numpy()), theirs.detach().numpy(), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("make, params, value, matrix_params", CASES)
def test_forward_matches_torch(make, params, value, matrix_params):
    p, tp, _, _ = _both(make, params)
    x, tx = _value(value)
    assert p.batch_shape == tuple(tp.batch_shape)
    assert p.event_shape == tuple(tp.event_shape)
    _close(p.log_prob(x), tp.log_prob(tx))
    _close(p.entropy(), tp.entropy())
    if not isinstance(p, D.Categorical):  # torch's Categorical mean is NaN
        _close(p.mean, tp.mean)
        _close(p.variance, tp.variance)
        _close(p.stddev, tp.stddev)
    else:
        assert np.isnan(p.mean.numpy()).all() and p.mean.shape == tuple(tp.mean.shape)


def _grads(ours, theirs, name):
    """Both gradients as arrays; a parameter the output does not use has none (zeros)."""
    g, tg = ours[name].grad, theirs[name].grad
    zeros = np.zeros(ours[name].shape)
    assert (g is None) == (tg is None), name
    return (zeros, zeros) if g is None else (g.numpy(), tg.numpy())


def _symmetric(g):
    return (g + np.swapaxes(g, -1, -2)) / 2


@pytest.mark.parametrize("what", ["log_prob", "entropy"])
@pytest.mark.parametrize("make, params, value, matrix_params", CASES)
def test_gradients_match_torch(make, params, value, matrix_params, what):
    p, tp, ours, theirs = _both(make, params, requires_grad=True)
    x, tx = _value(value)
    weights = R.normal(size=tp.log_prob(tx).shape if what == "log_prob" else tp.batch_shape)
    out = p.log_prob(x) if what == "log_prob" else p.entropy()
    t_out = tp.log_prob(tx) if what == "log_prob" else tp.entropy()
    (out * rill.tensor(weights)).sum().backward()
    (t_out * torch.tensor(weights)).sum().backward()
    for name in params:
        g, tg = _grads(ours, theirs, name)
        if name in matrix_params:  # rill reads the lower triangle only: same symmetric part
            g, tg = _symmetric(g), _symmetric(tg)
        np.testing.assert_allclose(g, tg, rtol=1e-7, atol=1e-9, err_msg=name)


def test_mean_and_variance_are_differentiable():
    for cls, params in ((D.Gamma, dict(concentration=_pos(3), rate=_pos(3))),
                        (D.Beta, dict(concentration1=_pos(3), concentration0=_pos(3)))):
        p, tp, ours, theirs = _both(lambda lib: getattr(lib, cls.__name__), params, True)
        (p.mean + p.variance).sum().backward()
        (tp.mean + tp.variance).sum().backward()
        for name in params:
            _close(ours[name].grad, theirs[name].grad)


# ---- KL divergences ----------------------------------------------------------------------

KL_CASES = [
    pytest.param(lambda lib: lib.Normal, dict(loc=R.normal(size=3), scale=_pos(3)),
                 dict(loc=R.normal(size=3), scale=_pos(3)), (), id="Normal"),
    pytest.param(lambda lib: lib.Categorical, dict(probs=_pos(2, 4)), dict(logits=R.normal(
        size=(2, 4))), (), id="Categorical"),
    pytest.param(lambda lib: lib.Bernoulli, dict(probs=R.uniform(0.1, 0.9, 3)),
                 dict(logits=R.normal(size=3)), (), id="Bernoulli"),
    pytest.param(lambda lib: lib.Uniform, dict(low=np.array([0.0, 0.2]), high=np.array(
        [1.0, 0.5])), dict(low=np.array([-0.5, 0.1]), high=np.array([2.0, 0.9])), (),
        id="Uniform"),
    pytest.param(lambda lib: lib.Beta, dict(concentration1=_pos(3), concentration0=_pos(3)),
                 dict(concentration1=_pos(3), concentration0=_pos(3)), (), id="Beta"),
    pytest.param(lambda lib: lib.Gamma, dict(concentration=_pos(3), rate=_pos(3)),
                 dict(concentration=_pos(3), rate=_pos(3)), (), id="Gamma"),
    pytest.param(lambda lib: lib.Dirichlet, dict(concentration=_pos(2, 3)),
                 dict(concentration=_pos(2, 3)), (), id="Dirichlet"),
    pytest.param(lambda lib: lib.MultivariateNormal,
                 dict(loc=R.normal(size=(2, 3)), scale_tril=_TRIL),
                 dict(loc=R.normal(size=(2, 3)), covariance_matrix=_COV), ("covariance_matrix",),
                 id="MultivariateNormal"),
    pytest.param(_independent_normal, dict(loc=R.normal(size=(2, 3)), scale=_pos(2, 3)),
                 dict(loc=R.normal(size=(2, 3)), scale=_pos(2, 3)), (), id="Independent"),
]


@pytest.mark.parametrize("make, p_params, q_params, matrix_params", KL_CASES)
def test_kl_divergence_matches_torch(make, p_params, q_params, matrix_params):
    p, tp, p_ours, p_theirs = _both(make, p_params, requires_grad=True)
    q, tq, q_ours, q_theirs = _both(make, q_params, requires_grad=True)
    kl, t_kl = D.kl_divergence(p, q), TD.kl_divergence(tp, tq)
    _close(kl, t_kl)
    weights = R.normal(size=t_kl.shape)
    (kl * rill.tensor(weights)).sum().backward()
    (t_kl * torch.tensor(weights)).sum().backward()
    for ours, theirs in ((p_ours, p_theirs), (q_ours, q_theirs)):
        for name in ours:
            g, tg = _grads(ours, theirs, name)
            if name in matrix_params:
                g, tg = _symmetric(g), _symmetric(tg)
            np.testing.assert_allclose(g, tg, rtol=1e-7, atol=1e-9, err_msg=name)


def test_kl_infinite_where_torch_is():
    p = D.Uniform(rill.tensor([0.0]), rill.tensor([2.0]))
    q = D.Uniform(rill.tensor([0.5]), rill.tensor([1.0]))
    assert math.isinf(D.kl_divergence(p, q).item())
    p = D.Categorical(probs=rill.tensor([0.5, 0.5]))
    q = D.Categorical(probs=rill.tensor([1.0, 0.0]))
    assert math.isinf(D.kl_divergence(p, q).item())
    assert D.kl_divergence(q, p).item() == pytest.approx(math.log(2))


def test_register_kl_and_unregistered_pair():
    with pytest.raises(rill.ArgumentError, match=r"no KL divergence is registered for "
                                                 r"\(Normal, Gamma\).*register_kl"):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Gamma(1.0, 1.0))

    class Shifted(D.Normal):
        pass

    @D.register_kl(Shifted, D.Gamma)
    def _kl(p, q):
        return p.loc * 0 + 42.0

    assert D.kl_divergence(Shifted(0.0, 1.0), D.Gamma(1.0, 1.0)).item() == 42.0
    # a subclass still finds its parent's pair
    assert D.kl_divergence(Shifted(0.0, 1.0), D.Normal(0.0, 1.0)).item() == 0.0
    with pytest.raises(rill.ArgumentError, match="Distribution subclasses"):
        D.register_kl(int, D.Normal)


# ---- sampling ----------------------------------------------------------------------------

SAMPLERS = [
    pytest.param(lambda: D.Normal(rill.tensor([0.5, -1.0]), rill.tensor([1.0, 2.0])),
                 id="Normal"),
    pytest.param(lambda: D.Uniform(rill.tensor([0.0, -1.0]), rill.tensor([1.0, 3.0])),
                 id="Uniform"),
    pytest.param(lambda: D.Bernoulli(probs=rill.tensor([0.2, 0.7])), id="Bernoulli"),
    pytest.param(lambda: D.Gamma(rill.tensor([0.4, 3.0]), rill.tensor([1.0, 2.0])),
                 id="Gamma"),
    pytest.param(lambda: D.Beta(rill.tensor([0.5, 2.0]), rill.tensor([1.5, 5.0])), id="Beta"),
    pytest.param(lambda: D.Dirichlet(rill.tensor([[0.5, 1.0, 2.0], [3.0, 3.0, 1.0]])),
                 id="Dirichlet"),
    pytest.param(lambda: D.MultivariateNormal(rill.tensor([[1.0, -1.0, 0.0]]),
                                              covariance_matrix=rill.tensor(_COV[:1])),
                 id="MultivariateNormal"),
    pytest.param(lambda: D.Independent(D.Normal(rill.zeros(2, 3, dtype=rill.float64),
                                                rill.ones(2, 3, dtype=rill.float64)), 2),
                 id="Independent"),
]


@pytest.mark.parametrize("make", SAMPLERS)
def test_sample_shapes_and_statistics(make):
    dist = make()
    assert dist.sample().shape == dist.batch_shape + dist.event_shape
    assert dist.sample((4, 2)).shape == (4, 2) + dist.batch_shape + dist.event_shape
    assert dist.sample(5).shape == (5,) + dist.batch_shape + dist.event_shape
    rill.manual_seed(1)
    n = 20000
    draws = np.asarray(dist.sample((n,)).numpy(), dtype=np.float64)
    assert np.isfinite(draws).all()
    mean, var = np.asarray(dist.mean.numpy()), np.asarray(dist.variance.numpy())
    np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 5 * np.sqrt(var / n) + 1e-12)
    np.testing.assert_allclose(draws.var(0), var, rtol=0.08)
    rill.manual_seed(1)
    again = dist.sample((n,)).numpy()
    np.testing.assert_array_equal(draws, again)  # reproducible under manual_seed


def test_categorical_sample_frequencies_and_shapes():
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.0, 0.5]])
    dist = D.Categorical(probs=rill.tensor(probs * 3))  # unnormalized weights
    assert dist.sample().shape == (2,)
    assert dist.sample((4, 5)).shape == (4, 5, 2)
    assert dist.sample((0,)).shape == (0, 2)
    rill.manual_seed(3)
    n = 20000
    draws = dist.sample((n,)).numpy()
    assert draws.dtype == np.int64
    for row in range(2):
        freq = np.bincount(draws[:, row], minlength=3) / n
        np.testing.assert_array_less(np.abs(freq - probs[row]),
                                     5 * np.sqrt(probs[row] * (1 - probs[row]) / n) + 1e-12)
    assert (draws[:, 1] != 1).all()


def test_rsample_is_reparameterized():
    f64 = rill.float64
    loc = rill.tensor([0.5, -1.0], dtype=f64, requires_grad=True)
    scale = rill.tensor([1.0, 2.0], dtype=f64, requires_grad=True)
    rill.manual_seed(0)
    x = D.Normal(loc, scale).rsample((1000,))
    x.mean().backward()
    np.testing.assert_allclose(loc.grad.numpy(), [0.5, 0.5])  # d/dloc mean over 2 columns
    eps = (x.detach().numpy() - loc.detach().numpy()) / scale.detach().numpy()
    np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0) / x.size, rtol=1e-12)

    low = rill.tensor([0.0], dtype=f64, requires_grad=True)
    high = rill.tensor([2.0], dtype=f64, requires_grad=True)
    u = D.Uniform(low, high).rsample((100,))
    u.sum().backward()
    fraction = u.detach().numpy() / 2.0
    np.testing.assert_allclose(low.grad.numpy(), (1 - fraction).sum(0), rtol=1e-12)
    np.testing.assert_allclose(high.grad.numpy(), fraction.sum(0), rtol=1e-12)

    mloc = rill.tensor([1.0, 2.0, 3.0], dtype=f64, requires_grad=True)
    tril = rill.tensor(_TRIL[0], requires_grad=True)
    y = D.MultivariateNormal(mloc, scale_tril=tril).rsample((50,))
    y.mean(axis=0).sum().backward()
    np.testing.assert_allclose(mloc.grad.numpy(), [1.0, 1.0, 1.0])
    eps = np.linalg.solve(_TRIL[0], (y.detach().numpy() - [1.0, 2.0, 3.0]).T).T
    np.testing.assert_allclose(tril.grad.numpy(), np.ones((3, 1)) * eps.mean(0)[None, :],
                               rtol=1e-10)
    assert D.Independent(D.Normal(mloc, 1.0), 1).has_rsample


@pytest.mark.parametrize("dist", [D.Gamma(1.0, 1.0), D.Beta(1.0, 1.0),
                                  D.Dirichlet(rill.tensor([1.0, 1.0]))],
                         ids=lambda d: type(d).__name__)
def test_rsample_of_gamma_family_is_reparameterized(dist):
    # implicit reparameterization; gradients are checked in test_distributions_rsample.py
    assert dist.has_rsample
    assert dist.rsample((2,)).shape == dist.sample((2,)).shape


@pytest.mark.parametrize("dist", [D.Bernoulli(probs=0.3), D.Categorical(logits=rill.zeros(3))],
                         ids=lambda d: type(d).__name__)
def test_rsample_refused_without_reparameterization(dist):
    assert not dist.has_rsample
    with pytest.raises(rill.ArgumentError, match="no reparameterized sampler.*use sample"):
        dist.rsample()


# ---- validation --------------------------------------------------------------------------

BAD = [
    pytest.param(lambda: D.Normal(0.0, -1.0), "scale must satisfy GreaterThan", id="scale"),
    pytest.param(lambda: D.Uniform(1.0, 1.0), "low must be less than high", id="uniform"),
    pytest.param(lambda: D.Bernoulli(probs=1.5), "probs must satisfy Interval", id="bern"),
    pytest.param(lambda: D.Bernoulli(), "exactly one of probs= or logits=", id="neither"),
    pytest.param(lambda: D.Categorical(probs=rill.tensor([0.5]), logits=rill.tensor([0.0])),
                 "exactly one of probs= or logits=", id="both"),
    pytest.param(lambda: D.Categorical(probs=rill.tensor([0.5, -0.5, 1.0])),
                 "probs must satisfy", id="negative-probs"),
    pytest.param(lambda: D.Gamma(0.0, 1.0), "concentration must satisfy", id="gamma"),
    pytest.param(lambda: D.Beta(1.0, -2.0), "concentration0 must satisfy", id="beta"),
    pytest.param(lambda: D.Dirichlet(rill.tensor([1.0, 0.0])), "concentration must satisfy",
                 id="dirichlet"),
    pytest.param(lambda: D.MultivariateNormal(rill.zeros(2), covariance_matrix=rill.tensor(
        [[1.0, 2.0], [2.0, 1.0]])), "covariance_matrix must satisfy PositiveDefinite",
        id="not-pd"),
    pytest.param(lambda: D.MultivariateNormal(rill.zeros(2), scale_tril=rill.eye(2),
                                              covariance_matrix=rill.eye(2)),
                 "exactly one of", id="two-matrices"),
    pytest.param(lambda: D.MultivariateNormal(rill.zeros(3), scale_tril=rill.eye(2)),
                 "loc has 3 entries", id="mvn-size"),
    pytest.param(lambda: D.Normal(rill.zeros(2), rill.ones(3)), "do not broadcast",
                 id="broadcast"),
    pytest.param(lambda: D.Independent(D.Normal(rill.zeros(2), 1.0), 2),
                 "reinterpreted_batch_ndims must be an int in \\[0, 1\\]", id="independent"),
    pytest.param(lambda: D.Normal("a", 1.0), "loc must be a tensor or a number", id="type"),
]


@pytest.mark.parametrize("make, message", BAD)
def test_bad_parameters_raise_rill_errors(make, message):
    with pytest.raises(rill.Error, match=message):
        make()


def test_log_prob_outside_support_raises_unless_validation_is_off():
    with pytest.raises(rill.ArgumentError, match="value must lie in the support"):
        D.Bernoulli(probs=0.3).log_prob(rill.tensor(0.5))
    with pytest.raises(rill.ArgumentError, match="support"):
        D.Beta(2.0, 2.0).log_prob(rill.tensor(1.5))
    with pytest.raises(rill.ArgumentError, match="support"):
        D.Categorical(logits=rill.zeros(3)).log_prob(rill.tensor(3))
    with pytest.raises(rill.ShapeError, match="event shape"):
        D.Dirichlet(rill.ones(3)).log_prob(rill.tensor([0.5, 0.5]))
    with pytest.raises(rill.ShapeError, match="does not broadcast with batch shape"):
        D.Normal(rill.zeros(3), 1.0).log_prob(rill.zeros(2))
    lp = D.Uniform(0.0, 1.0, validate_args=False).log_prob(rill.tensor(2.0))
    assert lp.item() == -math.inf
    D.Normal(0.0, -1.0, validate_args=False)  # no check asked for


def test_missing_property_is_a_rill_error():
    with pytest.raises(rill.ArgumentError, match="Distribution does not define entropy"):
        D.Distribution().entropy()


# ---- capture -----------------------------------------------------------------------------


def test_log_prob_under_capture_equals_eager():
    def normal_lp(loc, scale, x):
        return D.Normal(loc, scale).log_prob(x)

    def mvn_kl(loc, cov, loc2):
        p = D.MultivariateNormal(loc, covariance_matrix=cov)
        q = D.MultivariateNormal(loc2, scale_tril=rill.eye(3, dtype=rill.float64))
        return p.log_prob(loc2) + D.kl_divergence(p, q)

    for fn, args in ((normal_lp, (R.normal(size=3), _pos(3), R.normal(size=(2, 3)))),
                     (mvn_kl, (R.normal(size=(2, 3)), _COV, R.normal(size=(2, 3))))):
        tensors = [rill.tensor(a) for a in args]
        np.testing.assert_allclose(rill.capture(fn)(*tensors).numpy(), fn(*tensors).numpy(),
                                   rtol=1e-12)


# ---- special functions -------------------------------------------------------------------


def test_lgamma_and_digamma_match_scipy():
    x = np.concatenate([np.logspace(-5, 6, 300), [0.5, 1.0, 1.5, 2.0, 3.0]])
    np.testing.assert_allclose(lgamma(rill.tensor(x)).numpy(), scipy.special.gammaln(x),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(digamma(rill.tensor(x)).numpy(), scipy.special.digamma(x),
                               rtol=1e-12, atol=1e-12)
    t = rill.tensor(x[::10], requires_grad=True)
    lgamma(t).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), scipy.special.digamma(x[::10]), rtol=1e-10)
    assert lgamma(rill.tensor([4.0])).dtype == rill.float32
    # float32: the recurrence shift cancels ~log(13!) ~ 22, so errors are ~1e-6 absolute
    assert lgamma(rill.tensor([4.0])).item() == pytest.approx(math.lgamma(4.0), abs=1e-5)


@pytest.mark.parametrize("where", ["captured", "gpu"])
def test_categorical_samples_captured_and_on_the_gpu(where):
    """The Gumbel-max draw is ops like any other: it captures (a new draw each call) and runs
    on the gpu device, with the right frequencies and zero-weight categories never drawn."""
    logits = rill.tensor([np.log(0.25), -np.inf, np.log(0.75)])
    if where == "gpu":
        if not rill.gpu.is_available():
            pytest.skip("no gpu device")
        logits = logits.to("gpu")
        draw = lambda t: D.Categorical(logits=t).sample((4000,))  # noqa: E731
    else:
        draw = rill.capture(lambda t: D.Categorical(logits=t).sample((4000,)))
    first, second = draw(logits).to("cpu").numpy(), draw(logits).to("cpu").numpy()
    assert first.shape == (4000,) and first.dtype == np.int64
    assert not np.array_equal(first, second)                 # not frozen at trace time
    freq = np.bincount(np.concatenate([first, second]), minlength=3) / 8000
    np.testing.assert_allclose(freq, [0.25, 0.0, 0.75], atol=5 * np.sqrt(0.25 * 0.75 / 8000))
