"""ONNX Resize and Upsample -> rill ops (rows of import_ops.TABLE).

Resize is separable: the output is the input resampled along one axis after another. The
output sizes are static, so each axis's resampling is a fixed (out, in) weight matrix
built in NumPy from the operator's specification (coordinate transform, kernel, edge
handling) and applied with one matmul; nearest-neighbour sampling is a `take` of the
chosen source indices, exact for every dtype. Weights follow the spec's convention: an
n-point kernel sits on the n source pixels nearest the mapped coordinate x_original,
preferring those left of it, and sources outside the input repeat the edge pixel (or, with
exclude_outside, get weight 0 and the others are renormalized).
"""
from __future__ import annotations

import math

import numpy as np

from .errors import ONNXError
from .import_ops import axis_of, const, known, rill, row
from .limits import meter


def _text(value, default):
    value = default if value is None else value
    return value.decode() if isinstance(value, bytes) else value


def _source_coordinates(mode, n_in, n_out, scale, roi):
    """x_original for each output index along one axis (float64), per
    coordinate_transformation_mode; `scale` is the axis's float scale, `roi` (start, end)."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in  # the (possibly fractional) output width the scale implies
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if width > 1 else np.full(n_out, -0.5)
    if mode == "align_corners":
        return y * (n_in - 1) / (width - 1) if width != 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if width == 1:
            return np.full(n_out, (end - start) * (n_in - 1) / 2 + start * (n_in - 1))
        return y * (end - start) * (n_in - 1) / (width - 1) + start * (n_in - 1)
    raise ONNXError(f"coordinate_transformation_mode {mode!r} is not one of half_pixel, "
                    "half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, "
                    "tf_crop_and_resize", op="Resize")


def _cubic(t, a):
    """Keys' cubic convolution kernel at distance |t| with coefficient a."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _kernel_weights(kind, ratio, scale, antialias, a):
    """(first offset, weights (out, n)) of the n-point kernel: weights[:, k] applies to
    source pixel base + first + k, where base = ceil(x) - 1 and ratio = x - base in (0, 1]."""
    if kind == "nearest":
        return 0, None
    support = 1 if kind == "linear" else 2
    # Antialiasing when downscaling stretches the kernel by 1 / scale.
    stretch = min(scale, 1.0) if antialias else 1.0
    first = int(math.floor(-support / stretch) + 1)
    offsets = np.arange(first, 2 - first, dtype=np.float64)  # n = 2 - 2 * first points
    t = (offsets[None, :] - ratio[:, None]) * stretch
    if kind == "linear":
        w = np.clip(1 - np.abs(t), 0, None)
    else:
        w = _cubic(t, a)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    return first, w


def _axis_plan(a, n_in, n_out, scale, roi):
    """For one axis: ('take', indices, outside) or ('matmul', matrix (out, in), outside),
    `outside` flagging outputs that take extrapolation_value (tf_crop_and_resize)."""
    mode = _text(a.get("coordinate_transformation_mode"), "half_pixel")
    kind = _text(a.get("mode"), "nearest")
    x = _source_coordinates(mode, n_in, n_out, scale, roi)
    outside = (x < 0) | (x > n_in - 1) if mode == "tf_crop_and_resize" else None
    base = np.ceil(x) - 1
    ratio = x - base
    if kind == "nearest":
        rounding = _text(a.get("nearest_mode"), "round_prefer_floor")
        pick_right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                      "floor": ratio == 1.0, "ceil": np.ones_like(ratio, bool)}.get(rounding)
        if pick_right is None:
            raise ONNXError(f"nearest_mode {rounding!r} is not one of round_prefer_floor, "
                            "round_prefer_ceil, floor, ceil", op="Resize")
        index = np.clip(base + pick_right, 0, n_in - 1).astype(np.int64)
        return "take", index, outside
    if kind not in ("linear", "cubic"):
        raise ONNXError(f"mode {kind!r} is not one of nearest, linear, cubic", op="Resize")
    first, w = _kernel_weights(kind, ratio, scale, bool(a.get("antialias", 0)),
                               a.get("cubic_coeff_a", -0.75))
    sources = base[:, None].astype(np.int64) + first + np.arange(w.shape[1])[None, :]
    if a.get("exclude_outside", 0):
        w = np.where((sources < 0) | (sources >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    meter().elements((n_out, n_in), "Resize's weight matrix")
    matrix = np.zeros((n_out, n_in))
    rows = np.broadcast_to(np.arange(n_out)[:, None], sources.shape)
    np.add.at(matrix, (rows, np.clip(sources, 0, n_in - 1)), w)  # edge pixels repeat
    return "matmul", matrix, outside


def _resample(x, axis, plan, fill):
    r = rill()
    how, what, outside = plan
    if how == "take":
        out = r.take(x, const(what), axis=axis)
    else:
        work = x if x.dtype.kind == "f" else x.astype(r.float32)
        moved = r.moveaxis(work, axis, -1)
        out = r.moveaxis(r.matmul(moved, const(what.T.astype(work.dtype.storage))), -1, axis)
        if x.dtype.kind != "f":
            out = r.round(out).astype(x.dtype)
    if outside is not None and outside.any():
        shape = tuple(-1 if i == axis else 1 for i in range(x.ndim))
        out = r.where(const(outside.reshape(shape)),
                      const(np.asarray(fill, x.dtype.storage)), out)
    return out


def _output_sizes(a, x, axes, scales, sizes):
    """(sizes, scales) per resized axis, keep_aspect_ratio_policy applied."""
    shape = [x.shape[i] for i in axes]
    if sizes is not None:
        scales = [s / n for s, n in zip(sizes, shape)]
        policy = _text(a.get("keep_aspect_ratio_policy"), "stretch")
        if policy in ("not_larger", "not_smaller"):
            one = min(scales) if policy == "not_larger" else max(scales)
            scales = [one] * len(axes)
            sizes = [int(one * n + 0.5) for n in shape]  # rounding half up
        elif policy != "stretch":
            raise ONNXError(f"keep_aspect_ratio_policy {policy!r} is not one of stretch, "
                            "not_larger, not_smaller", op="Resize")
        return list(sizes), scales
    return [math.floor(n * s) for n, s in zip(shape, scales)], list(scales)


def resize(x, a, axes, scales, sizes, roi):
    """x resampled along `axes` (scales or sizes per axis; roi as 2 * len(axes) values)."""
    given = scales if sizes is None else sizes
    if len(given) != len(axes):
        raise ONNXError(f"{len(given)} {'scales' if sizes is None else 'sizes'} for "
                        f"{len(axes)} axes: it needs one per axis", op="Resize")
    sizes, scales = _output_sizes(a, x, axes, scales, sizes)
    shape = list(x.shape)
    for axis, size in zip(axes, sizes):
        shape[axis] = size
    meter().elements(shape, "Resize's output")
    fill = a.get("extrapolation_value", 0.0)
    k = len(axes)
    for i, axis in enumerate(axes):
        box = (roi[i], roi[k + i]) if roi is not None else (0.0, 1.0)
        if sizes[i] == x.shape[axis] and math.isclose(scales[i], 1.0) and box == (0.0, 1.0):
            continue  # an identity along this axis
        x = _resample(x, axis, _axis_plan(a, x.shape[axis], sizes[i], scales[i], box), fill)
    return x


def _optional(node, ins, i, what):
    if len(ins) <= i or ins[i] is None:
        return None
    values = known(node, ins[i], what).reshape(-1)
    return values if values.size else None


@row("Resize")
def _resize(run, node, ins, a):
    x = ins[0]
    if run.opset < 11:  # Resize-10: (X, scales), asymmetric coordinates
        a = dict(a, coordinate_transformation_mode="asymmetric",
                 nearest_mode=a.get("nearest_mode", "floor"))
        roi, scales, sizes = None, _optional(node, ins, 1, "scales"), None
    else:
        roi = _optional(node, ins, 1, "roi")
        scales = _optional(node, ins, 2, "scales")
        sizes = _optional(node, ins, 3, "sizes")
    axes = [axis_of(int(i), x.ndim) for i in a.get("axes", range(x.ndim))]
    if scales is None and sizes is None:
        raise ONNXError("Resize needs scales or sizes", op="Resize")
    scales = None if scales is None else [float(s) for s in scales]
    sizes = None if sizes is None else [int(s) for s in sizes]
    roi = None if roi is None else [float(v) for v in roi]
    return resize(x, a, axes, scales, sizes, roi)


@row("Upsample")
def _upsample(run, node, ins, a):
    x = ins[0]
    scales = a["scales"] if "scales" in a else known(node, ins[1], "scales").reshape(-1)
    kind = _text(a.get("mode"), "nearest")
    # Upsample repeats pixels (nearest) or interpolates with asymmetric coordinates.
    attrs = {"mode": kind, "coordinate_transformation_mode": "asymmetric",
             "nearest_mode": "floor"}
    return resize(x, attrs, list(range(x.ndim)), [float(s) for s in scales], None, None)
