"""Beta(concentration1, concentration0): a two-category Dirichlet read as one number."""
from __future__ import annotations

from ..ops.shape import broadcast_to, stack
from . import constraints
from .dirichlet import Dirichlet
from .distribution import Distribution
from .implicit import rsample_standard_gamma
from .utils import broadcast_all


class Beta(Distribution):
    """The beta distribution on [0, 1] with weights concentration1 (of x) and concentration0
    (of 1 - x). rsample is X / (X + Y) for X ~ Gamma(concentration1), Y ~ Gamma(concentration0),
    each differentiable in its concentration (see Gamma)."""

    has_rsample = True

    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(
            {"concentration1": concentration1, "concentration0": concentration0}, "Beta")
        self._dirichlet = Dirichlet(stack([self.concentration1, self.concentration0], axis=-1),
                                    validate_args=False)
        super().__init__(self.concentration1.shape, validate_args=validate_args)

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total * total * (total + 1))

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        x = rsample_standard_gamma(broadcast_to(self.concentration1, shape), shape)
        y = rsample_standard_gamma(broadcast_to(self.concentration0, shape), shape)
        return x / (x + y)

    def log_prob(self, value):
        self._validate_sample(value)
        return self._dirichlet.log_prob(stack([value, 1.0 - value], axis=-1))

    def entropy(self):
        return self._dirichlet.entropy()
