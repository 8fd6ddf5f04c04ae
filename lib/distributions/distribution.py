"""The Distribution base class: shapes, sampling entry points and argument validation."""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, ShapeError
from ..eager.context import no_grad
from ..ops.random import _concrete
from ..tensor import Tensor
from ..eager.context import detached_value
from . import constraints


class Distribution:
    """A batch of probability distributions, as torch.distributions.Distribution.

    Samples have shape sample_shape + batch_shape + event_shape; log_prob sums over the event
    dimensions and returns batch_shape (after broadcasting with the value's leading shape).
    """

    has_rsample = False
    has_enumerate_support = False
    arg_constraints: dict = {}
    support = None
    _validate_args = True

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        if value not in (True, False):
            raise ArgumentError(f"validate_args must be True or False, got {value!r}",
                                op="Distribution.set_default_validate_args")
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = tuple(batch_shape)
        self._event_shape = tuple(event_shape)
        if validate_args is not None:
            self._validate_args = bool(validate_args)
        if self._validate_args:
            for name, constraint in self.arg_constraints.items():
                if name not in self.__dict__ or isinstance(constraint, constraints._Dependent):
                    continue  # computed lazily from the parameter given, or checked by self
                value = self.__dict__[name]
                if not _holds(constraint.check(value)):
                    raise ArgumentError(
                        f"{name} must satisfy {constraint!r}, got values outside it "
                        f"(validate_args=False skips this check)", op=type(self).__name__)

    @property
    def batch_shape(self) -> tuple:
        return self._batch_shape

    @property
    def event_shape(self) -> tuple:
        return self._event_shape

    def _extended_shape(self, sample_shape=()) -> tuple:
        if isinstance(sample_shape, int):
            sample_shape = (sample_shape,)
        try:
            sample_shape = tuple(int(s) for s in sample_shape)
        except (TypeError, ValueError):
            raise ArgumentError(f"sample_shape must be a tuple of ints, got {sample_shape!r}",
                                op=f"{type(self).__name__}.sample") from None
        return sample_shape + self._batch_shape + self._event_shape

    # ---- what a subclass defines ---------------------------------------------------------

    def _missing(self, what: str):
        return ArgumentError(f"{type(self).__name__} does not define {what}",
                             op=f"{type(self).__name__}.{what}")

    @property
    def mean(self):
        raise self._missing("mean")

    @property
    def mode(self):
        raise self._missing("mode")

    @property
    def variance(self):
        raise self._missing("variance")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def entropy(self):
        raise self._missing("entropy")

    def log_prob(self, value):
        raise self._missing("log_prob")

    def cdf(self, value):
        raise self._missing("cdf")

    def perplexity(self):
        return self.entropy().exp()

    def rsample(self, sample_shape=()):
        name = type(self).__name__
        raise ArgumentError(f"{name} has no reparameterized sampler (has_rsample is False), so "
                            f"its samples cannot carry gradients; use sample() for draws "
                            f"without gradients", op=f"{name}.rsample")

    def sample(self, sample_shape=()):
        """Draws of shape sample_shape + batch_shape + event_shape, without gradients."""
        with no_grad():
            return detached_value(self.rsample(sample_shape))

    # ---- checks --------------------------------------------------------------------------

    def _validate_sample(self, value) -> None:
        """A log_prob argument: a tensor whose trailing shape is the event shape and whose
        batch part broadcasts with batch_shape, in the support (when validate_args)."""
        name = f"{type(self).__name__}.log_prob"
        if not isinstance(value, Tensor):
            raise ArgumentError(f"value must be a tensor, got {type(value).__name__}", op=name)
        n = len(self._event_shape)
        if n and value.shape[-n:] != self._event_shape:
            raise ShapeError(f"value's trailing shape {value.shape[-n:]} is not the event "
                             f"shape {self._event_shape}", op=name)
        try:
            np.broadcast_shapes(value.shape[:value.ndim - n], self._batch_shape)
        except ValueError:
            raise ShapeError(f"value of shape {value.shape} does not broadcast with batch "
                             f"shape {self._batch_shape}", op=name) from None
        if self._validate_args and self.support is not None:
            if not _holds(self.support.check(value)):
                raise ArgumentError(f"value must lie in the support {self.support!r} "
                                    "(validate_args=False skips this check)", op=name)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}: {tuple(self.__dict__[k].shape)}"
                           for k in self.arg_constraints if k in self.__dict__)
        return f"{type(self).__name__}({params})"


def _holds(ok) -> bool:
    """All true, when the values exist now; a captured graph cannot check data."""
    return not _concrete(ok) or bool(np.all(ok.numpy()))
