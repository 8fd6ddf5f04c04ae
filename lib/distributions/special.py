"""lgamma and digamma as rill composites (so they differentiate, capture and run on the gpu).

Both shift the argument up by a recurrence until Stirling's asymptotic series is accurate:
for z >= 10 the first omitted term is below 1e-14 relative, so positive float64 arguments
come out within ~1e-13. Arguments must be positive (the distributions here only need those).
"""
from __future__ import annotations

import math

from .. import ops  # noqa: F401  (installs Tensor methods)
from ..ops import elementwise as E

_SHIFT = 10  # lgamma(x) = lgamma(x + 10) - log(x (x+1) ... (x+9))
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
# Stirling: lgamma(z) ~ (z - 1/2) log z - z + log(2 pi)/2 + sum_k B_2k / (2k (2k-1) z^(2k-1))
_LGAMMA_SERIES = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360)
# digamma(z) ~ log z - 1/(2z) - sum_k B_2k / (2k z^(2k))
_DIGAMMA_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760)


def _odd_series(coefficients, inv, inv2):
    """c0 inv + c1 inv^3 + c2 inv^5 + ... by Horner's rule in inv^2."""
    total = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        total = total * inv2 + c
    return total * inv


def lgamma(x):
    """log |Gamma(x)| for x > 0."""
    shift = 0.0
    for k in range(_SHIFT):
        shift = shift + E.log(x + k)
    z = x + _SHIFT
    inv = 1.0 / z
    stirling = (z - 0.5) * E.log(z) - z + _HALF_LOG_2PI + _odd_series(_LGAMMA_SERIES, inv,
                                                                        inv * inv)
    return stirling - shift


def digamma(x):
    """d/dx lgamma(x) for x > 0."""
    shift = 0.0
    for k in range(_SHIFT):
        shift = shift + 1.0 / (x + k)
    z = x + _SHIFT
    inv = 1.0 / z
    inv2 = inv * inv
    series = _odd_series(_DIGAMMA_SERIES, inv2, inv2)  # even powers: c0 z^-2 + c1 z^-4 ...
    return E.log(z) - 0.5 * inv - series - shift
