"""Where parameters and values of a distribution may lie (torch.distributions.constraints).

A constraint's `check(value)` gives a bool tensor over the batch (the trailing `event_dim`
dimensions reduced); distributions read it when validate_args is on.
"""
from __future__ import annotations

from ..ops import elementwise as E, reduce as R
from ..ops.shape import tril


class Constraint:
    """The base: `check(value)` is True where value satisfies the constraint."""
    event_dim = 0
    is_discrete = False

    def check(self, value):
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__.lstrip("_") + "()"


def _all_last(ok, n):
    return R.all(ok, axis=tuple(range(-n, 0))) if n else ok


class _Dependent(Constraint):
    """Depends on other parameters (Uniform's bounds): checked by the distribution."""

    def check(self, value):
        return value == value


class _Real(Constraint):
    def check(self, value):
        return value == value  # not NaN


class _GreaterThan(Constraint):
    def __init__(self, lower_bound, strict=True):
        self.lower_bound, self.strict = lower_bound, strict

    def check(self, value):
        return value > self.lower_bound if self.strict else value >= self.lower_bound

    def __repr__(self) -> str:
        name = "GreaterThan" if self.strict else "GreaterThanEq"
        return f"{name}(lower_bound={self.lower_bound})"


class _Interval(Constraint):
    """lower <= value <= upper, or lower <= value < upper when half_open."""

    def __init__(self, lower_bound, upper_bound, half_open=False):
        self.lower_bound, self.upper_bound, self.half_open = lower_bound, upper_bound, half_open

    def check(self, value):
        upper = value < self.upper_bound if self.half_open else value <= self.upper_bound
        return E.logical_and(self.lower_bound <= value, upper)

    def __repr__(self) -> str:
        return f"Interval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return E.logical_or(value == 0, value == 1)


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        within = E.logical_and(self.lower_bound <= value, value <= self.upper_bound)
        if not value.dtype.is_floating:  # integers and bools are whole
            return within
        return E.logical_and(value == E.floor(value), within)

    def __repr__(self) -> str:
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return E.logical_and(R.all(value >= 0, axis=-1),
                             E.abs(R.sum(value, axis=-1) - 1) < 1e-6)


class _Independent(Constraint):
    """A base constraint with `reinterpreted_batch_ndims` more event dimensions."""

    def __init__(self, base, reinterpreted_batch_ndims):
        self.base, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims
        self.event_dim = base.event_dim + reinterpreted_batch_ndims
        self.is_discrete = base.is_discrete

    def check(self, value):
        return _all_last(self.base.check(value), self.reinterpreted_batch_ndims)

    def __repr__(self) -> str:
        return f"Independent({self.base!r}, {self.reinterpreted_batch_ndims})"


class _LowerCholesky(Constraint):
    """Lower triangular with a positive diagonal."""
    event_dim = 2

    def check(self, value):
        from .triangular import diagonal
        lower = R.all(value == tril(value), axis=(-2, -1))
        return E.logical_and(lower, R.all(diagonal(value) > 0, axis=-1))


class _PositiveDefinite(Constraint):
    """Symmetric with a Cholesky factor (all its pivots positive)."""
    event_dim = 2

    def check(self, value):
        from .triangular import cholesky, diagonal
        symmetric = R.all(E.abs(value - value.mT) <= 1e-6 * (1 + E.abs(value)), axis=(-2, -1))
        # A non-positive pivot makes the factor's diagonal NaN (sqrt of a negative) or zero.
        return E.logical_and(symmetric, R.all(diagonal(cholesky(value)) > 0, axis=-1))


dependent = _Dependent()
real = _Real()
real_vector = _Independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThan(0.0, strict=False)
unit_interval = _Interval(0.0, 1.0)
boolean = _Boolean()
simplex = _Simplex()
lower_cholesky = _LowerCholesky()
positive_definite = _PositiveDefinite()
independent = _Independent
interval = _Interval
greater_than = _GreaterThan
integer_interval = _IntegerInterval


def half_open_interval(lower_bound, upper_bound):
    return _Interval(lower_bound, upper_bound, half_open=True)
