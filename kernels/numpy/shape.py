"""Shape CPU kernels. Many return views: safe, because rill never writes a buffer."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _split(x, sizes, axis):
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _pad(x, widths, mode, value):
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=value)
    return np.pad(x, widths, mode=mode)


register_kernels("cpu", {
    # the methods, not np.reshape / np.transpose: those reach them through two Python calls
    "reshape": lambda x, shape: x.reshape(shape),
    "transpose": lambda x, axes: x.transpose(axes),
    "broadcast_to": lambda x, shape: np.broadcast_to(x, shape),
    "concat": lambda *xs, axis: np.concatenate(xs, axis=axis),
    "split": _split,
    "pad": _pad,
    "flip": lambda x, axes: np.flip(x, axes),
    "roll": lambda x, shift, axes: np.roll(x, shift, axes),
    "tril": lambda x, k: np.tril(x, k),
    "triu": lambda x, k: np.triu(x, k),
})
