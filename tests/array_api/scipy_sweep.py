"""Every SciPy function that declares Array API support in scipy.special, scipy.fft,
scipy.stats and scipy.signal (SciPy's own capability table), called on rill tensors and on
NumPy arrays with the same values; prints {name: [outcome, detail]} as JSON.

Run as a script: SCIPY_ARRAY_API must be set before SciPy is first imported, so
tests/array_api/test_scipy_array_api.py runs this in a fresh interpreter. Outcomes: "ok" (same values
within 1e-7, a rill tensor where NumPy gave an array), "error" (rill's call raised), "differs"
(values or structure differ), "numpy-out" (an ndarray came back for rill input), "not-run"
(no call found that NumPy accepts).

A function is called the way the table CALLS says, else with the first of a few generic
argument lists (1 to 4 arrays of values in (0.1, 0.9), 1-d or 2-d) that NumPy accepts.
"""
import json
import os
import signal as alarm_signal
import sys
import traceback
import warnings

os.environ["SCIPY_ARRAY_API"] = "1"

import numpy as np  # noqa: E402
import scipy.fft as fft  # noqa: E402
import scipy.signal as sig  # noqa: E402
import scipy.special as special  # noqa: E402
import scipy.stats as stats  # noqa: E402
from scipy._lib._array_api import xp_capabilities_table  # noqa: E402

import rill  # noqa: E402

FAMILIES = ("special", "fft", "stats", "signal")
RNG = np.random.default_rng(0)
ONE_D = [RNG.uniform(0.1, 0.9, 16) for _ in range(4)]
TWO_D = [RNG.uniform(0.1, 0.9, (4, 16)) for _ in range(4)]
GENERIC = [ONE_D[:k] for k in (1, 2, 3, 4)] + [TWO_D[:k] for k in (1, 2, 3)]

X, Y = ONE_D[0], ONE_D[1]
IMAGE = RNG.uniform(0.1, 0.9, (16, 16))  # B-spline filters need more than 4 rows to converge
B, A = sig.butter(3, 0.3)
SOS = sig.butter(4, 0.3, output="sos")
Z, P = np.array([-1.0 + 0j]), np.array([-0.5 + 0.5j, -0.5 - 0.5j])


def _rng_values(xp, seed=1):
    rng = np.random.default_rng(seed)
    return lambda size: xp.asarray(rng.normal(0.3, 1.0, size))


# name -> f(xp, a): the call, with `a` turning NumPy values into the library's arrays.
CALLS = {
    "special.multigammaln": lambda xp, a: special.multigammaln(a(X + 3), 2),
    "fft.fht": lambda xp, a: fft.fht(a(X), 0.1, 0.5),
    "fft.ifht": lambda xp, a: fft.ifht(a(X), 0.1, 0.5),
    "fft.fftfreq": lambda xp, a: fft.fftfreq(8, 0.5, xp=xp),
    "fft.rfftfreq": lambda xp, a: fft.rfftfreq(8, 0.5, xp=xp),
    "stats.bootstrap": lambda xp, a: stats.bootstrap(
        (a(X),), lambda x, axis: xp.mean(x, axis=axis), n_resamples=99, rng=0,
        method="percentile").confidence_interval,
    "stats.monte_carlo_test": lambda xp, a: stats.monte_carlo_test(
        a(X), _rng_values(xp), lambda x, axis: xp.mean(x, axis=axis), n_resamples=99),
    "stats.power": lambda xp, a: stats.power(
        lambda x, axis=-1: stats.ttest_1samp(x, 0.0, axis=axis).pvalue, _rng_values(xp),
        a(np.array([10, 20])), significance=0.05, n_resamples=50),
    "stats.permutation_test": lambda xp, a: stats.permutation_test(
        (a(X), a(Y)), lambda x, y, axis: xp.mean(x, axis=axis) - xp.mean(y, axis=axis),
        n_resamples=99, rng=0, vectorized=True),
    "stats.pmean": lambda xp, a: stats.pmean(a(X), 2.0),
    "stats.trim_mean": lambda xp, a: stats.trim_mean(a(X), 0.1),
    "stats.ttest_1samp": lambda xp, a: stats.ttest_1samp(a(X), 0.5),
    "stats.ttest_ind_from_stats": lambda xp, a: stats.ttest_ind_from_stats(
        a(np.array(0.5)), a(np.array(0.1)), a(np.array(10.0)), a(np.array(0.6)),
        a(np.array(0.2)), a(np.array(12.0))),
    "stats.ks_1samp": lambda xp, a: stats.ks_1samp(a(X), special.ndtr),
    "stats.cramervonmises": lambda xp, a: stats.cramervonmises(a(X), special.ndtr),
    "stats.boxcox_llf": lambda xp, a: stats.boxcox_llf(1.5, a(X)),
    "stats.yeojohnson_llf": lambda xp, a: stats.yeojohnson_llf(1.5, a(X)),
    "signal.general_cosine": lambda xp, a: sig.windows.general_cosine(9, a(np.array([.5, .5]))),
    "signal.general_hamming": lambda xp, a: sig.windows.general_hamming(9, 0.6, xp=xp),
    "signal.kaiser": lambda xp, a: sig.windows.kaiser(9, 4.0, xp=xp),
    "signal.kaiser_bessel_derived": lambda xp, a: sig.windows.kaiser_bessel_derived(
        8, 4.0, xp=xp),
    "signal.gaussian": lambda xp, a: sig.windows.gaussian(9, 2.0, xp=xp),
    "signal.general_gaussian": lambda xp, a: sig.windows.general_gaussian(9, 1.5, 2.0, xp=xp),
    "signal.chebwin": lambda xp, a: sig.windows.chebwin(9, 50, xp=xp),
    "signal.get_window": lambda xp, a: sig.get_window("hann", 9, xp=xp),
    "signal.abcd_normalize": lambda xp, a: sig.abcd_normalize(
        A=a(np.array([[0.0, 1.0], [-2.0, -3.0]])), B=a(np.array([[0.0], [1.0]])),
        C=a(np.array([[1.0, 0.0]])), D=a(np.array([[0.0]]))),
    "signal.bessel": lambda xp, a: sig.bessel(4, a(np.array(0.3))),
    "signal.besselap": lambda xp, a: sig.besselap(4, xp=xp),
    "signal.bilinear_zpk": lambda xp, a: sig.bilinear_zpk(a(Z), a(P), 1.0, 2.0),
    "signal.bode": lambda xp, a: sig.bode((a(B), a(A)), n=16),
    "signal.buttap": lambda xp, a: sig.buttap(4, xp=xp),
    "signal.butter": lambda xp, a: sig.butter(4, a(np.array([0.2, 0.4])), btype="band"),
    "signal.buttord": lambda xp, a: sig.buttord(a(np.array(0.2)), a(np.array(0.3)), 1, 40),
    "signal.cheb1ap": lambda xp, a: sig.cheb1ap(4, 1.0, xp=xp),
    "signal.cheb1ord": lambda xp, a: sig.cheb1ord(a(np.array(0.2)), a(np.array(0.3)), 1, 40),
    "signal.cheb2ap": lambda xp, a: sig.cheb2ap(4, 40.0, xp=xp),
    "signal.cheb2ord": lambda xp, a: sig.cheb2ord(a(np.array(0.2)), a(np.array(0.3)), 1, 40),
    "signal.cheby1": lambda xp, a: sig.cheby1(4, 1.0, a(np.array(0.3))),
    "signal.cheby2": lambda xp, a: sig.cheby2(4, 40.0, a(np.array(0.3))),
    "signal.cspline2d": lambda xp, a: sig.cspline2d(a(IMAGE), 0.0),
    "signal.ellip": lambda xp, a: sig.ellip(4, 1.0, 40.0, a(np.array(0.3))),
    "signal.ellipap": lambda xp, a: sig.ellipap(4, 1.0, 40.0, xp=xp),
    "signal.ellipord": lambda xp, a: sig.ellipord(a(np.array(0.2)), a(np.array(0.3)), 1, 40),
    "signal.filtfilt": lambda xp, a: sig.filtfilt(a(B), a(A), a(X), padlen=6),
    "signal.firls": lambda xp, a: sig.firls(5, a(np.array([0, 0.3, 0.4, 1])),
                                            a(np.array([1.0, 1.0, 0.0, 0.0]))),
    "signal.firwin": lambda xp, a: sig.firwin(9, a(np.array(0.3))),
    "signal.firwin2": lambda xp, a: sig.firwin2(9, a(np.array([0, 0.5, 1])),
                                                a(np.array([1.0, 1.0, 0.0]))),
    "signal.freqs_zpk": lambda xp, a: sig.freqs_zpk(a(Z), a(P), 1.0, worN=a(X)),
    "signal.freqz_sos": lambda xp, a: sig.freqz_sos(a(SOS), worN=16),
    "signal.gammatone": lambda xp, a: sig.gammatone(440, "fir", fs=16000, xp=xp),
    "signal.gauss_spline": lambda xp, a: sig.gauss_spline(a(X), 3),
    "signal.group_delay": lambda xp, a: sig.group_delay((a(B), a(A)), w=16),
    "signal.iircomb": lambda xp, a: sig.iircomb(1000, 30, fs=16000, xp=xp),
    "signal.iirdesign": lambda xp, a: sig.iirdesign(a(np.array(0.2)), a(np.array(0.3)), 1, 40),
    "signal.iirfilter": lambda xp, a: sig.iirfilter(4, a(np.array([0.2, 0.4])), rp=1, rs=40),
    "signal.iirnotch": lambda xp, a: sig.iirnotch(0.1, 30, xp=xp),
    "signal.iirpeak": lambda xp, a: sig.iirpeak(0.1, 30, xp=xp),
    "signal.impulse": lambda xp, a: sig.impulse((a(B), a(A)), N=8),
    "signal.order_filter": lambda xp, a: sig.order_filter(a(TWO_D[0]), a(np.ones((3, 3))), 4),
    "signal.place_poles": lambda xp, a: sig.place_poles(
        a(np.array([[0.0, 1.0], [-2.0, -3.0]])), a(np.array([[0.0], [1.0]])),
        a(np.array([-1.0, -2.0]))).gain_matrix,
    "signal.remez": lambda xp, a: sig.remez(9, a(np.array([0, 0.2, 0.3, 0.5])),
                                            a(np.array([1.0, 0.0]))),
    "signal.resample": lambda xp, a: sig.resample(a(X), 8),
    "signal.resample_poly": lambda xp, a: sig.resample_poly(a(X), 2, 3),
    "signal.savgol_coeffs": lambda xp, a: sig.savgol_coeffs(5, 2, xp=xp),
    "signal.savgol_filter": lambda xp, a: sig.savgol_filter(a(X), 5, 2),
    "signal.sos2zpk": lambda xp, a: sig.sos2zpk(a(SOS)),
    "signal.sosfilt": lambda xp, a: sig.sosfilt(a(SOS), a(X)),
    "signal.sosfilt_zi": lambda xp, a: sig.sosfilt_zi(a(SOS)),
    "signal.sosfiltfilt": lambda xp, a: sig.sosfiltfilt(a(SOS), a(X), padlen=6),
    "signal.sosfreqz": lambda xp, a: sig.sosfreqz(a(SOS), worN=16),
    "signal.spline_filter": lambda xp, a: sig.spline_filter(a(IMAGE.astype(np.float32))),
    "signal.zpk2sos": lambda xp, a: sig.zpk2sos(a(Z), a(P), 1.0),
    "signal.zpk2tf": lambda xp, a: sig.zpk2tf(a(Z), a(P), 1.0),
}
# Windows whose only argument is the length.
for _w in ("boxcar", "triang", "parzen", "bohman", "blackman", "nuttall", "blackmanharris",
           "flattop", "bartlett", "hann", "tukey", "barthann", "hamming", "cosine",
           "exponential", "taylor", "lanczos"):
    CALLS[f"signal.{_w}"] = (lambda w: lambda xp, a: getattr(sig.windows, w)(9, xp=xp))(_w)
# Functions whose result is not an array of values to compare.
NOT_VALUES = {"signal.choose_conv_method"}
# Roots, in an order the standard leaves open (eigenvalues): compared sorted.
UNORDERED = {"signal.tf2zpk"}
# Functions that want their first argument sorted.
SORTED_FIRST = {"stats._xp_searchsorted"}


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout("over 10 s")


def _leaves(result):
    if isinstance(result, (tuple, list)):
        for v in result:
            yield from _leaves(v)
    elif hasattr(result, "__dict__") and not isinstance(result, (np.ndarray, rill.Tensor)):
        for v in vars(result).values():
            yield from _leaves(v)
    else:
        yield result


def _compare(want, got, unordered=False):
    """None when `got` (rill's) matches `want` (NumPy's), else (outcome, why)."""
    wants, gots = list(_leaves(want)), list(_leaves(got))
    if any(isinstance(w, np.ndarray) and isinstance(g, np.ndarray) for w, g in zip(wants, gots)):
        return "numpy-out", "an ndarray came back"
    if unordered:
        wants = [np.sort_complex(np.ravel(w)) for w in wants]
        gots = [rill.asarray(np.sort_complex(np.ravel(np.asarray(g)))) for g in gots]
    if len(wants) != len(gots):
        return "differs", f"{len(gots)} results, NumPy gave {len(wants)}"
    for w, g in zip(wants, gots):
        if not isinstance(w, (np.ndarray, np.generic, float, int, complex)):
            continue  # a callable, a string, ... in a result object
        try:
            g = np.asarray(g)
        except Exception as e:  # noqa: BLE001
            return "differs", f"{type(g).__name__} result: {e}"
        if g.shape != np.shape(w):
            return "differs", f"shape {g.shape}, NumPy {np.shape(w)}"
        if not np.allclose(g, w, rtol=1e-7, atol=1e-10, equal_nan=True):
            return "differs", f"values {g.ravel()[:3]}, NumPy {np.ravel(w)[:3]}"
    return None


def _call(f, *args):
    alarm_signal.alarm(10)
    try:
        return f(*args)
    finally:
        alarm_signal.alarm(0)


def _generic(f, sort_first=False):
    """A call of f NumPy accepts among the generic argument lists, as f(xp, a); or None."""
    for args in GENERIC:
        if sort_first:
            args = [np.sort(args[0], axis=-1)] + args[1:]
        try:
            _call(f, *args)
        except Exception:  # noqa: BLE001 - not this argument list
            continue
        return lambda xp, a, args=args: f(*(a(v) for v in args))
    return None


def _where(e):
    frames = traceback.extract_tb(e.__traceback__)
    return " <- ".join(f"{os.path.basename(t.filename)}:{t.lineno}" for t in frames[-1:-4:-1])


def sweep():
    warnings.simplefilter("ignore")
    alarm_signal.signal(alarm_signal.SIGALRM, _alarm)
    outcomes = {}
    for f, caps in xp_capabilities_table.items():
        module = (getattr(f, "__module__", None) or "").split(".")
        if len(module) < 2 or module[1] not in FAMILIES:
            continue
        if caps.get("np_only") or caps.get("out_of_scope"):
            continue
        name = f"{module[1]}.{f.__name__}"
        if name in NOT_VALUES:
            continue
        call = CALLS.get(name) or _generic(f, name in SORTED_FIRST)
        if call is None:
            outcomes[name] = ["not-run", "no call NumPy accepts"]
            continue
        try:
            want = _call(call, np, np.asarray)
        except Exception as e:  # noqa: BLE001
            outcomes[name] = ["not-run", f"NumPy: {type(e).__name__}: {e}"[:200]]
            continue
        try:
            got = _call(call, rill, rill.asarray)
        except Exception as e:  # noqa: BLE001
            outcomes[name] = ["error", f"{type(e).__name__}: {str(e)[:240]} @ {_where(e)}"]
            continue
        found = _compare(want, got, name in UNORDERED)
        outcomes[name] = list(found) if found else ["ok", ""]
    return outcomes


if __name__ == "__main__":
    json.dump(sweep(), sys.stdout, indent=0, sort_keys=True)
