"""kl_divergence(p, q) and the @register_kl table of closed forms."""
from __future__ import annotations

import math

from ..errors import ArgumentError, ShapeError
from ..ops import elementwise as E, reduce as R
from .bernoulli import Bernoulli
from .beta import Beta
from .categorical import Categorical
from .dirichlet import Dirichlet
from .distribution import Distribution
from .gamma import Gamma
from .independent import Independent
from .multivariate_normal import MultivariateNormal
from .normal import Normal
from .special import digamma, lgamma
from .triangular import diagonal, solve_lower
from .uniform import Uniform
from .utils import sum_rightmost

_KL: dict = {}


def register_kl(type_p, type_q):
    """Decorator: fn(p, q) computes KL(p || q) for p of type_p and q of type_q (subclasses
    included; the most specific registered pair wins)."""
    for t in (type_p, type_q):
        if not (isinstance(t, type) and issubclass(t, Distribution)):
            raise ArgumentError(f"register_kl needs Distribution subclasses, got {t!r}",
                                op="register_kl")

    def decorate(fn):
        _KL[type_p, type_q] = fn
        return fn
    return decorate


def _lookup(tp, tq):
    best, rank = None, None
    for (p, q), fn in _KL.items():
        if issubclass(tp, p) and issubclass(tq, q):
            r = (tp.__mro__.index(p), tq.__mro__.index(q))
            if rank is None or r < rank:
                best, rank = fn, r
    return best


def kl_divergence(p, q):
    """KL(p || q) = E_p[log p(x) - log q(x)], of shape batch_shape, in closed form."""
    for name, d in (("p", p), ("q", q)):
        if not isinstance(d, Distribution):
            raise ArgumentError(f"{name} must be a Distribution, got {type(d).__name__}",
                                op="kl_divergence")
    fn = _lookup(type(p), type(q))
    if fn is None:
        raise ArgumentError(
            f"no KL divergence is registered for ({type(p).__name__}, {type(q).__name__}); "
            f"register one with @rill.distributions.register_kl({type(p).__name__}, "
            f"{type(q).__name__})", op="kl_divergence")
    return fn(p, q)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    ratio = (p.scale / q.scale) ** 2
    shift = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (ratio + shift - 1 - E.log(ratio))


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = E.where(q.probs == 0, math.inf, t)  # mass where q has none: infinite
    t = E.where(p.probs == 0, 0.0, t)       # no mass in p: no contribution
    return R.sum(t, axis=-1)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    ones = p.probs * (E.softplus(-q.logits) - E.softplus(-p.logits))
    ones = E.where(p.probs == 0, 0.0, ones)
    zeros = (1 - p.probs) * (E.softplus(q.logits) - E.softplus(p.logits))
    zeros = E.where(p.probs == 1, 0.0, zeros)
    return ones + zeros


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = E.log((q.high - q.low) / (p.high - p.low))
    outside = E.logical_or(q.low > p.low, q.high < p.high)
    return E.where(outside, math.inf, result)


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    p1, p0, q1, q0 = p.concentration1, p.concentration0, q.concentration1, q.concentration0
    total_p, total_q = p1 + p0, q1 + q0
    return (lgamma(q1) + lgamma(q0) + lgamma(total_p) - lgamma(p1) - lgamma(p0)
            - lgamma(total_q) + (p1 - q1) * digamma(p1) + (p0 - q0) * digamma(p0)
            + (total_q - total_p) * digamma(total_p))


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    pc, pr, qc, qr = p.concentration, p.rate, q.concentration, q.rate
    return (qc * E.log(pr / qr) + lgamma(qc) - lgamma(pc) + (pc - qc) * digamma(pc)
            + (qr - pr) * (pc / pr))


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    pc, qc = p.concentration, q.concentration
    total_p = R.sum(pc, axis=-1)
    total_q = R.sum(qc, axis=-1)
    return (lgamma(total_p) - lgamma(total_q) - R.sum(lgamma(pc) - lgamma(qc), axis=-1)
            + R.sum((pc - qc) * (digamma(pc) - digamma(total_p)[..., None]), axis=-1))


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn_mvn(p, q):
    if p.event_shape != q.event_shape:
        raise ShapeError(f"KL between MultivariateNormals of event shapes {p.event_shape} and "
                         f"{q.event_shape}", op="kl_divergence")
    d = p.event_shape[0]
    half_log_ratio = (R.sum(E.log(diagonal(q.scale_tril)), axis=-1)
                      - R.sum(E.log(diagonal(p.scale_tril)), axis=-1))
    spread = solve_lower(q.scale_tril, p.scale_tril)           # Lq^-1 Lp: trace term
    shift = solve_lower(q.scale_tril, (q.loc - p.loc)[..., None])[..., 0]
    trace = R.sum(spread * spread, axis=(-2, -1))
    return half_log_ratio + 0.5 * (trace + R.sum(shift * shift, axis=-1) - d)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise ArgumentError("KL between Independent distributions needs the same "
                            f"reinterpreted_batch_ndims, got {p.reinterpreted_batch_ndims} and "
                            f"{q.reinterpreted_batch_ndims}", op="kl_divergence")
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)
