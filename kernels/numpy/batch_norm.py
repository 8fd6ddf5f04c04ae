"""batch_norm_train CPU kernels: per-channel statistics of (N, C, ...) by blocks of images.

Each pass walks the batch a few images at a time (about BLOCK_BYTES of input), so the
temporaries a block makes are still in cache when they are reduced; large batches are split
over the cores (kernels/numpy/parallel.py). A channel's sum over an image is a
matrix-vector product and its sum of products a batched dot (BLAS: NumPy's reductions over
axes (0, 2) run short strided loops, 2-3x slower here); the partial sums per image are added
in the end.

Where a C compiler is at hand, C-contiguous float32/float64 input runs
kernels/native/batch_norm.c instead: two passes over each (image, channel) run forward, two
backward, channels split over the cores from NATIVE_SPLIT elements.
"""
from __future__ import annotations

import numpy as np

from rill.kernels.native import build as native
from rill.ops.primitive import register_kernels

from .parallel import split, team_threads

# The compiled modules (kernels/native) these kernels may load: built ahead of a captured
# step's first call (build.prefetch).
COMPILED = ('batch_norm',)

# A block of about 1 MiB of images, and the passes split over the cores only from 8 MiB:
# measured (float32, ms forward / backward), (32, 16, 32, 32): 0.42 / 0.63 in one thread,
# 0.56 / 0.69 split (the hand-offs cost more than the second core saves); (64, 64, 32, 32):
# 6.4 / 10.5 in one thread, 4.4 / 6.7 split. Smaller blocks cost more Python per pass.
BLOCK_BYTES = 1 << 20
SPLIT_BYTES = 1 << 23


def _blocks(lo, hi, image_bytes):
    step = max(1, BLOCK_BYTES // max(image_bytes, 1))
    for start in range(lo, hi, step):
        yield slice(start, min(start + step, hi))


def _each_block(xr, work):
    """Calls work(block slice) over the batch, in blocks, split over the cores."""
    def run(lo, hi):
        for blk in _blocks(lo, hi, xr[0].nbytes):
            work(blk)
    if xr.nbytes < SPLIT_BYTES:
        run(0, xr.shape[0])
    else:
        split(run, xr.shape[0], xr.size)


def _dots(a, b):
    """(n, c) sums over the last axis of a * b, for (n, c, m) blocks."""
    return np.matmul(a[:, :, None, :], b[:, :, :, None])[:, :, 0, 0]


# The compiled kernels split channels over the cores from this many elements. Measured
# (float32, us forward / backward, one thread -> split in two): (32, 16, 32, 32) 90 / 160 ->
# 124 / 163; (32, 32, 16, 16) 61 / 88 -> 114 / 121; (64, 64, 32, 32) 2400 / 3760 -> 900 / 1980.
NATIVE_SPLIT = 1 << 21


def _over_channels(call, x):
    """call(n, c, pixels, c0, c1, threads=...) over channels [0, c): on OpenMP's team where it
    runs (parallel.team_threads: a hand-off there costs microseconds), else split over
    rill's pool from NATIVE_SPLIT elements."""
    n, c = x.shape[:2]
    pixels = x.size // max(n * c, 1)
    threads = team_threads(x.size) if c > 1 else 1
    if threads > 1:
        call(n, c, pixels, 0, c, threads=threads)
        return

    def run(lo, hi):
        call(n, c, pixels, lo, hi, threads=1)
    if x.size < NATIVE_SPLIT:
        run(0, c)
    else:
        split(run, c, x.size)


def _batch_norm(x, w, b, eps):
    n, c = x.shape[:2]
    compiled = native.for_arrays("batch_norm", x)
    if compiled is not None:
        w, b = (np.ascontiguousarray(v, x.dtype) for v in (w, b))
        y, mean, var = np.empty_like(x), np.empty(c, x.dtype), np.empty(c, x.dtype)
        _over_channels(lambda *sizes, threads: compiled.forward(
            x, w, b, y, mean, var, *sizes, float(eps), x.dtype == np.float64, threads), x)
        return y, mean, var
    xr = x.reshape(n, c, -1)
    count = xr.shape[0] * xr.shape[2]
    ones = np.ones(xr.shape[2], x.dtype)
    # Sums of x - k and of its squares in one sweep, k a value of each channel: as stable as
    # two passes while k is within a few deviations of the mean (it is one of the values),
    # and the data is read twice in all instead of three times.
    k = xr[0, :, :1].copy()
    sums, squares = np.empty((n, c), x.dtype), np.empty((n, c), x.dtype)

    def shifted_sums(blk):
        shifted = xr[blk] - k
        np.matmul(shifted, ones, out=sums[blk])
        squares[blk] = _dots(shifted, shifted)
    _each_block(xr, shifted_sums)
    shift_mean = sums.sum(axis=0) / count
    var = np.maximum(squares.sum(axis=0) / count - shift_mean * shift_mean, 0)
    mean = shift_mean + k[:, 0]
    scale = w / np.sqrt(var + eps)
    offset = (b - mean * scale)[:, None]
    scale = scale[:, None]
    y = np.empty_like(xr)

    def affine(blk):
        np.multiply(xr[blk], scale, out=y[blk])
        y[blk] += offset
    _each_block(xr, affine)
    return y.reshape(x.shape), mean.astype(x.dtype, copy=False), var.astype(x.dtype, copy=False)


def _batch_norm_grad(g, x, w, mean, var, eps):
    n, c = x.shape[:2]
    compiled = native.for_arrays("batch_norm", x, g)
    if compiled is not None and g.dtype == x.dtype:
        wc, mean, var = (np.ascontiguousarray(v, x.dtype) for v in (w, mean, var))
        dx, dw, db = np.empty_like(x), np.empty(c, x.dtype), np.empty(c, x.dtype)
        _over_channels(lambda *sizes, threads: compiled.backward(
            g, x, wc, mean, var, dx, dw, db, *sizes, float(eps), x.dtype == np.float64,
            threads), x)
        return dx, dw.astype(w.dtype, copy=False), db.astype(w.dtype, copy=False)
    xr, gr = x.reshape(n, c, -1), g.reshape(n, c, -1)
    count = xr.shape[0] * xr.shape[2]
    ones = np.ones(xr.shape[2], x.dtype)
    g_sums, gx_sums = np.empty((n, c), x.dtype), np.empty((n, c), x.dtype)
    column_mean = mean[:, None]

    def sums(blk):
        np.matmul(gr[blk], ones, out=g_sums[blk])
        gx_sums[blk] = _dots(gr[blk], xr[blk] - column_mean)
    _each_block(xr, sums)
    rstd = 1 / np.sqrt(var + eps)
    db = g_sums.sum(axis=0)
    dw = gx_sums.sum(axis=0) * rstd
    # dx = w rstd (g - db/count - xhat dw/count), xhat = (x - mean) rstd: per channel,
    # dx = g * a + x * s + t.
    a = w * rstd
    s = -a * rstd * dw / count
    t = (-a * db / count - mean * s)[:, None]
    a, s = a[:, None], s[:, None]
    dx = np.empty_like(gr)

    def grad(blk):
        np.multiply(gr[blk], a, out=dx[blk])
        xs = xr[blk] * s
        xs += t
        dx[blk] += xs
    _each_block(xr, grad)
    return (dx.reshape(x.shape), dw.astype(w.dtype, copy=False),
            db.astype(w.dtype, copy=False))


register_kernels("cpu", {"batch_norm_train": _batch_norm, "batch_norm_grad": _batch_norm_grad})
