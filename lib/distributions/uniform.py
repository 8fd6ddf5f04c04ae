"""Uniform(low, high) on [low, high)."""
from __future__ import annotations

from ..errors import ArgumentError
from ..ops import elementwise as E
from ..ops.random import uniform as _uniform
from . import constraints
from .distribution import Distribution, _holds
from .utils import broadcast_all


class Uniform(Distribution):
    """The uniform distribution on [low, high); rsample is low + (high - low) * u."""

    arg_constraints = {"low": constraints.dependent, "high": constraints.dependent}
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = broadcast_all({"low": low, "high": high}, "Uniform")
        super().__init__(self.low.shape, validate_args=validate_args)
        if self._validate_args and not _holds(self.low < self.high):
            raise ArgumentError("low must be less than high everywhere (validate_args=False "
                                "skips this check)", op="Uniform")

    @property
    def support(self):
        return constraints.half_open_interval(self.low, self.high)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return self.low * float("nan")

    @property
    def stddev(self):
        return (self.high - self.low) / 12 ** 0.5

    @property
    def variance(self):
        width = self.high - self.low
        return width * width / 12

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        u = _uniform(0.0, 1.0, shape, dtype=self.low.dtype, device=self.low.device)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        self._validate_sample(value)
        inside = E.logical_and(self.low <= value, value < self.high)
        return E.log(E.cast(inside, self.low.dtype)) - E.log(self.high - self.low)

    def entropy(self):
        return E.log(self.high - self.low)

    def cdf(self, value):
        self._validate_sample(value)
        return E.clip((value - self.low) / (self.high - self.low), 0.0, 1.0)
