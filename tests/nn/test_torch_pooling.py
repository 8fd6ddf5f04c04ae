"""Pooling over 1, 2 and 3 axes against PyTorch: every option (ceil_mode with its
last-window rule, dilation, padding up to half the window, count_include_pad,
divisor_override, return_indices), float64 and float32, gradients, capture, errors."""
import itertools

import numpy as np
import pytest
import torch

import rill

F, TF = rill.nn.functional, torch.nn.functional
RNG = np.random.default_rng(5)


def check(rill_fn, torch_fn, shape, dtype="float64", **kw):
    x = RNG.standard_normal(shape).astype(dtype)
    rx, tx = rill.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    r, t = rill_fn(rx, **kw), torch_fn(tx, **kw)
    if isinstance(t, tuple):
        np.testing.assert_array_equal(r[1].numpy(), t[1].numpy())
        r, t = r[0], t[0]
    assert r.shape == tuple(t.shape), kw
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(r.numpy(), t.detach().numpy(), rtol=tol, atol=tol)
    gy = RNG.standard_normal(tuple(t.shape)).astype(dtype)
    (r * rill.tensor(gy)).sum().backward()
    (t * torch.tensor(gy)).sum().backward()
    np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)


def torch_accepts(kw, size):
    try:
        TF.max_pool1d(torch.zeros(1, 1, size), **kw)
        return True
    except RuntimeError:
        return False


# Sizes, windows, strides and paddings whose ceil_mode output differs from the floor one,
# and cases where ceil_mode's extra window would start in the right padding (then dropped).
WINDOWS = [dict(kernel_size=k, stride=s, padding=p, ceil_mode=c)
           for k, s, p, c in itertools.product((2, 3), (1, 2, 3), (0, 1), (False, True))
           if 2 * p <= k]


@pytest.mark.parametrize("size", [5, 6])
@pytest.mark.parametrize("kw", WINDOWS, ids=str)
def test_max_pool_1d_2d_3d_match_torch(kw, size):
    if not torch_accepts(kw, size):
        pytest.skip("torch refuses this window too")
    check(F.max_pool1d, TF.max_pool1d, (2, 3, size), dilation=2 if kw["kernel_size"] == 2
          else 1, return_indices=True, **kw)
    check(F.max_pool2d, TF.max_pool2d, (2, 3, size, size + 1), dilation=(1, 2),
          return_indices=True, **kw)
    check(F.max_pool3d, TF.max_pool3d, (1, 2, size, size - 1, 4), return_indices=True, **kw)


@pytest.mark.parametrize("size", [5])
@pytest.mark.parametrize("kw", WINDOWS, ids=str)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_1d_2d_3d_match_torch(kw, size, count_include_pad):
    if not torch_accepts(kw, size):
        pytest.skip("torch refuses this window too")
    check(F.avg_pool1d, TF.avg_pool1d, (2, 3, size + 2), count_include_pad=count_include_pad, **kw)
    check(F.avg_pool2d, TF.avg_pool2d, (2, 3, size, size + 1),
          count_include_pad=count_include_pad, **kw)
    check(F.avg_pool3d, TF.avg_pool3d, (1, 2, size, size - 1, 4),
          count_include_pad=count_include_pad, **kw)


@pytest.mark.parametrize("fn", ["avg_pool2d", "avg_pool3d"])
def test_divisor_override(fn):
    shape = (2, 2, 5, 6) if fn == "avg_pool2d" else (1, 2, 5, 4, 6)
    check(getattr(F, fn), getattr(TF, fn), shape, kernel_size=3, stride=2, padding=1,
          ceil_mode=True, divisor_override=5)


@pytest.mark.parametrize("name", ["max_pool3d", "avg_pool3d", "max_pool1d", "avg_pool1d"])
def test_float32_and_unbatched_inputs(name):
    shape = (3, 5, 4, 6) if name.endswith("3d") else (3, 7)
    check(getattr(F, name), getattr(TF, name), shape, "float32", kernel_size=2, stride=1,
          padding=1, ceil_mode=True)


@pytest.mark.parametrize("out", [1, 2, 3, 5])
def test_adaptive_pools_match_torch(out):
    check(F.adaptive_avg_pool1d, TF.adaptive_avg_pool1d, (2, 3, 7), output_size=out)
    check(F.adaptive_avg_pool3d, TF.adaptive_avg_pool3d, (2, 3, 7, 5, 6),
          output_size=(out, None, 3))
    check(F.adaptive_max_pool1d, TF.adaptive_max_pool1d, (3, 7), output_size=out)
    check(F.adaptive_max_pool2d, TF.adaptive_max_pool2d, (2, 3, 7, 5), output_size=(out, 3))


@pytest.mark.parametrize("ours, theirs, shape, kw", [
    (rill.nn.MaxPool1d, torch.nn.MaxPool1d, (2, 3, 9), dict(kernel_size=3, stride=2,
                                                            ceil_mode=True, dilation=2)),
    (rill.nn.MaxPool3d, torch.nn.MaxPool3d, (1, 2, 5, 5, 5), dict(kernel_size=2,
                                                                  return_indices=True)),
    (rill.nn.AvgPool1d, torch.nn.AvgPool1d, (2, 3, 9), dict(kernel_size=4, stride=3,
                                                            padding=2, ceil_mode=True)),
    (rill.nn.AvgPool3d, torch.nn.AvgPool3d, (1, 2, 5, 5, 5), dict(kernel_size=3, padding=1,
                                                                  count_include_pad=False)),
    (rill.nn.AdaptiveAvgPool3d, torch.nn.AdaptiveAvgPool3d, (1, 2, 5, 6, 7), dict(
        output_size=(2, 3, 4))),
    (rill.nn.AdaptiveMaxPool2d, torch.nn.AdaptiveMaxPool2d, (1, 2, 5, 6), dict(
        output_size=3)),
])
def test_layers_match_torch(ours, theirs, shape, kw):
    x = RNG.standard_normal(shape)
    r, t = ours(**kw)(rill.tensor(x)), theirs(**kw)(torch.tensor(x))
    if isinstance(t, tuple):
        np.testing.assert_array_equal(r[1].numpy(), t[1].numpy())
        r, t = r[0], t[0]
    np.testing.assert_allclose(r.numpy(), t.numpy(), rtol=1e-12)


@pytest.mark.parametrize("shape, kernel, stride", [((2, 3, 8, 8), 2, 2), ((2, 3, 9, 9), 3, 2),
                                                   ((2, 3, 130, 130), 2, 2)])
def test_max_pool_gradient_of_inf_and_nan_matches_torch(shape, kernel, stride):
    """A pixel that did not win its window gets 0, whatever the window's gradient (not
    inf * 0 = NaN), in windows apart and overlapping, small and split over the cores."""
    x = RNG.standard_normal(shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ty = TF.max_pool2d(tx, kernel, stride)
    g = np.ones(tuple(ty.shape), np.float32)
    g.flat[0], g.flat[1], g.flat[-1] = np.inf, -np.inf, np.nan
    ty.backward(torch.tensor(g))
    rx = rill.tensor(x, requires_grad=True)
    F.max_pool2d(rx, kernel, stride).backward(rill.tensor(g))
    np.testing.assert_array_equal(rx.grad.numpy(), tx.grad.numpy())


def test_pooling_step_captured_equals_eager():
    x = rill.tensor(RNG.standard_normal((2, 2, 5, 6, 7)))

    def f(v):
        a = F.max_pool3d(v, 3, stride=2, padding=1, ceil_mode=True)
        b = F.avg_pool3d(v, 2, ceil_mode=True, count_include_pad=False)
        return (a ** 2).sum() + (b ** 3).sum() + F.adaptive_avg_pool3d(v, 2).sum()

    eager = rill.value_and_grad(f)(x)
    captured = rill.capture(rill.value_and_grad(f))(x)
    for a, b in zip(eager, captured):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


@pytest.mark.parametrize("call, match", [
    (lambda: F.max_pool3d(rill.ones(2, 4, 4), 2), "N, C, D, H, W"),
    (lambda: F.max_pool3d(rill.ones(1, 1, 4, 4, 4), 2, padding=2), "half the kernel"),
    (lambda: F.avg_pool3d(rill.ones(1, 1, 4, 4, 4), (2, 2)), "kernel_size"),
    (lambda: F.avg_pool2d(rill.ones(1, 1, 4, 4), 2, divisor_override=0), "divisor_override"),
    (lambda: F.max_pool1d(rill.ones(1, 1, 3), 5), "does not fit"),
    (lambda: F.max_pool2d(rill.ones(1, 1, 4, 4), 2, ceil_mode="yes"), "ceil_mode"),
    (lambda: F.adaptive_avg_pool3d(rill.ones(1, 4, 4), 2), "N, C, D, H, W"),
    (lambda: F.adaptive_max_pool2d(rill.ones(1, 1, 4, 4), 2, return_indices=True),
     "return_indices"),
    (lambda: F.adaptive_avg_pool1d(rill.ones(1, 1, 4), 0), "positive"),
])
def test_bad_arguments_raise_rill_errors(call, match):
    with pytest.raises(rill.Error, match=match):
        call()
