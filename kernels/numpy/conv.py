"""Convolution CPU kernels: im2col into one layout that makes every product a single GEMM.

The patches of x are laid out as cols[G, Cg*KH*KW, N*OH*OW] (channel, kernel offset) x
(image, output pixel). Then
    forward:        y  = w[G, Og, Cg*KK] @ cols                       (one GEMM per group)
    weight grad:    gw = g[G, Og, N*OH*OW] @ cols^T                   (BLAS reads cols^T as is)
    input grad:     cols_g = w^T @ g, then col2im: KH*KW strided adds into the padded image.
Building cols is one strided copy whose inner runs are rows of the image (contiguous for
stride 1), which is what makes NCHW im2col cheap enough. float16 runs in float32: NumPy has
no half-precision GEMM.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np
from numpy.lib.stride_tricks import as_strided

from rill.ops.primitive import register_kernels


def _compute_dtype(a):
    return np.float32 if a.dtype == np.float16 else a.dtype


def _padded(x, padding):
    """x with zero padding; a negative pad crops (conv_transpose2d's output_padding)."""
    (pt, pb), (pl, pr) = padding
    if min(pt, pb, pl, pr) < 0:
        h, w = x.shape[2:]
        x = x[:, :, max(-pt, 0):h - max(-pb, 0), max(-pl, 0):w - max(-pr, 0)]
        pt, pb, pl, pr = max(pt, 0), max(pb, 0), max(pl, 0), max(pr, 0)
    if pt or pb or pl or pr:
        return np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    return x


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
    xp = np.ascontiguousarray(_padded(x, padding), dtype=_compute_dtype(x))
    n, c = xp.shape[:2]
    (kh, kw), (oh, ow) = kernel_size, out_size
    sn, sc, sh, sw = xp.strides
    view = as_strided(xp, shape=(c, kh, kw, n, oh, ow),
                      strides=(sc, sh * dilation[0], sw * dilation[1], sn,
                               sh * stride[0], sw * stride[1]), writeable=False)
    return np.ascontiguousarray(view).reshape(groups, (c // groups) * kh * kw, n * oh * ow)


def _by_group(g, groups):
    """g (N, O, OH, OW) as (G, O/G, N*OH*OW)."""
    n, o, oh, ow = g.shape
    return np.ascontiguousarray(g.transpose(1, 0, 2, 3), dtype=_compute_dtype(g)).reshape(
        groups, o // groups, n * oh * ow)


def conv2d(x, w, *bias, stride, padding, dilation, groups):
    n = x.shape[0]
    o, _, kh, kw = w.shape
    oh, ow = ((s + p[0] + p[1] - d * (k - 1) - 1) // st + 1 for s, p, d, k, st in
              zip(x.shape[2:], padding, dilation, (kh, kw), stride))
    cols = _cols(x, (kh, kw), (oh, ow), stride, padding, dilation, groups)
    wm = w.reshape(groups, o // groups, -1).astype(cols.dtype, copy=False)
    y = np.matmul(wm, cols).reshape(o, n * oh * ow)
    if bias:
        y += bias[0].astype(y.dtype, copy=False)[:, None]
    return y.reshape(o, n, oh, ow).transpose(1, 0, 2, 3).astype(x.dtype, copy=False)


def conv_transpose2d(g, w, input_size, stride, padding, dilation, groups):
    n, o, oh, ow = g.shape
    _, cg, kh, kw = w.shape
    c = cg * groups
    wm = w.reshape(groups, o // groups, cg * kh * kw).astype(_compute_dtype(w), copy=False)
    cols = np.matmul(wm.transpose(0, 2, 1), _by_group(g, groups))
    cols = cols.reshape(c, kh, kw, n, oh, ow)
    (pt, pb), (pl, pr) = padding
    h, wd = input_size
    # Room for every scattered pixel and for the crop below (pads may be negative). The image
    # is accumulated channel-major, the order cols comes in, so each tap's add streams
    # through both; the result is returned as an (N, C, H, W) view of it.
    full = [(o_ - 1) * st + d * (k - 1) + 1 for o_, st, d, k in
            zip((oh, ow), stride, dilation, (kh, kw))]
    out = np.zeros((c, n, max(h + pt + pb, full[0], pt + h), max(wd + pl + pr, full[1], pl + wd)),
                   dtype=cols.dtype)
    for i in range(kh):
        top = i * dilation[0]
        for j in range(kw):
            left = j * dilation[1]
            out[:, :, top:top + (oh - 1) * stride[0] + 1:stride[0],
                left:left + (ow - 1) * stride[1] + 1:stride[1]] += cols[:, i, j]
    return out[:, :, pt:pt + h, pl:pl + wd].transpose(1, 0, 2, 3).astype(g.dtype, copy=False)


def conv2d_weight_grad(x, g, kernel_size, stride, padding, dilation, groups):
    o = g.shape[1]
    cols = _cols(x, kernel_size, g.shape[2:], stride, padding, dilation, groups)
    gw = np.matmul(_by_group(g, groups), cols.transpose(0, 2, 1))
    return gw.reshape((o, x.shape[1] // groups) + tuple(kernel_size)).astype(x.dtype, copy=False)


register_kernels("cpu", {"conv2d": conv2d, "conv_transpose2d": conv_transpose2d,
                         "conv2d_weight_grad": conv2d_weight_grad})
