"""Categorical(probs=, logits=): one of K categories, indexed 0 .. K-1."""
from __future__ import annotations

from functools import cached_property

import numpy as np

from .. import dtypes as dt
from ..errors import ShapeError
from ..ops import elementwise as E, reduce as R
from ..ops.indexing import take_along_axis
from ..ops.random import uniform
from ..ops.shape import broadcast_to, reshape
from ..eager.context import detached_value
from . import constraints
from .distribution import Distribution
from .parameters import probs_or_logits
from .utils import as_parameter, logits_to_probs, probs_to_logits
from ..ops.creation import arange


class Categorical(Distribution):
    """Categories with weights `probs` (normalized along the last dimension) or `logits`
    (normalized log-weights); batch_shape is the parameter's shape less its last dimension."""

    arg_constraints = {"probs": constraints.simplex,
                       "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        name, value = probs_or_logits(probs, logits, "Categorical")
        value = as_parameter(value, name, "Categorical")
        if value.ndim < 1:
            raise ShapeError(f"{name} must have at least one dimension (the categories), got "
                             "a 0-d tensor", op="Categorical")
        if name == "probs":
            self.probs = value / R.sum(value, axis=-1, keepdims=True)
        else:
            self.logits = value - R.logsumexp(value, axis=-1, keepdims=True)
        param = self.__dict__[name]
        self._num_events = param.shape[-1]
        super().__init__(param.shape[:-1], validate_args=validate_args)

    @cached_property
    def probs(self):
        return logits_to_probs(self.logits)

    @cached_property
    def logits(self):
        return probs_to_logits(self.probs)

    @property
    def _param(self):
        return self.__dict__.get("probs", self.__dict__.get("logits"))

    @property
    def param_shape(self):
        return self._param.shape

    @property
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @property
    def mean(self):
        return self._batch_zero() + float("nan")  # undefined, as in torch

    @property
    def variance(self):
        return self.mean

    def _batch_zero(self):
        return R.sum(self._param * 0.0, axis=-1)

    @property
    def mode(self):
        return R.argmax(self.probs, axis=-1)

    def sample(self, sample_shape=()):
        # The Gumbel-max trick: argmax(logits + G), G = -log(-log(U)) standard Gumbel noise,
        # is an exact draw (a zero-weight category, logit -inf, never wins), and a handful
        # of ops where inverting the cumulative sums took twenty: RL loops sample at every
        # step (REINFORCE spent most of its time here).
        shape = self._extended_shape(sample_shape)
        logits = detached_value(self.logits)
        u = uniform(0.0, 1.0, shape + (self._num_events,), dtype=logits.dtype,
                    device=logits.device)
        return R.argmax(logits - E.log(-E.log(u)), axis=-1)

    def log_prob(self, value):
        self._validate_sample(value)
        index = value if value.dtype is dt.int64 else E.cast(value, dt.int64)
        shape = np.broadcast_shapes(index.shape, self._batch_shape)
        logits = broadcast_to(self.logits, shape + (self._num_events,))
        index = reshape(broadcast_to(index, shape), shape + (1,))
        # the picked column's axis dropped by a reshape: its gradient is one reshape back
        return reshape(take_along_axis(logits, index, -1), shape)

    def entropy(self):
        smallest = dt.finfo(self.logits.dtype).min
        return -R.sum(E.clip(self.logits, smallest, None) * self.probs, axis=-1)

    def enumerate_support(self, expand: bool = True):
        values = arange(self._num_events).reshape((-1,) + (1,) * len(self._batch_shape))
        return broadcast_to(values, (self._num_events,) + self._batch_shape) if expand else values
