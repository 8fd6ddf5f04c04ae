"""MultivariateNormal(loc, covariance_matrix= | precision_matrix= | scale_tril=)."""
from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from ..errors import ArgumentError, ShapeError
from ..ops import elementwise as E, reduce as R
from ..ops.creation import tensor
from ..ops.random import normal as _standard_normal
from ..ops.shape import broadcast_to
from . import constraints
from .distribution import Distribution
from .triangular import cholesky, diagonal, solve_lower
from .utils import as_parameter


class MultivariateNormal(Distribution):
    """A normal distribution over vectors: mean `loc` (..., d) and one of a covariance, a
    precision or a lower Cholesky factor of the covariance (..., d, d). Everything is
    computed from the factor L; rsample is loc + L @ eps, differentiable in both."""

    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        op = "MultivariateNormal"
        given = {k: v for k, v in (("covariance_matrix", covariance_matrix),
                                   ("precision_matrix", precision_matrix),
                                   ("scale_tril", scale_tril)) if v is not None}
        if len(given) != 1:
            raise ArgumentError("pass exactly one of covariance_matrix=, precision_matrix= or "
                                "scale_tril=", op=op)
        (name, matrix), = given.items()
        loc = as_parameter(loc, "loc", op)
        matrix = as_parameter(matrix, name, op, dtype=loc.dtype, device=loc.device)
        if loc.ndim < 1:
            raise ShapeError("loc must be at least one-dimensional (the event)", op=op)
        if matrix.ndim < 2 or matrix.shape[-1] != matrix.shape[-2]:
            raise ShapeError(f"{name} must be a (batch of) square matrices, got shape "
                             f"{matrix.shape}", op=op)
        if matrix.shape[-1] != loc.shape[-1]:
            raise ShapeError(f"{name} is {matrix.shape[-1]} x {matrix.shape[-1]} but loc has "
                             f"{loc.shape[-1]} entries in its last dimension", op=op)
        try:
            batch = np.broadcast_shapes(loc.shape[:-1], matrix.shape[:-2])
        except ValueError:
            raise ShapeError(f"the batch shapes of loc {loc.shape[:-1]} and {name} "
                             f"{matrix.shape[:-2]} do not broadcast", op=op) from None
        d = loc.shape[-1]
        setattr(self, name, broadcast_to(matrix, batch + (d, d)))
        self.loc = broadcast_to(loc, batch + (d,))
        super().__init__(batch, (d,), validate_args=validate_args)

    @cached_property
    def scale_tril(self):
        if "covariance_matrix" in self.__dict__:
            return cholesky(self.covariance_matrix)
        # P = Lp Lp^T gives the covariance P^-1 = Lp^-T Lp^-1, whose factor we take
        inverse = solve_lower(cholesky(self.precision_matrix), self._eye())
        return cholesky(inverse.mT @ inverse)

    @cached_property
    def covariance_matrix(self):
        return self.scale_tril @ self.scale_tril.mT

    @cached_property
    def precision_matrix(self):
        inverse = solve_lower(self.scale_tril, self._eye())  # L^-1; P = L^-T L^-1
        return inverse.mT @ inverse

    def _eye(self):
        d = self._event_shape[0]
        return tensor(np.eye(d), dtype=self.loc.dtype, device=self.loc.device)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return R.sum(self.scale_tril * self.scale_tril, axis=-1)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = _standard_normal(0.0, 1.0, shape + (1,), dtype=self.loc.dtype,
                               device=self.loc.device)
        return self.loc + (self.scale_tril @ eps)[..., 0]

    def _half_log_det(self):
        return R.sum(E.log(diagonal(self.scale_tril)), axis=-1)

    def log_prob(self, value):
        self._validate_sample(value)
        d = self._event_shape[0]
        whitened = solve_lower(self.scale_tril, (value - self.loc)[..., None])[..., 0]
        mahalanobis = R.sum(whitened * whitened, axis=-1)
        return -0.5 * (d * math.log(2 * math.pi) + mahalanobis) - self._half_log_det()

    def entropy(self):
        d = self._event_shape[0]
        return 0.5 * d * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
