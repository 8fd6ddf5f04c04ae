"""Max-pooling CPU kernels, for any number of spatial axes (registered for 2-d and 3-d).

Both passes loop over the window's taps, each a strided slice of the whole batch: a few
large vectorized passes instead of an argmax over a tiny trailing axis (which NumPy runs
several times slower). Taps are numbered in row-major order over the window.

The forward keeps four passes per tap, two of them over one-byte arrays: a comparison, the
running maximum, and the winner as max(winner, won * t) (tap numbers only grow, so a win
is the larger number). NaN is left out of that loop and handled only when a window holds
one (see `_nan_winners`). The backward writes each tap's share straight into its pixels
when windows do not overlap (the usual stride == kernel), instead of adding into zeros.
Both split the batch over the cores (parallel.py).

Where a C compiler is at hand, 2-d pooling of float32/float64 images runs
kernels/native/pooling.c instead, reading the planes where they lie (a convolution's
channel-major output or gradient is not copied first). The forward keeps each output row's
maxima and winners in cache while the taps pass over it ((32, 16, 32, 32), 2x2: 566 -> 190
us); windows with equal strides over short rows read several rows as one flat run per tap
(GoogLeNet's 3x3 windows, padding 1, batch 4, at stride 1 on 512x14x14: 2.8 -> 0.9 ms, on
832x7x7: 2.2 -> 0.7 ms; at stride 2 on 480x28x28: 4.0 -> 1.7 ms); a padded window reads a
copy of one plane with a -inf border (taps are numbered over the window, so the winners are
the NumPy kernel's). The gradient of 2x2 windows tiling the image writes whole rows (425 ->
170 us), the same bits; any other window adds each window's gradient into its winner's
pixel, one pass (at stride 1 on 480x28x28 10.0 -> 3.5 ms, at stride 2 on 64x112x112 12.4 ->
2.0 ms).
"""
from __future__ import annotations

import itertools

import numpy as np

from rill.kernels.native import build as native
from rill.ops.primitive import register_kernels

from rill.kernels.numpy import parallel
from rill.kernels.numpy.elementwise import KERNELS as _ELEMENTWISE

# The compiled modules (kernels/native) these kernels may load: built ahead of a captured
# step's first call (build.prefetch).
COMPILED = ('pooling',)

select = _ELEMENTWISE["where"]  # where(c, x, 0) exactly, inf and NaN included


def _geometry(spatial, kernel_size, stride, padding, dilation):
    """For each tap of the window, in row-major order: its strided slice of the padded image."""
    out = [(s + 2 * p - d * (k - 1) - 1) // st + 1 for s, k, st, p, d in
           zip(spatial, kernel_size, stride, padding, dilation)]
    for tap in itertools.product(*(range(k) for k in kernel_size)):
        yield tuple(slice(t * d, t * d + (o - 1) * st + 1, st) for t, d, o, st in
                    zip(tap, dilation, out, stride))


def _winner_type(kernel_size):
    return np.int8 if int(np.prod(kernel_size)) < 128 else np.int32


_LEAD = (slice(None), slice(None))


def _planes(a):
    """(a C-contiguous array holding a's planes, whether they are in order (c, n)): a
    channel-major image, as convolutions hand over, is read where it lies."""
    if not a.flags.c_contiguous:
        swapped = a.swapaxes(0, 1)
        if swapped.flags.c_contiguous:
            return swapped, True
    return np.ascontiguousarray(a), False


def _compiled(x, *others):
    """(the compiled module for 2-d pooling, x's planes (_planes), the others C-contiguous)
    where it takes them; else None."""
    if x.ndim != 4 or x.dtype not in (np.float32, np.float64) or \
            any(type(a) is not np.ndarray for a in (x, *others)):
        return None
    planes, channel_major = _planes(x)
    arrays = [planes] + [np.ascontiguousarray(a) for a in others]
    module = native.for_arrays("pooling", *arrays)
    return None if module is None else (module, arrays, channel_major)


def _pool_compiled(call, arrays, input_shape, out_shape, kernel_size, stride, padding,
                   dilation, winner_type, dtype, channel_major):
    sizes = (*input_shape, *out_shape[2:], *kernel_size, *stride, *dilation, *padding)
    flags = (np.dtype(winner_type).itemsize, dtype == np.float64, channel_major)
    elements = int(np.prod(input_shape))
    threads = parallel.team_threads(elements)
    if threads > 1:  # planes shared out on OpenMP's team
        call(*arrays, *sizes, 0, input_shape[0], *flags, threads)
        return

    def run(lo, hi):
        call(*arrays, *sizes, lo, hi, *flags)
    parallel.split(run, input_shape[0], elements)


def _pad(x, padding):
    """x padded with -inf, which never wins a window that holds a real pixel."""
    if not any(padding):
        return x
    return np.pad(x, ((0, 0), (0, 0)) + tuple((p, p) for p in padding),
                  constant_values=-np.inf)


def max_pool2d(x, kernel_size, stride, padding, dilation):
    small = _winner_type(kernel_size)
    compiled = _compiled(x)
    if compiled is not None:
        compiled, (planes,), channel_major = compiled
        out = [(s + 2 * p - d * (k - 1) - 1) // st + 1 for s, k, st, p, d in
               zip(x.shape[2:], kernel_size, stride, padding, dilation)]
        best = np.empty(x.shape[:2] + tuple(out), x.dtype)
        winner = np.empty(best.shape, small)
        _pool_compiled(compiled.forward, (planes, best, winner), x.shape, best.shape,
                       kernel_size, stride, padding, dilation, small, x.dtype, channel_major)
        return best, winner
    xp = _pad(x, padding)
    geometry = list(_geometry(x.shape[2:], kernel_size, stride, padding, dilation))
    # Keep the input's memory order (convolutions hand over channel-major images): a
    # reordering copy would cost more than the pooling. empty_like keeps that order too.
    best = np.empty_like(xp[_LEAD + geometry[0]])
    winner = np.empty_like(best, dtype=small)

    def pool(lo, hi):  # images lo:hi
        taps = [xp[(slice(lo, hi), slice(None)) + where] for where in geometry]
        b, w = best[lo:hi], winner[lo:hi]
        np.copyto(b, taps[0])
        w.fill(0)
        wins = np.empty_like(b, dtype=np.bool_)
        won = np.empty_like(b, dtype=small)
        for t, tap in enumerate(taps[1:], 1):
            # Strictly greater keeps the first maximum. Branch-free on one-byte arrays:
            # masked writes (copyto/where) run several times slower on masks this
            # unpredictable.
            np.greater(tap, b, out=wins)
            np.multiply(wins, small(t), out=won)
            np.maximum(w, won, out=w)
            np.maximum(b, tap, out=b)
        if np.isnan(b).any():  # np.maximum has carried a NaN into its window's maximum
            _nan_winners(taps, b, w)
    parallel.split(pool, x.shape[0], x.size)
    return best, winner


def _nan_winners(taps, best, winner):
    """Winners where a window holds NaN: as PyTorch, a NaN beats any number and a later NaN
    beats an earlier one (the comparisons above never pick a NaN)."""
    holds = np.isnan(best)
    for t, tap in enumerate(taps):
        winner[holds & np.isnan(tap)] = t


def _disjoint(kernel_size, stride, dilation):
    """Whether no pixel belongs to two windows (each window's extent fits in its stride)."""
    return all(st >= d * (k - 1) + 1 for k, st, d in zip(kernel_size, stride, dilation))


def _tiled(spatial, kernel_size, stride, padding, dilation):
    """Whether the windows cover every pixel exactly once (then no zero-fill is needed)."""
    return not any(padding) and all(
        d == 1 and st == k and s % k == 0 for s, k, st, d in
        zip(spatial, kernel_size, stride, dilation))


def max_pool2d_grad(g, winners, input_shape, kernel_size, stride, padding, dilation):
    compiled = _compiled(g, winners) if winners.dtype == _winner_type(kernel_size) else None
    if compiled is not None:
        compiled, (planes, winners), channel_major = compiled
        dx = np.empty(tuple(input_shape), g.dtype)
        _pool_compiled(compiled.backward, (planes, winners, dx), tuple(input_shape), g.shape,
                       kernel_size, stride, padding, dilation, winners.dtype, g.dtype,
                       channel_major)
        return dx
    n, c, *spatial = input_shape
    padded = tuple(s + 2 * p for s, p in zip(spatial, padding))
    fill = np.empty if _tiled(spatial, kernel_size, stride, padding, dilation) else np.zeros
    if g.strides[0] < g.strides[1]:  # channel-major, as a convolution's gradient comes
        out = fill((c, n) + padded, dtype=g.dtype).swapaxes(0, 1)
    else:
        out = fill((n, c) + padded, dtype=g.dtype)
    disjoint = _disjoint(kernel_size, stride, dilation)
    geometry = list(_geometry(spatial, kernel_size, stride, padding, dilation))
    # g * mask gives the losing pixels of an inf or NaN gradient NaN (inf * 0); PyTorch gives
    # them 0. A non-finite sum (inf or NaN in g, or an overflow) selects by bits instead.
    with np.errstate(invalid="ignore", over="ignore"):
        finite = bool(np.isfinite(np.sum(g)))
    zero = g.dtype.type(0)

    def route(lo, hi):  # images lo:hi
        part, gs, ws = out[lo:hi], g[lo:hi], winners[lo:hi]
        mask = np.empty_like(ws, dtype=np.bool_)
        for t, where in enumerate(geometry):
            np.equal(ws, t, out=mask)
            if disjoint:  # each pixel is this tap of one window only: write, do not add
                if finite:
                    np.multiply(gs, mask, out=part[_LEAD + where])
                else:
                    np.copyto(part[_LEAD + where], select(mask, gs, zero))
            else:
                part[_LEAD + where] += gs * mask if finite else select(mask, gs, zero)
    parallel.split(route, n, out.size)
    return out[_LEAD + tuple(slice(p, p + s) for p, s in zip(padding, spatial))]


register_kernels("cpu", {"max_pool2d": max_pool2d, "max_pool2d_grad": max_pool2d_grad,
                         "max_pool3d": max_pool2d, "max_pool3d_grad": max_pool2d_grad})
