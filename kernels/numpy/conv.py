"""Convolution CPU kernels, for any number of spatial axes: im2col into one layout that makes
every product a single GEMM.

The patches of x are laid out as cols[G, Cg*KH*KW, N*OH*OW] (channel, kernel offset) x
(image, output pixel), written here for two spatial axes (a third adds KD and OD). Then
    forward:        y  = w[G, Og, Cg*KK] @ cols                       (one GEMM per group)
    weight grad:    gw = g[G, Og, N*OH*OW] @ cols^T                   (BLAS reads cols^T as is)
    input grad:     cols_g = w^T @ g, then col2im: KH*KW strided adds into the padded image.
Building cols is one strided copy whose inner runs are rows of the image (contiguous for
stride 1), which is what makes NCHW im2col cheap enough. float16 runs in float32: NumPy has
no half-precision GEMM. The padding, im2col and col2im passes split the batch over the cores
(parallel.py), as BLAS splits the GEMMs. The weight gradient is computed as g @ cols^T,
in the weight's own layout: computed transposed (cols @ g^T, up to 10% faster in OpenBLAS),
it had to be copied into that layout somewhere, and a 4608x512 transpose costs 15 ms, three
times the GEMM (ResNet-18's SGD step read it in place at 13 ms a layer).
"""
from __future__ import annotations

import itertools
import threading
import weakref

import numpy as np
from numpy.lib.stride_tricks import as_strided

from rill.kernels.numpy import conv_direct, conv_per_image, conv_pointwise, parallel
from rill.kernels.onednn import conv as onednn_conv
from rill.ops.primitive import register_kernels

# The compiled modules (kernels/native) these kernels may load: built ahead of a captured
# step's first call (build.prefetch).
COMPILED = ('conv',)

# float32 convolutions run oneDNN's kernels where the optional library is installed
# (kernels/onednn: at PyTorch's speed, 1.0-1.4x ahead of the ones below on the Table 1
# models' and ResNet-18's layers; docs/benchmarks-history.md), except an input gradient into a few
# channels (a first layer's, 3 -> 64 at 224x224: 28 ms against 10.5 here), which training
# rarely asks for. Without it, or where it declines a case:
# 1x1 convolutions of stride 1 without padding are matrix products (conv_pointwise) where the
# batch's layout lets BLAS read it in place. Ungrouped float32 2-d convolutions of stride 1
# run conv_direct's compiled kernels where a C compiler is present; the other ungrouped ones
# conv_per_image's (faster on these machines
# than the whole-batch kernels below; see there). Benchmarks set these False to compare.
ONEDNN = True
DIRECT = True
PER_IMAGE = True
ONEDNN_MIN_INPUT_GRAD_CHANNELS = 16


def _per_image(out_size) -> bool:
    """Per-image GEMMs (conv_per_image), or one GEMM over the batch's columns (below)?

    Per image, a GEMM's long side is one image's output pixels: for outputs of at most 16x16
    it is too skinny for BLAS, and the batch's columns ran faster in every layer of the
    Table 1 models and ResNet-18 measured (fwd+bwd: AlexNet's conv3 1.14x, Overfeat's 12x12
    1.45x, GoogLeNet's 14x14 1.7x, ResNet's 7x7 several times; docs/benchmarks-history.md); from 27x27 up
    the per-image GEMMs tie or win. The rule depends only on the layer, so a step's three
    kernels agree, and the forward's columns serve the weight gradient."""
    return PER_IMAGE and int(np.prod(out_size)) > 256


def _compute_dtype(a):
    return np.float32 if a.dtype == np.float16 else a.dtype


def _padded(x, padding, dtype=None):
    """x with zero padding on its spatial axes, contiguous, in `dtype` (x's by default); a
    negative pad crops (a transposed convolution's output_padding)."""
    if min(min(p) for p in padding) < 0:
        x = x[(slice(None), slice(None)) + tuple(slice(max(-lo, 0), s - max(-hi, 0)) for
                                                 (lo, hi), s in zip(padding, x.shape[2:]))]
        padding = tuple((max(lo, 0), max(hi, 0)) for lo, hi in padding)
    if not any(lo or hi for lo, hi in padding):
        return np.ascontiguousarray(x, dtype=dtype)
    out = np.zeros(x.shape[:2] + tuple(s + lo + hi for s, (lo, hi) in
                                       zip(x.shape[2:], padding)), dtype=dtype or x.dtype)
    inner = (slice(None),) + tuple(slice(lo, lo + s) for s, (lo, _) in
                                   zip(x.shape[2:], padding))
    parallel.split(lambda lo, hi: np.copyto(out[(slice(lo, hi),) + inner], x[lo:hi]),
                   x.shape[0], x.size)
    return out


class _ColsCache:
    """The im2col columns of the last few images, for the weight gradient.

    Training computes the same columns twice: in the forward pass, and again in backward for
    the weight gradient (conv2d_weight_grad gets the same x). Buffers are never written, so
    the columns of an array stay valid as long as the array lives; they are keyed by the
    array (weakly: an entry goes when its image goes) and the geometry.
    """

    def __init__(self, entries: int = 8, max_bytes: int = 256 << 20):
        self.entries, self.max_bytes = entries, max_bytes
        self._by_id: dict = {}  # id(array) -> (weak reference to it, {geometry: cols})
        # Reentrant: a finalizer (an image dying) can run inside a locked section, on GC.
        self._lock = threading.RLock()

    def get(self, x, key):
        with self._lock:
            entry = self._by_id.get(id(x))
            return entry[1].get(key) if entry is not None and entry[0]() is x else None

    def put(self, x, key, cols):
        if cols.nbytes > self.max_bytes:
            return
        with self._lock:
            entry = self._by_id.get(id(x))
            if entry is None or entry[0]() is not x:
                if len(self._by_id) >= self.entries:
                    self._by_id.pop(next(iter(self._by_id)))  # the oldest image
                entry = self._by_id[id(x)] = (weakref.ref(x), {})
                weakref.finalize(x, self._drop, id(x), entry[0])
            entry[1][key] = cols

    def _drop(self, ident, ref):
        with self._lock:
            if self._by_id.get(ident, (None,))[0] is ref:
                del self._by_id[ident]


_CACHE = _ColsCache()


def _cols(x, kernel_size, out_size, stride, padding, dilation, groups):
    key = (tuple(kernel_size), tuple(out_size), stride, padding, dilation, groups)
    cols = _CACHE.get(x, key)
    if cols is None:
        cols = _build_cols(x, kernel_size, out_size, stride, padding, dilation, groups)
        _CACHE.put(x, key, cols)
    return cols


def _build_cols(x, kernel_size, out_size, stride, padding, dilation, groups):
    xp = _padded(x, padding, _compute_dtype(x))
    n, c = xp.shape[:2]
    sn, sc, *sp = xp.strides
    view = as_strided(xp, shape=(c,) + tuple(kernel_size) + (n,) + tuple(out_size),
                      strides=(sc,) + tuple(s * d for s, d in zip(sp, dilation)) + (sn,) +
                      tuple(s * st for s, st in zip(sp, stride)), writeable=False)
    cols = np.empty(view.shape, dtype=xp.dtype)
    batch = (slice(None),) * (1 + len(kernel_size))
    parallel.split(lambda lo, hi: np.copyto(cols[batch + (slice(lo, hi),)],
                                            view[batch + (slice(lo, hi),)]), n, cols.size)
    return cols.reshape(groups, -1, n * int(np.prod(out_size)))


def _by_group(g, groups):
    """g (N, O, *spatial) as (G, O/G, N*prod(spatial))."""
    o = g.shape[1]
    return np.ascontiguousarray(np.swapaxes(g, 0, 1), dtype=_compute_dtype(g)).reshape(
        groups, o // groups, -1)


def _channels_first(y, n, out_size):
    """(O, N * prod(out)) as an (N, O, *out) view: the GEMMs produce channel-major images."""
    return y.reshape((-1, n) + tuple(out_size)).swapaxes(0, 1)


def conv(x, w, *bias, stride, padding, dilation, groups):
    y = onednn_conv.conv(x, w, bias[0] if bias else None, stride, padding, dilation, groups) \
        if ONEDNN else None
    if y is not None:
        return y
    if conv_pointwise.applies(w.shape, stride, padding, dilation, groups):
        y = conv_pointwise.conv(x, w, bias[0] if bias else None)
        if y is not None:
            return y
    n, o = x.shape[0], w.shape[0]
    kernel = w.shape[2:]
    out = tuple((s + p[0] + p[1] - d * (k - 1) - 1) // st + 1 for s, p, d, k, st in
                zip(x.shape[2:], padding, dilation, kernel, stride))
    y = conv_direct.conv(x, w, bias[0] if bias else None, stride, padding, dilation) \
        if groups == 1 and DIRECT and conv_direct.pays(x.shape[1], o, out[-1]) else None
    if y is not None:
        return y
    if groups == 1 and _per_image(out):
        return conv_per_image.conv(x, w, bias[0] if bias else None, stride, padding, dilation)
    cols = _cols(x, kernel, out, stride, padding, dilation, groups)
    wm = w.reshape(groups, o // groups, -1).astype(cols.dtype, copy=False)
    y = np.matmul(wm, cols).reshape(o, -1)
    if bias:
        y += bias[0].astype(y.dtype, copy=False)[:, None]
    return _channels_first(y, n, out).astype(x.dtype, copy=False)


def conv_transpose(g, w, input_size, stride, padding, dilation, groups):
    gx = onednn_conv.conv_transpose(g, w, input_size, stride, padding, dilation, groups) \
        if ONEDNN and w.shape[1] * groups >= ONEDNN_MIN_INPUT_GRAD_CHANNELS else None
    if gx is not None:
        return gx
    if conv_pointwise.applies(w.shape, stride, padding, dilation, groups):
        gx = conv_pointwise.conv_transpose(g, w)
        if gx is not None:
            return gx
    gx = conv_direct.conv_transpose(g, w, input_size, stride, padding, dilation) \
        if groups == 1 and DIRECT and conv_direct.pays(g.shape[1], w.shape[1],
                                                       input_size[-1]) else None
    if gx is not None:
        return gx
    if groups == 1 and _per_image(g.shape[2:]):
        return conv_per_image.conv_transpose(g, w, input_size, stride, padding, dilation)
    n, o = g.shape[:2]
    out = g.shape[2:]
    cg, kernel = w.shape[1], w.shape[2:]
    c = cg * groups
    wm = w.reshape(groups, o // groups, -1).astype(_compute_dtype(w), copy=False)
    cols = np.matmul(wm.transpose(0, 2, 1), _by_group(g, groups))
    cols = cols.reshape((c,) + tuple(kernel) + (n,) + tuple(out))
    # Room for every scattered pixel and for the crop below (pads may be negative). The image
    # is accumulated channel-major, the order cols comes in, so each tap's add streams
    # through both; the result is returned as an (N, C, *spatial) view of it.
    room = tuple(max(s + lo + hi, (m - 1) * st + d * (k - 1) + 1, lo + s) for
                 s, (lo, hi), m, st, d, k in
                 zip(input_size, padding, out, stride, dilation, kernel))
    full = np.zeros((c, n) + room, dtype=cols.dtype)
    taps = [(tap, tuple(slice(t * d, t * d + (m - 1) * st + 1, st) for t, d, m, st in
                        zip(tap, dilation, out, stride)))
            for tap in itertools.product(*(range(k) for k in kernel))]

    def scatter(lo, hi):  # images lo:hi
        for tap, where in taps:
            full[(slice(None), slice(lo, hi)) + where] += cols[(slice(None),) + tap +
                                                               (slice(lo, hi),)]
    parallel.split(scatter, n, cols.size)
    crop = tuple(slice(lo, lo + s) for (lo, _), s in zip(padding, input_size))
    return full[(slice(None), slice(None)) + crop].swapaxes(0, 1).astype(g.dtype, copy=False)


def conv_weight_grad(x, g, kernel_size, stride, padding, dilation, groups):
    gw = onednn_conv.conv_weight_grad(x, g, kernel_size, stride, padding, dilation, groups) \
        if ONEDNN else None
    if gw is not None:
        return gw
    if conv_pointwise.applies((0, 0) + tuple(kernel_size), stride, padding, dilation, groups):
        gw = conv_pointwise.conv_weight_grad(x, g)
        if gw is not None:
            return gw
    gw = conv_direct.conv_weight_grad(x, g, kernel_size, stride, padding, dilation) \
        if groups == 1 and DIRECT and conv_direct.weight_grad_pays(x.shape[1], g.shape[-1]) \
        else None
    if gw is not None:
        return gw
    if groups == 1 and _per_image(g.shape[2:]):
        return conv_per_image.conv_weight_grad(x, g, kernel_size, stride, padding, dilation)
    o = g.shape[1]
    cols = _cols(x, kernel_size, g.shape[2:], stride, padding, dilation, groups)
    gw = np.matmul(_by_group(g, groups), cols.transpose(0, 2, 1))
    return gw.reshape((o, x.shape[1] // groups) + tuple(kernel_size)).astype(x.dtype, copy=False)


# One kernel per role serves every spatial rank (the 2-d names stay for callers).
conv2d, conv_transpose2d, conv2d_weight_grad = conv, conv_transpose, conv_weight_grad
register_kernels("cpu", {"conv2d": conv, "conv_transpose2d": conv_transpose,
                         "conv2d_weight_grad": conv_weight_grad,
                         "conv3d": conv, "conv_transpose3d": conv_transpose,
                         "conv3d_weight_grad": conv_weight_grad})
