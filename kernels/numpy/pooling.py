"""Max-pooling CPU kernels.

Both passes loop over the KH*KW window offsets, each a strided slice of the whole batch:
a few large vectorized passes instead of an argmax over a tiny trailing axis (which NumPy
runs several times slower).
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _geometry(h, w, kernel_size, stride, padding, dilation):
    """For each tap of the window, in row-major order: its strided slice of the padded image."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    for i in range(kh):
        for j in range(kw):
            yield (slice(i * dh, i * dh + (oh - 1) * sh + 1, sh),
                   slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))


def max_pool2d(x, kernel_size, stride, padding, dilation):
    n, c, h, w = x.shape
    ph, pw = padding
    xp = x
    if ph or pw:  # -inf never wins a window that holds a real pixel
        xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
    taps = kernel_size[0] * kernel_size[1]
    small = np.int8 if taps < 128 else np.int32
    best = winner = None
    for t, (rows, cols) in enumerate(_geometry(h, w, kernel_size, stride, padding, dilation)):
        tap = xp[:, :, rows, cols]
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
    n, c, h, w = input_shape
    ph, pw = padding
    if g.strides[0] < g.strides[1]:  # channel-major, as a convolution's gradient comes
        out = np.zeros((c, n, h + 2 * ph, w + 2 * pw), dtype=g.dtype).transpose(1, 0, 2, 3)
    else:
        out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=g.dtype)
    for t, (rows, cols) in enumerate(_geometry(h, w, kernel_size, stride, padding, dilation)):
        out[:, :, rows, cols] += g * (winners == t)
    return out[:, :, ph:ph + h, pw:pw + w]


register_kernels("cpu", {"max_pool2d": max_pool2d, "max_pool2d_grad": max_pool2d_grad})
