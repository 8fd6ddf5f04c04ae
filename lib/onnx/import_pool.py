"""Pooling by explicit windows: the sum over a window's k1 * k2 * ... offsets of strided
slices of the padded input. Used where rill's pooling ops do not cover the ONNX attributes
(AveragePool with dilations or windows past the pads, LpPool); composites of slices and
adds, so gradients and capture come for free."""
from __future__ import annotations

import itertools
import math

from .import_ops import rill, row


def output_sizes(sizes, kernel, before, after, strides, dilations, ceil):
    """Windows per spatial axis; with ceil_mode a last partial window counts only if it
    starts inside the input or its leading pad."""
    out = []
    for n, k, lo, hi, s, d in zip(sizes, kernel, before, after, strides, dilations):
        span = n + lo + hi - ((k - 1) * d + 1)
        count = (-(-span // s) if ceil else span // s) + 1
        if ceil and (count - 1) * s >= n + lo:
            count -= 1
        out.append(count)
    return out


def window_sum(x, kernel, before, after, strides, dilations, out, fill=0.0, combine=None):
    """Sum (or `combine`) over each window of x (N, C, *spatial), padded with `fill`
    before/after and on the right as far as the last window reaches."""
    r = rill()
    spatial = x.shape[2:]
    extra = [max((o - 1) * s + (k - 1) * d + 1 - (n + lo + hi), 0)
             for o, s, k, d, n, lo, hi in zip(out, strides, kernel, dilations, spatial,
                                               before, after)]
    widths = ((0, 0), (0, 0)) + tuple((lo, hi + e) for lo, hi, e in zip(before, after, extra))
    if any(w for pair in widths for w in pair):
        x = r.pad(x, widths, mode="constant", value=fill)
    from .limits import meter
    meter().unroll("the pooling window", math.prod(kernel))
    total = None
    for offset in itertools.product(*[range(k) for k in kernel]):
        key = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (m - 1) * s + 1, s)
            for o, d, m, s in zip(offset, dilations, out, strides))
        part = x[key]
        total = part if total is None else (combine(total, part) if combine else total + part)
    return total


def average_pool(x, kernel, before, after, strides, dilations, ceil, include_pad):
    """AveragePool: the window's sum over the number of its entries that count (inputs,
    and pads with count_include_pad; never the ceil-mode overhang)."""
    r = rill()
    out = output_sizes(x.shape[2:], kernel, before, after, strides, dilations, ceil)
    total = window_sum(x, kernel, before, after, strides, dilations, out)
    ones = r.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype)
    if include_pad:
        ones = r.pad(ones, ((0, 0), (0, 0)) + tuple(zip(before, after)), mode="constant",
                     value=1.0)
        before_, after_ = [0] * len(kernel), [0] * len(kernel)
    else:
        before_, after_ = before, after
    count = window_sum(ones, kernel, before_, after_, strides, dilations, out)
    return total / count


def max_pool(x, kernel, before, after, strides, dilations, ceil, low):
    out = output_sizes(x.shape[2:], kernel, before, after, strides, dilations, ceil)
    return window_sum(x, kernel, before, after, strides, dilations, out, fill=low,
                      combine=rill().maximum)


def max_pool_with_indices(x, kernel, before, after, strides, dilations, ceil, low,
                          storage_order):
    """MaxPool and its Indices output: for each window, the first largest entry's index in
    the input flattened over (N, C, *spatial), the spatial part in row-major order (or
    column-major with storage_order 1). The indices are fixed per offset, so they come
    from NumPy grids sliced as the values are."""
    import numpy as np
    from .import_ops import const
    r = rill()
    spatial = tuple(x.shape[2:])
    out = output_sizes(spatial, kernel, before, after, strides, dilations, ceil)
    size = math.prod(spatial)
    position = np.arange(size, dtype=np.int64).reshape(
        spatial, order="F" if storage_order else "C")
    channels = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(
        x.shape[:2] + (1,) * len(spatial)) * size
    grid = channels + position
    geometry = zip(out, strides, kernel, dilations, spatial, before, after)
    extra = [max((o - 1) * s + (k - 1) * d + 1 - (n + lo + hi), 0)
             for o, s, k, d, n, lo, hi in geometry]
    widths = ((0, 0), (0, 0)) + tuple((lo, hi + e) for lo, hi, e in zip(before, after, extra))
    x = r.pad(x, widths, mode="constant", value=low)
    grid = np.pad(grid, widths, constant_values=-1)
    from .limits import meter
    meter().unroll("the pooling window", math.prod(kernel))
    best = where = None
    for offset in itertools.product(*[range(k) for k in kernel]):
        key = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (m - 1) * s + 1, s)
            for o, d, m, s in zip(offset, dilations, out, strides))
        part, index = x[key], const(grid[key])
        if best is None:
            best, where = part, index
        else:
            better = r.logical_or(r.greater(part, best), where < 0)  # strictly: first wins
            best, where = r.where(better, part, best), r.where(better, index, where)
    return best, where


@row("LpPool")
def _lp_pool(run, node, ins, a):
    from .import_nn import _window
    r = rill()
    x = ins[0]
    kernel = list(a["kernel_shape"])
    before, after, strides, dilations = _window(node, a, x, kernel)
    p = a.get("p", 2)
    ceil = bool(a.get("ceil_mode", 0))
    out = output_sizes(x.shape[2:], kernel, before, after, strides, dilations, ceil)
    total = window_sum(r.power(r.abs(x), p), kernel, before, after, strides, dilations, out)
    return r.power(total, 1.0 / p)


@row("MaxUnpool")
def _max_unpool(run, node, ins, a):
    """MaxPool's partial inverse: each value of X written at its index in I, zeros
    elsewhere. As the specification's reference computes it, the indices count in the
    output MaxPool's geometry gives ((in - 1) * stride + kernel - pads, per axis) flattened
    over (N, C, *spatial); an `output_shape` input only pads that result with zeros at the
    end of each spatial axis."""
    from .errors import ONNXError
    from .import_ops import ints
    r = rill()
    x, where = ins[0], ins[1]
    kernel = list(a["kernel_shape"])
    n = len(kernel)
    strides = list(a.get("strides", [1] * n))
    pads = list(a.get("pads", [0] * (2 * n)))
    if x.ndim != n + 2 or tuple(where.shape) != tuple(x.shape):
        raise ONNXError(f"X {tuple(x.shape)} must be (N, C) + {n} spatial axes, and I the "
                        f"same shape (got {tuple(where.shape)})", op="MaxUnpool")
    inferred = tuple(x.shape[:2]) + tuple(
        (size - 1) * s - (pads[i] + pads[n + i]) + k
        for i, (size, s, k) in enumerate(zip(x.shape[2:], strides, kernel)))
    wanted = inferred
    if len(ins) > 2 and ins[2] is not None:
        wanted = tuple(ints(node, ins[2], "output_shape"))
        if len(wanted) != len(inferred) or any(w < i for w, i in zip(wanted, inferred)):
            raise ONNXError(f"output_shape {wanted} must have {len(inferred)} entries, each at "
                            f"least the unpooled shape {inferred}", op="MaxUnpool")
    from .limits import meter
    meter().elements(wanted, "MaxUnpool's output")
    flat = r.zeros((math.prod(inferred),), dtype=x.dtype)
    out = r.index_set(flat, (where.reshape((-1,)).astype(r.int64),), x.reshape((-1,)))
    out = out.reshape(inferred)
    if wanted != inferred:
        out = r.pad(out, tuple((0, w - i) for w, i in zip(wanted, inferred)),
                    mode="constant", value=0.0)
    return out


@row("Col2Im")
def _col2im(run, node, ins, a):
    """Column blocks back into an image (torch's fold): input (N, C * prod(block), L), the
    L blocks in row-major order over the grid of block positions; each block entry is
    added where its dilated, strided window puts it in the padded image, then the pads
    are cut off."""
    from .errors import ONNXError
    from .import_ops import ints
    from .limits import meter
    r = rill()
    x = ins[0]
    image = ints(node, ins[1], "image_shape")
    block = ints(node, ins[2], "block_shape")
    n = len(image)
    strides = list(a.get("strides", [1] * n))
    dilations = list(a.get("dilations", [1] * n))
    pads = list(a.get("pads", [0] * (2 * n)))
    before, after = pads[:n], pads[n:]
    grid = [(size + lo + hi - d * (k - 1) - 1) // s + 1
            for size, lo, hi, d, k, s in zip(image, before, after, dilations, block, strides)]
    per_block = math.prod(block)
    if len(block) != n or x.ndim != 3 or x.shape[1] % max(per_block, 1) or \
            x.shape[2] != math.prod(grid) or min(grid + block) < 1:
        raise ONNXError(f"input {tuple(x.shape)} must be (N, C * {per_block}, "
                        f"{math.prod(grid)}) for image_shape {image}, block_shape {block}, "
                        f"strides {strides}, pads {pads} and dilations {dilations}",
                        op="Col2Im")
    channels = x.shape[1] // per_block
    padded = tuple(size + lo + hi for size, lo, hi in zip(image, before, after))
    meter().elements((x.shape[0], channels) + padded, "Col2Im's output")
    meter().unroll("the block", per_block)
    cols = x.reshape((x.shape[0], channels, per_block) + tuple(grid))
    out = r.zeros((x.shape[0], channels) + padded, dtype=x.dtype)
    for k, offset in enumerate(itertools.product(*[range(b) for b in block])):
        key = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (m - 1) * s + 1, s)
            for o, d, m, s in zip(offset, dilations, grid, strides))
        out = r.index_add(out, key, cols[:, :, k])
    return out[(slice(None), slice(None)) +
               tuple(slice(lo, lo + size) for lo, size in zip(before, image))]
