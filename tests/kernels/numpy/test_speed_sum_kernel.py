"""The CPU sum over every axis but one as matrix-vector products (kernels/numpy/reduce.py,
issue 20, speed): against NumPy in float64, with keepdims and negative axes, NaN and inf
propagated as NumPy does, and the cases it leaves to np.sum; through rill.sum and its
gradient (a conv's bias gradient)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill.kernels.numpy import reduce as kernels

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("shape, axis", [((16, 8, 24, 24), (0, 2, 3)), ((64, 300, 8), (0, 2)),
                                         ((300, 250), 0), ((250, 300), (1,)),
                                         ((8, 16, 32, 32), (-4, -2, -1))])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_numpy(shape, axis, keepdims, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    assert kernels._sum_keeping_one_axis(x, axis) is not None  # the fast path applies
    got = kernels._sum(x, axis, keepdims)
    want = np.sum(x.astype(np.float64), axis=axis, keepdims=keepdims)
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_nan_and_inf_propagate_as_in_numpy():
    x = RNG.standard_normal((8, 4, 64, 64)).astype(np.float32)
    x[1, 0, 3, 3] = np.nan
    x[2, 1, 0, 0] = np.inf
    x[2, 2, 0, 0], x[3, 2, 5, 5] = np.inf, -np.inf
    with np.errstate(invalid="ignore"):  # inf - inf: both warn, as NumPy's sums do
        got = kernels._sum(x, (0, 2, 3), False)
        want = np.sum(x, axis=(0, 2, 3))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def test_other_cases_are_left_to_numpy():
    x = RNG.standard_normal((16, 8, 24, 24)).astype(np.float32)
    assert kernels._sum_keeping_one_axis(x, (0, 2)) is None           # two axes kept
    assert kernels._sum_keeping_one_axis(x, None) is None             # everything
    assert kernels._sum_keeping_one_axis(x.transpose(1, 0, 2, 3), (0, 2, 3)) is None
    assert kernels._sum_keeping_one_axis(x.astype(np.float16), (0, 2, 3)) is None
    assert kernels._sum_keeping_one_axis(x[:2, :2, :4, :4].copy(), (0, 2, 3)) is None  # small


def test_bias_gradient_of_a_convolution_matches_torch():
    x = RNG.standard_normal((8, 3, 32, 32)).astype(np.float32)
    w, b = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32), np.zeros(16, np.float32)
    rb = rill.tensor(b, requires_grad=True)
    (rill.nn.functional.conv2d(rill.tensor(x), rill.tensor(w), rb, padding=1) ** 2).sum().backward()
    tb = torch.tensor(b, requires_grad=True)
    (torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), tb, padding=1) ** 2).sum().backward()
    np.testing.assert_allclose(rb.grad.numpy(), tb.grad.numpy(), rtol=1e-4)
    captured = rill.capture(lambda t: rill.sum(t, axis=(0, 2, 3)))
    np.testing.assert_allclose(captured(rill.tensor(x)).numpy(),
                               np.sum(x.astype(np.float64), axis=(0, 2, 3)), rtol=2e-6)
