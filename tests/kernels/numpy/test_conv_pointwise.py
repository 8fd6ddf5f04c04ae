"""1x1 convolutions as matrix products (kernels/numpy/conv_pointwise.py): the same values as
PyTorch for both batch layouts they run, every spatial rank, bias or not; the layouts and
windows they do not run go to the other kernels, with the same results."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

conv = importlib.import_module("rill.kernels.numpy.conv")
pointwise = importlib.import_module("rill.kernels.numpy.conv_pointwise")

TORCH_CONV = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d,
              3: torch.nn.functional.conv3d}


def _batch(rng, shape, layout, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    if layout == "channels":  # the whole-batch GEMMs' (C, N, P) buffer seen as (N, C, ...)
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, 0, 1)), 0, 1)
    return x


def _torch_step(x, w, b, g):
    tx, tw = (torch.tensor(np.ascontiguousarray(a), requires_grad=True) for a in (x, w))
    tb = torch.tensor(b, requires_grad=True) if b is not None else None
    y = TORCH_CONV[x.ndim - 2](tx, tw, tb)
    y.backward(torch.tensor(np.ascontiguousarray(g)))
    return y.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()


@pytest.mark.parametrize("layout", ["channels", "images"])
@pytest.mark.parametrize("spatial", [(300,), (17, 19), (4, 8, 9)])
@pytest.mark.parametrize("dtype, tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_pointwise_convolutions_match_torch(monkeypatch, layout, spatial, dtype, tol, with_bias):
    monkeypatch.setattr(conv, "ONEDNN", False)  # the products here, not oneDNN's kernels
    rng = np.random.default_rng(len(spatial))
    x = _batch(rng, (3, 5) + spatial, layout, dtype)
    w = rng.standard_normal((7, 5) + (1,) * len(spatial)).astype(dtype)
    b = rng.standard_normal(7).astype(dtype) if with_bias else None
    g = _batch(rng, (3, 7) + spatial, layout, dtype)
    taken = []
    for name in ("conv", "conv_transpose", "conv_weight_grad"):
        kernel = getattr(pointwise, name)
        monkeypatch.setattr(pointwise, name, lambda *a, _k=kernel, _n=name: taken.append(_n)
                            or _k(*a))
    attrs = dict(stride=(1,) * len(spatial), padding=((0, 0),) * len(spatial),
                 dilation=(1,) * len(spatial), groups=1)
    y = conv.conv(x, w, *([b] if with_bias else []), **attrs)
    gx = conv.conv_transpose(g, w, input_size=spatial, **attrs)
    gw = conv.conv_weight_grad(x, g, kernel_size=(1,) * len(spatial), **attrs)
    assert taken == ["conv", "conv_transpose", "conv_weight_grad"]
    assert y.dtype == gx.dtype == gw.dtype == dtype and gw.flags.c_contiguous
    want = _torch_step(x, w, b, g)
    for got, expected in zip((y, gx, gw), want):
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("case", ["small images", "strided", "padded", "grouped", "float16",
                                  "mixed layouts"])
def test_what_pointwise_does_not_run_goes_to_the_other_kernels(case):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)   # 36 pixels: small images
    w = rng.standard_normal((6, 4, 1, 1)).astype(np.float32)
    attrs = dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
    if case == "strided":
        attrs["stride"] = (2, 2)
    elif case == "padded":
        attrs["padding"] = ((1, 1), (1, 1))
    elif case == "grouped":
        attrs["groups"] = 2
        w = w[:, :2]
    elif case == "float16":
        x, w = x.astype(np.float16), w.astype(np.float16)
    elif case == "mixed layouts":
        x = rng.standard_normal((2, 4, 20, 20)).astype(np.float32)
    assert not pointwise.applies(w.shape, **attrs) or case in ("small images", "float16",
                                                                "mixed layouts")
    y = conv.conv(x, w, **attrs)
    g = rng.standard_normal(y.shape).astype(x.dtype)
    if case == "mixed layouts":  # the gradient channel-major, the image not
        g = np.swapaxes(np.ascontiguousarray(np.swapaxes(g, 0, 1)), 0, 1)
        assert pointwise.conv_weight_grad(x, g) is None
    gx = conv.conv_transpose(g, w, input_size=x.shape[2:], **attrs)
    gw = conv.conv_weight_grad(x, g, kernel_size=(1, 1), **attrs)
    tx = torch.tensor(x.astype(np.float32), requires_grad=True)
    tw = torch.tensor(w.astype(np.float32), requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, stride=attrs["stride"],
                                    padding=attrs["padding"][0][0], groups=attrs["groups"])
    ty.backward(torch.tensor(np.ascontiguousarray(g).astype(np.float32)))
    tol = 2e-2 if case == "float16" else 1e-5
    for got, want in ((y, ty), (gx, tx.grad), (gw, tw.grad)):
        np.testing.assert_allclose(got.astype(np.float32), want.detach().numpy(), rtol=tol,
                                   atol=tol)
