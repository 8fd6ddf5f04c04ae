"""Gamma(concentration, rate)."""
from __future__ import annotations

from .. import dtypes as dt
from ..ops import elementwise as E
from ..ops.shape import broadcast_to
from . import constraints
from .distribution import Distribution
from .implicit import rsample_standard_gamma
from .special import digamma, lgamma
from .utils import broadcast_all, xlogy


class Gamma(Distribution):
    """The gamma distribution with shape `concentration` and inverse scale `rate`.

    rsample differentiates a draw in the concentration implicitly, through the CDF's
    derivative (implicit.py), and in the rate as draw / rate.
    """

    has_rsample = True

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(
            {"concentration": concentration, "rate": rate}, "Gamma")
        super().__init__(self.concentration.shape, validate_args=validate_args)

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return E.clip((self.concentration - 1) / self.rate, 0.0, None)

    @property
    def variance(self):
        return self.concentration / (self.rate * self.rate)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        draws = rsample_standard_gamma(broadcast_to(self.concentration, shape), shape)
        return E.clip(draws / self.rate, dt.finfo(draws.dtype).tiny, None)

    def log_prob(self, value):
        self._validate_sample(value)
        c, r = self.concentration, self.rate
        return xlogy(c, r) + xlogy(c - 1, value) - r * value - lgamma(c)

    def entropy(self):
        c = self.concentration
        return c - E.log(self.rate) + lgamma(c) + (1.0 - c) * digamma(c)
