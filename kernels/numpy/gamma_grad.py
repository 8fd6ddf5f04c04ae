"""CPU kernel of standard_gamma_grad (declared in rill/distributions/implicit.py): dx/dalpha
for a Gamma(alpha, 1) draw x, by implicit differentiation of its CDF, in float64.

A draw is x = F^-1(u; alpha) with F = P(alpha, .), the regularized lower incomplete gamma
function. Holding u fixed, dx/dalpha = -(dP/dalpha)(alpha, x) / f(x; alpha), f the density
x^(alpha-1) e^-x / Gamma(alpha). Both P and f carry the factor x^alpha e^-x / Gamma(alpha); it
cancels on paper, so nothing here overflows or underflows with it. What is left:

- x < alpha + 1 (P's power series converges fast): P = sum_n e^-x x^(a+n) / Gamma(a+n+1);
  differentiating term by term and dividing by f,
      dx/da = x sum_n t_n (psi(a+n+1) - log x),   t_n = Gamma(a) x^n / Gamma(a+n+1),
  with t_0 = 1/a, t_n = t_(n-1) x / (a+n) and psi(a+n+1) = psi(a+n) + 1/(a+n).
- otherwise (Legendre's continued fraction for the upper function converges fast):
  Q = 1 - P = x^a e^-x h(a, x) / Gamma(a), so dx/da = dQ/da / f = x ((log x - psi(a)) h + h'),
  h' = dh/da carried through the modified Lentz recurrence beside h (forward mode).

Both loops run on the elements not yet converged (each stops when its last step moved the
result by less than 1e-16 of it); the number of steps grows like sqrt(alpha) near the mode,
about 300 at alpha = 1e3. Gamma draws increase with alpha, so every result is positive.
"""
from __future__ import annotations

import numpy as np

from rill.distributions import implicit as _declared  # noqa: F401  (declares the primitive)
from rill.ops.primitive import register_kernels

_TOLERANCE = 1e-16
_MAX_STEPS = 1_000_000  # far beyond what alpha = 1e8 needs (~2e4); a guard, not a budget
_TINY = 1e-300  # Lentz's stand-in for a zero denominator

# psi(z) ~ log z - 1/(2z) - sum_k B_2k / (2k z^(2k)) for z >= 10; smaller z shifts up.
_DIGAMMA_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760)
_SHIFT = 10


def _digamma(z: np.ndarray) -> np.ndarray:
    """psi(z) for z > 0 in float64 (absolute error ~1e-15 plus 1e-16 relative)."""
    shift = np.zeros_like(z)
    for k in range(_SHIFT):  # psi(z) = psi(z + 10) - sum_k 1/(z + k); harmless for large z
        shift += 1.0 / (z + k)
    w = z + _SHIFT
    inv2 = 1.0 / (w * w)
    series = np.zeros_like(z)
    for c in reversed(_DIGAMMA_SERIES):
        series = series * inv2 + c
    return np.log(w) - 0.5 / w - series * inv2 - shift


def _series(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x sum_n t_n (psi(a+n+1) - log x), for x < a + 1."""
    log_x = np.log(x)
    psi = _digamma(a + 1)
    t = 1.0 / a
    total = t * (psi - log_x)
    out = np.empty_like(a)
    live = np.arange(a.size)
    for n in range(1, _MAX_STEPS):
        t = t * x / (a + n)
        psi = psi + 1.0 / (a + n)
        step = t * (psi - log_x)
        total = total + step
        # t falls from n = 1 on (x < a + 1) while psi - log x grows like log n: a step this
        # small is larger than all the remaining ones together only by a modest factor.
        done = np.abs(step) <= _TOLERANCE * np.abs(total)
        if done.any():
            out[live[done]] = x[done] * total[done]
            keep = ~done
            live, a, x, log_x, psi, t, total = (v[keep] for v in
                                                (live, a, x, log_x, psi, t, total))
            if not live.size:
                break
    out[live] = x * total  # only if _MAX_STEPS ran out
    return out


def _continued_fraction(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x ((log x - psi(a)) h + dh/da), h = 1/(x+1-a- 1(1-a)/(x+3-a- 2(2-a)/(x+5-a- ...))),
    for x >= a + 1. Each quantity of the recurrence is paired with its derivative in a."""
    log_term = np.log(x) - _digamma(a)
    b = x + 1.0 - a           # db/da = -1 throughout
    d = 1.0 / b
    dd = d * d                # d(1/b)/da = 1/b^2
    c = np.full_like(a, 1.0 / _TINY)
    dc = np.zeros_like(a)
    h, dh = d.copy(), dd.copy()
    out = np.empty_like(a)
    live = np.arange(a.size)
    for i in range(1, _MAX_STEPS):
        coef = i * (a - i)    # -i (i - a); d coef / da = i
        b = b + 2.0
        u = coef * d + b
        du = i * d + coef * dd - 1.0
        u = np.where(np.abs(u) < _TINY, _TINY, u)
        d = 1.0 / u
        dd = -du * d * d
        c_new = b + coef / c
        dc = -1.0 + i / c - coef * (dc / c) / c  # (c * c) overflows at c = 1/_TINY
        c = np.where(np.abs(c_new) < _TINY, _TINY, c_new)
        ratio = c * d
        dratio = dc * d + c * dd
        step_h = h * (ratio - 1.0)
        step_dh = dh * (ratio - 1.0) + h * dratio
        h, dh = h + step_h, dh + step_dh
        result = log_term * h + dh
        done = np.abs(log_term * step_h) + np.abs(step_dh) <= _TOLERANCE * np.abs(result)
        if done.any():
            out[live[done]] = x[done] * result[done]
            keep = ~done
            live, a, x, log_term, b, d, dd, c, dc, h, dh = (
                v[keep] for v in (live, a, x, log_term, b, d, dd, c, dc, h, dh))
            if not live.size:
                break
    out[live] = x * (log_term * h + dh)  # only if _MAX_STEPS ran out
    return out


def _standard_gamma_grad(x, alpha):
    a = np.asarray(alpha, dtype=np.float64).ravel()
    v = np.asarray(x, dtype=np.float64).ravel()
    drawn = v > 0
    v = np.where(drawn, v, 1.0)  # no log(0) below; those results are replaced
    out = np.empty_like(a)
    lower = v < a + 1
    if lower.any():
        out[lower] = _series(a[lower], v[lower])
    upper = ~lower
    if upper.any():
        out[upper] = _continued_fraction(a[upper], v[upper])
    # A draw of 0 (only where a float's range ran out) does not move: its gradient is 0.
    out = np.where(drawn, out, 0.0)
    return out.reshape(np.shape(x)).astype(x.dtype, copy=False)


register_kernels("cpu", {"standard_gamma_grad": _standard_gamma_grad})
