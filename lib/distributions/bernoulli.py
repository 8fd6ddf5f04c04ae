"""Bernoulli(probs=, logits=)."""
from __future__ import annotations

from functools import cached_property

from ..ops import elementwise as E
from ..ops.random import bernoulli as _bernoulli
from ..ops.shape import broadcast_to
from ..eager.context import detached_value
from . import constraints
from .distribution import Distribution
from .parameters import probs_or_logits
from .utils import as_parameter, logits_to_probs, probs_to_logits
from ..ops.creation import tensor


class Bernoulli(Distribution):
    """1 with probability `probs` (or sigmoid(`logits`)), else 0."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        name, value = probs_or_logits(probs, logits, "Bernoulli")
        setattr(self, name, as_parameter(value, name, "Bernoulli"))
        super().__init__(self._param.shape, validate_args=validate_args)

    @property
    def _param(self):
        return self.__dict__.get("probs", self.__dict__.get("logits"))

    @cached_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @cached_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @property
    def param_shape(self):
        return self._param.shape

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        return E.cast(self.probs >= 0.5, self.probs.dtype) * E.cast(self.probs != 0.5,
                                                                    self.probs.dtype)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        return _bernoulli(broadcast_to(detached_value(self.probs), shape))

    def log_prob(self, value):
        self._validate_sample(value)
        # -binary_cross_entropy_with_logits(logits, value)
        return value * self.logits - E.softplus(self.logits)

    def entropy(self):
        return E.softplus(self.logits) - self.probs * self.logits

    def enumerate_support(self, expand: bool = True):
        values = tensor([0.0, 1.0], dtype=self._param.dtype, device=self._param.device)
        values = values.reshape((2,) + (1,) * len(self._batch_shape))
        return broadcast_to(values, (2,) + self._batch_shape) if expand else values
