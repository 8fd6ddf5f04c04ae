"""Pooling over NCHW images.

max_pool2d is one primitive that returns the maxima and which tap of each window won (one
byte each; flat indices into H*W, PyTorch's return_indices, are computed from them only when
asked); its gradient routes g to the winners (max_pool2d_grad), whose own gradient is a
gather, so every derivative order works. avg_pool2d is a depthwise
convolution with a constant kernel, and adaptive_avg_pool2d two small matrix products:
composites whose gradients come for free.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import dtypes as dt
from ..eager.bind import bind
from ..errors import ArgumentError, ShapeError, reports_as
from . import attrs as A
from . import promotion
from .arguments import as_bool, as_tensor
from .conv import _pair, conv2d, conv_output_size
from .primitive import primitive
from .rules import require


def _check_window(x, kernel_size, stride, padding, dilation=(1, 1)):
    """What every pooling needs of its input and window (as PyTorch: padding at most half
    the window, so that no window is padding alone)."""
    require(x, "f", "floating-point tensors")
    if x.ndim != 4:
        raise ShapeError(f"expects x (N, C, H, W), got {x.shape}")
    if min(kernel_size) < 1 or min(stride) < 1 or min(dilation) < 1:
        raise ArgumentError(f"kernel_size {kernel_size}, stride {stride} and dilation "
                            f"{dilation} must be positive")
    if any(p < 0 or 2 * p > k for p, k in zip(padding, kernel_size)):
        raise ArgumentError(f"padding {padding} must be between 0 and half the kernel size "
                            f"{kernel_size}")


def _window(kernel_size, stride, padding, op) -> tuple:
    """The public arguments as pairs; the stride defaults to the window."""
    kernel_size = _pair(kernel_size, "kernel_size", op)
    stride = kernel_size if stride is None else _pair(stride, "stride", op)
    return kernel_size, stride, _pair(padding, "padding", op)


def _max_pool_infer(x, *, kernel_size, stride, padding, dilation):
    _check_window(x, kernel_size, stride, padding, dilation)
    out = tuple(conv_output_size(s, k, st, (p, p), d) for s, k, st, p, d in
                zip(x.shape[2:], kernel_size, stride, padding, dilation))
    if min(out) < 1:
        raise ShapeError(f"the window {kernel_size} does not fit the input {x.shape[2:]}")
    shape = x.shape[:2] + out
    return [(shape, x.dtype), (shape, winner_dtype(kernel_size))]


def winner_dtype(kernel_size):
    """Which tap of its window won, per output: one byte for any window up to 127 taps."""
    return dt.int8 if kernel_size[0] * kernel_size[1] < 128 else dt.int32


def flat_indices(winners, input_shape, kernel_size, stride, padding, dilation):
    """The flat index in H*W of each winning tap (PyTorch's return_indices)."""
    from .creation import tensor
    from .indexing import take
    h, w = input_shape[2:]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    offsets = np.array([(i * dh - ph) * w + (j * dw - pw) for i in range(kh)
                        for j in range(kw)], dtype=np.int64)
    oh, ow = winners.shape[2:]
    base = (np.arange(oh)[:, None] * sh) * w + np.arange(ow)[None, :] * sw
    return take(tensor(offsets, device=winners.device), winners) + \
        tensor(base, device=winners.device)


def _max_pool_vjp(g, outs, x, **attrs):
    return (bind(max_pool2d_grad_p, g[0], outs[1], input_shape=x.shape, **attrs),)


def _max_pool_grad_infer(g, winners, *, input_shape, kernel_size, stride, padding, dilation):
    if len(input_shape) != 4 or tuple(g.shape) != tuple(winners.shape) or \
            tuple(g.shape[:2]) != tuple(input_shape[:2]):
        raise ShapeError(f"gradient {g.shape} and winners {winners.shape} do not fit an input "
                         f"of shape {tuple(input_shape)}")
    return tuple(input_shape), g.dtype


def _max_pool_grad_vjp(gg, out, g, winners, input_shape, **attrs):
    """The gradient routes g to the winners, so its own gradient gathers from them."""
    from .indexing import take_along_axis
    from .shape import reshape
    n, c = input_shape[:2]
    indices = flat_indices(winners, input_shape, **attrs)
    picked = take_along_axis(reshape(gg, (n, c, -1)), reshape(indices, (n, c, -1)), axis=2)
    return reshape(picked, g.shape), None


_WINDOW = dict(kernel_size=A.PAIR, stride=A.PAIR, padding=A.PAIR, dilation=A.PAIR)
max_pool2d_p = primitive("max_pool2d", _max_pool_infer, _max_pool_vjp,
                         normalize=promotion.floating, multiple_results=True, save_output=True,
                         attrs=_WINDOW)
max_pool2d_grad_p = primitive("max_pool2d_grad", _max_pool_grad_infer, _max_pool_grad_vjp,
                              attrs=dict(_WINDOW, input_shape=A.SHAPE))


def _unbatched(fn):
    """Accept (C, H, W) as well as (N, C, H, W), as PyTorch's pooling does."""
    @functools.wraps(fn)  # keeps fn's signature visible (help(), inspect)
    def run(x, *args, **kwargs):
        from .shape import expand_dims, squeeze
        x = as_tensor(x, "x", fn.__name__)
        if x.ndim == 3:
            out = fn(expand_dims(x, 0), *args, **kwargs)
            return tuple(squeeze(o, 0) for o in out) if isinstance(out, tuple) else squeeze(out, 0)
        return fn(x, *args, **kwargs)
    return run


@reports_as("max_pool2d")
@_unbatched
def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, return_indices=False):
    """The maximum of each window; with return_indices, also its flat index in H*W.

    >>> x = rill.arange(16.0).reshape(1, 1, 4, 4)
    >>> rill.nn.functional.max_pool2d(x, 2)[0, 0]
    tensor([[ 5.,  7.],
            [13., 15.]])
    """
    kernel_size, stride, padding = _window(kernel_size, stride, padding, "max_pool2d")
    attrs = dict(kernel_size=kernel_size, stride=stride, padding=padding,
                 dilation=_pair(dilation, "dilation", "max_pool2d"))
    out, winners = bind(max_pool2d_p, x, **attrs)
    if as_bool(return_indices, "return_indices", "max_pool2d"):
        return out, flat_indices(winners, x.shape, **attrs)
    return out


def _window_counts(size, kernel, stride, padding, out_size) -> np.ndarray:
    """How many real (unpadded) pixels each window covers, along one axis."""
    starts = np.arange(out_size) * stride - padding
    return np.minimum(starts + kernel, size) - np.maximum(starts, 0)


@reports_as("avg_pool2d")
@_unbatched
def avg_pool2d(x, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
    """The mean of each window (padding counts as zeros unless count_include_pad=False).

    >>> x = rill.arange(16.0).reshape(1, 1, 4, 4)
    >>> rill.nn.functional.avg_pool2d(x, 2)[0, 0]
    tensor([[ 2.5,  4.5],
            [10.5, 12.5]])
    """
    from .creation import full, tensor
    kernel_size, stride, padding = _window(kernel_size, stride, padding, "avg_pool2d")
    count_include_pad = as_bool(count_include_pad, "count_include_pad", "avg_pool2d")
    _check_window(x, kernel_size, stride, padding)
    c = x.shape[1]
    ones = full((c, 1) + kernel_size, 1.0, dtype=x.dtype, device=x.device)
    sums = conv2d(x, ones, stride=stride, padding=padding, groups=c)
    if count_include_pad or padding == (0, 0):
        return sums * (1.0 / (kernel_size[0] * kernel_size[1]))
    counts = np.outer(*(_window_counts(s, k, st, p, o) for s, k, st, p, o in
                        zip(x.shape[2:], kernel_size, stride, padding, sums.shape[2:])))
    return sums / tensor(counts, dtype=x.dtype, device=x.device)


def _adaptive_matrix(size: int, out: int) -> np.ndarray:
    """Row i averages input cells floor(i*size/out) .. ceil((i+1)*size/out) - 1."""
    m = np.zeros((out, size))
    for i in range(out):
        start, stop = (i * size) // out, -((-(i + 1) * size) // out)
        m[i, start:stop] = 1.0 / (stop - start)
    return m


@reports_as("adaptive_avg_pool2d")
@_unbatched
def adaptive_avg_pool2d(x, output_size):
    """Average pooling to a fixed output size (windows as PyTorch chooses them).

    >>> rill.nn.functional.adaptive_avg_pool2d(rill.ones(2, 3, 5, 7), 1).shape
    (2, 3, 1, 1)
    """
    from .creation import tensor
    from .linalg import matmul
    require(x, "f", "floating-point tensors")
    if x.ndim != 4:
        raise ShapeError(f"expects x (N, C, H, W), got {x.shape}")
    oh, ow = _pair(output_size, "output_size", "adaptive_avg_pool2d")
    if oh < 1 or ow < 1:
        raise ArgumentError(f"output_size must be positive, got {(oh, ow)}")
    try:
        rows, cols = _adaptive_matrix(x.shape[2], oh), _adaptive_matrix(x.shape[3], ow).T
    except (ValueError, MemoryError):  # an output_size no array can hold
        raise ArgumentError(f"output_size {(oh, ow)} is too large") from None
    rows = tensor(rows, dtype=x.dtype, device=x.device)
    cols = tensor(cols, dtype=x.dtype, device=x.device)
    return matmul(matmul(rows, x), cols)
