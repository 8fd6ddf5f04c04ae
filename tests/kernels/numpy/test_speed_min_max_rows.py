"""maximum/minimum with a scalar operand as rows against a row of the scalar (kernels/numpy/
elementwise.py:AgainstRows, issue 20, speed): the same bits and dtype as the plain ufunc for
every operand order, dtype, size and NaN/-0.0, with out= (in place too), and the cases left to
the ufunc; relu and clamp through rill against PyTorch, eager and captured."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill.kernels.numpy.elementwise import AgainstRows, _relu

RNG = np.random.default_rng(11)
ROW = AgainstRows.ROW


def _data(n, dtype):
    if np.dtype(dtype).kind == "f":
        x = RNG.standard_normal(n).astype(dtype)
        x[::7], x[1::7], x[2::11] = np.nan, -0.0, np.inf
        return x
    return RNG.integers(-50, 50, n).astype(dtype)


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))  # bit for bit


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("n", [2 * ROW, 5 * ROW + 37, 3 * ROW - 1])
@pytest.mark.parametrize("scalar_first", [False, True])
def test_same_bits_as_the_ufunc(ufunc, dtype, n, scalar_first):
    x = _data(n, dtype).reshape(-1, 1) if n % 2 else _data(n, dtype).reshape(2, -1)
    s = np.zeros((), dtype) if dtype == np.uint8 else np.asarray(-0.0 if np.dtype(dtype).kind
                                                                 == "f" else 3, dtype)
    args = (s, x) if scalar_first else (x, s)
    _same(AgainstRows(ufunc)(*args), ufunc(*args))
    out = np.empty_like(x)
    got = AgainstRows(ufunc)(*args, out=out)
    assert got is out
    _same(out, ufunc(*args))


def test_in_place_and_promotion():
    x = _data(4 * ROW, np.float32)
    want = np.maximum(x, np.float32(0.5))
    y = x.copy()
    AgainstRows(np.maximum)(y, np.float32(0.5), out=y)
    _same(y, want)
    # A 0-d float64 array promotes float32 data to float64, as the ufunc does.
    _same(AgainstRows(np.maximum)(x, np.asarray(0.5)), np.maximum(x, np.asarray(0.5)))
    # A NaN scalar: every result is NaN, as the ufunc gives.
    _same(AgainstRows(np.minimum)(x, np.float32(np.nan)), np.minimum(x, np.float32(np.nan)))


def test_out_as_a_tuple_and_overlapping_out():
    x = _data(4 * ROW, np.float32)
    out = np.empty_like(x)
    assert AgainstRows(np.maximum)(x, np.float32(0), out=(out,)) is out
    _same(out, np.maximum(x, np.float32(0)))
    # out overlapping x one element further on: as the ufunc, which copies x first (else
    # each result would be read again as the next input)
    y, z = x.copy(), x.copy()
    AgainstRows(np.maximum)(y[:-1], np.float32(-1e30), out=y[1:])
    np.maximum(z[:-1], np.float32(-1e30), out=z[1:])
    _same(y, z)


@pytest.mark.parametrize("case", ["python float", "small", "transposed", "out transposed",
                                  "two arrays"])
def test_other_cases_take_the_ufunc(case):
    x = _data(4 * ROW, np.float32).reshape(64, -1)
    args, out = {"python float": ((x, 0.5), None), "small": ((x[:1, :10], np.float32(0)), None),
                 "transposed": ((x.T, np.float32(0)), None),
                 "out transposed": ((x, np.float32(0)), np.empty(x.shape[::-1], x.dtype).T),
                 "two arrays": ((x, x[::-1]), None)}[case]
    want = np.maximum(*args)
    got = AgainstRows(np.maximum)(*args, out=out)
    _same(np.ascontiguousarray(got), np.ascontiguousarray(want))


def test_relu_and_clamp_match_torch_eager_and_captured():
    xs = _data(3 * ROW + 5, np.float32).reshape(1, -1)
    xs[np.isnan(xs)] = 1.0  # torch's clamp and relu agree with NumPy's NaN rules; keep it plain
    x = rill.tensor(xs)

    def f(t, fw):
        return fw.nn.functional.relu(t) + fw.clamp(t, -0.25, 0.5) * 2

    want = f(torch.tensor(xs), torch).numpy()
    eager = f(x, rill).numpy()
    captured = rill.capture(lambda t: f(t, rill))(x).numpy()
    np.testing.assert_array_equal(eager, want)
    np.testing.assert_array_equal(captured, eager)
    _same(_relu(xs), np.maximum(xs, np.float32(0)))
