"""Resizing as PyTorch's: F.interpolate, pixel_shuffle and pixel_unshuffle.

Every mode is separable, so interpolate resizes one spatial axis at a time: the nearest
modes gather (`take` with the source index of each output position), the linear and cubic
modes multiply by a small (out, in) interpolation matrix built here in NumPy, and 'area' is
adaptive average pooling. All are composites of rill ops: gradients, capture and the gpu
device come from them.

Source positions follow PyTorch's rules. The scale per axis is in/out, or 1/scale_factor when
a scale_factor is given (and recompute_scale_factor is not True); then
    nearest         src = floor(dst * scale)                    (clamped to in - 1)
    nearest-exact   src = floor((dst + 0.5) * scale)
    linear, cubic   src = (dst + 0.5) * scale - 0.5             (align_corners=False)
                    src = dst * (in - 1) / (out - 1)            (align_corners=True)
The nearest scales are float32, as PyTorch computes them, so ties round the same way.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentError, ShapeError, reports_as
from .arguments import as_bool, as_choice, as_float, as_int, as_tensor, describe

_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")
_RANK_OF = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_CUBIC_A = -0.75  # the cubic convolution coefficient PyTorch uses


def _per_axis(value, rank, what, convert, op):
    if isinstance(value, (tuple, list)):
        if len(value) != rank:
            raise ArgumentError(f"{what} must have {rank} entries (one per spatial axis of the "
                                f"input), got {describe(value)}", op=op)
        return tuple(convert(v, what, op) for v in value)
    return (convert(value, what, op),) * rank


def _sizes(x, rank, size, scale_factor, recompute, op):
    """The output sizes, and the scale (or None) that source positions use, per axis."""
    spatial = x.shape[2:]
    if (size is None) == (scale_factor is None):
        raise ArgumentError("give exactly one of size and scale_factor", op=op)
    if size is not None:
        out = _per_axis(size, rank, "size", as_int, op)
        scales = (None,) * rank
    else:
        factors = _per_axis(scale_factor, rank, "scale_factor", as_float, op)
        if min(factors) <= 0 or not all(math.isfinite(f) for f in factors):
            raise ArgumentError(f"scale_factor must be positive and finite, got {factors}",
                                op=op)
        out = tuple(int(math.floor(s * f)) for s, f in zip(spatial, factors))
        scales = (None,) * rank if recompute else factors
    if min(out) < 1:
        raise ShapeError(f"the output size {out} must be positive (input {tuple(spatial)})",
                         op=op)
    return out, scales


def _ratio(size_in, size_out, factor, align_corners):
    """PyTorch's area_pixel_compute_scale."""
    if align_corners:
        return (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    return 1.0 / factor if factor is not None else size_in / size_out


def _nearest_source(size_in, size_out, factor, exact: bool) -> np.ndarray:
    scale = np.float32(1.0 / factor) if factor is not None else \
        np.float32(size_in) / np.float32(size_out)
    dst = np.arange(size_out, dtype=np.float32) + (np.float32(0.5) if exact else 0)
    return np.minimum(np.floor(dst * scale).astype(np.int64), size_in - 1)


def _linear_matrix(size_in, size_out, factor, align_corners) -> np.ndarray:
    ratio = _ratio(size_in, size_out, factor, align_corners)
    dst = np.arange(size_out, dtype=np.float64)
    src = dst * ratio if align_corners else np.maximum((dst + 0.5) * ratio - 0.5, 0.0)
    low = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
    high = np.minimum(low + 1, size_in - 1)
    frac = src - low
    m = np.zeros((size_out, size_in))
    np.add.at(m, (np.arange(size_out), low), 1.0 - frac)
    np.add.at(m, (np.arange(size_out), high), frac)
    return m


def _cubic_weights(t):
    """The four cubic-convolution weights of taps -1, 0, 1, 2 at fractional offset t."""
    a = _CUBIC_A

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return far(t + 1), near(t), near(1 - t), far(2 - t)


def _cubic_matrix(size_in, size_out, factor, align_corners) -> np.ndarray:
    ratio = _ratio(size_in, size_out, factor, align_corners)
    dst = np.arange(size_out, dtype=np.float64)
    src = dst * ratio if align_corners else (dst + 0.5) * ratio - 0.5  # no clamp for cubic
    base = np.floor(src).astype(np.int64)
    m = np.zeros((size_out, size_in))
    for offset, weight in zip((-1, 0, 1, 2), _cubic_weights(src - base)):
        # Taps outside the input read its edge (PyTorch clamps the index).
        np.add.at(m, (np.arange(size_out), np.clip(base + offset, 0, size_in - 1)), weight)
    return m


def _along(x, axis, fn):
    """fn applied to x with `axis` moved last."""
    from .shape import swapaxes
    return swapaxes(fn(swapaxes(x, axis, -1)), axis, -1)


@reports_as("interpolate")
def interpolate(input, size=None, scale_factor=None, mode: str = "nearest",
                align_corners=None, recompute_scale_factor=None, antialias: bool = False):
    """Resize the spatial axes of (N, C, L), (N, C, H, W) or (N, C, D, H, W), as PyTorch's
    F.interpolate: modes 'nearest', 'nearest-exact', 'linear' (3-d input), 'bilinear' and
    'bicubic' (4-d), 'trilinear' (5-d) and 'area'; `size` or `scale_factor` (output size
    floor(in * scale_factor)); `align_corners` for the linear and cubic modes.

    >>> x = rill.tensor([[[1.0, 2.0, 4.0]]])
    >>> rill.nn.functional.interpolate(x, scale_factor=2, mode="linear")
    tensor([[[1.  , 1.25, 1.75, 2.5 , 3.5 , 4.  ]]])
    """
    from .creation import tensor
    from .indexing import take
    from .linalg import matmul
    from .pooling import _adaptive_avg
    op = "interpolate"
    x = as_tensor(input, "input", op)
    mode = as_choice(mode, "mode", op, _MODES)
    if x.ndim not in (3, 4, 5):
        raise ShapeError(f"expects input (N, C, L), (N, C, H, W) or (N, C, D, H, W), got "
                         f"shape {x.shape}", op=op)
    rank = x.ndim - 2
    if mode in _RANK_OF and _RANK_OF[mode] != rank:
        raise ShapeError(f"mode {mode!r} resizes {_RANK_OF[mode]} spatial axes "
                         f"({_RANK_OF[mode] + 2}-d input), got a {x.ndim}-d input {x.shape}",
                         op=op)
    if x.dtype.kind != "f":
        raise ArgumentError(f"expects a floating-point input, got {x.dtype}", op=op)
    linear = mode in _RANK_OF
    if align_corners is not None:
        if not linear:
            raise ArgumentError(f"align_corners only applies to the linear and cubic modes, "
                                f"not {mode!r}; leave it None", op=op)
        align_corners = as_bool(align_corners, "align_corners", op)
    if as_bool(antialias, "antialias", op):
        raise ArgumentError("antialias=True is not supported; resize without it (or blur "
                            "before downsampling)", op=op)
    recompute = recompute_scale_factor is not None and as_bool(
        recompute_scale_factor, "recompute_scale_factor", op)
    out, factors = _sizes(x, rank, size, scale_factor, recompute, op)
    if mode == "area":
        return _adaptive_avg(x, out, rank, op)
    for i, (size_out, factor) in enumerate(zip(out, factors)):
        axis, size_in = 2 + i, x.shape[2 + i]
        if mode in ("nearest", "nearest-exact"):
            index = _nearest_source(size_in, size_out, factor, mode == "nearest-exact")
            x = take(x, tensor(index, device=x.device), axis=axis)
            continue
        build = _cubic_matrix if mode == "bicubic" else _linear_matrix
        m = tensor(build(size_in, size_out, factor, bool(align_corners)).T, dtype=x.dtype,
                   device=x.device)
        x = _along(x, axis, lambda v, m=m: matmul(v, m))
    return x


def _factor(value, what, op) -> int:
    r = as_int(value, what, op)
    if r < 1:
        raise ArgumentError(f"{what} must be a positive int, got {r}", op=op)
    return r


@reports_as("pixel_shuffle")
def pixel_shuffle(input, upscale_factor):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r): each group of r*r channels becomes an r x r
    block of pixels (PyTorch's order).

    >>> rill.nn.functional.pixel_shuffle(rill.arange(8.0).reshape(1, 4, 1, 2), 2)[0, 0]
    tensor([[0., 2., 1., 3.],
            [4., 6., 5., 7.]])
    """
    from .shape import permute_dims, reshape
    op = "pixel_shuffle"
    x = as_tensor(input, "input", op)
    r = _factor(upscale_factor, "upscale_factor", op)
    if x.ndim < 3 or x.shape[-3] % (r * r):
        raise ShapeError(f"expects (*, C*r*r, H, W) with channels divisible by "
                         f"upscale_factor**2 = {r * r}, got shape {x.shape}", op=op)
    *lead, c, h, w = x.shape
    k = len(lead)
    x = reshape(x, tuple(lead) + (c // (r * r), r, r, h, w))
    x = permute_dims(x, tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2))
    return reshape(x, tuple(lead) + (c // (r * r), h * r, w * r))


@reports_as("pixel_unshuffle")
def pixel_unshuffle(input, downscale_factor):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W): the inverse of pixel_shuffle.

    >>> rill.nn.functional.pixel_unshuffle(rill.ones(1, 1, 4, 6), 2).shape
    (1, 4, 2, 3)
    """
    from .shape import permute_dims, reshape
    op = "pixel_unshuffle"
    x = as_tensor(input, "input", op)
    r = _factor(downscale_factor, "downscale_factor", op)
    if x.ndim < 3 or x.shape[-2] % r or x.shape[-1] % r:
        raise ShapeError(f"expects (*, C, H*r, W*r) with height and width divisible by "
                         f"downscale_factor = {r}, got shape {x.shape}", op=op)
    *lead, c, h, w = x.shape
    k = len(lead)
    x = reshape(x, tuple(lead) + (c, h // r, r, w // r, r))
    x = permute_dims(x, tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3))
    return reshape(x, tuple(lead) + (c * r * r, h // r, w // r))
