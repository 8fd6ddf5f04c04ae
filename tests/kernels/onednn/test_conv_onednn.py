"""Convolutions through oneDNN (kernels/onednn), checked against PyTorch in float64: forward,
input gradient and weight gradient over 1-3 spatial axes, strides, dilation, groups,
asymmetric padding, bias and strided inputs; the cases oneDNN declines fall back to rill's own
kernels; a prepared primitive runs on two threads at once."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import rill
from forked import in_forked_child
from rill.kernels.numpy import conv as conv_kernels
from rill.kernels.numpy import parallel
from rill.kernels.onednn import conv as onednn_conv
from rill.kernels.onednn import library

pytestmark = pytest.mark.skipif(library.library() is None,
                                reason=f"oneDNN not loaded: {library.why_not()}")

TORCH_CONV = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d,
              3: torch.nn.functional.conv3d}


def _torch64(x, w, b, g, stride, padding, dilation, groups):
    """y, dx, dw in float64 from PyTorch; rill's (lo, hi) pads become a pad of x first."""
    tx, tw = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w))
    tb = None if b is None else torch.tensor(b, dtype=torch.float64)
    flat = [p for lo_hi in reversed(padding) for p in lo_hi]
    y = TORCH_CONV[x.ndim - 2](torch.nn.functional.pad(tx, flat), tw, tb, stride, 0, dilation,
                               groups)
    y.backward(torch.tensor(g, dtype=torch.float64))
    return y.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()


CASES = [  # x shape, out channels, kernel, stride, padding (lo, hi) per axis, dilation, groups
    ((2, 16, 30), 8, (5,), (2,), ((2, 2),), (1,), 1),
    ((4, 16, 14, 14), 32, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    ((2, 3, 35, 35), 16, (11, 11), (4, 4), ((2, 2), (2, 2)), (1, 1), 1),
    ((2, 16, 13, 11), 24, (3, 5), (2, 1), ((0, 1), (2, 0)), (1, 1), 1),
    ((2, 16, 12, 12), 16, (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2), 1),
    ((2, 32, 9, 9), 64, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 4),
    ((2, 32, 9, 9), 32, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 32),  # depthwise
    ((2, 64, 7, 7), 16, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),
    ((2, 16, 6, 7, 8), 8, (3, 3, 3), (1, 2, 1), ((1, 1), (0, 0), (1, 1)), (1, 1, 1), 1),
]


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape, out, kernel, stride, padding, dilation, groups", CASES)
def test_onednn_convolutions_match_torch_float64(shape, out, kernel, stride, padding,
                                                 dilation, groups, with_bias):
    rng = np.random.default_rng(sum(shape) + out)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((out, shape[1] // groups) + kernel) /
         np.sqrt(np.prod(kernel) * shape[1] / groups)).astype(np.float32)
    b = rng.standard_normal(out).astype(np.float32) if with_bias else None
    y = onednn_conv.conv(x, w, b, stride, padding, dilation, groups)
    assert y is not None and y.dtype == np.float32 and y.flags.c_contiguous
    g = rng.standard_normal(y.shape).astype(np.float32)
    dx = onednn_conv.conv_transpose(g, w, shape[2:], stride, padding, dilation, groups)
    dw = onednn_conv.conv_weight_grad(x, g, kernel, stride, padding, dilation, groups)
    assert dx is not None and dw is not None
    want = _torch64(x, w, b, g, stride, padding, dilation, groups)
    for got, expected in zip((y, dx, dw), want):
        assert got.shape == expected.shape
        scale = np.abs(expected).max()
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5 * scale)


def test_strided_views_are_read_in_place_and_match_contiguous_copies():
    rng = np.random.default_rng(1)
    whole = rng.standard_normal((3, 48, 12, 12)).astype(np.float32)
    x = whole[:, 8:40]  # a channel slice, as a concatenation's part: not contiguous
    w = rng.standard_normal((16, 32, 3, 3)).astype(np.float32)
    attrs = ((1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    y = onednn_conv.conv(x, w, None, *attrs)
    np.testing.assert_array_equal(y, onednn_conv.conv(np.ascontiguousarray(x), w, None, *attrs))
    g = rng.standard_normal(y.shape).astype(np.float32)
    np.testing.assert_array_equal(onednn_conv.conv_weight_grad(x, g, (3, 3), *attrs),
                                  onednn_conv.conv_weight_grad(x.copy(), g, (3, 3), *attrs))


def test_cases_onednn_declines_return_none_and_rills_kernels_run():
    x64 = np.ones((1, 4, 6, 6))
    w64 = np.ones((2, 4, 3, 3))
    attrs = ((1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    assert onednn_conv.conv(x64, w64, None, *attrs) is None  # float64: no oneDNN kernel
    x, w = x64.astype(np.float32), w64.astype(np.float32)
    crop = ((1, 1), ((-1, 0), (0, 0)), (1, 1), 1)  # a transposed conv's output padding
    assert onednn_conv.conv(x, w, None, *crop) is None
    y = conv_kernels.conv(x64, w64, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
                          groups=1)
    assert y.dtype == np.float64 and y[0, 0, 2, 2] == 36.0


def test_without_the_library_the_numpy_kernels_give_the_same_step(monkeypatch):
    """A small conv net's gradients with oneDNN and with it turned off (float32 sums in
    another order: equal to rounding)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 20, 20)).astype(np.float32)

    def grads():
        rill.manual_seed(0)
        net = rill.nn.Sequential(rill.nn.Conv2d(3, 16, 5, stride=2, padding=2), rill.nn.ReLU(),
                                 rill.nn.Conv2d(16, 32, 3, padding=1, groups=2),
                                 rill.nn.Flatten(), rill.nn.Linear(32 * 100, 10))
        net(rill.tensor(x)).square().mean().backward()
        return [p.grad.numpy() for p in net.parameters()]
    with_onednn = grads()
    monkeypatch.setattr(library, "ENABLED", False)
    assert library.library() is None and "RILL_ONEDNN" in library.why_not()
    without = grads()
    for a, b in zip(with_onednn, without):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * np.abs(b).max())


def test_a_first_layers_input_gradient_stays_on_rills_kernel(monkeypatch):
    """Few input channels: oneDNN's input gradient is slower there (docs/benchmarks-history.md)."""
    asked = []
    monkeypatch.setattr(onednn_conv, "conv_transpose", lambda *a: asked.append(a) or None)
    g = np.ones((1, 8, 4, 4), np.float32)
    w = np.ones((8, 3, 3, 3), np.float32)
    gx = conv_kernels.conv_transpose(g, w, (4, 4), (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    assert gx.shape == (1, 3, 4, 4) and gx[0, 0, 1, 1] == 72.0 and not asked


def test_one_prepared_primitive_runs_on_two_threads_at_once():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    xs = [rng.standard_normal((2, 32, 16, 16)).astype(np.float32) for _ in range(8)]
    attrs = ((1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    want = [onednn_conv.conv(x, w, None, *attrs) for x in xs]
    got = [None] * len(xs)

    def run(i):
        for _ in range(5):
            got[i] = onednn_conv.conv(xs[i], w, None, *attrs)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_inside_a_split_pass_a_call_runs_on_one_thread(monkeypatch):
    from rill.kernels.onednn import primitive
    monkeypatch.setattr(parallel, "THREADS", 2)
    seen = []
    parallel._inside.active = True
    try:
        seen.append(primitive.threads())
    finally:
        parallel._inside.active = False
    seen.append(primitive.threads())
    assert seen == [1, 2]


def test_a_child_forked_after_a_threaded_call_still_convolves():
    """GNU OpenMP's threads do not survive fork(): the child must not wait for them."""
    x = np.ones((2, 16, 8, 8), np.float32)
    w = np.ones((16, 16, 3, 3), np.float32)
    attrs = ((1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    assert onednn_conv.conv(x, w, None, *attrs)[0, 0, 1, 1] == 144.0
    assert in_forked_child(
        lambda: str(onednn_conv.conv(x, w, None, *attrs)[0, 0, 1, 1]).encode()) == b"144.0"
