"""Dirichlet(concentration): distributions on the probability simplex."""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import ShapeError
from ..ops import elementwise as E, reduce as R
from ..ops.shape import broadcast_to
from . import constraints
from .distribution import Distribution
from .implicit import rsample_standard_gamma
from .special import digamma, lgamma
from .utils import as_parameter, xlogy


class Dirichlet(Distribution):
    """Concentrations along the last dimension (the event). rsample normalizes independent
    Gamma(concentration) draws, each differentiable in its concentration (see Gamma)."""

    has_rsample = True

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex

    def __init__(self, concentration, validate_args=None):
        concentration = as_parameter(concentration, "concentration", "Dirichlet")
        if concentration.ndim < 1:
            raise ShapeError("concentration must have at least one dimension (the event), "
                             "got a 0-d tensor", op="Dirichlet")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:],
                         validate_args=validate_args)

    @property
    def _total(self):
        return R.sum(self.concentration, axis=-1, keepdims=True)

    @property
    def mean(self):
        return self.concentration / self._total

    @property
    def mode(self):
        c = E.clip(self.concentration - 1, 0.0, None)
        return c / R.sum(c, axis=-1, keepdims=True)

    @property
    def variance(self):
        c, total = self.concentration, self._total
        return c * (total - c) / (total * total * (total + 1))

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        draws = rsample_standard_gamma(broadcast_to(self.concentration, shape), shape)
        info = dt.finfo(draws.dtype)
        return E.clip(draws / R.sum(draws, axis=-1, keepdims=True), info.tiny, 1 - info.eps)

    def log_prob(self, value):
        self._validate_sample(value)
        c = self.concentration
        return (R.sum(xlogy(c - 1, value), axis=-1) + lgamma(R.sum(c, axis=-1))
                - R.sum(lgamma(c), axis=-1))

    def entropy(self):
        c = self.concentration
        k = c.shape[-1]
        total = R.sum(c, axis=-1)
        return (R.sum(lgamma(c), axis=-1) - lgamma(total) - (k - total) * digamma(total)
                - R.sum((c - 1.0) * digamma(c), axis=-1))
