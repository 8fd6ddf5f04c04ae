"""Reductions, scans, sorting and softmax on the gpu device against the CPU on shapes the op
table does not reach: several programs and blocks with tails, split reductions, long rows,
non-contiguous inputs, NaN / inf / ties. Block sizes are shrunk (monkeypatched) where that is
the way to reach a code path under Triton's interpreter quickly."""
from __future__ import annotations

import math

import numpy as np
import pytest

import rill

if not rill.gpu.is_available():  # pragma: no cover
    pytest.skip("no gpu device: " + "; ".join(rill.gpu.missing_parts()), allow_module_level=True)

GPU = rill.device("gpu")

from rill.kernels.triton import activation as gpu_activation  # noqa: E402
from rill.kernels.triton import reduce as gpu_reduce  # noqa: E402
from rill.kernels.triton import sorting as gpu_sorting  # noqa: E402

TOL = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=2e-5, atol=1e-6)}


def both(fn, *arrays):
    """fn on the gpu and on the cpu, as NumPy arrays (tuples for several results)."""
    def run(device):
        out = fn(*[rill.tensor(a, device=device) for a in arrays])
        return tuple(o.numpy() for o in out) if isinstance(out, tuple) else out.numpy()
    return run(GPU), run("cpu")


def check(fn, *arrays, exact=None, slack=0.0):
    """fn on the gpu equals fn on the cpu: integers exactly; floats within TOL of the CPU's
    result or, where both differ from a more precise reference (`exact`, else fn over float64
    copies of float32 inputs), no farther from it than the CPU's result plus TOL (plus
    `slack`). Sums of many terms round differently in a different order: neither order is
    the right one."""
    got, want = both(fn, *arrays)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    if exact is None and any(a.dtype == np.float32 for a in arrays):
        exact = fn(*[rill.tensor(a.astype(np.float64) if a.dtype == np.float32 else a)
                     for a in arrays])
        exact = tuple(e.numpy() for e in exact) if isinstance(exact, tuple) else exact.numpy()
    exact = (exact,) if exact is not None and not isinstance(exact, tuple) else exact
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind != "f":
            np.testing.assert_array_equal(g, w)
            continue
        tol = TOL[w.dtype.type]
        if exact is None:
            np.testing.assert_allclose(g, w, **tol)
            continue
        ref = np.asarray(exact[i], dtype=np.longdouble)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        finite = np.isfinite(ref)
        np.testing.assert_array_equal(g[~finite], w[~finite])
        err_gpu = np.abs(g[finite] - ref[finite])
        err_cpu = np.abs(w[finite] - ref[finite])
        allowed = err_cpu + tol["atol"] + slack + tol["rtol"] * np.abs(ref[finite])
        worst = np.argmax(err_gpu - allowed) if err_gpu.size else 0
        assert np.all(err_gpu <= allowed), (
            f"gpu error {float(err_gpu[worst]):.3g} > cpu error {float(err_cpu[worst]):.3g} "
            f"+ tolerance at flat index {worst} (reference {float(ref[finite][worst]):.17g})")


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 256 elements, splits below 64 programs: loops, tails and split paths."""
    monkeypatch.setattr(gpu_reduce, "TILE", 256)
    monkeypatch.setattr(gpu_reduce, "SPLIT_PROGRAMS", 64)
    monkeypatch.setattr(gpu_activation, "TILE", 256)
    monkeypatch.setattr(gpu_activation, "SINGLE_MAX", 64)
    monkeypatch.setattr(gpu_sorting, "CHUNK", 16)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("axis", [0, 1, None, (0, 1)])
def test_reductions_37x5000(dtype, axis):
    x = np.random.default_rng(1).standard_normal((37, 5000)).astype(dtype)
    # A float32 sum down 37 rows rounds each partial sum (under 32 here) by up to ulp(32) / 2:
    # any order of the 37 additions is off by a few 1e-6 where the sum nears zero (the H200
    # was 1.5e-6 off where NumPy was 1e-7). 37 such roundings bound it; a lost or doubled row
    # is off by ~1.
    slack = 37 * float(np.spacing(np.float32(32))) / 2 if dtype == np.float32 else 0.0
    for fn in (rill.sum, rill.mean, rill.max, rill.min, rill.logsumexp, rill.prod):
        check(lambda t: fn(t, axis=axis), x, slack=slack)
    check(lambda t: rill.var(t, axis=axis, correction=1), x, slack=slack)
    check(lambda t: rill.norm(t, ord=3, axis=axis), x)
    if not isinstance(axis, tuple):
        check(lambda t: rill.argmax(t, axis=axis), x)
        check(lambda t: rill.argmin(t, axis=axis), x)


@pytest.mark.parametrize("axis", [0, 1, 2, (0, 2), (1, 2), None])
def test_small_tiles_and_splits(small_tiles, axis):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 200, 5))
    for fn in (rill.sum, rill.mean, rill.max, rill.min, rill.logsumexp):
        check(lambda t: fn(t, axis=axis, keepdims=True), x)
    check(lambda t: rill.var(t, axis=axis, correction=1), x)
    for o in (2, 0, -math.inf, 0.5):
        check(lambda t: rill.norm(t, ord=o, axis=axis), x)
    check(lambda t: rill.any(t > 3.0, axis=axis), x)
    check(lambda t: rill.all(t > -3.0, axis=axis), x)
    check(lambda t: rill.sum(t > 0, axis=axis), x)
    if not isinstance(axis, tuple):
        ties = np.round(x * 2)  # many equal values: the first occurrence wins
        check(lambda t: rill.argmax(t, axis=axis), ties)
        check(lambda t: rill.argmin(t, axis=axis), ties)
        check(lambda t: rill.cumsum(t, axis=axis), x)
        check(lambda t: rill.cumprod(t, axis=axis), 1 + x / 100)
    check(lambda t: rill.cumsum(t), x)  # one long row: a split scan
    check(lambda t: rill.cumprod(t, axis=0), 1 + x / 100)


def test_non_contiguous_and_special_values():
    x = np.random.default_rng(3).standard_normal((6, 9, 4))
    x[1, 2, 3] = np.nan
    x[2, :, 1] = -np.inf
    x[4, 5, 2] = np.inf
    for axis in (0, 1, 2, (0, 2)):
        for fn in (rill.sum, rill.max, rill.min, rill.logsumexp, rill.mean):
            check(lambda t: fn(t[::-1, :, ::2].transpose((2, 0, 1)), axis=axis), x)
    for axis in (0, 1, 2):
        check(lambda t: rill.argmax(t[:, ::-1], axis=axis), x)
        check(lambda t: rill.argmin(t[:, ::-1], axis=axis), x)
    check(lambda t: rill.max(t, axis=0), np.full((3, 2), -np.inf))


def test_integers_bools_and_empty():
    rng = np.random.default_rng(4)
    i = rng.integers(-5, 6, (13, 17)).astype(np.int32)
    for axis in (0, 1, None):
        check(lambda t: rill.sum(t, axis=axis), i)
        check(lambda t: rill.prod(t, axis=axis), i)
        check(lambda t: rill.max(t, axis=axis), i)
        check(lambda t: rill.cumsum(t, axis=axis), i)
        check(lambda t: rill.sum(t > 0, axis=axis), i)
    check(lambda t: rill.argmin(t, axis=1), i)
    e = np.zeros((0, 4))
    for fn in (rill.sum, rill.prod, rill.mean, rill.logsumexp, rill.norm):
        check(lambda t: fn(t, axis=0), e)
    check(lambda t: rill.var(t, axis=0), e)
    check(lambda t: rill.all(t > 0, axis=0), e)
    check(lambda t: rill.any(t > 0, axis=0), e)
    check(lambda t: rill.sum(t, axis=1), e)
    check(lambda t: rill.cumsum(t, axis=0), e)


def test_long_scans():
    # References in long double (64-bit significands on x86): a float64 scan of 70000 terms is
    # itself off by ~1e-12 where the running sum nears zero, in NumPy's order as in the GPU's.
    x = np.random.default_rng(5).standard_normal((3, 70000))
    wide = x.astype(np.longdouble)
    check(lambda t: rill.cumsum(t, axis=1), x, exact=np.cumsum(wide, axis=1))
    check(lambda t: rill.cumsum(t, axis=0), x, exact=np.cumsum(wide, axis=0))
    check(lambda t: rill.cumsum(t), x, exact=np.cumsum(wide.ravel()))
    factors = 1 + x[:, :2000] / 1000
    check(lambda t: rill.cumprod(t, axis=1), factors,
          exact=np.cumprod(factors.astype(np.longdouble), axis=1))


@pytest.mark.parametrize("shape,axis", [((3, 70000), 1), ((3, 70000), 0), ((40, 5, 33), 1),
                                        ((2, 3), -1)])
def test_softmax_long_rows(shape, axis):
    x = np.random.default_rng(6).standard_normal(shape) * 5
    check(lambda t: rill.nn.functional.softmax(t, axis=axis), x)
    check(lambda t: rill.nn.functional.log_softmax(t, axis=axis), x)
    check(lambda t: rill.nn.functional.softmax(t, axis=axis), x.astype(np.float32))


@pytest.mark.parametrize("tiles", [False, True])
def test_softmax_special_rows(request, tiles):
    if tiles:
        request.getfixturevalue("small_tiles")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 200)) * 3
    x[0] = -np.inf  # nan row, as the CPU
    x[1, 7] = np.inf
    x[2, 150] = np.nan
    x[3, :100] = -np.inf
    x[4] -= 2000.0  # very negative row
    x[5, 190] = 800.0
    for fn in (rill.nn.functional.softmax, rill.nn.functional.log_softmax):
        for axis in (0, 1):
            check(lambda t: fn(t, axis=axis), x)
    check(lambda t: rill.logsumexp(t, axis=1), x)


@pytest.mark.parametrize("tiles,reduction,smoothing", [
    (False, "mean", 0.0), (False, "none", 0.2), (False, "sum", 0.0),
    (True, "mean", 0.2), (True, "none", 0.0)])
def test_softmax_cross_entropy(request, tiles, reduction, smoothing):
    if tiles:
        request.getfixturevalue("small_tiles")
    rng = np.random.default_rng(8)
    logits = rng.standard_normal((37, 300)) * 4
    target = rng.integers(0, 300, 37)
    target[[3, 9]] = -100
    xent = rill.nn.functional.softmax_cross_entropy

    def loss(x, t):
        return xent(x, t, -100, smoothing, reduction)
    check(loss, logits, target)
    check(lambda x, t: loss(x.astype(rill.float32), t), logits, target)

    def grad(x, t):
        return rill.grad(lambda v: (loss(v, t) * rill.ones_like(loss(v, t))).sum())(x)
    check(grad, logits, target)


@pytest.mark.parametrize("tiles", [False, True])
def test_sort_and_topk(request, tiles):
    if tiles:
        request.getfixturevalue("small_tiles")
    rng = np.random.default_rng(9)
    x = np.round(rng.standard_normal((7, 50, 3)) * 2)  # many ties
    x[1, 4, 0] = np.nan
    x[1, 9, 0] = np.nan
    x[2, :, 1] = np.inf
    for axis in (0, 1, 2):
        for descending in (False, True):
            check(lambda t: _sort_both(t, axis, descending), x)
        check(lambda t: rill.topk(t, 5, axis=1, largest=axis == 1), x)
    check(lambda t: _sort_both(t, -1, False), rng.integers(0, 4, (5, 300)).astype(np.int64))
    check(lambda t: _sort_both(t[:, ::-1], 0, True), x[:, :, 0])


def _sort_both(t, axis, descending):
    from rill.eager.bind import bind
    from rill.ops.sorting import sort_p
    return tuple(bind(sort_p, t, axis=axis % t.ndim, descending=descending))
