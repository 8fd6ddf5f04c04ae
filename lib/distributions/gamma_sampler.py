"""Standard gamma draws as a composite of normal and uniform draws (Marsaglia and Tsang).

The method is a rejection sampler; a loop that runs until every element is accepted would
depend on data, so each element gets a fixed number of proposals and keeps the first one
accepted. Each is accepted with probability above 0.95 (for concentration >= 1), so the
first _ROUNDS - 1 all fail with probability below 1e-11; then the last proposal is used
untested.
Concentrations below 1 use Gamma(a) = Gamma(a + 1) * U^(1/a).
"""
from __future__ import annotations

from .. import dtypes as dt
from ..ops import elementwise as E
from ..ops.random import normal, uniform
from ..eager.context import detached_value

_ROUNDS = 10


def standard_gamma(concentration, shape):
    """Gamma(concentration, 1) draws of `shape` (concentration broadcast to it), no gradient."""
    a = detached_value(concentration)
    dtype, device = a.dtype, a.device
    boosted = E.where(a < 1, a + 1, a)
    d = boosted - 1.0 / 3
    c = 1.0 / E.sqrt(9 * d)
    out = done = None
    for round_ in range(_ROUNDS):
        x = normal(0.0, 1.0, shape, dtype=dtype, device=device)
        t = 1 + c * x
        v = t * t * t
        positive = v > 0
        safe_v = E.where(positive, v, 1.0)
        proposal = d * safe_v
        if round_ == _ROUNDS - 1:
            # The last proposal is kept whether accepted or not, so no uniform is drawn for
            # it: a draw nobody uses is dropped from a captured graph, and the draws after
            # it would then differ from eager mode's.
            out = E.where(done, out, proposal)
            break
        u = uniform(0.0, 1.0, shape, dtype=dtype, device=device)
        accept = E.logical_and(positive, E.log1p(-u) < 0.5 * x * x + d - d * safe_v
                               + d * E.log(safe_v))  # 1 - u in (0, 1]: log finite
        if out is None:
            out, done = proposal, accept
        else:  # keep the first accepted proposal
            out, done = E.where(done, out, proposal), E.logical_or(done, accept)
    small = uniform(0.0, 1.0, shape, dtype=dtype, device=device)
    out = E.where(a < 1, out * E.exp(E.log1p(-small) / E.where(a < 1, a, 1.0)), out)
    return E.clip(out, dt.finfo(dtype).tiny, None)
