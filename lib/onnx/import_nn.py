"""ONNX neural-network ops -> rill ops (rows of import_ops.TABLE): Gemm, convolution,
pooling, normalization, losses."""
from __future__ import annotations

import math

import numpy as np

from .errors import ONNXError
from .import_ops import axis_of, rill, row


def _text(value, default):
    value = default if value is None else value
    return value.decode() if isinstance(value, bytes) else value


@row("Gemm")
def _gemm(run, node, ins, a):
    r = rill()
    x, w = ins[0], ins[1]
    if a.get("transA", 0):
        x = r.permute_dims(x, (1, 0))
    if a.get("transB", 0):
        w = r.permute_dims(w, (1, 0))
    out = r.matmul(x, w)
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if alpha != 1.0:
        out = out * alpha
    if len(ins) > 2 and ins[2] is not None:
        out = out + (ins[2] * beta if beta != 1.0 else ins[2])
    return out


def _window(node, a, x, kernel, strides=None, dilations=None):
    """(pads before, pads after, strides, dilations) per spatial axis, auto_pad resolved."""
    n = len(kernel)
    strides = list(a.get("strides", [1] * n)) if strides is None else strides
    dilations = list(a.get("dilations", [1] * n)) if dilations is None else dilations
    pads = list(a.get("pads", [0] * (2 * n)))
    auto = _text(a.get("auto_pad"), "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * n)
        for i in range(n):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size, 0)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * (2 * n)
    return pads[:n], pads[n:], strides, dilations


def _pad_spatial(x, before, after, value=0.0):
    if not any(before) and not any(after):
        return x
    widths = ((0, 0), (0, 0)) + tuple(zip(before, after))
    return rill().pad(x, widths, mode="constant", value=value)


def _conv_fn(n, transpose=False):
    import rill.nn.functional as F
    name = ("conv_transpose" if transpose else "conv") + f"{n}d"
    found = getattr(F, name, None)
    if found is None:
        raise ONNXError(f"{n}-d {'ConvTranspose' if transpose else 'Conv'} is not supported",
                        op="Conv")
    return found


@row("Conv")
def _conv(run, node, ins, a):
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    kernel = list(w.shape[2:])
    before, after, strides, dilations = _window(node, a, x, kernel)
    x = _pad_spatial(x, before, after)
    return _conv_fn(len(kernel))(x, w, bias, stride=tuple(strides), padding=0,
                                 dilation=tuple(dilations), groups=a.get("group", 1))


@row("ConvTranspose")
def _conv_transpose(run, node, ins, a):
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    kernel = list(w.shape[2:])
    n = len(kernel)
    strides = list(a.get("strides", [1] * n))
    dilations = list(a.get("dilations", [1] * n))
    output_padding = list(a.get("output_padding", [0] * n))
    before, after = _transpose_pads(x, kernel, strides, dilations, output_padding, a)
    grows = any(p < 0 for p in before + after)  # output_shape past the full result
    # The full transposed convolution, then crop the pads (asymmetric ones too); negative
    # pads add zeros, and the bias goes on after them, as it covers every output position.
    out = _conv_fn(n, True)(x, w, None if grows else bias, stride=tuple(strides), padding=0,
                            output_padding=tuple(output_padding), groups=a.get("group", 1),
                            dilation=tuple(dilations))
    if grows:
        out = _pad_spatial(out, [max(-p, 0) for p in before], [max(-p, 0) for p in after])
    if any(p > 0 for p in before + after):
        out = out[(slice(None), slice(None)) + tuple(
            slice(max(before[i], 0), out.shape[2 + i] - max(after[i], 0)) for i in range(n))]
    if grows and bias is not None:
        out = out + bias.reshape((1, -1) + (1,) * n)
    return out


def _transpose_pads(x, kernel, strides, dilations, output_padding, a):
    """ConvTranspose's (pads before, pads after) per spatial axis. Given an output_shape (or
    auto_pad SAME_*, which asks for input size * stride), the pads are the ONNX spec's: the
    total is the full result's size minus the size asked for, the odd one goes at the end
    for SAME_UPPER and at the start otherwise; explicit pads are then ignored."""
    n = len(kernel)
    auto = _text(a.get("auto_pad"), "NOTSET")
    sizes = [x.shape[2 + i] for i in range(n)]
    base = [(sizes[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    if "output_shape" in a:
        want = list(a["output_shape"])
        if len(want) != n:  # as onnxruntime and the reference, which refuse N and C too
            raise ONNXError(f"output_shape {want} must give the {n} spatial sizes (the "
                            "batch and channels are inferred)", op="ConvTranspose")
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        want = [sizes[i] * strides[i] for i in range(n)]
    elif auto == "VALID":
        return [0] * n, [0] * n
    else:
        pads = list(a.get("pads", [0] * (2 * n)))
        if len(pads) != 2 * n or any(p < 0 for p in pads):
            raise ONNXError(f"pads {pads} must be {2 * n} values >= 0", op="ConvTranspose")
        return pads[:n], pads[n:]
    for i in range(n):
        # Past base + stride - 1 no input position reaches: onnxruntime and the reference
        # refuse such a size, so rill does too rather than invent zeros.
        if not 0 <= want[i] < base[i] + strides[i]:
            raise ONNXError(f"output size {want[i]} on spatial axis {i} is out of reach: an "
                            f"input of size {sizes[i]} with stride {strides[i]}, kernel "
                            f"{kernel[i]} and dilation {dilations[i]} gives 0 to "
                            f"{base[i] + strides[i] - 1}", op="ConvTranspose")
    total = [base[i] + output_padding[i] - want[i] for i in range(n)]
    before = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
    return before, [t - b for t, b in zip(total, before)]


@row("MaxPool")
def _max_pool(run, node, ins, a):
    import rill.nn.functional as F
    x = ins[0]
    kernel = list(a["kernel_shape"])
    before, after, strides, dilations = _window(node, a, x, kernel)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype.storage).min
    ceil = bool(a.get("ceil_mode", 0))
    if len(node.output) > 1 and node.output[1]:
        from .import_pool import max_pool_with_indices
        return list(max_pool_with_indices(x, kernel, before, after, strides, dilations, ceil,
                                          low, a.get("storage_order", 0)))
    if x.dtype.kind != "f" or any(2 * p > k for p, k in zip(before + after, kernel * 2)):
        from .import_pool import max_pool  # integers, or pads wider than half the window
        return max_pool(x, kernel, before, after, strides, dilations, ceil, low)
    if ceil and (any(before) or any(after)):  # pads and partial windows: pad by hand
        x = _pad_spatial(x, before, after, low)
        before = after = [0] * len(kernel)
    if before != after:
        x = _pad_spatial(x, before, after, low)
        padding = 0
    else:
        padding = tuple(before)
    pool = getattr(F, f"max_pool{len(kernel)}d")
    return pool(x, tuple(kernel), stride=tuple(strides), padding=padding,
                dilation=tuple(dilations), ceil_mode=ceil)


@row("AveragePool")
def _avg_pool(run, node, ins, a):
    import rill.nn.functional as F
    x = ins[0]
    kernel = list(a["kernel_shape"])
    before, after, strides, dilations = _window(node, a, x, kernel)
    pool = getattr(F, f"avg_pool{len(kernel)}d")
    ceil = bool(a.get("ceil_mode", 0))
    include = bool(a.get("count_include_pad", 0))
    if any(d != 1 for d in dilations) or ceil:  # windows rill's pooling does not cover
        from .import_pool import average_pool
        return average_pool(x, kernel, before, after, strides, dilations, ceil, include)
    args = dict(stride=tuple(strides), padding=0, ceil_mode=ceil)
    if not any(before) and not any(after) and not ceil:
        return pool(x, tuple(kernel), **args)
    # mean = (sum of the window's inputs) / (how many of its entries count): both as
    # averages over the padded input, so whatever divisor the pool uses cancels.
    total = pool(_pad_spatial(x, before, after), tuple(kernel), **args)
    ones = rill().ones(x.shape, dtype=x.dtype)
    count = pool(_pad_spatial(ones, before, after, 1.0 if include else 0.0), tuple(kernel),
                 **args)
    return total / count


@row("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(run, node, ins, a):
    x = ins[0]
    axes = tuple(range(2, x.ndim))
    reduce = rill().mean if node.op_type == "GlobalAveragePool" else rill().max
    return reduce(x, axis=axes, keepdims=True)


def _channel(v, ndim):
    return v.reshape((-1,) + (1,) * (ndim - 2))


@row("BatchNormalization")
def _batch_norm(run, node, ins, a):
    x, scale, bias, mean, var = ins[:5]
    eps = a.get("epsilon", 1e-5)
    d = x.ndim
    if a.get("training_mode", 0):  # the batch's statistics (biased variance), and the
        # running ones moved toward them by 1 - momentum, as the specification says
        r = rill()
        axes = (0,) + tuple(range(2, d))
        batch_mean = r.mean(x, axis=axes)
        centered = x - _channel(batch_mean, d)
        batch_var = r.mean(centered * centered, axis=axes)
        m = a.get("momentum", 0.9)
        y = centered * r.rsqrt(_channel(batch_var, d) + eps) * _channel(scale, d) + \
            _channel(bias, d)
        return [y, mean * m + batch_mean.astype(mean.dtype) * (1 - m),
                var * m + batch_var.astype(var.dtype) * (1 - m)][:len(node.output)]
    return (x - _channel(mean, d)) * rill().rsqrt(_channel(var, d) + eps) * \
        _channel(scale, d) + _channel(bias, d)


def _normalize(x, axes, eps):
    r = rill()
    mean = r.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    var = r.mean(centered * centered, axis=axes, keepdims=True)
    inv = r.rsqrt(var + eps)
    return centered * inv, mean, inv


def _stashed(x, a):
    """Statistics in float32 for half-precision inputs (stash_type 1, the default)."""
    if a.get("stash_type", 1) == 1 and x.dtype.kind == "f" and x.dtype.itemsize < 4:
        return x.astype(rill().float32)
    return x


@row("InstanceNormalization")
def _instance_norm(run, node, ins, a):
    x, scale, bias = ins
    y, _, _ = _normalize(x, tuple(range(2, x.ndim)), a.get("epsilon", 1e-5))
    return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@row("LayerNormalization")
def _layer_norm(run, node, ins, a):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    axis = axis_of(a.get("axis", -1), x.ndim)
    y, mean, inv = _normalize(_stashed(x, a), tuple(range(axis, x.ndim)),
                              a.get("epsilon", 1e-5))
    y = y.astype(x.dtype) * scale
    if bias is not None:
        y = y + bias
    return [y, mean, inv]


@row("GroupNormalization")
def _group_norm(run, node, ins, a):
    x, scale, bias = ins
    groups = a["num_groups"]
    n, c = x.shape[:2]
    grouped = _stashed(x, a).reshape((n, groups, -1))
    y, _, _ = _normalize(grouped, (2,), a.get("epsilon", 1e-5))
    y = y.reshape(x.shape).astype(x.dtype)
    if scale.shape[0] != c:  # opset 18: one scale and bias per group
        scale = rill().repeat_interleave(scale, c // groups)
        bias = rill().repeat_interleave(bias, c // groups)
    return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@row("RMSNormalization")
def _rms_norm(run, node, ins, a):
    r = rill()
    x, scale = ins
    axis = axis_of(a.get("axis", -1), x.ndim)
    xs = _stashed(x, a)
    ms = r.mean(xs * xs, axis=tuple(range(axis, x.ndim)), keepdims=True)
    return (xs * r.rsqrt(ms + a.get("epsilon", 1e-5))).astype(x.dtype) * scale


@row("MeanVarianceNormalization")
def _mvn(run, node, ins, a):
    x = ins[0]
    axes = tuple(axis_of(i, x.ndim) for i in a.get("axes", [0, 2, 3]))
    r = rill()
    mean = r.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    std = r.sqrt(r.mean(centered * centered, axis=axes, keepdims=True))
    return centered / (std + 1e-9)


@row("LpNormalization")
def _lp_norm(run, node, ins, a):
    r = rill()
    x = ins[0]
    axis, p = a.get("axis", -1), a.get("p", 2)
    if p not in (1, 2):
        raise ONNXError(f"p must be 1 or 2, got {p}", op="LpNormalization")
    # A slice whose norm is 0 gives 0 (the spec), not 0/0; the norm is kept off 0 before
    # the division and the square root, so the gradient stays finite there too.
    if p == 1:
        norm = r.sum(r.abs(x), axis=axis, keepdims=True)
        zero = r.equal(norm, 0)
        safe = r.where(zero, 1, norm)
    else:
        squares = r.sum(x * x, axis=axis, keepdims=True)
        zero = r.equal(squares, 0)
        safe = r.sqrt(r.where(zero, 1, squares))
    return r.where(zero, 0, x / safe)


@row("LRN")
def _lrn(run, node, ins, a):
    r = rill()
    x = ins[0]
    size = a["size"]
    if size < 1:
        raise ONNXError(f"size must be >= 1, got {size}", op="LRN")
    run.meter.unroll("LRN's window", size)
    alpha, beta, bias = a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0)
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    squared = r.pad(x * x, ((0, 0), (before, after)) + ((0, 0),) * (x.ndim - 2))
    c = x.shape[1]
    total = sum(squared[:, i:i + c] for i in range(size))
    return x / r.power(total * (alpha / size) + bias, beta)


def _nll(r, log_prob, target, weight, ignore_index, reduction):
    ignored = None if ignore_index is None else r.equal(target, ignore_index)
    safe = target if ignored is None else r.where(ignored, 0, target)
    picked = r.take_along_axis(log_prob, r.expand_dims(safe.astype(r.int64), axis=1), axis=1)
    picked = picked.reshape(tuple(target.shape))
    w = r.take(weight, safe.astype(r.int64)) if weight is not None else r.ones_like(picked)
    if ignored is not None:
        w = r.where(ignored, r.zeros_like(w), w)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return r.sum(loss)
    return r.sum(loss) / r.sum(w)


@row("NegativeLogLikelihoodLoss")
def _nll_loss(run, node, ins, a):
    weight = ins[2] if len(ins) > 2 else None
    return _nll(rill(), ins[0], ins[1], weight, a.get("ignore_index"),
                _text(a.get("reduction"), "mean"))


@row("SoftmaxCrossEntropyLoss")
def _cross_entropy(run, node, ins, a):
    r = rill()
    log_prob = r.log_softmax(ins[0], axis=1)
    weight = ins[2] if len(ins) > 2 else None
    loss = _nll(r, log_prob, ins[1], weight, a.get("ignore_index"),
                _text(a.get("reduction"), "mean"))
    return [loss, log_prob]

