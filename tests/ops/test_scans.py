"""Scans against torch (and NumPy for the Array API forms) on the same inputs: cumsum/cumprod
with dtype, exclusive and reverse; cumulative_sum/cumulative_prod; cummax/cummin (ties, NaN);
logcumsumexp over a wide range; gradients against torch and finite differences; capture;
errors; the gpu device against the CPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill.ops.reduce import (cummax, cummin, cumprod, cumsum, cumulative_prod, cumulative_sum,
                             logcumsumexp)


def torch_scan(fn, identity, t, dim, exclusive, reverse):
    """The reference for the exclusive/reverse options, from torch's plain scans."""
    if reverse:
        t = torch.flip(t, [dim])
    if exclusive:
        first = torch.full_like(t.narrow(dim, 0, 1), identity)
        t = torch.cat([first, t.narrow(dim, 0, t.shape[dim] - 1)], dim)
    out = fn(t, dim)
    return torch.flip(out, [dim]) if reverse else out


def compare(rill_fn, torch_fn, x, rng, rtol=1e-12):
    """Values and the gradient of <out, g> against torch, float64."""
    rx, tx = rill.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, want = rill_fn(rx), torch_fn(tx)
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=rtol, atol=1e-12)
    g = rng.standard_normal(want.shape)
    (out * rill.tensor(g)).sum().backward()
    want.backward(torch.tensor(g))
    np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_cumprod_options_match_torch(rng, exclusive, reverse, dim):
    x = rng.standard_normal((3, 5))
    x[1, 2] = 0.0  # cumprod's gradient through a zero
    for name, fn, identity in (("cumsum", cumsum, 0), ("cumprod", cumprod, 1)):
        compare(lambda t: fn(t, dim, exclusive=exclusive, reverse=reverse),
                lambda t: torch_scan(getattr(torch, name), identity, t, dim, exclusive, reverse),
                x, rng)


def test_cumsum_flattened_and_dtypes_match_torch(rng):
    ints = rng.integers(-5, 6, (2, 3)).astype(np.int32)
    got = cumsum(rill.tensor(ints), None, reverse=True)
    want = torch.flip(torch.cumsum(torch.flip(torch.tensor(ints).reshape(-1), [0]), 0), [0])
    assert got.dtype == rill.int64
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    for dtype, tdtype in (("float64", torch.float64), ("int16", torch.int16)):
        got = cumprod(rill.tensor(ints), 1, dtype=dtype)
        want = torch.cumprod(torch.tensor(ints), 1, dtype=tdtype)
        assert got.numpy().dtype == want.numpy().dtype
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(cumsum(rill.tensor([True, False, True]), 0, exclusive=True)
                                  .numpy(), [0, 1, 1])


def test_scan_gradients_match_finite_differences(rng):
    x = rng.standard_normal((2, 4))
    g = rng.standard_normal(x.shape)
    fns = [lambda t: cumprod(t, 1, exclusive=True, reverse=True),
           lambda t: cumsum(t, 0, exclusive=True), lambda t: logcumsumexp(t, 1),
           lambda t: cummax(t, 1)[0]]
    for fn in fns:
        rx = rill.tensor(x, requires_grad=True)
        (fn(rx) * rill.tensor(g)).sum().backward()
        numeric = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            e = np.zeros_like(x)
            e[i] = 1e-6
            numeric[i] = ((fn(rill.tensor(x + e)).numpy() * g).sum() -
                          (fn(rill.tensor(x - e)).numpy() * g).sum()) / 2e-6
        np.testing.assert_allclose(rx.grad.numpy(), numeric, rtol=1e-6, atol=1e-7)


def test_cumulative_sum_and_prod_follow_the_array_api(rng):
    x = rng.standard_normal((3, 4))
    for axis in (0, 1, -1):
        for include_initial in (False, True):
            np.testing.assert_allclose(
                cumulative_sum(rill.tensor(x), axis=axis, include_initial=include_initial).numpy(),
                np.cumulative_sum(x, axis=axis, include_initial=include_initial), rtol=1e-12)
            np.testing.assert_allclose(
                cumulative_prod(rill.tensor(x), axis=axis, include_initial=include_initial)
                .numpy(),
                np.cumulative_prod(x, axis=axis, include_initial=include_initial), rtol=1e-12)
    one_d = np.array([3, 1, 2], dtype=np.int32)
    got = cumulative_sum(rill.tensor(one_d), include_initial=True)
    assert got.dtype == rill.int64
    np.testing.assert_array_equal(got.numpy(), [0, 3, 4, 6])
    got = cumulative_prod(rill.tensor(one_d), dtype="float32")
    assert got.dtype == rill.float32
    np.testing.assert_array_equal(got.numpy(), [3, 3, 6])
    empty = cumulative_sum(rill.zeros(2, 0), axis=1, include_initial=True)
    np.testing.assert_array_equal(empty.numpy(), np.zeros((2, 1)))
    # include_initial's gradient: the prepended identity is a constant.
    rx = rill.tensor(x, requires_grad=True)
    cumulative_sum(rx, axis=1, include_initial=True).sum().backward()
    np.testing.assert_array_equal(rx.grad.numpy(), np.tile([4.0, 3, 2, 1], (3, 1)))


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_match_torch(rng, name):
    fn = {"cummax": cummax, "cummin": cummin}[name]
    tfn = getattr(torch, name)
    nan = float("nan")
    cases = [rng.integers(-2, 3, (3, 9)).astype(np.float64),          # many ties
             np.array([[1.0, nan, 3.0, nan, -5.0], [2.0, 2.0, nan, 0.0, 9.0]]),
             rng.standard_normal((2, 17))]                             # several ladder steps
    for x in cases:
        for dim in (0, 1):
            values, indices = fn(rill.tensor(x), dim)
            want = tfn(torch.tensor(x), dim)
            np.testing.assert_array_equal(values.numpy(), want.values.numpy())
            np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())
            assert indices.dtype == rill.int64
    x = cases[0]
    compare(lambda t: fn(t, 1)[0], lambda t: tfn(t, 1).values, x, rng)
    ints = rng.integers(-100, 100, (4, 6))
    for dtype, tdtype in (("int64", torch.int64), ("int32", torch.int32), ("bool", torch.bool)):
        values, indices = fn(rill.tensor(ints > 0 if dtype == "bool" else ints, dtype=dtype), 1)
        want = tfn(torch.tensor(ints > 0 if dtype == "bool" else ints, dtype=tdtype), 1)
        np.testing.assert_array_equal(values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())


def test_logcumsumexp_matches_torch_over_a_wide_range(rng):
    x = rng.standard_normal((3, 11)) * 400  # plain log(cumsum(exp)) over- and underflows
    x[0, 0] = -1000.0
    for dim in (0, 1):
        compare(lambda t: logcumsumexp(t, dim), lambda t: torch.logcumsumexp(t, dim), x, rng,
                rtol=1e-10)
    x32 = (rng.standard_normal((2, 6)) * 50).astype(np.float32)
    got = logcumsumexp(rill.tensor(x32), 1)
    assert got.dtype == rill.float32
    np.testing.assert_allclose(got.numpy(), torch.logcumsumexp(torch.tensor(x32), 1).numpy(),
                               rtol=1e-5)
    with_inf = np.array([-np.inf, 0.0, np.inf, 1.0])
    np.testing.assert_array_equal(logcumsumexp(rill.tensor(with_inf), 0).numpy(),
                                  torch.logcumsumexp(torch.tensor(with_inf), 0).numpy())


def test_captured_scans_agree_with_eager(rng):
    x = rng.standard_normal((3, 6))

    def scans(t):
        return (cumsum(t, 1, exclusive=True, reverse=True), cumprod(t, 0, exclusive=True),
                cumulative_sum(t, axis=1, include_initial=True), *cummax(t, 1), *cummin(t, 0),
                logcumsumexp(t, 1))
    for got, want in zip(rill.capture(scans)(rill.tensor(x)), scans(rill.tensor(x))):
        np.testing.assert_array_equal(got.numpy(), want.numpy())

    @rill.capture
    def grad(t):
        return rill.grad(lambda u: (logcumsumexp(u, 1) + cummax(u, 1)[0] +
                                    cumprod(u, 1, reverse=True)).sum())(t)
    rx = rill.tensor(x, requires_grad=True)
    (logcumsumexp(rx, 1) + cummax(rx, 1)[0] + cumprod(rx, 1, reverse=True)).sum().backward()
    np.testing.assert_allclose(grad(rill.tensor(x)).numpy(), rx.grad.numpy(), rtol=1e-15)


def test_bad_input_raises_rill_errors():
    x = rill.zeros(2, 3)
    with pytest.raises(rill.ArgumentError, match="cumulative_sum.*axis is required"):
        cumulative_sum(x)
    with pytest.raises(rill.ShapeError, match="cumulative_prod.*out of range"):
        cumulative_prod(x, axis=2)
    with pytest.raises(rill.ShapeError, match="cumsum.*out of range"):
        cumsum(x, 2, exclusive=True)
    with pytest.raises(rill.DTypeError, match="cumsum"):
        cumsum(x, 0, dtype="not a dtype")
    with pytest.raises(rill.ArgumentError, match="reverse"):
        cumprod(x, 0, reverse="yes")
    with pytest.raises(rill.ShapeError, match="cummax.*out of range"):
        cummax(x, 3)
    with pytest.raises(rill.ShapeError, match="logcumsumexp.*out of range"):
        logcumsumexp(x, -3)


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device")
def test_gpu_agrees_with_cpu(rng):
    gpu = rill.device("gpu")
    x = rng.integers(-3, 4, (3, 9)).astype(np.float64)
    fns = [lambda t: cumsum(t, 1, exclusive=True, reverse=True),
           lambda t: cumulative_prod(t, axis=0, include_initial=True),
           lambda t: cummax(t, 1), lambda t: cummin(t, 0), lambda t: logcumsumexp(t, 1)]
    for fn in fns:
        got, want = fn(rill.tensor(x, device=gpu)), fn(rill.tensor(x))
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for a, b in zip(got, want):
            assert a.device == gpu
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
