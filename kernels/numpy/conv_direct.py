"""Direct 2-d convolution kernels compiled from C (kernels/native/conv.c), for float32 images,
stride 1 and dilation 1: the common 3x3 "same" convolution and its two gradients, with no
im2col columns and no GEMM.

    forward:      y  = conv(x, w) + bias                       (native forward)
    input grad:   dx = conv(g, w flipped and transposed), pads k - 1 - pad (the same loop)
    weight grad:  dw = sum over images and pixels of g * shifted x   (native weight_grad)

Each function returns None where it does not apply (another dtype, stride or dilation, a
pad outside [0, k - 1], three spatial axes, no C compiler); the caller then runs
conv_per_image's kernels. The images are split over the cores (parallel.split), each thread's
share one C call with the GIL released; the weight gradient's per-thread partial sums are
added in a fixed order, so a result does not depend on the scheduling.
"""
from __future__ import annotations

import numpy as np

from rill.kernels.native import build as native
from rill.kernels.numpy import parallel

_BLOCK = 8  # the forward's block of output channels (conv.c: OB)


def _applies(x, w, stride, dilation, padding) -> bool:
    return (x.ndim == 4 and x.dtype == np.float32 and w.dtype == np.float32
            and all(s == 1 for s in stride) and all(d == 1 for d in dilation)
            and min(min(p) for p in padding) >= 0)


# Where the loops beat the GEMM kernels (measured on the Table 1 models' and ResNet-18's
# layers, 2-core AMD EPYC, docs/benchmarks-history.md; the loops were tuned on the bench's 32x32 layers
# of at most 64 channels, on an Intel Xeon): rows of at least 16 pixels (one
# vector: a 13-pixel row of AlexNet's conv3 leaves lanes idle and the GEMM 1.5x ahead) and
# at most 128 channels in and out (past that the packed weights outgrow the caches: VGG's
# 128->256 at 56x56 ran 1.5x slower). The weight gradient's loop re-reads g for every input
# channel and tap block, so it pays only for the first layers' few channels (<= 32): at
# 256 channels it ran 5-13x slower than a GEMM (AlexNet's conv3-5, VGG's conv5-8).
# conv.py asks these before calling the kernels below (which run any shape they apply to).
MIN_WIDTH, MAX_CHANNELS, MAX_WEIGHT_GRAD_CHANNELS = 16, 128, 32


def pays(in_channels: int, out_channels: int, out_width: int) -> bool:
    """Whether the forward loop (also the input gradient's, channels swapped) beats GEMMs."""
    return out_width >= MIN_WIDTH and max(in_channels, out_channels) <= MAX_CHANNELS


def weight_grad_pays(in_channels: int, out_width: int) -> bool:
    return out_width >= MIN_WIDTH and in_channels <= MAX_WEIGHT_GRAD_CHANNELS


def _module(*arrays):
    return native.for_arrays("conv", *arrays)


def _packed(w_cko):
    """Weights laid out (in-channels, KH, KW, out-channels rounded up to _BLOCK), zeros past."""
    c, kh, kw, o = w_cko.shape
    packed = np.zeros((c, kh, kw, -(-o // _BLOCK) * _BLOCK), np.float32)
    packed[..., :o] = w_cko
    return packed


def _forward(module, x, packed, bias, out_channels, out_size, top, left):
    n, c, h, w = x.shape
    y = np.empty((n, out_channels) + tuple(out_size), np.float32)
    sizes = (n, c, h, w, out_channels, packed.shape[1], packed.shape[2], *out_size, top, left)

    def run(lo, hi):
        module.forward(x, packed, bias, y, *sizes, lo, hi)
    parallel.split(run, n, x.size + y.size)
    return y


def conv(x, w, bias, stride, padding, dilation):
    """y = conv2d(x, w) + bias, or None where the direct kernel does not apply."""
    if not _applies(x, w, stride, dilation, padding):
        return None
    x = np.ascontiguousarray(x)
    module = _module(x, w)
    if module is None:
        return None
    o, _, kh, kw = w.shape
    (top, bottom), (left, right) = padding
    out = (x.shape[2] + top + bottom - kh + 1, x.shape[3] + left + right - kw + 1)
    if min(out) < 1:
        return None
    packed = _packed(w.transpose(1, 2, 3, 0))
    b = np.zeros(packed.shape[-1], np.float32)
    if bias is not None:
        b[:o] = bias
    return _forward(module, x, packed, b, o, out, top, left)


def conv_transpose(g, w, input_size, stride, padding, dilation):
    """The input gradient (N, C, *input_size) of conv2d for output gradient g, or None."""
    if not _applies(g, w, stride, dilation, padding):
        return None
    o, c, kh, kw = w.shape
    (top, bottom), (left, right) = padding
    h, wd = input_size
    if max(top, bottom) > kh - 1 or max(left, right) > kw - 1 or \
            g.shape[2:] != (h + top + bottom - kh + 1, wd + left + right - kw + 1):
        return None
    g = np.ascontiguousarray(g)
    module = _module(g, w)
    if module is None:
        return None
    # dx[c, p, q] = sum_{o, i, j} w[o, c, i, j] g[o, p - i + top, q - j + left]: the forward
    # loop over g, with in-channels o, out-channels c and the taps reversed.
    packed = _packed(w[:, :, ::-1, ::-1].transpose(0, 2, 3, 1))
    zeros = np.zeros(packed.shape[-1], np.float32)
    return _forward(module, g, packed, zeros, c, (h, wd), kh - 1 - top, kw - 1 - left)


def conv_weight_grad(x, g, kernel_size, stride, padding, dilation):
    """The weight gradient (O, C, KH, KW) of conv2d, or None."""
    if not _applies(x, g, stride, dilation, padding) or len(kernel_size) != 2:
        return None
    x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)
    module = _module(x, g)
    if module is None:
        return None
    n, c, h, wd = x.shape
    o = g.shape[1]
    kh, kw = kernel_size
    (top, bottom), (left, right) = padding
    if g.shape[2:] != (h + top + bottom - kh + 1, wd + left + right - kw + 1):
        return None
    sizes = (n, c, h, wd, o, kh, kw, *g.shape[2:], top, left)
    partials = {}  # by first image: added in that order

    def run(lo, hi):
        partials[lo] = np.zeros((o, c, kh, kw), np.float32)
        module.weight_grad(x, g, partials[lo], *sizes, lo, hi)
    parallel.split(run, n, x.size + g.size)
    gw = None
    for lo in sorted(partials):
        gw = partials[lo] if gw is None else gw + partials[lo]
    return gw
