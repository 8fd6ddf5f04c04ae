"""1x1 convolutions (stride 1, no padding, ungrouped): each is a matrix product, with no columns.

An image (C, H, W) is already the matrix (C, P) of its P = H*W pixels, so
    forward:       y_n  = w[O, C] @ x_n[C, P]
    input grad:    gx_n = w^T[C, O] @ g_n[O, P]
    weight grad:   gw   = sum_n g_n[O, P] @ x_n^T[P, C]
read the images where they lie. The other kernels copy a 1x1 layer's image into columns (or a
gradient out of them) for nothing: GoogLeNet has 37 such layers, two thirds of its convs.

Layouts: a channel-major batch (the (C, N, P) buffer the whole-batch GEMMs produce, seen as
(N, C, H, W)) is one (C, N*P) matrix, so each product is one GEMM and its result is
channel-major too. An image-major (C-contiguous) batch takes one GEMM per image (np.matmul
over the batch; BLAS reads each image in place) where images have more than 256 pixels, the
size from which conv.py's per-image kernels win too; smaller ones are left to conv.py, whose
batch-wide GEMM over copied columns beats skinny per-image products. Any other layout is
left to conv.py as well. The GEMMs run on BLAS's threads.
"""
from __future__ import annotations

import numpy as np

# Images of more pixels than this take one GEMM each (see the module's docstring).
MIN_PIXELS_PER_IMAGE = 256


def applies(w_shape, stride, padding, dilation, groups) -> bool:
    return groups == 1 and all(k == 1 for k in w_shape[2:]) and all(s == 1 for s in stride) \
        and not any(lo or hi for lo, hi in padding)


def _layout(a) -> str | None:
    """"channels" for a channel-major (N, C, *spatial) batch, "images" for a C-contiguous
    one with enough pixels per image, None where this module does not run it."""
    if a.ndim < 3 or a.dtype not in (np.float32, np.float64):
        return None
    if a.shape[0] > 1 and np.swapaxes(a, 0, 1).flags.c_contiguous:
        return "channels"
    if a.flags.c_contiguous and int(np.prod(a.shape[2:])) > MIN_PIXELS_PER_IMAGE:
        return "images"
    return None


def _as_channels(a):
    """A channel-major batch (N, C, *spatial) as its (C, N*P) matrix (a view)."""
    return np.swapaxes(a, 0, 1).reshape(a.shape[1], -1)


def _from_channels(m, n, spatial):
    """(O, N*P) as the channel-major batch (N, O, *spatial) it holds (a view)."""
    return np.swapaxes(m.reshape((-1, n) + tuple(spatial)), 0, 1)


def _product(w2, a):
    """w2 @ each image of a: (N, C, *spatial) -> (N, O, *spatial) in a's layout; None where
    a's layout is not one this module runs."""
    layout = _layout(a)
    if layout is None or w2.dtype != a.dtype:
        return None
    n, spatial = a.shape[0], a.shape[2:]
    if layout == "channels":
        return _from_channels(w2 @ _as_channels(a), n, spatial)
    return np.matmul(w2, a.reshape(n, a.shape[1], -1)).reshape((n, -1) + tuple(spatial))


def conv(x, w, bias):
    y = _product(w.reshape(w.shape[0], -1), x)
    if y is not None and bias is not None:
        y += bias.astype(y.dtype, copy=False).reshape((-1,) + (1,) * (x.ndim - 2))
    return y


def conv_transpose(g, w):
    return _product(w.reshape(w.shape[0], -1).T, g)


def conv_weight_grad(x, g):
    lx, lg = _layout(x), _layout(g)
    if lx is None or lx != lg or x.dtype != g.dtype:
        return None
    o, c = g.shape[1], x.shape[1]
    if lx == "channels":
        gw = _as_channels(g) @ _as_channels(x).T
    else:  # images summed in order: deterministic
        xs, gs = x.reshape(x.shape[0], c, -1), g.reshape(g.shape[0], o, -1)
        gw = gs[0] @ xs[0].T
        for gi, xi in zip(gs[1:], xs[1:]):
            gw += gi @ xi.T
    return gw.reshape((o, c) + (1,) * (x.ndim - 2))
