"""Max-pooling CPU kernels, for any number of spatial axes (registered for 2-d and 3-d).

Both passes loop over the window's taps, each a strided slice of the whole batch: a few
large vectorized passes instead of an argmax over a tiny trailing axis (which NumPy runs
several times slower). Taps are numbered in row-major order over the window.
"""
from __future__ import annotations

import itertools

import numpy as np

from rill.ops.primitive import register_kernels


def _geometry(spatial, kernel_size, stride, padding, dilation):
    """For each tap of the window, in row-major order: its strided slice of the padded image."""
    out = [(s + 2 * p - d * (k - 1) - 1) // st + 1 for s, k, st, p, d in
           zip(spatial, kernel_size, stride, padding, dilation)]
    for tap in itertools.product(*(range(k) for k in kernel_size)):
        yield tuple(slice(t * d, t * d + (o - 1) * st + 1, st) for t, d, o, st in
                    zip(tap, dilation, out, stride))


def _winner_type(kernel_size):
    return np.int8 if int(np.prod(kernel_size)) < 128 else np.int32


def max_pool2d(x, kernel_size, stride, padding, dilation):
    xp = x
    if any(padding):  # -inf never wins a window that holds a real pixel
        xp = np.pad(x, ((0, 0), (0, 0)) + tuple((p, p) for p in padding),
                    constant_values=-np.inf)
    small = _winner_type(kernel_size)
    best = winner = None
    lead = (slice(None), slice(None))
    for t, where in enumerate(_geometry(x.shape[2:], kernel_size, stride, padding, dilation)):
        tap = xp[lead + where]
        if best is None:
            # Keep the input's memory order (convolutions hand over channel-major images):
            # a reordering copy would cost more than the pooling.
            best = tap.copy(order="K")
            winner = np.zeros(best.shape, dtype=small)
            continue
        # Strictly greater keeps the first maximum; a NaN (tap != tap) wins over any number
        # and, once held, is never beaten (np.maximum propagates it), as in PyTorch.
        wins = tap > best
        wins |= tap != tap
        # Branch-free, on one-byte tap numbers: masked writes (copyto/where) run several
        # times slower on masks this unpredictable, and int64 arithmetic moves 8x the bytes.
        won = wins.view(np.int8).astype(small, copy=False)
        winner += won * small(t) - won * winner
        np.maximum(best, tap, out=best)
    return best, winner


def max_pool2d_grad(g, winners, input_shape, kernel_size, stride, padding, dilation):
    n, c, *spatial = input_shape
    padded = tuple(s + 2 * p for s, p in zip(spatial, padding))
    if g.strides[0] < g.strides[1]:  # channel-major, as a convolution's gradient comes
        out = np.zeros((c, n) + padded, dtype=g.dtype).swapaxes(0, 1)
    else:
        out = np.zeros((n, c) + padded, dtype=g.dtype)
    lead = (slice(None), slice(None))
    for t, where in enumerate(_geometry(spatial, kernel_size, stride, padding, dilation)):
        out[lead + where] += g * (winners == t)
    return out[lead + tuple(slice(p, p + s) for p, s in zip(padding, spatial))]


register_kernels("cpu", {"max_pool2d": max_pool2d, "max_pool2d_grad": max_pool2d_grad,
                         "max_pool3d": max_pool2d, "max_pool3d_grad": max_pool2d_grad})
