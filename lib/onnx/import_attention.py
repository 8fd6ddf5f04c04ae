"""ONNX Attention (opset 23 on) -> rill ops: 3-D or 4-D inputs, grouped key/value heads,
a past key/value cache, boolean or additive masks, causal and sliding-window masks aligned
to the end of the cache, soft-capping, and the optional QK output. Written from the
operator's specification; the mask is a bias added to the scores, -inf where a key is
hidden, and a row with every key hidden gives zeros."""
from __future__ import annotations

import math

import numpy as np

from .dtypes import rill_dtype
from .import_ops import rill, row


def _split_heads(x, heads):
    b, length, hidden = x.shape
    return rill().permute_dims(x.reshape((b, length, heads, hidden // heads)), (0, 2, 1, 3))


def _repeat_heads(x, times):
    if times == 1:
        return x
    b, h, s, e = x.shape
    wide = rill().broadcast_to(x.reshape((b, h, 1, s, e)), (b, h, times, s, e))
    return wide.reshape((b, h * times, s, e))


def _window_bias(r, length, keys, offset, dtype, allowed_fn):
    """0 where allowed_fn(i, j, offset) holds, -inf elsewhere; offset an int or a (batch,)
    tensor (then the bias is (batch, 1, L, S))."""
    from .limits import meter
    meter().elements((length, keys), "the attention mask")
    i = np.arange(length).reshape(length, 1)
    j = np.arange(keys).reshape(1, keys)
    if isinstance(offset, int):
        allowed = allowed_fn(i + offset, j)
        return r.tensor(np.where(allowed, 0, -np.inf).astype(dtype.storage))
    shift = offset.reshape((-1, 1, 1, 1)).astype(r.int64)
    allowed = allowed_fn(r.tensor(i) + shift, r.tensor(j))
    return r.where(allowed, r.tensor(np.zeros((), dtype.storage)),
                   r.tensor(np.asarray(-np.inf, dtype.storage)))


@row("Attention")
def _attention(run, node, ins, a):
    r = rill()
    ins = list(ins) + [None] * (7 - len(ins))
    q, k, v, mask, past_key, past_value, nonpad = ins[:7]
    three_d = q.ndim == 3
    if three_d:
        q = _split_heads(q, a["q_num_heads"])
        k = _split_heads(k, a["kv_num_heads"])
        v = _split_heads(v, a["kv_num_heads"])
    dtype = q.dtype
    scale = a.get("scale", 1 / math.sqrt(q.shape[3]))
    root = r.tensor(np.asarray(math.sqrt(scale), dtype.storage))  # on q and on k, as the spec
    if past_key is not None:
        k = r.concat([past_key, k], axis=2)
        v = r.concat([past_value, v], axis=2)
    present_key, present_value = k, v
    length, keys = q.shape[2], k.shape[2]
    bias = r.zeros((length, keys), dtype=dtype)
    if mask is not None and mask.shape[-1] < keys:
        fill = False if mask.dtype is r.bool else -np.inf
        widths = ((0, 0),) * (mask.ndim - 1) + ((0, keys - mask.shape[-1]),)
        mask = r.pad(mask, widths, mode="constant", value=fill)
    if mask is not None and mask.dtype is r.bool:
        mask = r.where(mask, r.tensor(np.zeros((), dtype.storage)),
                       r.tensor(np.asarray(-np.inf, dtype.storage)))
    if mask is not None:
        bias = bias + mask
    if nonpad is not None and past_key is None:
        offset = nonpad.reshape((-1,)) - length
    else:
        offset = past_key.shape[2] if past_key is not None else 0
    if a.get("is_causal", 0):
        bias = bias + _window_bias(r, length, keys, offset, dtype, lambda i, j: j <= i)
    left, right = a.get("left_window_size", -1), a.get("right_window_size", -1)
    if left >= 0 or right >= 0:
        def inside(i, j):
            ok = (i - j <= left) if left >= 0 else None
            if right >= 0:
                near = j - i <= right
                ok = near if ok is None else (ok & near)
            return ok
        bias = bias + _window_bias(r, length, keys, offset, dtype, inside)
    if nonpad is not None:
        seen = r.arange(keys).reshape((1, keys)) < nonpad.reshape((-1, 1)).astype(r.int64)
        bias = bias + r.where(seen, r.tensor(np.zeros((), dtype.storage)),
                              r.tensor(np.asarray(-np.inf, dtype.storage))
                              ).reshape((-1, 1, 1, keys))
    heads = q.shape[1]
    k, v = _repeat_heads(k, heads // k.shape[1]), _repeat_heads(v, heads // v.shape[1])
    scores = r.matmul(q * root, r.permute_dims(k, (0, 1, 3, 2)) * root)
    softcap = a.get("softcap", 0.0)
    if softcap and softcap > 0:
        scores = r.tanh(scores / softcap) * softcap
    with_bias = scores + bias
    mode = a.get("qk_matmul_output_mode", 0)
    qk_out = with_bias if mode == 2 else scores
    if "softmax_precision" in a:
        with_bias = with_bias.astype(rill_dtype(a["softmax_precision"]))
    probs = _softmax_rows(r, with_bias)
    hidden = r.isinf(r.max(bias, axis=-1, keepdims=True)) & \
        (r.max(bias, axis=-1, keepdims=True) < 0)
    probs = r.where(hidden, r.zeros_like(probs), probs)
    if mode == 3:
        qk_out = probs
    out = r.matmul(probs.astype(dtype), v)
    if three_d:
        out = r.permute_dims(out, (0, 2, 1, 3))
        out = out.reshape((out.shape[0], out.shape[1], -1))
    return [out, present_key, present_value, qk_out.astype(dtype)]


def _softmax_rows(r, x):
    """Softmax over the last axis that gives 0, not NaN, for a row of -inf."""
    top = r.max(x, axis=-1, keepdims=True)
    top = r.where(r.isinf(top) & (top < 0), r.zeros_like(top), top)
    e = r.exp(x - top)
    total = r.sum(e, axis=-1, keepdims=True)
    return e / r.where(total == 0, r.ones_like(total), total)


@row("TensorScatter")
def _tensor_scatter(run, node, ins, a):
    """A key/value cache update (opset 24): `update`'s sequence_length entries along
    `axis` written into a copy of `past_cache` from write_indices[b] on, for each batch
    entry b (modulo the cache's length in circular mode). A linear write past the cache's
    end is an index error, as the specification requires it to stay inside."""
    from .errors import ONNXError
    from .import_ops import axis_of
    r = rill()
    past, update = ins[0], ins[1]
    starts = ins[2] if len(ins) > 2 else None
    axis = axis_of(a.get("axis", -2), past.ndim)
    mode = a.get("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("linear", "circular"):
        raise ONNXError(f"mode must be 'linear' or 'circular', got {mode!r}", op="TensorScatter")
    same = all(p == u for i, (p, u) in enumerate(zip(past.shape, update.shape)) if i != axis)
    if not 0 < axis < past.ndim or update.ndim != past.ndim or not same or \
            update.shape[axis] > past.shape[axis]:
        raise ONNXError(f"update {tuple(update.shape)} must match past_cache "
                        f"{tuple(past.shape)} except along axis {a.get('axis', -2)} (not the "
                        "batch axis), where it may be shorter", op="TensorScatter")
    length = update.shape[axis]
    along = np.arange(length, dtype=np.int64).reshape(
        (length,) + (1,) * (past.ndim - axis - 1))
    where = r.tensor(along)
    if starts is not None:
        where = where + starts.astype(r.int64).reshape((-1,) + (1,) * (past.ndim - 1))
    if mode == "circular":
        where = r.remainder(where, past.shape[axis])
    where = r.broadcast_to(where, tuple(update.shape))
    return r.scatter(past, axis, where, update)
