"""Pooling over (N, C, *spatial) with one, two or three spatial axes, as PyTorch's.

max pooling is one primitive per rank (max_pool2d, max_pool3d; 1-d is 2-d on a unit-height
image) that returns the maxima and which tap of each window won (one byte each; flat
indices, PyTorch's return_indices, are computed from them only when asked); its gradient
routes g to the winners (max_pool*_grad), whose own gradient is a gather, so every
derivative order works. Average pooling is a depthwise convolution with a constant kernel,
and adaptive average pooling a small matrix product per axis: composites whose gradients
come for free.

ceil_mode lets a last, partial window start inside the input (or the left padding): that
window reads past the padded input, which max pooling fills with -inf and average pooling
with zeros that are never counted.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import dtypes as dt
from ..eager.bind import bind
from ..errors import ArgumentError, ShapeError, reports_as
from . import attrs as A
from . import batching
from . import promotion
from .arguments import as_bool, as_int, as_tensor, describe
from .conv import _FAMILIES, _ntuple, conv2d
from .primitive import primitive
from .rules import require


def _check_window(x, kernel_size, stride, padding, dilation=None):
    """What every pooling needs of its input and window (as PyTorch: padding at most half
    the window, so that no window is padding alone)."""
    rank = len(kernel_size)
    dilation = dilation or (1,) * rank
    require(x, "f", "floating-point tensors")
    if x.ndim != rank + 2:
        names = ", ".join(("D", "H", "W")[3 - rank:])
        raise ShapeError(f"expects x (N, C, {names}), got {x.shape}")
    if min(kernel_size) < 1 or min(stride) < 1 or min(dilation) < 1:
        raise ArgumentError(f"kernel_size {kernel_size}, stride {stride} and dilation "
                            f"{dilation} must be positive")
    if any(p < 0 or 2 * p > k for p, k in zip(padding, kernel_size)):
        raise ArgumentError(f"padding {padding} must be between 0 and half the kernel size "
                            f"{kernel_size}")


def pool_output_size(size, kernel, stride, pad, dilation, ceil_mode) -> int:
    """PyTorch's output length: floor (or ceil) of the window count, where with ceil_mode
    the last window must still start inside the input or its left padding."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _out_sizes(shape, kernel_size, stride, padding, dilation, ceil_mode) -> tuple:
    out = tuple(pool_output_size(s, k, st, p, d, ceil_mode) for s, k, st, p, d in
                zip(shape, kernel_size, stride, padding, dilation))
    if min(out) < 1:
        raise ShapeError(f"the window {tuple(kernel_size)} does not fit the input "
                         f"{tuple(shape)}")
    return out


def _ceil_extra(shape, out, kernel_size, stride, padding, dilation) -> tuple:
    """How far the last windows read past the padded input (ceil_mode), per axis."""
    return tuple(max((o - 1) * st + d * (k - 1) + 1 - (s + 2 * p), 0) for s, o, k, st, p, d in
                 zip(shape, out, kernel_size, stride, padding, dilation))


# ---- max pooling: primitives ----------------------------------------------------------------

def _max_pool_infer(x, *, kernel_size, stride, padding, dilation):
    _check_window(x, kernel_size, stride, padding, dilation)
    out = _out_sizes(x.shape[2:], kernel_size, stride, padding, dilation, False)
    shape = x.shape[:2] + out
    return [(shape, x.dtype), (shape, winner_dtype(kernel_size))]


def winner_dtype(kernel_size):
    """Which tap of its window won, per output: one byte for any window up to 127 taps."""
    return dt.int8 if math.prod(kernel_size) < 128 else dt.int32


def flat_indices(winners, input_shape, kernel_size, stride, padding, dilation):
    """The flat index in prod(spatial) of each winning tap (PyTorch's return_indices)."""
    from .creation import tensor
    from .indexing import take
    spatial = tuple(input_shape[2:])
    place = [math.prod(spatial[i + 1:]) for i in range(len(spatial))]  # row-major strides
    offsets = np.zeros(kernel_size, dtype=np.int64)
    base = np.zeros(winners.shape[2:], dtype=np.int64)
    for axis, (k, st, p, d, step) in enumerate(zip(kernel_size, stride, padding, dilation,
                                                   place)):
        along = [1] * len(spatial)
        along[axis] = -1
        offsets = offsets + ((np.arange(k) * d - p) * step).reshape(along)
        base = base + (np.arange(winners.shape[2 + axis]) * st * step).reshape(along)
    return take(tensor(offsets.reshape(-1), device=winners.device), winners) + \
        tensor(base, device=winners.device)


def _max_pool_vjp(g, outs, x, **attrs):
    grad = _MAX_POOL[len(attrs["kernel_size"])][1]
    return (bind(grad, g[0], outs[1], input_shape=x.shape, **attrs),)


def _max_pool_grad_infer(g, winners, *, input_shape, kernel_size, stride, padding, dilation):
    if len(input_shape) != len(kernel_size) + 2 or tuple(g.shape) != tuple(winners.shape) or \
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


def _max_pool_family(rank: int):
    one = A.PAIR if rank == 2 else A.TupleOf(A.INT, length=rank)
    window = dict(kernel_size=one, stride=one, padding=one, dilation=one)
    return (primitive(f"max_pool{rank}d", _max_pool_infer, _max_pool_vjp,
                      normalize=promotion.floating, multiple_results=True, save_output=True,
                      attrs=window, batch=batching.fold_into_n),
            primitive(f"max_pool{rank}d_grad", _max_pool_grad_infer, _max_pool_grad_vjp,
                      attrs=dict(window, input_shape=A.SHAPE), batch=batching.pool_grad_rule,
                      cache_rule="compiled"))


_MAX_POOL = {rank: _max_pool_family(rank) for rank in (2, 3)}
max_pool2d_p, max_pool2d_grad_p = _MAX_POOL[2]
max_pool3d_p, max_pool3d_grad_p = _MAX_POOL[3]


# ---- public functions -----------------------------------------------------------------------

def _unbatched(rank: int):
    """Accept (C, *spatial) as well as (N, C, *spatial), as PyTorch's pooling does."""
    def wrap(fn):
        @functools.wraps(fn)  # keeps fn's signature visible (help(), inspect)
        def run(input, *args, **kwargs):
            from .shape import expand_dims, squeeze
            x = as_tensor(input, "input", fn.__name__)
            if x.ndim == rank + 1:
                out = fn(expand_dims(x, 0), *args, **kwargs)
                if isinstance(out, tuple):
                    return tuple(squeeze(o, 0) for o in out)
                return squeeze(out, 0)
            return fn(x, *args, **kwargs)
        return run
    return wrap


def _window(rank, kernel_size, stride, padding, op) -> tuple:
    """The public arguments as tuples of `rank` ints; the stride defaults to the window (as
    PyTorch, an empty stride means the default too)."""
    kernel_size = _ntuple(kernel_size, rank, "kernel_size", op)
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        stride = kernel_size
    else:
        stride = _ntuple(stride, rank, "stride", op)
    return kernel_size, stride, _ntuple(padding, rank, "padding", op)


def _max_pool(rank, op, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    from .shape import pad
    kernel_size, stride, padding = _window(rank, kernel_size, stride, padding, op)
    attrs = dict(kernel_size=kernel_size, stride=stride, padding=padding,
                 dilation=_ntuple(dilation, rank, "dilation", op))
    ceil_mode = as_bool(ceil_mode, "ceil_mode", op)
    return_indices = as_bool(return_indices, "return_indices", op)
    source = x
    if ceil_mode:
        _check_window(x, **attrs)
        out = _out_sizes(x.shape[2:], ceil_mode=True, **attrs)
        extra = _ceil_extra(x.shape[2:], out, **attrs)
        if any(extra):  # the partial last windows read -inf past the input
            x = pad(x, ((0, 0), (0, 0)) + tuple((0, e) for e in extra), value=-math.inf)
    best, winners = bind(_MAX_POOL[rank][0], x, **attrs)
    if not return_indices:
        return best
    indices = flat_indices(winners, x.shape, **attrs)
    if x is not source:  # indices into the extended input, renumbered for the real one
        indices = _renumber(indices, x.shape[2:], source.shape[2:])
    return best, indices


def _renumber(indices, extended, real):
    """Flat indices into an input extended at the end of each axis, as indices into the
    real input (the winners never lie in the extension)."""
    result, rest = 0, indices
    coords = []
    for size in reversed(extended):
        coords.append(rest % size)
        rest = rest // size
    for coord, size in zip(reversed(coords), real):
        result = result * size + coord
    return result


@reports_as("max_pool1d")
@_unbatched(1)
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """The maximum of each window of (N, C, L); with return_indices, also its index in L.

    >>> rill.nn.functional.max_pool1d(rill.tensor([[[1.0, 3.0, 2.0, 5.0, 4.0]]]), 2,
    ...                                ceil_mode=True)
    tensor([[[3., 5., 4.]]])
    """
    from .shape import expand_dims, squeeze
    op = "max_pool1d"
    if input.ndim != 3:
        raise ShapeError(f"expects x (N, C, L) or (C, L), got {input.shape}", op=op)

    def one(v, name, default=None):  # the 1-d setting as the 2-d one of a unit-height image
        if v is None or (isinstance(v, (tuple, list)) and len(v) == 0):
            return default
        return (1 if name != "padding" else 0,) + _ntuple(v, 1, name, op)
    out = _max_pool(2, op, expand_dims(input, 2), one(kernel_size, "kernel_size"),
                    one(stride, "stride"), one(padding, "padding"), one(dilation, "dilation"),
                    ceil_mode, return_indices)
    return tuple(squeeze(o, 2) for o in out) if isinstance(out, tuple) else squeeze(out, 2)


@reports_as("max_pool2d")
@_unbatched(2)
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """The maximum of each window; with return_indices, also its flat index in H*W.

    >>> x = rill.arange(16.0).reshape(1, 1, 4, 4)
    >>> rill.nn.functional.max_pool2d(x, 2)[0, 0]
    tensor([[ 5.,  7.],
            [13., 15.]])
    """
    return _max_pool(2, "max_pool2d", input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices)


@reports_as("max_pool3d")
@_unbatched(3)
def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """The maximum of each window of (N, C, D, H, W); with return_indices, also its flat
    index in D*H*W.

    >>> rill.nn.functional.max_pool3d(rill.ones(1, 2, 4, 5, 6), 2, ceil_mode=True).shape
    (1, 2, 2, 3, 3)
    """
    return _max_pool(3, "max_pool3d", input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices)


# ---- average pooling -------------------------------------------------------------------------

def _divisors(size, kernel, stride, pad, out, count_include_pad) -> np.ndarray:
    """Each window's divisor along one axis: its extent clipped to the padded input (PyTorch
    counts the padding, never the ceil_mode overhang), or to the input alone."""
    starts = np.arange(out) * stride - pad
    ends = np.minimum(starts + kernel, size + pad)
    if count_include_pad:
        return ends - starts
    return np.minimum(ends, size) - np.maximum(starts, 0)


def _avg_pool(rank, op, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    from .creation import full, tensor
    kernel_size, stride, padding = _window(rank, kernel_size, stride, padding, op)
    ceil_mode = as_bool(ceil_mode, "ceil_mode", op)
    count_include_pad = as_bool(count_include_pad, "count_include_pad", op)
    if divisor_override is not None:
        divisor_override = as_int(divisor_override, "divisor_override", op)
        if divisor_override == 0:
            raise ArgumentError("divisor_override must not be zero", op=op)
    _check_window(x, kernel_size, stride, padding)
    ones = (1,) * rank
    out = _out_sizes(x.shape[2:], kernel_size, stride, padding, ones, ceil_mode)
    extra = _ceil_extra(x.shape[2:], out, kernel_size, stride, padding, ones)
    c = x.shape[1]
    weight = full((c, 1) + kernel_size, 1.0, dtype=x.dtype, device=x.device)
    # The ceil_mode overhang is zero padding after the input, outside every count.
    pads = tuple((p, p + e) for p, e in zip(padding, extra))
    if rank == 2 and not any(extra):
        sums = conv2d(x, weight, stride=stride, padding=padding, groups=c)
    else:
        sums = bind(_FAMILIES[rank].forward, x, weight, stride=stride, padding=pads,
                    dilation=ones, groups=c)
    if divisor_override is not None:
        return sums * (1.0 / divisor_override)
    per_axis = [_divisors(s, k, st, p, o, count_include_pad) for s, k, st, p, o in
                zip(x.shape[2:], kernel_size, stride, padding, out)]
    if all((d == d[0]).all() for d in per_axis):  # one divisor for every window
        return sums * (1.0 / math.prod(int(d[0]) for d in per_axis))
    counts = functools.reduce(np.multiply.outer, per_axis)
    return sums / tensor(counts, dtype=x.dtype, device=x.device)


@reports_as("avg_pool1d")
@_unbatched(1)
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """The mean of each window of (N, C, L).

    >>> rill.nn.functional.avg_pool1d(rill.tensor([[[1.0, 3.0, 2.0, 5.0, 4.0]]]), 2)
    tensor([[[2. , 3.5]]])
    """
    from .shape import expand_dims, squeeze
    op = "avg_pool1d"
    if input.ndim != 3:
        raise ShapeError(f"expects x (N, C, L) or (C, L), got {input.shape}", op=op)
    kernel_size, stride, padding = _window(1, kernel_size, stride, padding, op)
    return squeeze(_avg_pool(2, op, expand_dims(input, 2), (1,) + kernel_size, (1,) + stride,
                             (0,) + padding, ceil_mode, count_include_pad, None), 2)


@reports_as("avg_pool2d")
@_unbatched(2)
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """The mean of each window (padding counts as zeros unless count_include_pad=False).

    >>> x = rill.arange(16.0).reshape(1, 1, 4, 4)
    >>> rill.nn.functional.avg_pool2d(x, 2)[0, 0]
    tensor([[ 2.5,  4.5],
            [10.5, 12.5]])
    """
    return _avg_pool(2, "avg_pool2d", input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


@reports_as("avg_pool3d")
@_unbatched(3)
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """The mean of each window of (N, C, D, H, W).

    >>> rill.nn.functional.avg_pool3d(rill.ones(1, 2, 4, 4, 4), 2).shape
    (1, 2, 2, 2, 2)
    """
    return _avg_pool(3, "avg_pool3d", input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


# ---- adaptive pooling ------------------------------------------------------------------------

def _adaptive_bounds(size: int, out: int) -> list:
    """Window i covers floor(i*size/out) .. ceil((i+1)*size/out) - 1 (PyTorch's windows)."""
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def _adaptive_matrix(size: int, out: int) -> np.ndarray:
    """Row i averages window i."""
    m = np.zeros((out, size))
    for i, (start, stop) in enumerate(_adaptive_bounds(size, out)):
        m[i, start:stop] = 1.0 / (stop - start)
    return m


def _output_size(output_size, x, rank, op) -> tuple:
    """output_size as `rank` ints; None keeps that axis's input size (as PyTorch)."""
    if isinstance(output_size, (tuple, list)):
        if len(output_size) != rank:
            raise ArgumentError(f"output_size must be an int or {rank} ints, got "
                                f"{describe(output_size)}", op=op)
        sizes = tuple(x.shape[x.ndim - rank + i] if o is None else
                      as_int(o, "output_size", op) for i, o in enumerate(output_size))
    else:
        sizes = (as_int(output_size, "output_size", op),) * rank
    if min(sizes) < 1:
        raise ArgumentError(f"output_size must be positive, got {sizes}", op=op)
    return sizes


def _adaptive_input(x, rank, op):
    require(x, "f", "floating-point tensors")
    if x.ndim not in (rank + 1, rank + 2):
        names = ", ".join(("L",) if rank == 1 else ("D", "H", "W")[3 - rank:])
        raise ShapeError(f"expects x (N, C, {names}) or (C, {names}), got {x.shape}", op=op)


def _adaptive_avg(x, output_size, rank, op):
    from .creation import tensor
    from .linalg import matmul
    from .shape import swapaxes
    x = as_tensor(x, "input", op)
    _adaptive_input(x, rank, op)
    sizes = _output_size(output_size, x, rank, op)
    spatial = x.shape[x.ndim - rank:]
    if all(size % out == 0 for size, out in zip(spatial, sizes)):
        # Equal windows that tile the input (global pooling among them): a mean over the
        # window axes of a reshape. One reduction, where the matrix form below is a
        # product per axis (and, backward, as many more) plus transposes.
        from .reduce import mean
        from .shape import reshape
        split = x.shape[:x.ndim - rank] + sum(((out, size // out) for size, out in
                                               zip(spatial, sizes)), ())
        windows = tuple(range(x.ndim - rank + 1, x.ndim + rank, 2))
        return mean(reshape(x, split), axis=windows)
    for i, out in enumerate(sizes):
        axis = x.ndim - rank + i
        try:
            m = _adaptive_matrix(x.shape[axis], out)
        except (ValueError, MemoryError):  # an output_size no array can hold
            raise ArgumentError(f"output_size {sizes} is too large", op=op) from None
        m = tensor(m.T, dtype=x.dtype, device=x.device)
        # Average along `axis`: move it last, one matrix product, move it back.
        x = swapaxes(matmul(swapaxes(x, axis, -1), m), axis, -1)
    return x


@reports_as("adaptive_avg_pool1d")
def adaptive_avg_pool1d(input, output_size):
    """Average pooling of (N, C, L) to a fixed length (windows as PyTorch chooses them).

    >>> rill.nn.functional.adaptive_avg_pool1d(rill.arange(5.0).reshape(1, 1, 5), 2)
    tensor([[[1., 3.]]])
    """
    return _adaptive_avg(input, output_size, 1, "adaptive_avg_pool1d")


@reports_as("adaptive_avg_pool2d")
def adaptive_avg_pool2d(input, output_size):
    """Average pooling to a fixed output size (windows as PyTorch chooses them).

    >>> rill.nn.functional.adaptive_avg_pool2d(rill.ones(2, 3, 5, 7), 1).shape
    (2, 3, 1, 1)
    """
    return _adaptive_avg(input, output_size, 2, "adaptive_avg_pool2d")


@reports_as("adaptive_avg_pool3d")
def adaptive_avg_pool3d(input, output_size):
    """Average pooling of (N, C, D, H, W) to a fixed output size.

    >>> rill.nn.functional.adaptive_avg_pool3d(rill.ones(2, 3, 5, 7, 4), (1, 2, None)).shape
    (2, 3, 1, 2, 4)
    """
    return _adaptive_avg(input, output_size, 3, "adaptive_avg_pool3d")


def _adaptive_max(x, output_size, rank, return_indices, op):
    """The maximum of each adaptive window: separable, so one axis at a time, a max over a
    slice per output position (output sizes are small where this is used)."""
    from .reduce import max as max_
    from .shape import stack
    x = as_tensor(x, "input", op)
    _adaptive_input(x, rank, op)
    sizes = _output_size(output_size, x, rank, op)
    if as_bool(return_indices, "return_indices", op):
        raise ArgumentError("return_indices=True is not supported by adaptive max pooling "
                            "yet; use max_pool with return_indices when the windows are "
                            "equal", op=op)
    for i, out in enumerate(sizes):
        axis = x.ndim - rank + i
        lead = (slice(None),) * axis
        x = stack([max_(x[lead + (slice(start, stop),)], axis=axis) for start, stop in
                   _adaptive_bounds(x.shape[axis], out)], axis=axis)
    return x


@reports_as("adaptive_max_pool1d")
def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Max pooling of (N, C, L) to a fixed length (windows as PyTorch chooses them)."""
    return _adaptive_max(input, output_size, 1, return_indices, "adaptive_max_pool1d")


@reports_as("adaptive_max_pool2d")
def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max pooling of (N, C, H, W) to a fixed output size.

    >>> rill.nn.functional.adaptive_max_pool2d(rill.arange(16.0).reshape(1, 1, 4, 4), 2)
    tensor([[[[ 5.,  7.],
              [13., 15.]]]])
    """
    return _adaptive_max(input, output_size, 2, return_indices, "adaptive_max_pool2d")
