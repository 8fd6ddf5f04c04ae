"""The error function and exact GELU: erf(x), gelu(x) = x Phi(x) and its gradient g gelu'(x).

Each runs as one C pass over the cores where a compiler is at hand (kernels/native/
special.c: libmvec's vector erf, erfc and exp in double; float32 GELU through its own Phi,
accurate to 2^-34, as a float32 result needs no more), else in NumPy: erf and erfc as a
piecewise rational scheme after fdlibm's s_erf.c (measured on 1e6 points in [-40, 40] plus edge
cases: erf max 1 ulp (1.1e-16 abs) vs math.erf, max 0.85 ulp vs a 120-bit mpmath reference).
Both compute float32 in double and round once, within an ulp of the true value: they agree to
the last float32 bit but where a result lies that close to a tie of rounding (erf: rarely;
GELU: 0.04 % of float32 values, by one ulp), and float64 to a few ulps.

GELU is 0.5 x erfc(-x / sqrt 2), not 0.5 x (1 + erf(x / sqrt 2)): for x below about -5 the sum
cancels (to 0 below -8 in double) where erfc keeps the tail, so gelu(-10) in float32 is
-7.6e-23, the float64 value rounded, not -0.0.
"""

import math

import numpy as np

from rill.kernels.native import build as native

from . import parallel

# The compiled modules (kernels/native) these kernels may load (build.prefetch).
COMPILED = ("special",)

# Coefficient sets are in ascending powers. Values are the published fdlibm constants.
# A float32-exact constant near erf on [0.84375, 1.25), so P/Q only fits a small remainder.
_ERX = 8.45062911510467529297e-01
_EFX8 = 1.02703333676410069053e+00  # 8 * (2/sqrt(pi) - 1)

# erf(x) = x + x*R(x^2) on |x| < 0.84375
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01,
       -2.84817495755985104766e-02, -5.77027029648944159157e-03,
       -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02,
       5.08130628187576562776e-03, 1.32494738004321644526e-04,
       -3.96022827877536812320e-06)

# erf(x) = erx + P(s)/Q(s), s = |x| - 1, on 0.84375 <= |x| < 1.25
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01,
       -3.72207876035701323847e-01, 3.18346619901161753674e-01,
       -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01,
       7.18286544141962662868e-02, 1.26171219808761642112e-01,
       1.36370839120290507362e-02, 1.19844998467991074170e-02)

# erfc(x) = exp(-x^2 - 0.5625 + R(s)/S(s)) / x, s = 1/x^2, on 1.25 <= |x| < 1/0.35
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01,
       -1.05586262253232909814e+01, -6.23753324503260060396e+01,
       -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02,
       4.34565877475229228821e+02, 6.45387271733267880336e+02,
       4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)

# Same form on 1/0.35 <= |x| < 6
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01,
       -1.77579549177547519889e+01, -1.60636384855821916062e+02,
       -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02,
       1.53672958608443695994e+03, 3.19985821950859553908e+03,
       2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01)

# Interval edges: these are exactly the high-word cut points fdlibm tests, so the
# fits are only ever used on the ranges they were made for.
_TINY = 2.0 ** -28
_SMALL = 0.84375
_MID = 1.25
_SPLIT = float.fromhex("0x1.6db6e00000000p+1")  # just above 1/0.35
_BIG = 6.0  # erf(6) rounds to 1.0 in float64

# Clearing the low 32 bits gives a z whose square is exact, so exp(-x^2) can be
# split as exp(-z^2) * exp((z - x)(z + x)) without losing the low-order bits of x^2.
_HIGH_MASK = np.uint64(0xFFFFFFFF00000000)


def _poly(t, coeffs):
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc *= t
        acc += c
    return acc


def _erfc_tail(ax, r_coeffs, s_coeffs):
    """erfc(ax) for ax >= 1.25."""
    s = 1.0 / (ax * ax)
    z = (ax.view(np.uint64) & _HIGH_MASK).view(np.float64)
    ratio = _poly(s, r_coeffs) / _poly(s, s_coeffs)
    r = np.exp(-z * z - 0.5625) * np.exp((z - ax) * (z + ax) + ratio)
    return r / ax


def erf(x: np.ndarray) -> np.ndarray:
    """Error function of x, elementwise; float16/float32 are computed in float64 and cast back."""
    x = np.asarray(x)
    out = _compiled("erf", x)
    return _erf_numpy(x) if out is None else out


def _erf_numpy(x: np.ndarray) -> np.ndarray:
    if np.iscomplexobj(x):
        raise TypeError("erf: complex input is not supported")
    out_dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(np.float64)

    # flat may alias the caller's data, so it is only read; results go to a fresh copy,
    # which also lets NaN pass through untouched.
    flat = np.asarray(x, dtype=np.float64).reshape(-1)
    out = flat.copy()
    ax = np.abs(flat)

    # Subnormal results (and the down-cast below) can raise underflow; that is expected here.
    with np.errstate(under="ignore"):
        # Scaling by 8 keeps the product x*efx out of the subnormal range, so tiny and
        # subnormal x keep full precision (and -0.0 keeps its sign).
        m = ax < _TINY
        if m.any():
            t = flat[m]
            out[m] = 0.125 * (8.0 * t + _EFX8 * t)

        m = (ax >= _TINY) & (ax < _SMALL)
        if m.any():
            t = flat[m]
            z = t * t
            out[m] = t + t * (_poly(z, _PP) / _poly(z, _QQ))

        m = (ax >= _SMALL) & (ax < _MID)
        if m.any():
            s = ax[m] - 1.0
            out[m] = np.copysign(_ERX + _poly(s, _PA) / _poly(s, _QA), flat[m])

        m = (ax >= _MID) & (ax < _SPLIT)
        if m.any():
            out[m] = np.copysign(1.0 - _erfc_tail(ax[m], _RA, _SA), flat[m])

        m = (ax >= _SPLIT) & (ax < _BIG)
        if m.any():
            out[m] = np.copysign(1.0 - _erfc_tail(ax[m], _RB, _SB), flat[m])

        m = ax >= _BIG
        if m.any():
            out[m] = np.copysign(1.0, flat[m])

        # Casting tiny results down to float16/float32 flushes them toward zero by design.
        return out.reshape(x.shape).astype(out_dtype, copy=False)


_ERFC_ZERO = 28.0  # erfc(28) underflows to 0 in float64


def _erfc64(x: np.ndarray) -> np.ndarray:
    """erfc(x) of a float64 array, the same pieces as erf: 1 - erf where that keeps its digits,
    the tail's own value beyond 1.25."""
    flat = x.reshape(-1)
    out = flat.copy()  # NaN passes through
    ax = np.abs(flat)
    with np.errstate(under="ignore"):
        m = ax < _SMALL
        if m.any():
            out[m] = 1.0 - _erf_numpy(flat[m])
        m = (ax >= _SMALL) & (ax < _MID)
        if m.any():
            s = ax[m] - 1.0
            d = _poly(s, _PA) / _poly(s, _QA)
            out[m] = np.where(flat[m] > 0, (1.0 - _ERX) - d, (1.0 + _ERX) + d)
        for lo, hi, r, q in ((_MID, _SPLIT, _RA, _SA), (_SPLIT, _ERFC_ZERO, _RB, _SB)):
            m = (ax >= lo) & (ax < hi)
            if m.any():
                tail = _erfc_tail(ax[m], r, q)
                out[m] = np.where(flat[m] > 0, tail, 2.0 - tail)
        m = ax >= _ERFC_ZERO
        if m.any():
            out[m] = np.where(flat[m] > 0, 0.0, 2.0)
    return out.reshape(x.shape)


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, 0.5 x erfc(-x / sqrt 2), of a floating array, computed in float64 and cast
    back. gelu(+inf) = inf; gelu(-inf) is NaN (-inf * 0), as 0.5 x (1 + erf) gives it."""
    out = _compiled("gelu", x)
    if out is not None:
        return out
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):  # -inf * 0
        return (0.5 * x64 * _erfc64(x64 * -_SQRT_HALF)).astype(x.dtype, copy=False)


def gelu_grad(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    """g * gelu'(x), gelu'(x) = Phi(x) + x phi(x), for g and x of one shape and floating
    dtype, computed in float64 and cast back; NaN at +-inf (inf * 0)."""
    out = _compiled("gelu_grad", g, x)
    if out is not None:
        return out
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore", under="ignore", over="ignore"):  # inf * 0, x * x
        d = 0.5 * _erfc64(x64 * -_SQRT_HALF) + x64 * np.exp(-0.5 * x64 * x64) * _INV_SQRT_2PI
        return (g.astype(np.float64) * d).astype(x.dtype, copy=False)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _compiled(name: str, *arrays):
    """The C pass `name` (kernels/native/special.c) over arrays of one shape and of float32
    or float64, split over the cores; None where it cannot run them (another dtype, no
    compiler): the caller computes it in NumPy."""
    x = arrays[-1]
    if type(x) is not np.ndarray or x.dtype not in _FLOATS or \
            any(type(a) is not np.ndarray or a.dtype != x.dtype or a.shape != x.shape
                for a in arrays):
        return None
    # a C-ordered copy of a strided view costs a pass; the NumPy kernel costs ~40 passes
    arrays = [a if a.flags.c_contiguous else a.copy(order="C") for a in arrays]
    compiled = native.for_arrays("special", *arrays)
    if compiled is None:
        return None
    out = np.empty(x.shape, x.dtype)
    kernel, is_double = getattr(compiled, name), x.dtype == np.float64
    parallel.split(lambda lo, hi: kernel(*arrays, out, lo, hi, is_double), x.size, x.size)
    return out
