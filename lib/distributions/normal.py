"""Normal(loc, scale)."""
from __future__ import annotations

import math

from ..ops import elementwise as E
from ..ops.random import normal as _standard_normal
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all


class Normal(Distribution):
    """The normal distribution with mean `loc` and standard deviation `scale`; rsample is
    loc + scale * eps, differentiable in both."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all({"loc": loc, "scale": scale}, "Normal")
        super().__init__(self.loc.shape, validate_args=validate_args)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale * self.scale

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = _standard_normal(0.0, 1.0, shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        self._validate_sample(value)
        z = (value - self.loc) / self.scale
        return -0.5 * z * z - E.log(self.scale) - 0.5 * math.log(2 * math.pi)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + E.log(self.scale)

    def cdf(self, value):
        self._validate_sample(value)
        return 0.5 * (1 + E.erf((value - self.loc) / (self.scale * math.sqrt(2))))
