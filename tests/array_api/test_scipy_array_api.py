"""SciPy's Array API functions (every one of scipy.special, scipy.fft, scipy.stats and
scipy.signal in SciPy's capability table) on rill tensors give NumPy's values on the same
inputs. The sweep (tests/array_api/scipy_sweep.py) runs in a fresh interpreter with SCIPY_ARRAY_API=1,
which SciPy reads when first imported.

KNOWN lists what still fails and why; a function that starts passing fails the test too, so
that the list stays true (remove it then).
"""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("scipy")

# name -> (outcome, cause). "scipy": SciPy does the same with PyTorch tensors or with a
# read-only NumPy array, so the cause is on SciPy's side.
KNOWN = {
    "signal.minimum_phase": (
        "error", "rill: `h = xp.real(c); h *= w` writes the real part of a complex tensor "
                 "through a view, which rill refuses (ops/views.py part_of: putting one part "
                 "back exactly needs a complex-from-parts op); NumPy and PyTorch write it"),
    "signal.sosfilt": (
        "error", "scipy: its Cython kernel wants a writable sos buffer and rill's __array__ "
                 "is read-only; SciPy fails the same on a read-only NumPy array"),
    "signal.sosfiltfilt": ("error", "scipy: calls sosfilt (above)"),
    "signal.taylor": (
        "differs", "scipy: xp.asarray(10**(sll/20)) takes the library's default float dtype, "
                   "float32 in rill and PyTorch (3e-7 relative off NumPy's float64; PyTorch "
                   "gives the same values as rill)"),
    "signal.bode": ("numpy-out", "scipy: lti systems are NumPy only (an ndarray for PyTorch)"),
    "signal.impulse": ("numpy-out", "scipy: lti systems are NumPy only (as bode)"),
    "signal.place_poles": ("numpy-out", "scipy: converts to NumPy and returns NumPy"),
    "signal.cspline2d": ("numpy-out", "scipy: returns an ndarray for PyTorch input too"),
}
FAMILIES = ("special", "fft", "stats", "signal")
MINIMUM_RUN = {"special": 90, "fft": 30, "stats": 70, "signal": 110}  # functions swept


@pytest.fixture(scope="module")
def outcomes():
    here = os.path.dirname(__file__)
    env = {**os.environ, "SCIPY_ARRAY_API": "1"}
    done = subprocess.run([sys.executable, os.path.join(here, "scipy_sweep.py")],
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("family", FAMILIES)
def test_scipy_functions_on_rill_match_numpy(outcomes, family):
    mine = {k: v for k, v in outcomes.items() if k.startswith(family + ".")}
    ran = {k: v for k, v in mine.items() if v[0] != "not-run"}
    assert len(ran) >= MINIMUM_RUN[family], sorted(set(mine) - set(ran))
    unexpected = {k: v for k, v in ran.items() if v[0] != "ok" and k not in KNOWN}
    assert not unexpected, json.dumps(unexpected, indent=1)
    changed = {k: (v, KNOWN[k][0]) for k, v in ran.items()
               if k in KNOWN and v[0] != KNOWN[k][0]}
    assert not changed, f"outcome changed (update KNOWN): {changed}"


def test_the_fourteen_stats_functions_that_needed_zero_d_masks(outcomes):
    """They write `x[mask] = v` with a 0-d mask (array_api_extra's at); refused before."""
    names = ["alexandergovern", "epps_singleton_2samp", "f_oneway", "gstd", "kurtosistest",
             "normaltest", "pearsonr", "skewtest", "spearmanrho", "tmean", "tsem", "tstd",
             "tvar", "variation"]
    assert {n: outcomes[f"stats.{n}"][0] for n in names} == {n: "ok" for n in names}
