"""The direct 2-d convolution compiled from C (kernels/native/conv.c, kernels/numpy/conv_direct.py):
forward, input gradient and weight gradient of float32 stride-1 convolutions against float64
references, on shapes that take every edge of its blocking (rows not a whole number of
vectors, channel counts not a whole number of blocks, the last block of rows past the image,
kernels wider than the weight gradient's block of 3 columns, asymmetric padding); which
convolutions it takes and which go to the per-image kernels; special values; wrong buffer
sizes as errors, not reads out of bounds; and the whole op through rill against PyTorch."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import rill
from rill.kernels.native import build
from rill.kernels.numpy import conv as conv_kernels
from rill.kernels.numpy import conv_direct, conv_per_image, parallel

pytestmark = pytest.mark.skipif(shutil.which(build._compiler()[0]) is None,
                                reason="no C compiler on this machine")
RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _compiled_and_split(monkeypatch):
    monkeypatch.setattr(build, "ENABLED", True)
    monkeypatch.setattr(conv_kernels, "ONEDNN", False)  # these kernels, not oneDNN's
    monkeypatch.setattr(parallel, "MIN_ELEMENTS", 0)  # small batches still split over threads
    monkeypatch.setattr(parallel, "THREADS", max(2, parallel.THREADS))


def _draw(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _references(x, w, b, g, pad):
    """float64 results of the per-image kernels (themselves checked against PyTorch)."""
    d = [a.astype(np.float64) for a in (x, w, g)]
    one = (1, 1)
    y = conv_per_image.conv(d[0], d[1], None if b is None else b.astype(np.float64), one, pad,
                            one)
    dx = conv_per_image.conv_transpose(d[2], d[1], x.shape[2:], one, pad, one)
    dw = conv_per_image.conv_weight_grad(d[0], d[2], w.shape[2:], one, pad, one)
    return y, dx, dw


def _close(got, want):
    assert got is not None and got.dtype == np.float32 and got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got / scale, want / scale, rtol=0, atol=3e-6)


SHAPES = [  # x (N, C, H, W), w (O, C, KH, KW), padding ((top, bottom), (left, right))
    ((2, 3, 5, 7), (4, 3, 3, 3), ((1, 1), (1, 1))),          # rows shorter than a vector
    ((3, 16, 16, 16), (32, 16, 3, 3), ((1, 1), (1, 1))),     # whole vectors and blocks
    ((2, 5, 9, 33), (17, 5, 2, 4), ((0, 1), (2, 1))),        # 3 vectors a row, O = 2 blocks + 1
    ((1, 4, 20, 19), (7, 4, 5, 5), ((2, 2), (0, 4))),        # 5 columns: two gradient blocks
    ((2, 8, 6, 6), (3, 8, 1, 1), ((0, 0), (0, 0))),          # 1x1
    ((5, 2, 4, 40), (9, 2, 4, 1), ((3, 0), (0, 0))),         # tall kernel, rows not 3k
]


@pytest.mark.parametrize("xs, ws, pad", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_direct_kernels_match_float64(xs, ws, pad, bias):
    x, w = _draw(*xs), _draw(*ws)
    b = _draw(ws[0]) if bias else None
    y = conv_direct.conv(x, w, b, (1, 1), pad, (1, 1))
    g = _draw(*y.shape)
    want_y, want_dx, want_dw = _references(x, w, b, g, pad)
    _close(y, want_y)
    _close(conv_direct.conv_transpose(g, w, xs[2:], (1, 1), pad, (1, 1)), want_dx)
    _close(conv_direct.conv_weight_grad(x, g, ws[2:], (1, 1), pad, (1, 1)), want_dw)


def test_weight_gradient_is_the_same_bits_every_call():
    x, g = _draw(9, 6, 11, 11), _draw(9, 5, 11, 11)
    pad = ((1, 1), (1, 1))
    first = conv_direct.conv_weight_grad(x, g, (3, 3), (1, 1), pad, (1, 1))
    for _ in range(5):
        assert np.array_equal(conv_direct.conv_weight_grad(x, g, (3, 3), (1, 1), pad, (1, 1)),
                              first)


def test_an_empty_batch():
    x, w = np.zeros((0, 4, 6, 6), np.float32), _draw(3, 4, 3, 3)
    pad = ((1, 1), (1, 1))
    assert conv_direct.conv(x, w, None, (1, 1), pad, (1, 1)).shape == (0, 3, 6, 6)
    gw = conv_direct.conv_weight_grad(x, np.zeros((0, 3, 6, 6), np.float32), (3, 3), (1, 1),
                                      pad, (1, 1))
    assert gw.shape == (3, 4, 3, 3) and not gw.any()


def test_special_values_give_what_the_products_give():
    """An inf in the image meets only the g values it multiplies: the lanes the kernel
    computes past a row's end (where g is zero) add no inf * 0 = NaN."""
    x = np.ones((1, 1, 4, 10), np.float32)
    x[0, 0, 1, 9] = np.inf
    x[0, 0, 3, 0] = np.nan
    g = np.ones((1, 1, 4, 10), np.float32)
    pad = ((1, 1), (1, 1))
    got = conv_direct.conv_weight_grad(x, g, (3, 3), (1, 1), pad, (1, 1))
    want = conv_per_image.conv_weight_grad(x.astype(np.float64), g.astype(np.float64), (3, 3),
                                           (1, 1), pad, (1, 1))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6)
    w = _draw(2, 1, 3, 3)
    y = conv_direct.conv(x, w, None, (1, 1), pad, (1, 1))
    want = conv_per_image.conv(x.astype(np.float64), w.astype(np.float64), None, (1, 1), pad,
                               (1, 1))
    assert np.isnan(y).any() and np.isinf(y).any()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(want))


@pytest.mark.parametrize("case", ["float64", "stride", "dilation", "negative pad", "3d",
                                  "wide transpose pad"])
def test_what_the_direct_kernels_leave_to_the_per_image_ones(case):
    x, w, g = _draw(2, 3, 8, 8), _draw(4, 3, 3, 3), _draw(2, 4, 8, 8)
    one, pad = (1, 1), ((1, 1), (1, 1))
    if case == "float64":
        assert conv_direct.conv(x.astype(np.float64), w.astype(np.float64), None, one, pad,
                                one) is None
    elif case == "stride":
        assert conv_direct.conv(x, w, None, (2, 1), pad, one) is None
    elif case == "dilation":
        assert conv_direct.conv_weight_grad(x, g, (3, 3), one, pad, (1, 2)) is None
    elif case == "negative pad":
        assert conv_direct.conv_transpose(g, w, (10, 10), one, ((-1, -1), (1, 1)), one) is None
    elif case == "3d":
        assert conv_direct.conv(_draw(1, 3, 4, 4, 4), _draw(2, 3, 3, 3, 3), None, (1, 1, 1),
                                ((1, 1),) * 3, (1, 1, 1)) is None
    else:  # a pad past k - 1: the input gradient's flipped convolution would need pads < 0
        g5 = _draw(2, 4, 12, 8)
        assert conv_direct.conv_transpose(g5, w, (8, 8), one, ((3, 3), (1, 1)), one) is None


def test_without_the_compiled_module_the_per_image_kernels_run(monkeypatch):
    monkeypatch.setattr(build, "ENABLED", False)
    x, w = _draw(2, 3, 8, 8), _draw(4, 3, 3, 3)
    assert conv_direct.conv(x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1)) is None
    y = conv_kernels.conv(x, w, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
                          groups=1)
    assert y.shape == (2, 4, 8, 8)


def test_wrong_buffer_sizes_are_errors_not_reads_out_of_bounds():
    module = build.load("conv")
    x, y = np.zeros((2, 3, 8, 8), np.float32), np.zeros((2, 4, 8, 8), np.float32)
    packed, bias = np.zeros((3, 3, 3, 8), np.float32), np.zeros(8, np.float32)
    sizes = [2, 3, 8, 8, 4, 3, 3, 8, 8, 1, 1]
    module.forward(x, packed, bias, y, *sizes, 0, 2)  # the right sizes run
    with pytest.raises(ValueError, match="x"):
        module.forward(x[:1], packed, bias, y, *sizes, 0, 2)
    with pytest.raises(ValueError, match="packed weights"):
        module.forward(x, packed[:2], bias, y, *sizes, 0, 2)
    with pytest.raises(ValueError, match="images"):
        module.forward(x, packed, bias, y, *sizes, 0, 3)
    with pytest.raises(ValueError, match="padding"):  # an output the image cannot fill
        module.forward(x, packed, bias, np.zeros((2, 4, 3, 8), np.float32),
                       *sizes[:7], 3, 8, 1, 1, 0, 2)
    with pytest.raises(ValueError, match="dw"):
        module.weight_grad(x, y, np.zeros(5, np.float32), *sizes, 0, 2)


@pytest.mark.parametrize("kw", [dict(padding=1), dict(padding=0), dict(padding=(2, 1))])
def test_the_op_through_rill_matches_torch(kw):
    """rill's conv2d (float32, stride 1: the direct kernels) forward and gradients."""
    x, w, b = _draw(6, 5, 13, 18), _draw(10, 5, 3, 3), _draw(10)
    rx, rw, rb = (rill.tensor(a, requires_grad=True) for a in (x, w, b))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    r = rill.nn.functional.conv2d(rx, rw, rb, **kw)
    t = torch.nn.functional.conv2d(tx, tw, tb, **kw)
    np.testing.assert_allclose(r.numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-4)
    gy = _draw(*t.shape)
    r.backward(rill.tensor(gy))
    t.backward(torch.tensor(gy))
    for a, c in ((rx, tx), (rw, tw), (rb, tb)):
        np.testing.assert_allclose(a.grad.numpy(), c.grad.numpy(), rtol=1e-5, atol=2e-4)
