"""ONNX ops whose output shapes depend on their input values -> rill ops, run eagerly.

A rill graph has static shapes, so these ops need their deciding input's values when the
node runs: a constant at trace time, or any input when the model is loaded with
`rill.onnx.load(path, capture=False)` (the module runs eagerly, node by node). The integer
results (indices, counts) are computed on the host from those values; value outputs are
then gathered from the input with rill ops, so gradients still reach it.
"""
from __future__ import annotations

import numpy as np

from .import_ops import axis_of, const, known, rill, row

WHY = "input (load with capture=False to run the model eagerly: its result's shape depends " \
    "on its values)"


@row("Compress")
def _compress(run, node, ins, a):
    r = rill()
    x, condition = ins
    keep = np.flatnonzero(known(node, condition, "condition " + WHY).reshape(-1))
    if "axis" not in a:
        return r.take(x.reshape((-1,)), const(keep.astype(np.int64)), axis=0)
    axis = axis_of(a["axis"], x.ndim)
    return r.take(x, const(keep[keep < x.shape[axis]].astype(np.int64)), axis=axis)


@row("Unique")
def _unique(run, node, ins, a):
    """Y (the distinct values or slices, sorted or in order of first occurrence), the index
    of each one's first occurrence, each input element's index into Y, and the counts."""
    r = rill()
    x = ins[0]
    values = known(node, x, WHY)
    axis = a.get("axis")
    if axis is None:
        values, source = values.reshape(-1), x.reshape((-1,))
        axis = 0
    else:
        axis = axis_of(axis, x.ndim)
        source = x
    _, first, inverse, counts = np.unique(values, return_index=True, return_inverse=True,
                                          return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not a.get("sorted", 1):  # order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    y = r.take(source, const(first.astype(np.int64)), axis=axis)
    return [y, const(first.astype(np.int64)), const(inverse.astype(np.int64)),
            const(counts.astype(np.int64))]


def _corners(box, center):
    if center:  # (x_center, y_center, width, height)
        x, y, w, h = box
        return min(y - h / 2, y + h / 2), min(x - w / 2, x + w / 2), \
            max(y - h / 2, y + h / 2), max(x - w / 2, x + w / 2)
    y1, x1, y2, x2 = box  # diagonal corners in either order
    return min(y1, y2), min(x1, x2), max(y1, y2), max(x1, x2)


def _iou(a, b):
    top, left = max(a[0], b[0]), max(a[1], b[1])
    bottom, right = min(a[2], b[2]), min(a[3], b[3])
    if bottom <= top or right <= left:
        return 0.0
    inter = (bottom - top) * (right - left)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@row("NonMaxSuppression")
def _non_max_suppression(run, node, ins, a):
    """Greedy per batch and class: take the best remaining box (ties: lower index), drop
    the boxes whose IoU with it exceeds iou_threshold; boxes scoring at most
    score_threshold never count. Returns (batch, class, box) rows."""
    ins = list(ins) + [None] * (5 - len(ins))
    boxes = known(node, ins[0], "boxes " + WHY)
    scores = known(node, ins[1], "scores " + WHY)

    def scalar(v, default):
        if v is None:
            return default
        found = known(node, v, "threshold").reshape(-1)
        return found[0] if found.size else default
    limit = int(scalar(ins[2], 0))
    iou_limit = float(scalar(ins[3], 0.0))
    floor = None if ins[4] is None else float(scalar(ins[4], -np.inf))
    center = a.get("center_point_box", 0)
    chosen = []
    for b in range(scores.shape[0]):
        corners = [_corners(box, center) for box in boxes[b]]
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = [i for i in np.lexsort((np.arange(s.size), -s))
                     if floor is None or s[i] > floor]
            kept: list = []
            for i in order:
                if len(kept) >= limit:
                    break
                if all(_iou(corners[i], corners[j]) <= iou_limit for j in kept):
                    kept.append(i)
            chosen += [(b, c, i) for i in kept]
    return const(np.asarray(chosen, np.int64).reshape(-1, 3))
