"""Kernels compiled from C at first use (rill.kernels.native, issue 20, speed).

The build: cached on disk under a key of everything the binary depends on, reused by a later
process without compiling, and None (so the NumPy kernel runs) without a compiler or with
RILL_NATIVE=0. The LSTM cell's compiled passes against its NumPy kernel: the same operations
in the same order, so equal bit for bit where tanh agrees, and within a few ulps at most;
input the compiled path cannot take (non-contiguous) goes to NumPy; wrong sizes are errors,
not memory read out of bounds."""
from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from rill.kernels.native import build

numpy_lstm = importlib.import_module("rill.kernels.numpy.lstm_cell")

needs_compiler = pytest.mark.skipif(shutil.which(build._compiler()[0]) is None,
                                    reason="no C compiler on this machine")


@pytest.fixture(autouse=True)
def _native_allowed(monkeypatch):
    """These tests are about the compiled path: on whatever the environment says."""
    monkeypatch.setattr(build, "ENABLED", True)


def _cell_arrays(n, hidden, dtype, seed=0):
    rng = np.random.default_rng(seed)

    def draw(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)
    return dict(x_proj=draw(n, 4 * hidden, scale=2), h=draw(n, hidden), c=draw(n, hidden),
                w_hh=draw(4 * hidden, hidden, scale=0.3), bias=draw(4 * hidden),
                g_h=draw(n, hidden), g_c=draw(n, hidden))


def _run_cell(a, bias=True):
    extra = (a["bias"],) if bias else ()
    h_new, c_new, acts, tanh_c = numpy_lstm.lstm_cell(a["x_proj"], a["h"], a["c"], a["w_hh"],
                                                      *extra)
    d_gates, d_c = numpy_lstm.lstm_cell_grad(acts, tanh_c, a["c"], a["g_h"], a["g_c"])
    return h_new, c_new, acts, tanh_c, d_gates, d_c


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, hidden, bias", [(32, 256, True), (3, 5, False), (17, 33, True)])
def test_compiled_lstm_cell_matches_the_numpy_kernel(monkeypatch, dtype, n, hidden, bias):
    assert build.load("lstm_cell") is not None, build.why_not("lstm_cell")
    a = _cell_arrays(n, hidden, dtype)
    # special values go through both paths alike
    a["x_proj"][0, :4] = [np.inf, -np.inf, 0.0, -0.0]
    a["c"][1, 0] = np.nan
    compiled = _run_cell(a, bias)
    monkeypatch.setattr(build, "ENABLED", False)
    assert build.load("lstm_cell") is None
    reference = _run_cell(a, bias)
    ulp = np.finfo(dtype).eps
    for name, got, want in zip(("h", "c", "acts", "tanh_c", "d_gates", "d_c"), compiled,
                               reference):
        assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        finite = np.isfinite(want)
        assert (got[~finite & ~np.isnan(want)] == want[~finite & ~np.isnan(want)]).all(), name
        # tanh is libmvec's against NumPy's: a few ulps of 1 (the values are <= ~10)
        np.testing.assert_allclose(got[finite], want[finite], rtol=8 * ulp, atol=8 * ulp,
                                   err_msg=name)
    # the products after tanh repeat the same operations: the gradient is bit-equal when fed
    # the same residuals
    monkeypatch.setattr(build, "ENABLED", True)
    acts, tanh_c = reference[2], reference[3]
    got = numpy_lstm.lstm_cell_grad(acts, tanh_c, a["c"], a["g_h"], a["g_c"])
    monkeypatch.setattr(build, "ENABLED", False)
    want = numpy_lstm.lstm_cell_grad(acts, tanh_c, a["c"], a["g_h"], a["g_c"])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@needs_compiler
def test_non_contiguous_input_takes_the_numpy_kernel(monkeypatch):
    a = _cell_arrays(6, 8, np.float32)
    wide = np.repeat(a["c"], 2, axis=1)
    c_view = wide[:, ::2]                      # the same values, strided
    np.testing.assert_array_equal(c_view, a["c"])
    calls = []
    module = build.load("lstm_cell")
    monkeypatch.setattr(numpy_lstm.native, "load", lambda name: _Spy(module, calls))
    numpy_lstm.lstm_cell(a["x_proj"], a["h"], c_view, a["w_hh"], a["bias"])
    assert calls == []
    numpy_lstm.lstm_cell(a["x_proj"], a["h"], a["c"], a["w_hh"], a["bias"])
    assert calls == ["forward"]


class _Spy:
    def __init__(self, module, calls):
        self.module, self.calls = module, calls

    def __getattr__(self, name):
        self.calls.append(name)
        return getattr(self.module, name)


@needs_compiler
def test_wrong_buffer_sizes_are_errors_not_reads_out_of_bounds():
    module = build.load("lstm_cell")
    a = _cell_arrays(4, 8, np.float32)
    prod_t = np.zeros((32, 4), np.float32)
    outs = [np.empty((4, 8), np.float32) for _ in range(2)]
    with pytest.raises(ValueError, match="x_proj"):
        module.forward(prod_t, a["x_proj"][:3], None, a["c"], *outs, np.empty((4, 32), np.float32),
                       np.empty((4, 8), np.float32), 4, 8, False)
    with pytest.raises(ValueError, match="d_gates"):
        module.backward(np.empty((4, 32), np.float32), *[np.empty((4, 8), np.float32)] * 4,
                        np.empty((4, 31), np.float32), np.empty((4, 8), np.float32), 4, 8, False)
    with pytest.raises(TypeError):                      # outputs must be writable
        frozen = np.empty((4, 8), np.float32)
        frozen.flags.writeable = False
        module.forward(prod_t, a["x_proj"], None, a["c"], frozen, outs[1],
                       np.empty((4, 32), np.float32), np.empty((4, 8), np.float32), 4, 8, False)


_LOAD_IN_A_FRESH_PROCESS = """
import sys, time
from rill.kernels.native import build
module = build.load("lstm_cell")
print(module is not None, build.why_not("lstm_cell") or "")
"""


def _fresh_process(env):
    done = subprocess.run([sys.executable, "-c", _LOAD_IN_A_FRESH_PROCESS], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_compiler
def test_built_once_then_loaded_from_the_cache(tmp_path):
    env = dict(os.environ, RILL_CACHE_DIR=str(tmp_path))
    env.pop("RILL_NATIVE", None)
    assert _fresh_process(env).startswith("True")
    # `import rill` builds the compiled bind (kernels/native/dispatch.c) too
    built = sorted((tmp_path / "native").iterdir())
    assert [p.name.split("-")[0] for p in built] == ["dispatch", "lstm_cell"]
    stamps = [p.stat().st_mtime_ns for p in built]
    assert _fresh_process(env).startswith("True")
    assert sorted((tmp_path / "native").iterdir()) == built
    assert [p.stat().st_mtime_ns for p in built] == stamps  # loaded, not rebuilt


def test_without_a_compiler_the_numpy_kernel_runs(tmp_path):
    env = dict(os.environ, RILL_CACHE_DIR=str(tmp_path), CC=str(tmp_path / "no-such-cc"))
    env.pop("RILL_NATIVE", None)
    out = _fresh_process(env)
    assert out.startswith("False") and "no-such-cc" in out
    assert not (tmp_path / "native").exists() or not any((tmp_path / "native").iterdir())
    env = dict(os.environ, RILL_CACHE_DIR=str(tmp_path), RILL_NATIVE="0")
    assert _fresh_process(env).strip() == "False RILL_NATIVE=0"


numpy_norm = importlib.import_module("rill.kernels.numpy.normalization")


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape, axes", [((8, 64, 64), 1), ((3, 5, 7), 2), ((2, 1), 1),
                                         ((40, 1000), 1)])
def test_compiled_layer_norm_matches_the_numpy_kernel(monkeypatch, dtype, shape, axes):
    assert build.load("layer_norm") is not None, build.why_not("layer_norm")
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3 + 2).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(shape[len(shape) - axes:]).astype(dtype)
    b = rng.standard_normal(w.shape).astype(dtype)
    x.reshape(-1)[0] = np.nan                      # a NaN spoils its own row only, in both

    def run():
        y = numpy_norm._layer_norm(x, w, b, 1e-5, axes)
        return (y,) + numpy_norm._layer_norm_grad(g, x, w, 1e-5, axes)
    compiled = run()
    monkeypatch.setattr(build, "ENABLED", False)
    reference = run()
    # the sums run in another order (vector lanes; float64 accumulators for dw, db): float
    # rounding of a sum of d terms, relative to the largest value
    tolerance = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 4e-15}[dtype]
    for name, got, want in zip(("y", "dx", "dw", "db"), compiled, reference):
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        ok = ~np.isnan(want)                       # dw: all NaN (the NaN row is in every sum)
        scale = max(1.0, float(np.abs(want[ok]).max(initial=0)))
        np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=tolerance * scale * 10,
                                   err_msg=name)


@needs_compiler
def test_layer_norm_of_strided_input_and_empty_rows(monkeypatch):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 16)).astype(np.float32)
    w, b = np.ones(16, np.float32), np.zeros(16, np.float32)
    strided = np.repeat(x, 2, axis=1)[:, ::2]
    np.testing.assert_allclose(numpy_norm._layer_norm(strided, w, b, 1e-5, 1),
                               numpy_norm._layer_norm(x, w, b, 1e-5, 1), rtol=1e-6, atol=1e-6)
    g = np.repeat(x, 2, axis=1)[:, ::2]       # a non-contiguous gradient goes to NumPy
    calls = []
    module = build.load("layer_norm")
    monkeypatch.setattr(numpy_norm.native, "load", lambda name: _Spy(module, calls))
    numpy_norm._layer_norm_grad(g, x, w, 1e-5, 1)
    assert calls == []
    numpy_norm._layer_norm_grad(np.ascontiguousarray(g), x, w, 1e-5, 1)
    assert calls == ["backward"]
    empty = numpy_norm._layer_norm(np.zeros((0, 16), np.float32), w, b, 1e-5, 1)
    assert empty.shape == (0, 16) and calls == ["backward"]


numpy_updates = importlib.import_module("rill.kernels.numpy.updates")


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [0, 7, 1000, numpy_updates.CHUNK * 2 + 5])
@pytest.mark.parametrize("beta1, weight_decay, decay", [(0.9, 0.0, 1.0), (0.3, 0.1, 1.0),
                                                         (0.9, 0.0, 1 - 3e-4)])
def test_compiled_adam_update_is_bit_equal_to_the_numpy_kernel(monkeypatch, dtype, size, beta1,
                                                                weight_decay, decay):
    assert build.load("updates") is not None, build.why_not("updates")
    rng = np.random.default_rng(3)
    p, g, m = (rng.standard_normal(size).astype(dtype) for _ in range(3))
    v = rng.random(size).astype(dtype)
    if size:
        g[0], v[-1] = np.nan, 0.0                    # NaN stays in its element; v' = 0 divides
    scalars = (np.asarray(1e-3, dtype), np.asarray(0.31622776, dtype))
    attrs = dict(beta1=beta1, beta2=0.999, eps=1e-8, weight_decay=weight_decay, decay=decay)
    calls = []
    module = build.load("updates")
    monkeypatch.setattr(numpy_updates.native, "load", lambda name: _Spy(module, calls))
    compiled = numpy_updates._adam_update(p, g, m, v, *scalars, **attrs)
    assert calls and set(calls) == {"adam"}
    monkeypatch.undo()                                  # the NumPy kernel from here on
    monkeypatch.setattr(build, "ENABLED", False)
    reference = numpy_updates._adam_update(p, g, m, v, *scalars, **attrs)
    for got, want in zip(compiled, reference):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)        # NaNs in the same places too


@needs_compiler
def test_adam_update_of_a_transposed_parameter_takes_the_numpy_kernel(monkeypatch):
    rng = np.random.default_rng(4)
    p, g, m, v = (np.abs(rng.standard_normal((30, 20))).astype(np.float32).T for _ in range(4))
    calls = []
    module = build.load("updates")
    monkeypatch.setattr(numpy_updates.native, "load", lambda name: _Spy(module, calls))
    scalars = (np.float32(1e-3), np.float32(0.5))
    out = numpy_updates._adam_update(p, g, m, v, *scalars, beta1=0.9, beta2=0.999, eps=1e-8,
                                     weight_decay=0.0, decay=1.0)
    assert calls == [] and out[0].shape == (20, 30) and out[0].flags.c_contiguous
    contiguous = [np.ascontiguousarray(a) for a in (p, g, m, v)]
    again = numpy_updates._adam_update(*contiguous, *scalars, beta1=0.9, beta2=0.999, eps=1e-8,
                                       weight_decay=0.0, decay=1.0)
    assert calls == ["adam"]
    for a, b in zip(out, again):
        np.testing.assert_array_equal(a, b)


numpy_reduce = importlib.import_module("rill.kernels.numpy.reduce")


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, axis", [((512, 64), 0), ((8, 64, 64), (0, 1)),
                                         ((4, 5, 6, 70), (0, 1, 2)), ((3000, 1), 0),
                                         ((33, 1000), 0)])
def test_compiled_column_sums_are_float64_accurate(monkeypatch, dtype, shape, axis):
    calls = []
    module = build.load("reduce")
    monkeypatch.setattr(numpy_reduce.native, "load", lambda name: _Spy(module, calls))
    x = np.random.default_rng(5).standard_normal(shape).astype(dtype) + 0.5
    got = numpy_reduce._sum(x, axis, False)
    assert calls == ["column_sums"] and got.dtype == dtype and got.shape == shape[-1:]
    # rows summed in blocks of 32 in the input's type, the blocks in double: within the error
    # bound of a 32-term sum, 32 eps sum |x| (NumPy's row-by-row float32 sum: n eps sum |x|)
    exact = x.astype(np.float64).sum(axis=axis)
    bound = 32 * np.finfo(dtype).eps * np.abs(x.astype(np.float64)).sum(axis=axis)
    assert (np.abs(got.astype(np.float64) - exact) <= bound).all()
    kept = numpy_reduce._sum(x, axis, True)
    assert kept.shape == tuple(1 if a != len(shape) - 1 else n for a, n in enumerate(shape))


@needs_compiler
def test_column_sums_propagate_nan_and_inf_and_leave_other_sums_to_numpy(monkeypatch):
    calls = []
    module = build.load("reduce")
    monkeypatch.setattr(numpy_reduce.native, "load", lambda name: _Spy(module, calls))
    x = np.ones((256, 8), np.float32)
    x[3, 0], x[4, 1], x[5, 1], x[6, 2] = np.nan, np.inf, -np.inf, np.inf
    got = numpy_reduce._sum(x, 0, False)
    with np.errstate(invalid="ignore"):                        # inf - inf, in NumPy
        want = x.sum(axis=0)
    np.testing.assert_array_equal(got, want)                  # nan, nan, inf, 256, ...
    assert calls == ["column_sums"]
    numpy_reduce._sum(np.ones((256, 8), np.float32).T, 1, False)    # not C-contiguous
    numpy_reduce._sum(np.ones((64, 64, 4), np.float32), (0, 2), False)  # keeps a middle axis
    numpy_reduce._sum(np.ones((8, 8), np.float32), 0, False)        # under the threshold
    assert calls == ["column_sums"]


numpy_batch_norm = importlib.import_module("rill.kernels.numpy.batch_norm")


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(32, 16, 8, 8), (4, 3, 5), (2, 6), (3, 4, 2, 3, 5)])
@pytest.mark.parametrize("split", [False, True])
def test_compiled_batch_norm_matches_the_numpy_kernel(monkeypatch, dtype, shape, split):
    if split:  # channels over the cores
        monkeypatch.setattr(numpy_batch_norm, "NATIVE_SPLIT", 1)
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(shape) * 2 + 100).astype(dtype)   # far from 0: the shift matters
    g = rng.standard_normal(shape).astype(dtype)
    w, b = (rng.standard_normal(shape[1]).astype(dtype) for _ in range(2))
    calls = []
    module = build.load("batch_norm")
    monkeypatch.setattr(numpy_batch_norm.native, "load", lambda name: _Spy(module, calls))

    def run():
        y, mean, var = numpy_batch_norm._batch_norm(x, w, b, 1e-5)
        return (y, mean, var) + numpy_batch_norm._batch_norm_grad(g, x, w, mean, var, 1e-5)
    compiled = run()
    assert set(calls) == {"forward", "backward"}
    monkeypatch.setattr(numpy_batch_norm.native, "load", lambda name: None)
    reference = run()
    exact = x.astype(np.float64).reshape(shape[0], shape[1], -1)
    np.testing.assert_allclose(compiled[1], exact.mean(axis=(0, 2)), rtol=4 * np.finfo(dtype).eps)
    np.testing.assert_allclose(compiled[2], exact.var(axis=(0, 2)), rtol=64 * np.finfo(dtype).eps)
    for name, got, want in zip(("y", "mean", "var", "dx", "dw", "db"), compiled, reference):
        assert got.dtype == want.dtype and got.shape == want.shape, name
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=0, atol=scale * 2e3 * np.finfo(dtype).eps,
                                   err_msg=name)


@needs_compiler
def test_batch_norm_of_channel_major_input_takes_the_numpy_kernel(monkeypatch):
    x = np.random.default_rng(7).standard_normal((3, 4, 5, 5)).astype(np.float32)
    channel_major = np.ascontiguousarray(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    calls = []
    module = build.load("batch_norm")
    monkeypatch.setattr(numpy_batch_norm.native, "load", lambda name: _Spy(module, calls))
    w, b = np.ones(4, np.float32), np.zeros(4, np.float32)
    y, mean, var = numpy_batch_norm._batch_norm(channel_major, w, b, 1e-5)
    assert calls == []
    y2, mean2, var2 = numpy_batch_norm._batch_norm(x, w, b, 1e-5)
    assert calls == ["forward"]
    np.testing.assert_allclose(y, y2, rtol=1e-5, atol=1e-5)


numpy_pooling = importlib.import_module("rill.kernels.numpy.pooling")


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, kernel, stride, dilation", [
    ((4, 3, 8, 8), (2, 2), (2, 2), (1, 1)),         # the 2x2 vector loop
    ((2, 3, 9, 7), (2, 2), (2, 2), (1, 1)),         # ... with a row and a column left over
    ((2, 2, 9, 11), (3, 2), (2, 1), (1, 2)),        # overlapping, dilated
    ((1, 2, 30, 600), (1, 3), (1, 2), (1, 1)),      # rows longer than one chunk
    ((1, 1, 12, 12), (12, 12), (1, 1), (1, 1)),     # 144 taps: int32 winners
])
def test_compiled_max_pool_equals_the_numpy_kernel(monkeypatch, dtype, shape, kernel, stride,
                                                   dilation):
    rng = np.random.default_rng(8)
    x = rng.standard_normal(shape).astype(dtype)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    x[0, -1, 1, :4] = [1.0, 1.0, np.nan, np.nan]    # ties and two NaNs in one window
    calls = []
    module = build.load("pooling")
    monkeypatch.setattr(numpy_pooling.native, "load", lambda name: _Spy(module, calls))
    got = numpy_pooling.max_pool2d(x, kernel, stride, (0, 0), dilation)
    assert calls == ["forward"]
    monkeypatch.setattr(numpy_pooling.native, "load", lambda name: None)
    want = numpy_pooling.max_pool2d(x, kernel, stride, (0, 0), dilation)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)              # maxima (NaN included) and winners


# Windows the compiled pooling takes besides 2x2 tiling ones: padded (GoogLeNet's and
# ResNet's 3x3), overlapping at stride 1, dilated, not square, and over 127 taps (int32
# winners), with NaN and ties.
POOL_WINDOWS = [((3, 3), (2, 2), (1, 1), (1, 1)), ((3, 3), (1, 1), (1, 1), (1, 1)),
                ((2, 3), (1, 2), (1, 0), (2, 1)), ((12, 12), (1, 1), (0, 0), (1, 1)),
                ((2, 2), (2, 2), (0, 0), (1, 1))]


def _channel_major(a):
    """a's values with its planes laid out in order (c, n), as convolutions hand them over."""
    return a.transpose(1, 0, 2, 3).copy().transpose(1, 0, 2, 3)


@needs_compiler
@pytest.mark.parametrize("window", POOL_WINDOWS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, layout", [
    ((3, 4, 15, 17), _channel_major),              # short rows: read flat where strides agree
    ((2, 3, 13, 300), np.ascontiguousarray),       # wide rows at stride 2: row by row
    ((1, 2, 13, 1100), _channel_major),            # wider than one flat run
])
def test_compiled_pooling_of_any_window_equals_the_numpy_kernel(monkeypatch, window, dtype,
                                                                shape, layout):
    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape).astype(dtype)
    x[0, 0, 2, 2] = np.nan
    x[-1, 1, :4, :4] = 1.0                         # ties: the first maximum wins
    x = layout(x)
    calls = []
    module = build.load("pooling")
    monkeypatch.setattr(numpy_pooling.native, "load", lambda name: _Spy(module, calls))
    best, winners = numpy_pooling.max_pool2d(x, *window)
    g = rng.standard_normal(best.shape).astype(dtype)
    g[0, 1, 0, :3] = [np.inf, np.nan, -np.inf]     # reach their winners only
    g = layout(g)                                  # a convolution's gradient: channel-major
    dx = numpy_pooling.max_pool2d_grad(g, winners, x.shape, *window)
    assert calls == ["forward", "backward"] and dx.flags.c_contiguous
    monkeypatch.setattr(numpy_pooling.native, "load", lambda name: None)
    np.testing.assert_array_equal(best, numpy_pooling.max_pool2d(x, *window)[0])
    np.testing.assert_array_equal(winners, numpy_pooling.max_pool2d(x, *window)[1])
    # the same terms added in the same order: the same bits
    np.testing.assert_array_equal(dx, numpy_pooling.max_pool2d_grad(g, winners, x.shape,
                                                                    *window))


@needs_compiler
def test_compiled_pooling_gradient_refuses_a_winner_out_of_its_window():
    module = build.load("pooling")
    g = np.ones((1, 1, 2, 2), np.float32)
    dx = np.empty((1, 1, 4, 4), np.float32)
    for bad in (9, -1):
        winners = np.zeros((1, 1, 2, 2), np.int8)
        winners[0, 0, 1, 1] = bad   # 3x3 windows have taps 0..8: no write outside dx
        with pytest.raises(ValueError, match="winner out of its window"):
            module.backward(g, winners, dx, 1, 1, 4, 4, 2, 2, 3, 3, 1, 1, 1, 1, 0, 0, 0, 1,
                            1, False, False)


numpy_elementwise = importlib.import_module("rill.kernels.numpy.elementwise")


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [1, 1000, 2 * (1 << 19) + 3])
@pytest.mark.parametrize("alpha, beta", [(1.0, -0.01), (0.9, 1.0), (-2.5, 0.3)])
def test_compiled_scaled_add_is_bit_equal_to_numpy(monkeypatch, dtype, size, alpha, beta):
    rng = np.random.default_rng(10)
    x, y = (rng.standard_normal(size).astype(dtype) for _ in range(2))
    x[0] = np.nan if size > 1 else x[0]
    calls = []
    module = build.load("elementwise")
    # small arrays take NumPy's passes (test below); the C pass must match at every size
    monkeypatch.setattr(numpy_elementwise, "SCALED_ADD_COMPILED_MIN", 0)
    monkeypatch.setattr(numpy_elementwise.native, "load", lambda name: _Spy(module, calls))
    got = numpy_elementwise._scaled_add(x, y, alpha, beta)
    assert calls and set(calls) == {"scaled_add"}
    monkeypatch.setattr(numpy_elementwise.native, "load", lambda name: None)
    want = numpy_elementwise._scaled_add(x, y, alpha, beta)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    # broadcasting and mixed layouts stay NumPy's
    monkeypatch.setattr(numpy_elementwise.native, "load", lambda name: _Spy(module, calls))
    calls.clear()
    numpy_elementwise._scaled_add(x[:1], np.stack([y, y]), alpha, beta)
    assert calls == []


@needs_compiler
def test_small_scaled_adds_take_numpys_passes(monkeypatch):
    """Under SCALED_ADD_COMPILED_MIN elements the C pass's fixed cost exceeds NumPy's (an
    optimizer's update of a scalar, bench/distributed.py's null step); above, the C pass."""
    calls = []
    module = build.load("elementwise")
    monkeypatch.setattr(numpy_elementwise.native, "load", lambda name: _Spy(module, calls))
    limit = numpy_elementwise.SCALED_ADD_COMPILED_MIN
    for size, compiled in [(1, False), (limit - 1, False), (limit, True)]:
        calls.clear()
        x, y = np.ones(size, np.float32), np.full(size, 2.0, np.float32)
        np.testing.assert_array_equal(numpy_elementwise._scaled_add(x, y, 1.0, -0.5),
                                      np.zeros(size, np.float32))
        assert (calls == ["scaled_add"]) is compiled, (size, calls)


numpy_activation = importlib.import_module("rill.kernels.numpy.activation")


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, smoothing, reduction", [((512, 65), 0.0, "mean"),
                                                         ((16, 10), 0.1, "none"),
                                                         ((33, 100), 0.2, "sum")])
def test_compiled_cross_entropy_matches_the_numpy_kernel(monkeypatch, dtype, shape, smoothing,
                                                         reduction):
    rng = np.random.default_rng(11)
    n, c = shape
    logits = (rng.standard_normal(shape) * 4).astype(dtype)
    target = rng.integers(0, c, n)
    target[0] = -100                                  # ignored
    logits[1, 3] = np.nan                             # a NaN row
    logits[2] = -np.inf                               # a row of -inf: nan, as torch
    logits[3, 0] = np.inf
    g = rng.standard_normal(n).astype(dtype) if reduction == "none" else np.asarray(0.7, dtype)
    calls = []
    module = build.load("softmax")
    monkeypatch.setattr(numpy_activation.native, "load", lambda name: _Spy(module, calls))

    def run():
        return (numpy_activation.softmax_cross_entropy(logits, target, -100, smoothing,
                                                       reduction),
                numpy_activation.softmax_cross_entropy_grad(logits, target, g, -100, smoothing,
                                                            reduction))
    with np.errstate(all="raise"):                    # the compiled path warns about nothing
        compiled = run()
    assert calls == ["row_stats", "cross_entropy_grad"]
    monkeypatch.setattr(numpy_activation.native, "load", lambda name: None)
    reference = run()
    for got, want in zip(compiled, reference):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = np.isfinite(want)
        np.testing.assert_array_equal(got[~ok & ~np.isnan(want)], want[~ok & ~np.isnan(want)])
        # exp and log are glibc's, the sums vector lanes: a few ulps of the largest term
        np.testing.assert_allclose(got[ok], want[ok], rtol=8 * np.finfo(dtype).eps,
                                   atol=8 * np.finfo(dtype).eps)
    # the gradient's rows without NaN against float64, for the per-row case
    if reduction == "none":
        rows = ~np.isnan(reference[1]).any(axis=1)
        exact = np.exp(logits[rows].astype(np.float64))
        exact /= exact.sum(axis=1, keepdims=True)
        exact -= smoothing / c
        kept = target[rows]
        exact[np.arange(rows.sum()), np.where(kept >= 0, kept, 0)] -= 1 - smoothing
        exact *= np.where(kept >= 0, g[rows], 0)[:, None]
        np.testing.assert_allclose(compiled[1][rows], exact, rtol=0,
                                   atol=16 * np.finfo(dtype).eps * np.abs(g).max())


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_max_pool_gradient_equals_the_numpy_kernel(monkeypatch, dtype):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 4, 10, 600)).astype(dtype)   # rows longer than one chunk
    x[0, 0, 0, :2] = [np.nan, 1.0]
    winners = numpy_pooling.max_pool2d(x, (2, 2), (2, 2), (0, 0), (1, 1))[1]
    g = rng.standard_normal((3, 4, 5, 300)).astype(dtype)
    g[0, 0, 0, :3] = [np.inf, np.nan, -np.inf]                 # reach their winners only
    calls = []
    module = build.load("pooling")
    monkeypatch.setattr(numpy_pooling.native, "load", lambda name: _Spy(module, calls))
    got = numpy_pooling.max_pool2d_grad(g, winners, x.shape, (2, 2), (2, 2), (0, 0), (1, 1))
    assert calls == ["backward"] and got.flags.c_contiguous
    odd = numpy_pooling.max_pool2d_grad(g[..., :299], winners[..., :299], (3, 4, 10, 599),
                                        (2, 2), (2, 2), (0, 0), (1, 1))  # not tiling
    assert calls == ["backward", "backward"]
    monkeypatch.setattr(numpy_pooling.native, "load", lambda name: None)
    np.testing.assert_array_equal(got, numpy_pooling.max_pool2d_grad(
        g, winners, x.shape, (2, 2), (2, 2), (0, 0), (1, 1)))
    np.testing.assert_array_equal(odd, numpy_pooling.max_pool2d_grad(
        g[..., :299], winners[..., :299], (3, 4, 10, 599), (2, 2), (2, 2), (0, 0), (1, 1)))


@needs_compiler
def test_a_cached_file_others_could_have_written_is_not_loaded(tmp_path):
    """Loading a built file runs its code: the cache is private, and a file that is not this
    user's alone is refused (the NumPy kernel runs), never loaded."""
    env = dict(os.environ, RILL_CACHE_DIR=str(tmp_path))
    env.pop("RILL_NATIVE", None)
    assert _fresh_process(env).startswith("True")
    folder = tmp_path / "native"
    assert folder.stat().st_mode & 0o777 == 0o700
    (built,) = folder.glob("lstm_cell-*")  # beside it: the compiled bind, built at import
    assert built.stat().st_mode & 0o777 == 0o755
    built.chmod(0o777)                                  # anyone may write it now
    out = _fresh_process(env)
    assert out.startswith("False") and "others may write it" in out
    if hasattr(os, "geteuid") and os.geteuid() == 0:    # root can give it to someone else
        built.chmod(0o755)
        os.chown(built, 65534, -1)
        out = _fresh_process(env)
        assert out.startswith("False") and "belongs to user 65534" in out


_CAPTURE_A_CONV_NET = """
import numpy as np, rill
from rill.kernels.native import build, modules_for
net = rill.nn.Sequential(rill.nn.Conv2d(3, 4, 3, padding=1), rill.nn.BatchNorm2d(4),
                         rill.nn.ReLU(), rill.nn.MaxPool2d(2))
x = rill.tensor(np.ones((2, 3, 8, 8), np.float32))
step = rill.capture(lambda x: net(x).sum())
graph = step.graph_for(x)
print(sorted(modules_for(graph)))
step(x)
print(sorted(build._prefetched))
"""


@needs_compiler
def test_a_captured_step_builds_the_modules_its_kernels_load_ahead(tmp_path):
    """Before its first call runs a kernel, a captured step starts building (in the
    background) the compiled modules its kernels may load, from their files' COMPILED."""
    env = dict(os.environ, RILL_CACHE_DIR=str(tmp_path))
    env.pop("RILL_NATIVE", None)
    done = subprocess.run([sys.executable, "-c", _CAPTURE_A_CONV_NET], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    wanted, prefetched = (ast.literal_eval(line) for line in done.stdout.splitlines()[-2:])
    assert {"conv", "batch_norm", "pooling"} <= set(wanted)
    assert set(prefetched) == set(wanted)  # the cache was empty: every one was queued
    built = {p.name.split("-")[0] for p in (tmp_path / "native").iterdir()
             if not p.name.startswith(".")}
    assert set(wanted) <= built
