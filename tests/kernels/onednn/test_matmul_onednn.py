"""Matrix products through oneDNN (kernels/onednn/matmul.py) once a convolution or LSTM layer
has started its OpenMP team: against float64 NumPy for strided and transposed operands and a
fused bias; the products kernels/numpy/linalg.py hands it (float32, large enough to thread)
and those it keeps (small, float64, stacked, before any team); gradients against torch;
eager against captured; one prepared product run on new arrays and on two threads at once."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import rill
from rill.kernels.numpy import linalg as linalg_kernels
from rill.kernels.numpy import parallel
from rill.kernels.onednn import library
from rill.kernels.onednn import matmul as onednn_matmul

pytestmark = pytest.mark.skipif(library.library() is None,
                                reason=f"oneDNN not loaded: {library.why_not()}")


@pytest.fixture
def team(monkeypatch):
    """As after a convolution on two threads: products may join oneDNN's team."""
    monkeypatch.setattr(library, "_teams_started", True)
    monkeypatch.setattr(linalg_kernels, "ONEDNN", True)


@pytest.fixture
def calls(monkeypatch):
    """The products oneDNN computed (not declined), as (a shape, b shape)."""
    seen = []
    original = onednn_matmul.matmul

    def spy(a, b, bias=None, out=None):
        out = original(a, b, bias, out=out)
        if out is not None:
            seen.append((a.shape, b.shape))
        return out
    monkeypatch.setattr(onednn_matmul, "matmul", spy)
    return seen


def _draw(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def _close(got, want):
    assert got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize("layout", ["plain", "a transposed", "b transposed", "both",
                                    "strided rows"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_products_match_float64(team, layout, with_bias):
    m, k, n = 67, 130, 45
    a, b = _draw(m, k), _draw(k, n, seed=1)
    if layout in ("a transposed", "both"):
        a = np.ascontiguousarray(a.T).T
    if layout in ("b transposed", "both"):
        b = np.ascontiguousarray(b.T).T
    if layout == "strided rows":
        a = _draw(2 * m, k)[::2]
    bias = _draw(n, seed=2) if with_bias else None
    got = onednn_matmul.matmul(a, b, bias)
    want = a.astype(np.float64) @ b.astype(np.float64) + (0 if bias is None else bias)
    _close(got, want)


def test_a_prepared_product_runs_on_new_arrays_and_two_threads(team):
    a, b = _draw(96, 64), _draw(64, 80, seed=3)
    outs, errors = {}, []

    def run(i):
        try:
            x = a * (i + 1)
            outs[i] = [onednn_matmul.matmul(x, b) for _ in range(20)][-1]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(4):
        _close(outs[i], (a * (i + 1)).astype(np.float64) @ b)


def test_declined_cases_return_none(team):
    a = _draw(8, 8)
    assert onednn_matmul.matmul(a.astype(np.float64), a.astype(np.float64)) is None
    assert onednn_matmul.matmul(a, a[:, ::-1]) is None  # a negative stride
    assert onednn_matmul.matmul(a, a, _draw(16)[::2]) is None  # a strided bias
    assert onednn_matmul.matmul(a, _draw(2, 8, 8)) is None  # ranks differ


def test_no_product_before_a_team(monkeypatch):
    monkeypatch.setattr(library, "_teams_started", False)
    assert onednn_matmul.matmul(_draw(8, 8), _draw(8, 8)) is None


def test_linalg_hands_large_float32_products_over(team, calls):
    big = int(np.sqrt(parallel.SMALL_GEMM)) + 8  # big ** 3 >= SMALL_GEMM multiply-adds
    x, w, bias = _draw(big, big), _draw(big, big, seed=4), _draw(big, seed=5)
    y = rill.nn.functional.linear(rill.tensor(x), rill.tensor(w), rill.tensor(bias))
    _close(y.numpy(), x.astype(np.float64) @ w.T.astype(np.float64) + bias)
    assert calls == [((big, big), (big, big))]
    rows = rill.tensor(_draw(4, big // 4, big))
    _close((rows @ rill.tensor(w)).numpy(),
           rows.numpy().astype(np.float64) @ w.astype(np.float64))  # (B, T, C) @ (C, D)
    assert calls[-1] == ((big, big), (big, big))
    seen = len(calls)
    small = _draw(16, 16)
    _close((rill.tensor(small) @ rill.tensor(small)).numpy(), small.astype(np.float64) @ small)
    (rill.tensor(x.astype(np.float64)) @ rill.tensor(w.astype(np.float64))).numpy()
    stacked = _draw(4, big, big)
    _close((rill.tensor(stacked) @ rill.tensor(stacked)).numpy(),
           stacked.astype(np.float64) @ stacked)
    assert len(calls) == seen  # small, float64 and stacked products stay on NumPy


def test_linear_gradients_match_torch(team, calls):
    big = int(np.sqrt(parallel.SMALL_GEMM)) + 8
    x, w, bias = _draw(big, big + 3), _draw(big - 5, big + 3, seed=6), _draw(big - 5, seed=7)
    g = _draw(big, big - 5, seed=8)
    xr, wr, br = (rill.tensor(a, requires_grad=True) for a in (x, w, bias))
    rill.nn.functional.linear(xr, wr, br).backward(rill.tensor(g))
    xt, wt, bt = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, bias))
    torch.nn.functional.linear(xt, wt, bt).backward(torch.tensor(g, dtype=torch.float64))
    for got, want in ((xr, xt), (wr, wt), (br, bt)):
        _close(got.grad.numpy(), want.grad.numpy())
    assert len(calls) == 3  # the forward, the input's and the weight's gradients


def test_captured_step_equals_eager(team, calls):
    big = int(np.sqrt(parallel.SMALL_GEMM)) + 8
    x0, w0, b0 = _draw(big, big, seed=9), _draw(big, big, seed=10) * 0.1, _draw(big, seed=11)

    def loss(w, b, x):
        return (rill.nn.functional.linear(x, w, b).relu() ** 2).sum()

    step = rill.value_and_grad(loss, argnums=(0, 1))
    args = [rill.tensor(a) for a in (w0, b0, x0)]
    value, (gw, gb) = step(*args)
    eager_calls = len(calls)
    c_value, (c_gw, c_gb) = rill.capture(step)(*args)
    assert eager_calls == 2 and len(calls) == 4  # the forward and the weight's gradient
    for got, want in ((c_value, value), (c_gw, gw), (c_gb, gb)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-4)
