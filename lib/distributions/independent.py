"""Independent(base_distribution, reinterpreted_batch_ndims)."""
from __future__ import annotations

from ..errors import ArgumentError
from . import constraints
from .distribution import Distribution
from .utils import sum_rightmost


class Independent(Distribution):
    """The base distribution with its rightmost `reinterpreted_batch_ndims` batch dimensions
    read as event dimensions: log_prob and entropy sum over them."""

    arg_constraints: dict = {}

    def __init__(self, base_distribution, reinterpreted_batch_ndims, validate_args=None):
        op = "Independent"
        if not isinstance(base_distribution, Distribution):
            raise ArgumentError(f"base_distribution must be a Distribution, got "
                                f"{type(base_distribution).__name__}", op=op)
        n = reinterpreted_batch_ndims
        batch = base_distribution.batch_shape
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= len(batch):
            raise ArgumentError(f"reinterpreted_batch_ndims must be an int in [0, {len(batch)}] "
                                f"(the base's batch dimensions), got {n!r}", op=op)
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = n
        split = len(batch) - n
        super().__init__(batch[:split], batch[split:] + base_distribution.event_shape,
                         validate_args=validate_args)

    @property
    def has_rsample(self):
        return self.base_dist.has_rsample

    @property
    def has_enumerate_support(self):
        return False if self.reinterpreted_batch_ndims else self.base_dist.has_enumerate_support

    @property
    def support(self):
        support = self.base_dist.support
        n = self.reinterpreted_batch_ndims
        return constraints.independent(support, n) if n else support

    @property
    def mean(self):
        return self.base_dist.mean

    @property
    def mode(self):
        return self.base_dist.mode

    @property
    def variance(self):
        return self.base_dist.variance

    def sample(self, sample_shape=()):
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value):
        return sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self):
        return sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"
