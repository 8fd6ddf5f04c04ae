"""ONNX shape, indexing and creation ops -> rill ops (rows of import_ops.TABLE)."""
from __future__ import annotations

import numpy as np

from .errors import ONNXError
from .import_ops import axis_of, const, ints, known, rill, row


@row("Shape")
def _shape(run, node, ins, a):
    shape = list(ins[0].shape)
    n = len(shape)
    start, end = a.get("start", 0), a.get("end", n)
    start, end = max(0, min(n, start + n if start < 0 else start)), \
        max(0, min(n, end + n if end < 0 else end))
    return const(np.asarray(shape[start:end], np.int64))


@row("Size")
def _size(run, node, ins, a):
    return const(np.asarray(ins[0].size, np.int64))


@row("Constant")
def _constant(run, node, ins, a):
    from .tensors import decode
    if "value" in a:
        return const(decode(a["value"], "the Constant's value", run.meter, run.folder))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in a:
            return const(np.asarray(a[key], dtype))
    raise ONNXError(f"Constant with {sorted(a)} is not supported", op="Constant")


@row("ConstantOfShape")
def _constant_of_shape(run, node, ins, a):
    from .tensors import decode
    value = decode(a["value"], "the ConstantOfShape value", run.meter, run.folder) \
        if "value" in a else np.zeros(1, np.float32)
    if value.size != 1:
        raise ONNXError(f"its value must hold one element, got {value.size}",
                        op="ConstantOfShape")
    shape = tuple(ints(node, ins[0], "shape"))
    run.meter.elements(shape, "ConstantOfShape's output")
    return const(np.full(shape, value.reshape(-1)[0], dtype=value.dtype))


@row("Reshape")
def _reshape(run, node, ins, a):
    x = ins[0]
    shape = ints(node, ins[1], "shape")
    if not a.get("allowzero", 0):  # 0 copies the input's size on that axis
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(tuple(shape))


@row("Flatten")
def _flatten(run, node, ins, a):
    x = ins[0]
    axis = axis_of(a.get("axis", 1), x.ndim)
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape((lead, int(np.prod(x.shape[axis:], dtype=np.int64))))


@row("Transpose")
def _transpose(run, node, ins, a):
    x = ins[0]
    perm = a.get("perm", list(range(x.ndim))[::-1])
    return rill().permute_dims(x, tuple(perm))


def _axes(run, node, ins, a, since=13):
    if run.opset >= since:
        return None if len(ins) < 2 or ins[1] is None else ints(node, ins[1], "axes")
    return a.get("axes")


@row("Squeeze")
def _squeeze(run, node, ins, a):
    x = ins[0]
    axes = _axes(run, node, ins, a)
    if axes is None:
        axes = [i for i, s in enumerate(x.shape) if s == 1]
    axes = {axis_of(i, x.ndim) for i in axes}
    return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


@row("Unsqueeze")
def _unsqueeze(run, node, ins, a):
    x = ins[0]
    axes = _axes(run, node, ins, a)
    out_ndim = x.ndim + len(axes)
    axes = {axis_of(i, out_ndim) for i in axes}
    sizes = iter(x.shape)
    return x.reshape(tuple(1 if i in axes else next(sizes) for i in range(out_ndim)))


@row("Concat")
def _concat(run, node, ins, a):
    parts = [x for x in ins if x is not None]
    return rill().concat(parts, axis=axis_of(a["axis"], parts[0].ndim))


@row("Split")
def _split(run, node, ins, a):
    x = ins[0]
    axis = axis_of(a.get("axis", 0), x.ndim)
    n = x.shape[axis]
    if run.opset >= 13 and len(ins) > 1 and ins[1] is not None or "split" in a:
        sizes = ints(node, ins[1], "split") if run.opset >= 13 and len(ins) > 1 and \
            ins[1] is not None else [int(s) for s in a["split"]]
        if len(sizes) != len(node.output) or any(s < 0 for s in sizes) or sum(sizes) != n:
            raise ONNXError(f"split sizes {sizes[:8]} must be >= 0, one per output "
                            f"({len(node.output)}), and add up to the axis's {n}", op="Split")
    else:
        parts = a.get("num_outputs", len(node.output))
        size = -(-n // parts)  # ceil: the last part may be smaller
        sizes = ([size] * (n // size) + ([n % size] if n % size else []))[:len(node.output)]
    bounds = np.cumsum([0] + sizes)
    return [rill().take(x, rill().arange(int(lo), int(hi)), axis=axis)
            for lo, hi in zip(bounds[:-1], bounds[1:])]


@row("Slice")
def _slice(run, node, ins, a):
    x = ins[0]
    if run.opset >= 10:
        starts, ends = ints(node, ins[1], "starts"), ints(node, ins[2], "ends")
        axes = ints(node, ins[3], "axes") if len(ins) > 3 and ins[3] is not None else \
            list(range(len(starts)))
        steps = ints(node, ins[4], "steps") if len(ins) > 4 and ins[4] is not None else \
            [1] * len(starts)
    else:
        starts, ends = list(a["starts"]), list(a["ends"])
        axes = list(a.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    key = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = axis_of(axis, x.ndim)
        n = x.shape[axis]
        start, end = start + n if start < 0 else start, end + n if end < 0 else end
        if step > 0:  # ONNX clamps the bounds into the axis, then counts as range() does
            key[axis] = slice(min(max(start, 0), n), min(max(end, 0), n), step)
        else:
            end = min(max(end, -1), n - 1)
            key[axis] = slice(min(max(start, 0), n - 1), None if end < 0 else end, step)
    return x[tuple(key)]


@row("Gather")
def _gather(run, node, ins, a):
    x, idx = ins
    axis = axis_of(a.get("axis", 0), x.ndim)
    n = x.shape[axis]
    idx = rill().where(idx < 0, idx + n, idx)  # ONNX allows negative indices
    return rill().take(x, idx, axis=axis)


@row("GatherElements")
def _gather_elements(run, node, ins, a):
    x, idx = ins
    axis = axis_of(a.get("axis", 0), x.ndim)
    idx = rill().where(idx < 0, idx + x.shape[axis], idx)
    return rill().take_along_axis(x, idx, axis=axis)


@row("GatherND")
def _gather_nd(run, node, ins, a):
    r = rill()
    x, idx = ins
    b = a.get("batch_dims", 0)
    k = idx.shape[-1]
    if b and k:  # the leading b axes as one, its position an extra index in front
        lead = int(np.prod(x.shape[:b], dtype=np.int64))
        xs = x.reshape((lead,) + tuple(x.shape[b:]))
        ids = idx.reshape((lead,) + tuple(idx.shape[b:]))
        batch = const(np.arange(lead).reshape((lead,) + (1,) * (ids.ndim - 2)))
        out = xs[(batch,) + tuple(ids[..., i] for i in range(k))]
        return out.reshape(tuple(idx.shape[:-1]) + tuple(x.shape[b + k:]))
    if b:
        raise ONNXError("GatherND with batch_dims and empty index tuples is not supported",
                        op="GatherND")
    key = tuple(idx[..., i] for i in range(k))
    return x[key] if k else r.broadcast_to(x, idx.shape[:-1] + x.shape)


@row("ScatterElements", "Scatter")
def _scatter_elements(run, node, ins, a):
    r = rill()
    x, idx, updates = ins
    axis = axis_of(a.get("axis", 0), x.ndim)
    idx = r.where(idx < 0, idx + x.shape[axis], idx)
    reduction = a.get("reduction", "none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction == "none":
        return r.scatter(x, axis, idx, updates)
    if reduction == "add":
        return r.scatter_add(x, idx, updates, axis=axis)
    return r.scatter_reduce(x, axis, idx, updates, {"mul": "prod", "max": "amax",
                                                     "min": "amin"}[reduction])


@row("ScatterND")
def _scatter_nd(run, node, ins, a):
    r = rill()
    x, idx, updates = ins
    reduction = a.get("reduction", "none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ONNXError(f"reduction must be none, add, mul, max or min, got {reduction!r}",
                        op="ScatterND")
    k = idx.shape[-1]
    if not 0 <= k <= x.ndim or tuple(updates.shape) != tuple(idx.shape[:-1]) + \
            tuple(x.shape[k:]):
        raise ONNXError(f"updates {tuple(updates.shape)} must have shape indices.shape[:-1] "
                        f"+ data.shape[{k}:] = {tuple(idx.shape[:-1]) + tuple(x.shape[k:])}",
                        op="ScatterND")
    if reduction == "none":  # repeated indices: the spec leaves the winner undefined
        return r.index_set(x, tuple(idx[..., i] for i in range(k)), updates)
    # Each update combines with every earlier one aimed at the same slice (the spec's loop
    # over the updates), so repeated indices all count: the first k axes flattened into one,
    # whose flat index is scattered along with the reduction.
    rows = int(np.prod(x.shape[:k], dtype=np.int64))
    rest = tuple(x.shape[k:])
    flat = r.zeros(tuple(idx.shape[:-1]), dtype=r.int64)
    for i in range(k):
        size = x.shape[i]
        flat = flat * size + r.where(idx[..., i] < 0, idx[..., i] + size, idx[..., i])
    count = int(np.prod(idx.shape[:-1], dtype=np.int64))
    flat = r.broadcast_to(flat.reshape((count,) + (1,) * len(rest)), (count,) + rest)
    combine = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction]
    out = r.scatter_reduce(x.reshape((rows,) + rest), 0, flat,
                           updates.reshape((count,) + rest), combine)
    return out.reshape(tuple(x.shape))


@row("Expand")
def _expand(run, node, ins, a):
    x = ins[0]
    shape = ints(node, ins[1], "shape")
    out = np.broadcast_shapes(tuple(x.shape), tuple(shape))
    return rill().broadcast_to(x, out)


@row("Tile")
def _tile(run, node, ins, a):
    return rill().tile(ins[0], tuple(ints(node, ins[1], "repeats")))


@row("Range")
def _range(run, node, ins, a):
    start, limit, delta = (known(node, v, "bounds").item() for v in ins)
    if delta == 0:
        raise ONNXError("its delta is 0: the range would never reach its limit", op="Range")
    dtype = ins[0].dtype
    n = max(int(np.ceil((limit - start) / delta)), 0)
    run.meter.elements((n,), "Range's output")
    return const((start + delta * np.arange(n)).astype(dtype.storage))


@row("Pad")
def _pad(run, node, ins, a):
    x = ins[0]
    if run.opset >= 11:
        pads = ints(node, ins[1], "pads")
        value = ins[2] if len(ins) > 2 and ins[2] is not None else 0
        if not isinstance(value, int) and run.is_static(node.input[2]):
            value = known(node, value, "constant_value").item()
        axes = ints(node, ins[3], "axes") if len(ins) > 3 and ins[3] is not None else \
            list(range(x.ndim))
    else:
        pads, value, axes = list(a["pads"]), a.get("value", 0.0), list(range(x.ndim))
    mode = a.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    widths = [(0, 0)] * x.ndim
    k = len(axes)
    for i, axis in enumerate(axes):
        widths[axis_of(axis, x.ndim)] = (pads[i], pads[i + k])
    if any(lo < 0 or hi < 0 for lo, hi in widths):  # negative pads crop
        key = tuple(slice(-lo if lo < 0 else 0, hi if hi < 0 else None) for lo, hi in widths)
        x = x[key]
        widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    mode = {"edge": "edge", "reflect": "reflect", "wrap": "wrap"}.get(mode, "constant")
    if mode == "wrap":  # periodic: each axis gathered at its positions modulo its size
        for axis, (lo, hi) in enumerate(widths):
            if lo or hi:
                n = x.shape[axis]
                x = rill().take(x, const(np.arange(-lo, n + hi) % n), axis=axis)
        return x
    if mode == "constant" and not isinstance(value, (int, float, bool)):
        # a fill value computed in the graph: pad with zeros, then fill where nothing was
        r = rill()
        inside = r.pad(r.ones(x.shape, dtype=r.bool), tuple(widths), mode="constant",
                       value=False)
        return r.where(inside, r.pad(x, tuple(widths), mode="constant", value=0),
                       value.reshape(()).astype(x.dtype))
    if mode == "constant":
        return rill().pad(x, tuple(widths), mode="constant", value=value)
    return rill().pad(x, tuple(widths), mode=mode)


@row("Trilu")
def _trilu(run, node, ins, a):
    k = ints(node, ins[1], "k")[0] if len(ins) > 1 and ins[1] is not None else 0
    return (rill().triu if a.get("upper", 1) else rill().tril)(ins[0], k)


@row("TopK")
def _topk(run, node, ins, a):
    import rill as r
    x = ins[0]
    k = ints(node, ins[1], "k")[0] if run.opset >= 10 else a["k"]
    axis = axis_of(a.get("axis", -1), x.ndim)
    values, indices = r.topk(x, k, axis=axis, largest=bool(a.get("largest", 1)))
    return [values, indices.astype(r.int64)]


@row("OneHot")
def _one_hot(run, node, ins, a):
    r = rill()
    indices, depth, values = ins
    depth = int(known(node, depth, "depth").reshape(-1)[0])
    axis = a.get("axis", -1)
    out_ndim = indices.ndim + 1
    axis = axis_of(axis, out_ndim)
    idx = r.where(indices < 0, indices + depth, indices).astype(r.int64)
    positions = r.arange(depth).reshape(tuple(-1 if i == axis else 1 for i in range(out_ndim)))
    hot = r.equal(r.expand_dims(idx, axis=axis), positions)
    return r.where(hot, values[1], values[0])


@row("EyeLike")
def _eye_like(run, node, ins, a):
    from .dtypes import rill_dtype
    x = ins[0]
    dtype = rill_dtype(a["dtype"]) if "dtype" in a else x.dtype
    if x.ndim != 2:
        raise ONNXError(f"its input must be 2-D, got shape {tuple(x.shape)}", op="EyeLike")
    run.meter.elements(x.shape, "EyeLike's output")
    return const(np.eye(x.shape[0], x.shape[1], a.get("k", 0), dtype=dtype.storage))


@row("Dropout")
def _dropout(run, node, ins, a):  # inference: the input, and a mask of ones
    x = ins[0]
    return [x, rill().ones(x.shape, dtype=rill().bool)]


def _blocks(node, x, a):
    """(n, c, h, w, blocksize, mode) of DepthToSpace and SpaceToDepth, checked."""
    if x.ndim != 4:
        raise ONNXError(f"its input must be 4-D, got shape {tuple(x.shape)}", op=node.op_type)
    s = a["blocksize"]
    mode = a.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if s < 1 or mode not in ("DCR", "CRD"):
        raise ONNXError(f"blocksize must be >= 1 and mode DCR or CRD, got {s} and {mode!r}",
                        op=node.op_type)
    return (*x.shape, s, mode)


@row("DepthToSpace")
def _depth_to_space(run, node, ins, a):
    x = ins[0]
    n, c, h, w, s, mode = _blocks(node, x, a)
    if c % (s * s):
        raise ONNXError(f"{c} channels do not split into blocks of {s}x{s}",
                        op="DepthToSpace")
    if mode == "DCR":  # channels ordered (block row, block column, depth)
        y = x.reshape((n, s, s, c // (s * s), h, w))
        y = rill().permute_dims(y, (0, 3, 4, 1, 5, 2))
    else:  # (depth, block row, block column)
        y = x.reshape((n, c // (s * s), s, s, h, w))
        y = rill().permute_dims(y, (0, 1, 4, 2, 5, 3))
    return y.reshape((n, c // (s * s), h * s, w * s))


@row("SpaceToDepth")
def _space_to_depth(run, node, ins, a):
    x = ins[0]
    n, c, h, w, s, mode = _blocks(node, x, a)
    if h % s or w % s:
        raise ONNXError(f"height {h} and width {w} must be multiples of the blocksize {s}",
                        op="SpaceToDepth")
    y = x.reshape((n, c, h // s, s, w // s, s))
    # The inverse of DepthToSpace in the same mode: DCR puts the block offsets before the
    # channel in the output's channel axis, CRD after it.
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    y = rill().permute_dims(y, order)
    return y.reshape((n, c * s * s, h // s, w // s))


@row("Einsum")
def _einsum(run, node, ins, a):
    equation = a["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else equation
    return rill().einsum(equation.replace(" ", ""), *ins)


@row("Det")
def _det(run, node, ins, a):
    return rill().linalg.det(ins[0])


@row("NonZero")
def _nonzero(run, node, ins, a):
    from .import_dynamic import WHY
    found = known(node, ins[0], WHY)
    return const(np.stack(np.nonzero(found)).astype(np.int64).reshape(found.ndim, -1))


@row("ReverseSequence")
def _reverse_sequence(run, node, ins, a):
    """The first sequence_lens[b] steps of each batch entry reversed, the rest kept."""
    x = ins[0]
    lens = ints(node, ins[1], "sequence_lens")
    t_axis, b_axis = a.get("time_axis", 0), a.get("batch_axis", 1)
    steps = np.arange(x.shape[t_axis])[:, None]
    n = np.asarray(lens)[None, :]
    order = np.where(steps < n, n - 1 - steps, steps)  # (time, batch)
    if t_axis > b_axis:
        order = order.T
    order = order.reshape(order.shape + (1,) * (x.ndim - 2))
    order = np.ascontiguousarray(np.broadcast_to(order, x.shape))
    return rill().take_along_axis(x, const(order), axis=t_axis)
