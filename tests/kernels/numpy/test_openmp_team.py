"""C passes on GNU OpenMP's team (kernels/numpy/parallel.py:team_threads): once a oneDNN
convolution has started the team, relu, relu_grad, add, scaled_add, max pooling, batch norm
and a captured step's fused groups share their work out on it, with the results of one thread (bit for bit where the
thread's share cannot change the arithmetic); before the team exists, in one of rill's pool
threads, and in a child forked after the team started, they stay off it (a forked child
would hang waiting for workers that did not survive the fork; so would rill's own pool,
which a forked child now makes anew)."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import rill
from forked import in_forked_child
from kernel_paths import needs_compiler
from rill.kernels.native import build
from rill.kernels.numpy import parallel
from rill.kernels.onednn import library

elementwise = importlib.import_module("rill.kernels.numpy.elementwise")
pooling = importlib.import_module("rill.kernels.numpy.pooling")
batch_norm = importlib.import_module("rill.kernels.numpy.batch_norm")

pytestmark = [
    needs_compiler,
    pytest.mark.skipif(library.library() is None,
                       reason=f"oneDNN not loaded: {library.why_not()}"),
    pytest.mark.skipif(parallel.THREADS < 2, reason="one core: no team to share work on"),
]

LARGE = (1 << 20) + 37  # elements: past TEAM_MIN_ELEMENTS, not a multiple of the lanes


@pytest.fixture
def team(monkeypatch):
    """A real oneDNN convolution on two threads starts the team (as a conv net's first layer
    does); then the calls below are recorded, to show which ran on it."""
    monkeypatch.setattr(build, "ENABLED", True)
    x = rill.tensor(np.ones((2, 16, 16, 16), np.float32))
    rill.nn.functional.conv2d(x, rill.tensor(np.ones((16, 16, 3, 3), np.float32)), padding=1)
    assert library.teams_started()
    assert parallel.team_threads(LARGE) == parallel.THREADS
    calls = []

    class Spy:
        def __init__(self, module):
            self.module = module

        def __getattr__(self, name):
            def call(*args):
                calls.append((name, args[-1] if name != "column_sums" else None))
                return getattr(self.module, name)(*args)
            return call
    loaded = build.load
    monkeypatch.setattr(build, "load", lambda name: Spy(loaded(name)))
    return calls


def _floats(dtype, n=LARGE, seed=0):
    x = np.random.default_rng(seed).standard_normal(n).astype(dtype)
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40]
    return x


def _numpy_kernels(monkeypatch):
    monkeypatch.setattr(build, "load", lambda name: None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_passes_on_the_team_equal_numpy(team, monkeypatch, dtype):
    x, y = _floats(dtype, seed=1), _floats(dtype, seed=2)
    got = {
        "relu": elementwise._relu(x),
        "relu_grad": elementwise._relu_grad(y, x),
        "add": elementwise._add(x, y),
        "scaled_add": elementwise._scaled_add(x, y, 0.9, -0.1),
    }
    assert sorted(team) == sorted((name, parallel.THREADS) for name in got)
    _numpy_kernels(monkeypatch)
    with np.errstate(invalid="ignore"):  # inf - inf in the NumPy kernels: NaN, as in C
        want = {
            "relu": np.maximum(x, dtype(0)),
            "relu_grad": np.where(x > 0, y, dtype(0)),
            "add": x + y,
            "scaled_add": elementwise._scaled_add(x, y, 0.9, -0.1),
        }
    for name in got:  # the same operations on every element: the same bits
        assert got[name].dtype == dtype
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("window", [((3, 3), (1, 1), (1, 1), (1, 1)),
                                    ((3, 3), (2, 2), (1, 1), (1, 1)),
                                    ((2, 2), (2, 2), (0, 0), (1, 1))])
def test_max_pooling_on_the_team_equals_numpy(team, monkeypatch, window):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 24, 28, 28)).astype(np.float32)
    x[0, 0, 2, 2] = np.nan
    best, winners = pooling.max_pool2d(x, *window)
    g = rng.standard_normal(best.shape).astype(np.float32)
    dx = pooling.max_pool2d_grad(g, winners, x.shape, *window)
    assert team == [("forward", parallel.THREADS), ("backward", parallel.THREADS)]
    _numpy_kernels(monkeypatch)
    want_best, want_winners = pooling.max_pool2d(x, *window)
    np.testing.assert_array_equal(best, want_best)
    np.testing.assert_array_equal(winners, want_winners)
    np.testing.assert_array_equal(dx, pooling.max_pool2d_grad(g, winners, x.shape, *window))


def test_batch_norm_on_the_team_equals_one_thread(team, monkeypatch):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 32, 28, 28)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    w, b = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    y, mean, var = batch_norm._batch_norm(x, w, b, 1e-5)
    grads = batch_norm._batch_norm_grad(g, x, w, mean, var, 1e-5)
    assert team == [("forward", parallel.THREADS), ("backward", parallel.THREADS)]
    # each channel is one thread's alone: the same bits as on one thread
    monkeypatch.setattr(parallel, "team_threads", lambda elements: 1)
    monkeypatch.setattr(batch_norm, "team_threads", lambda elements: 1)
    for got, want in zip((y, mean, var, *grads),
                         (*batch_norm._batch_norm(x, w, b, 1e-5),
                          *batch_norm._batch_norm_grad(g, x, w, mean, var, 1e-5))):
        np.testing.assert_array_equal(got, want)


def test_a_captured_fused_group_on_the_team_equals_eager(team, monkeypatch):
    seen = []
    real = parallel.team_threads
    monkeypatch.setattr(parallel, "team_threads", lambda n: seen.append(real(n)) or seen[-1])
    a, b = (rill.tensor(_floats(np.float32, seed=s)) for s in (5, 6))
    step = rill.capture(lambda a, b: (a * 2.0 + b) * (b - 0.5))
    step(a, b)
    seen.clear()
    with rill.profiler.profile() as prof:
        got = step(a, b).numpy()
    assert {e.name for e in prof.events()} - {"input", "constant"} == {"fused"}
    with np.errstate(invalid="ignore"):
        want = (a.numpy() * np.float32(2) + b.numpy()) * (b.numpy() - np.float32(0.5))
    np.testing.assert_array_equal(got, want)  # the ops in their order, no FMA: the same bits
    assert parallel.THREADS in seen


def test_no_team_inside_rills_own_pool(team):
    seen = []
    parallel.split(lambda lo, hi: seen.append(parallel.team_threads(LARGE)), 2, LARGE)
    assert sorted(seen) == [1, parallel.THREADS]  # the pool's thread: 1; the caller's: the team


def test_a_child_forked_after_the_team_runs_its_passes_alone(team):
    x = _floats(np.float32)
    want = np.maximum(x, np.float32(0))

    def work():
        alone = parallel.team_threads(LARGE) == 1
        return b"ok" if alone and np.array_equal(elementwise._relu(x), want,
                                                 equal_nan=True) else b"wrong"
    assert in_forked_child(work) == b"ok"
