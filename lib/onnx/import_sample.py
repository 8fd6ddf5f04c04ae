"""ONNX GridSample and AffineGrid -> rill ops (rows of import_ops.TABLE).

GridSample reads X at positions that are data (the grid), so it is built from rill ops
that run on the grid: each spatial axis's normalized coordinate is mapped to a pixel
coordinate, out-of-range coordinates are clamped (border) or reflected (reflection), and
the output is the sum over the kernel's taps (1 nearest, 2 linear, 4 cubic per axis) of
weight * X gathered at the tap, taps outside X reading 0 (zeros), the edge (border) or
the reflected pixel (reflection). Gradients reach X and the grid through the weights.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .errors import ONNXError
from .import_ops import const, rill, row


def _text(value, default):
    value = default if value is None else value
    return value.decode() if isinstance(value, bytes) else value


def _reflect(r, x, low, high):
    """x reflected at `low` and `high` until it lies between them (a float tensor)."""
    span = high - low
    below, above = low - x, x - high
    dist = r.where(x < low, below, r.where(x > high, above, r.zeros_like(x)))
    times = r.floor(dist / span)
    rest = dist - times * span
    even = r.equal(r.remainder(times, 2), 0)
    from_low = r.where(even, low + rest, high - rest)   # reflected off low first
    from_high = r.where(even, high - rest, low + rest)  # reflected off high first
    return r.where(x < low, from_low, r.where(x > high, from_high, x))


def _cubic_taps(r, t, a=-0.75):
    """Keys' cubic weights for the taps at -1, 0, 1, 2 from floor(x); t = x - floor(x)."""
    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _taps(r, x, size, mode, padding, low, high):
    """[(index tensor (int64, in range), weight tensor or None)] along one axis."""
    if mode == "nearest":
        starts, weights = [r.round(x)], [None]  # halfway rounds to even
    elif mode == "linear":
        base = r.floor(x)
        t = x - base
        starts, weights = [base, base + 1], [1 - t, t]
    else:
        base = r.floor(x)
        starts = [base - 1, base, base + 1, base + 2]
        weights = _cubic_taps(r, x - base)
    taps = []
    for index, weight in zip(starts, weights):
        if padding == "zeros":
            inside = (index >= 0) & (index <= size - 1)
            mask = r.where(inside, r.ones_like(x), r.zeros_like(x))
            weight = mask if weight is None else weight * mask
        elif padding == "reflection":
            index = r.trunc(_reflect(r, index, low, high))
        taps.append((r.clip(index, 0, size - 1).astype(r.int64), weight))
    return taps


@row("GridSample")
def _grid_sample(run, node, ins, a):
    r = rill()
    x, grid = ins
    mode = _text(a.get("mode"), "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)  # opset 16 names
    padding = _text(a.get("padding_mode"), "zeros")
    if mode not in ("nearest", "linear", "cubic"):
        raise ONNXError(f"mode {mode!r} is not one of linear, nearest, cubic",
                        op="GridSample")
    if padding not in ("zeros", "border", "reflection"):
        raise ONNXError(f"padding_mode {padding!r} is not one of zeros, border, reflection",
                        op="GridSample")
    aligned = bool(a.get("align_corners", 0))
    dims = list(x.shape[2:])
    n, c, rank = x.shape[0], x.shape[1], len(dims)
    out = tuple(grid.shape[1:-1])
    grid = grid.astype(x.dtype) if x.dtype.kind == "f" else grid
    per_axis = []
    for i, size in enumerate(dims):
        g = grid[..., rank - 1 - i]  # the grid lists coordinates last axis first (x = W)
        pos = (g + 1) / 2 * (size - 1) if aligned else ((g + 1) * size - 1) / 2
        if mode == "nearest":
            pos = r.round(pos)
        low, high = (0.0, size - 1.0) if aligned else (-0.5, size - 0.5)
        if padding == "border":  # only positions past the border move (onto the edge)
            pos = r.where((pos < low) | (pos > high), r.clip(pos, 0, size - 1), pos)
        elif padding == "reflection":
            pos = _reflect(r, pos, low, high)
        per_axis.append(_taps(r, pos, size, mode, padding, low, high))
    strides = [math.prod(dims[i + 1:]) for i in range(rank)]
    flat_x = x.reshape((n, c, -1))
    q = math.prod(out)
    from .limits import meter
    meter().unroll("GridSample's taps", math.prod(len(taps) for taps in per_axis))
    total = None
    for combo in itertools.product(*per_axis):
        flat = sum(index * stride for (index, _), stride in zip(combo, strides))
        picked = r.take_along_axis(
            flat_x, r.broadcast_to(flat.reshape((n, 1, q)), (n, c, q)), axis=2)
        weight = None
        for _, w in combo:
            if w is not None:
                weight = w if weight is None else weight * w
        if weight is not None:
            picked = picked * weight.reshape((n, 1, q)).astype(x.dtype)
        total = picked if total is None else total + picked
    return total.reshape((n, c) + out)


@row("AffineGrid")
def _affine_grid(run, node, ins, a):
    """The grid of normalized coordinates (x, y[, z]) of an output of size `size`, moved by
    the batch of affine matrices theta (N, 2, 3) or (N, 3, 4)."""
    from .import_ops import ints
    r = rill()
    theta, size = ins
    size = ints(node, size, "size")
    spatial = size[2:]
    run.meter.elements(list(spatial) + [2 * (len(spatial) + 1)], "AffineGrid's grid")
    aligned = bool(a.get("align_corners", 0))
    axes = []
    for s in spatial:
        if aligned:
            axes.append(np.linspace(-1, 1, s) if s > 1 else np.zeros(1))
        else:
            axes.append((np.arange(s) * 2 + 1) / s - 1)
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial axis in order D, H, W
    base = np.stack(list(reversed(mesh)) + [np.ones_like(mesh[0])], axis=-1)  # x, y, z, 1
    base = const(base.reshape(-1, len(spatial) + 1).astype(theta.dtype.storage))
    out = r.matmul(base, r.permute_dims(theta, (0, 2, 1)))  # (N, points, rank)
    return out.reshape((size[0],) + tuple(spatial) + (len(spatial),))
