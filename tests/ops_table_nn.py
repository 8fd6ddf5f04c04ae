"""The op table's rows for rill.nn.functional: convolutions, pooling, softmax, normalization,
losses, attention, linear, embedding, dropout.

The NumPy float64 references below are deliberately naive, one output element (or one
window, one row, one sample) at a time: direct convolution summing kernel taps over an
explicitly zero-padded image, transposed convolution as a scatter, pooling window by window.
They share nothing with rill's kernels (im2col GEMMs, strided tap passes), so agreement is
evidence and not a tautology. Inputs stay small (<= ~200 elements each) because the
finite-difference check evaluates the op twice per input element.
"""
from __future__ import annotations

import math

import numpy as np
import torch

import rill
import rill.nn.functional as RF

from ops_table import Op, distinct, ints

TF = torch.nn.functional


# ---- naive NumPy references ----------------------------------------------------------------

def _two(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _conv_pads(padding, kernel, dilation):
    """padding as ((top, bottom), (left, right)), by PyTorch's documented rules."""
    if padding == "valid":
        return ((0, 0),) * len(kernel)
    if padding == "same":  # total d*(k-1); an odd total puts the extra pixel at the end
        return tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
                     for k, d in zip(kernel, dilation))
    return tuple((p, p) for p in ((padding,) * len(kernel) if isinstance(padding, int)
                                  else padding))


def _zero_pad(x, pads):
    """x (N, C, *spatial) inside a zero frame of the given (before, after) pads."""
    out = np.zeros(x.shape[:2] + tuple(s + a + b for s, (a, b) in zip(x.shape[2:], pads)))
    out[(slice(None), slice(None)) + tuple(slice(a, a + s) for s, (a, _) in
                                           zip(x.shape[2:], pads))] = x
    return out


def np_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    (sh, sw), (dh, dw) = _two(stride), _two(dilation)
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    xp = _zero_pad(x, _conv_pads(padding, (kh, kw), (dh, dw)))
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for s, oc, i, j in np.ndindex(n, o, oh, ow):
        first = (oc // og) * cg  # the first input channel of this output channel's group
        acc = 0.0
        for ci, ki, kj in np.ndindex(cg, kh, kw):
            acc += xp[s, first + ci, i * sh + ki * dh, j * sw + kj * dw] * w[oc, ci, ki, kj]
        out[s, oc, i, j] = acc + (0.0 if b is None else b[oc])
    return out


def np_conv1d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    n = x.shape[0]
    o, cg, k = w.shape
    (pads,) = _conv_pads(padding if isinstance(padding, str) else (padding,), (k,), (dilation,))
    xp = _zero_pad(x, (pads,))
    length = (xp.shape[2] - dilation * (k - 1) - 1) // stride + 1
    og = o // groups
    out = np.zeros((n, o, length))
    for s, oc, i in np.ndindex(n, o, length):
        first = (oc // og) * cg
        out[s, oc, i] = sum(xp[s, first + ci, i * stride + ki * dilation] * w[oc, ci, ki]
                            for ci, ki in np.ndindex(cg, k)) + (0.0 if b is None else b[oc])
    return out


def np_conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1,
                        dilation=1):
    """Each input pixel scatters its kernel-weighted copy into the output; then crop."""
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = map(_two, (stride, padding, output_padding,
                                                          dilation))
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    full = np.zeros((n, og * groups, (h - 1) * sh + dh * (kh - 1) + 1 + oph,
                     (wd - 1) * sw + dw * (kw - 1) + 1 + opw))
    for s, ci, i, j in np.ndindex(n, c, h, wd):
        for oc, ki, kj in np.ndindex(og, kh, kw):
            full[s, (ci // cg) * og + oc, i * sh + ki * dh, j * sw + kj * dw] += (
                x[s, ci, i, j] * w[ci, oc, ki, kj])
    out_h = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    out_w = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    out = full[:, :, ph:ph + out_h, pw:pw + out_w]
    return out if b is None else out + b[None, :, None, None]


def _batched(fn):
    """Let a reference take (C, H, W) as well as (N, C, H, W)."""
    def run(x, *args, **kwargs):
        if x.ndim == 3:
            out = fn(x[None], *args, **kwargs)
            return tuple(o[0] for o in out) if isinstance(out, tuple) else out[0]
        return fn(x, *args, **kwargs)
    return run


def _windows(shape, kernel, stride, padding, dilation=(1, 1)):
    """Yield ((i, j), [(row, col) of each tap, unpadded coordinates, row-major]) per output."""
    (h, w), (kh, kw), (sh, sw), (ph, pw), (dh, dw) = shape, kernel, stride, padding, dilation
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    for i, j in np.ndindex(oh, ow):
        yield (i, j), (oh, ow), [(i * sh - ph + ki * dh, j * sw - pw + kj * dw)
                                 for ki, kj in np.ndindex(kh, kw)]


@_batched
def np_max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1):
    """(maxima, flat index into H*W of the first maximum of each window)."""
    k = _two(kernel_size)
    st = k if stride is None else _two(stride)
    n, c, h, w = x.shape
    out = idx = None
    for (i, j), (oh, ow), taps in _windows((h, w), k, st, _two(padding), _two(dilation)):
        if out is None:
            out, idx = np.zeros((n, c, oh, ow)), np.zeros((n, c, oh, ow), dtype=np.int64)
        for s, ch in np.ndindex(n, c):
            best, where = -np.inf, -1
            for r, q in taps:
                if 0 <= r < h and 0 <= q < w and x[s, ch, r, q] > best:
                    best, where = x[s, ch, r, q], r * w + q
            out[s, ch, i, j], idx[s, ch, i, j] = best, where
    return out, idx


@_batched
def np_avg_pool2d(x, kernel_size, stride=None, padding=0, count_include_pad=True):
    k = _two(kernel_size)
    st = k if stride is None else _two(stride)
    n, c, h, w = x.shape
    out = None
    for (i, j), (oh, ow), taps in _windows((h, w), k, st, _two(padding)):
        if out is None:
            out = np.zeros((n, c, oh, ow))
        real = [(r, q) for r, q in taps if 0 <= r < h and 0 <= q < w]
        divisor = len(taps) if count_include_pad else len(real)
        for s, ch in np.ndindex(n, c):
            out[s, ch, i, j] = sum(x[s, ch, r, q] for r, q in real) / divisor
    return out


@_batched
def np_adaptive_avg_pool2d(x, output_size):
    oh, ow = _two(output_size)
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow))
    for i, j in np.ndindex(oh, ow):
        r0, r1 = math.floor(i * h / oh), math.ceil((i + 1) * h / oh)
        c0, c1 = math.floor(j * w / ow), math.ceil((j + 1) * w / ow)
        out[:, :, i, j] = x[:, :, r0:r1, c0:c1].mean(axis=(2, 3))
    return out


def _rows(x, axis):
    """Yield (index, 1-d view) of each row of x along axis; writes through to x."""
    moved = np.moveaxis(x, axis, -1)
    for idx in np.ndindex(moved.shape[:-1]):
        yield moved[idx]


def np_softmax(x, axis=-1):
    if x.ndim == 0:
        return np.ones(())
    out = x.copy()
    for row in _rows(out, axis):
        if row.size:
            e = np.exp(row - row.max())
            row[:] = e / e.sum()
    return out


def np_log_softmax(x, axis=-1):
    if x.ndim == 0:
        return np.zeros(())
    out = x.copy()
    for row in _rows(out, axis):
        if row.size:
            shifted = row - row.max()
            row[:] = shifted - math.log(np.exp(shifted).sum())
    return out


def np_batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
                  training=False, momentum=0.1, eps=1e-5):
    """(y, new running mean, new running var), channel by channel."""
    c = x.shape[1]
    y = np.zeros_like(x)
    new_mean = None if running_mean is None else running_mean.copy()
    new_var = None if running_var is None else running_var.copy()
    for ch in range(c):
        values = x[:, ch]
        if training:
            mu, var = values.mean(), ((values - values.mean()) ** 2).mean()
            if new_mean is not None:
                unbiased = var * values.size / (values.size - 1)
                new_mean[ch] = (1 - momentum) * running_mean[ch] + momentum * mu
                new_var[ch] = (1 - momentum) * running_var[ch] + momentum * unbiased
        else:
            mu, var = running_mean[ch], running_var[ch]
        y[:, ch] = (values - mu) / math.sqrt(var + eps)
        if weight is not None:
            y[:, ch] *= weight[ch]
        if bias is not None:
            y[:, ch] += bias[ch]
    return y, new_mean, new_var


def np_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    k = len(normalized_shape)
    rows = x.reshape((-1,) + x.shape[x.ndim - k:])
    out = np.zeros_like(rows)
    for r in range(rows.shape[0]):
        v = rows[r]
        out[r] = (v - v.mean()) / math.sqrt(((v - v.mean()) ** 2).mean() + eps)
        if weight is not None:
            out[r] = out[r] * weight
        if bias is not None:
            out[r] = out[r] + bias
    return out.reshape(x.shape)


def np_group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    n, c = x.shape[:2]
    per = c // num_groups
    out = np.zeros_like(x)
    for s, g in np.ndindex(n, num_groups):
        v = x[s, g * per:(g + 1) * per]
        out[s, g * per:(g + 1) * per] = (v - v.mean()) / math.sqrt(v.var() + eps)
    for ch in range(c):
        if weight is not None:
            out[:, ch] *= weight[ch]
        if bias is not None:
            out[:, ch] += bias[ch]
    return out


def _reduce(per_sample, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduction](per_sample)


def _samples(x):
    """(N, C, d...) -> (N*d..., C) rows, and the sample shape; (C,) is one sample."""
    if x.ndim == 1:
        return x[None], ()
    moved = np.moveaxis(x, 1, -1)
    return moved.reshape(-1, x.shape[1]), moved.shape[:-1]


def np_nll_loss(lp, target, weight=None, ignore_index=-100, reduction="mean"):
    rows, sample_shape = _samples(lp)
    c = rows.shape[1]
    w = np.ones(c) if weight is None else weight
    t = np.asarray(target).reshape(-1)
    loss, total = np.zeros(len(t)), 0.0
    for s, cls in enumerate(t):
        if cls != ignore_index:
            loss[s] = -w[cls] * rows[s, cls]
            total += w[cls]
    if reduction == "mean":
        return loss.sum() / total
    return _reduce(loss.reshape(sample_shape), reduction)


def np_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean",
                     label_smoothing=0.0):
    """PyTorch's semantics: the smoothing term is the (weighted) mean over classes of -log p,
    counted for the same samples and normalized like the nll term."""
    lp = np_log_softmax(logits, axis=1 if logits.ndim > 1 else 0)
    rows, sample_shape = _samples(lp)
    c = rows.shape[1]
    w = np.ones(c) if weight is None else weight
    eps = label_smoothing
    if np.asarray(target).dtype.kind == "f":  # class probabilities
        probs, _ = _samples(target)
        probs = probs * (1 - eps) + eps / c
        loss = np.array([-(rows[s] * w * probs[s]).sum() for s in range(len(rows))])
        return _reduce(loss.reshape(sample_shape), reduction)
    t = np.asarray(target).reshape(-1)
    loss, total = np.zeros(len(t)), 0.0
    for s, cls in enumerate(t):
        if cls != ignore_index:
            loss[s] = (1 - eps) * -w[cls] * rows[s, cls] + eps / c * -(w * rows[s]).sum()
            total += w[cls]
    if reduction == "mean":
        return loss.sum() / total
    return _reduce(loss.reshape(sample_shape), reduction)


def np_huber(x, y, reduction="mean", delta=1.0):
    d = np.abs(x - y)
    out = np.zeros_like(d)
    for idx in np.ndindex(d.shape):
        out[idx] = 0.5 * d[idx] ** 2 if d[idx] < delta else delta * (d[idx] - 0.5 * delta)
    return _reduce(out, reduction)


def np_bce_logits(x, y, weight=None, pos_weight=None, reduction="mean"):
    p = 1 / (1 + np.exp(-x))
    pw = 1.0 if pos_weight is None else pos_weight
    loss = -(pw * y * np.log(p) + (1 - y) * np.log(1 - p))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def np_sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    lq, sk = q.shape[-2], k.shape[-2]
    mask = np.zeros((lq, sk)) if attn_mask is None else attn_mask
    if is_causal:
        mask = np.array([[j <= i for j in range(sk)] for i in range(lq)])
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for b in np.ndindex(q.shape[:-2]):
        m = mask[b[len(b) - (mask.ndim - 2):]] if mask.ndim > 2 else mask
        scores = q[b] @ k[b].T * scale
        scores = np.where(m, scores, -np.inf) if m.dtype == bool else scores + m
        out[b] = np_softmax(scores, -1) @ v[b]
    return out


# ---- naive N-d references (conv3d, conv_transpose3d, max_pool3d) ----------------------------

def _ntuple(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def np_conv_nd(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """Direct convolution over any number of spatial axes, one output element at a time."""
    rank = w.ndim - 2
    st, dil = _ntuple(stride, rank), _ntuple(dilation, rank)
    o, cg, *kernel = w.shape
    xp = _zero_pad(x, _conv_pads(padding, kernel, dil))
    size = [(xp.shape[2 + d] - dil[d] * (kernel[d] - 1) - 1) // st[d] + 1 for d in range(rank)]
    og = o // groups
    out = np.zeros((x.shape[0], o, *size))
    for s, oc, *pos in np.ndindex(x.shape[0], o, *size):
        first = (oc // og) * cg
        acc = 0.0
        for ci, *tap in np.ndindex(cg, *kernel):
            where = tuple(p * st[d] + t * dil[d] for d, (p, t) in enumerate(zip(pos, tap)))
            acc += xp[(s, first + ci) + where] * w[(oc, ci, *tap)]
        out[(s, oc, *pos)] = acc + (0.0 if b is None else b[oc])
    return out


def np_conv_transpose_nd(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1,
                         dilation=1):
    """Each input element scatters its kernel-weighted copy into the output; then crop."""
    rank = w.ndim - 2
    st, pad, opad, dil = (_ntuple(v, rank) for v in (stride, padding, output_padding, dilation))
    n, c, *size = x.shape
    _, og, *kernel = w.shape
    cg = c // groups
    full = np.zeros((n, og * groups, *[(size[d] - 1) * st[d] + dil[d] * (kernel[d] - 1) + 1
                                       + opad[d] for d in range(rank)]))
    for s, ci, *pos in np.ndindex(n, c, *size):
        for oc, *tap in np.ndindex(og, *kernel):
            where = tuple(p * st[d] + t * dil[d] for d, (p, t) in enumerate(zip(pos, tap)))
            full[(s, (ci // cg) * og + oc) + where] += x[(s, ci, *pos)] * w[(ci, oc, *tap)]
    crop = tuple(slice(pad[d], full.shape[2 + d] - pad[d]) for d in range(rank))
    out = full[(slice(None), slice(None)) + crop]
    return out if b is None else out + b.reshape((-1,) + (1,) * rank)


def _pool_size(length, k, s, p, d, ceil_mode):
    """PyTorch's documented output length; with ceil_mode a last window that would start in
    the right padding is dropped."""
    span = length + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= length + p:
        out -= 1
    return out


def np_max_pool_nd(x, rank, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """(maxima, flat index into the spatial axes of each window's first maximum); the input
    is (N, C, *spatial) or (C, *spatial)."""
    if x.ndim == rank + 1:
        out, idx = np_max_pool_nd(x[None], rank, kernel_size, stride, padding, dilation,
                                  ceil_mode)
        return out[0], idx[0]
    k = _ntuple(kernel_size, rank)
    st = k if stride is None else _ntuple(stride, rank)
    pad, dil = _ntuple(padding, rank), _ntuple(dilation, rank)
    spatial = x.shape[2:]
    size = [_pool_size(spatial[d], k[d], st[d], pad[d], dil[d], ceil_mode) for d in range(rank)]
    out = np.zeros(x.shape[:2] + tuple(size))
    idx = np.zeros(out.shape, dtype=np.int64)
    for s, ch, *pos in np.ndindex(*out.shape):
        best, where = -np.inf, -1
        for tap in np.ndindex(*k):
            at = [p * st[d] - pad[d] + t * dil[d] for d, (p, t) in enumerate(zip(pos, tap))]
            if all(0 <= a < spatial[d] for d, a in enumerate(at)) and x[(s, ch, *at)] > best:
                best, where = x[(s, ch, *at)], int(np.ravel_multi_index(at, spatial))
        out[(s, ch, *pos)], idx[(s, ch, *pos)] = best, where
    return out, idx



def np_avg_pool_nd(x, rank, kernel_size, stride=None, padding=0, ceil_mode=False,
                   count_include_pad=True, divisor_override=None):
    """Window means by PyTorch's documented divisor: the window clipped to the padded input
    (count_include_pad), or to the real input, or divisor_override."""
    if x.ndim == rank + 1:
        return np_avg_pool_nd(x[None], rank, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)[0]
    k = _ntuple(kernel_size, rank)
    st = k if stride is None else _ntuple(stride, rank)
    pad = _ntuple(padding, rank)
    spatial = x.shape[2:]
    size = [_pool_size(spatial[d], k[d], st[d], pad[d], 1, ceil_mode) for d in range(rank)]
    out = np.zeros(x.shape[:2] + tuple(size))
    for pos in np.ndindex(*size):
        lo = [p * st[d] - pad[d] for d, p in enumerate(pos)]
        hi = [min(lo[d] + k[d], spatial[d] + pad[d]) for d in range(rank)]
        padded_count = math.prod(b - a for a, b in zip(lo, hi))
        lo = [max(v, 0) for v in lo]
        hi = [min(h, spatial[d]) for d, h in enumerate(hi)]
        window = x[(slice(None), slice(None)) + tuple(slice(a, b) for a, b in zip(lo, hi))]
        divisor = (divisor_override or (padded_count if count_include_pad
                                        else math.prod(b - a for a, b in zip(lo, hi))))
        out[(slice(None), slice(None)) + pos] = window.sum(axis=tuple(range(2, 2 + rank))) / divisor
    return out


def np_adaptive_pool_nd(x, rank, output_size, reduce=np.mean):
    """Output cell i of n over length L reads [floor(i L / n), ceil((i + 1) L / n))."""
    if x.ndim == rank + 1:
        return np_adaptive_pool_nd(x[None], rank, output_size, reduce)[0]
    size = _ntuple(output_size, rank)
    spatial = x.shape[2:]
    out = np.zeros(x.shape[:2] + size)
    for pos in np.ndindex(*size):
        box = tuple(slice(math.floor(i * n_in / n), math.ceil((i + 1) * n_in / n))
                    for i, n, n_in in zip(pos, size, spatial))
        out[(slice(None), slice(None)) + pos] = reduce(x[(slice(None), slice(None)) + box],
                                                       axis=tuple(range(2, 2 + rank)))
    return out


def np_instance_norm(x, weight=None, bias=None, eps=1e-5):
    out = np.zeros_like(x)
    for s, ch in np.ndindex(*x.shape[:2]):
        v = x[s, ch]
        out[s, ch] = (v - v.mean()) / math.sqrt(((v - v.mean()) ** 2).mean() + eps)
        if weight is not None:
            out[s, ch] = out[s, ch] * weight[ch] + bias[ch]
    return out


def np_rms_norm(x, k, weight=None, eps=None):
    eps = np.finfo(np.float64).eps if eps is None else eps
    axes = tuple(range(x.ndim - k, x.ndim))
    out = x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps)
    return out if weight is None else out * weight


def np_local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0):
    """Channel c is divided by (k + alpha/size * sum of squares over channels
    c - size//2 .. c + (size-1)//2 that exist) ** beta."""
    out = np.zeros_like(x)
    c = x.shape[1]
    for ch in range(c):
        near = x[:, max(ch - size // 2, 0):min(ch + (size - 1) // 2 + 1, c)]
        out[:, ch] = x[:, ch] / (k + alpha / size * np.sum(near * near, axis=1)) ** beta
    return out


# ---- input makers --------------------------------------------------------------------------

def fixed(values, dtype=np.int64):
    """A fixed input (class labels with an ignored entry, a mask with a True in each row)."""
    return lambda rng: np.array(values, dtype=dtype)


def uniform(shape, low, high):
    return lambda rng: rng.uniform(low, high, size=shape)


def probabilities(shape, axis=1):
    """Rows of class probabilities (positive, summing to one along axis)."""
    def make(rng):
        e = np.exp(rng.uniform(-1, 1, size=shape))
        return e / e.sum(axis=axis, keepdims=True)
    return make


def hard_labels(shape):
    """0/1 float targets."""
    return lambda rng: (rng.random(shape) > 0.5).astype(np.float64)


def shifted(shape, offset):
    """Values far from zero: softmax must shift by the max (exp(1000) overflows)."""
    return lambda rng: rng.uniform(-2, 2, size=shape) + offset


# ---- rows ----------------------------------------------------------------------------------

def conv2d_row(name, shapes, **kw):
    return Op(name, lambda x, w, b=None: RF.conv2d(x, w, b, **kw),
              lambda x, w, b=None: np_conv2d(x, w, b, **kw),
              lambda x, w, b=None: TF.conv2d(x, w, b, **kw), shapes)


def conv1d_row(name, shapes, **kw):
    return Op(name, lambda x, w, b=None: RF.conv1d(x, w, b, **kw),
              lambda x, w, b=None: np_conv1d(x, w, b, **kw),
              lambda x, w, b=None: TF.conv1d(x, w, b, **kw), shapes)


def conv_t_row(name, shapes, **kw):
    return Op(name, lambda x, w, b=None: RF.conv_transpose2d(x, w, b, **kw),
              lambda x, w, b=None: np_conv_transpose2d(x, w, b, **kw),
              lambda x, w, b=None: TF.conv_transpose2d(x, w, b, **kw), shapes)


def conv3d_row(name, shapes, **kw):
    return Op(name, lambda x, w, b=None: RF.conv3d(x, w, b, **kw),
              lambda x, w, b=None: np_conv_nd(x, w, b, **kw),
              lambda x, w, b=None: TF.conv3d(x, w, b, **kw), shapes)


def conv_t3d_row(name, shapes, **kw):
    return Op(name, lambda x, w, b=None: RF.conv_transpose3d(x, w, b, **kw),
              lambda x, w, b=None: np_conv_transpose_nd(x, w, b, **kw),
              lambda x, w, b=None: TF.conv_transpose3d(x, w, b, **kw), shapes)


def max_pool3d_row(name, shapes, **kw):
    return Op(name, lambda x: RF.max_pool3d(x, **kw), lambda x: np_max_pool_nd(x, 3, **kw)[0],
              lambda x: TF.max_pool3d(x, **kw), [(distinct(s),) for s in shapes])



def max_pool_row(name, shapes, **kw):
    return Op(name, lambda x: RF.max_pool2d(x, **kw), lambda x: np_max_pool2d(x, **kw)[0],
              lambda x: TF.max_pool2d(x, **kw), [(distinct(s),) for s in shapes])


def avg_pool_row(name, shapes, **kw):
    return Op(name, lambda x: RF.avg_pool2d(x, **kw), lambda x: np_avg_pool2d(x, **kw),
              lambda x: TF.avg_pool2d(x, **kw), [(s,) for s in shapes])


def softmax_rows(axis, shapes, suffix, **extra):
    return [Op(f"{name}{suffix}", (lambda f: lambda x: f(x, axis=axis))(rf),
               (lambda f: lambda x: f(x, axis))(ref), (lambda f: lambda x: f(x, axis))(tf),
               shapes, **extra)
            for name, rf, ref, tf in (("softmax", RF.softmax, np_softmax, torch.softmax),
                                      ("log_softmax", RF.log_softmax, np_log_softmax,
                                       torch.log_softmax))]


def _fresh_stats(x):
    """New running statistics for each call: training batch_norm updates them in place."""
    c = x.shape[1]
    return rill.zeros(c, dtype=x.dtype, device=x.device), rill.ones(c, dtype=x.dtype, device=x.device)


def _torch_fresh_stats(x):
    c = x.shape[1]
    return torch.zeros(c, dtype=x.dtype), torch.ones(c, dtype=x.dtype)


def _bn_train(x, w=None, b=None):
    return RF.batch_norm(x, *_fresh_stats(x), w, b, training=True)


def _bn_train_torch(x, w=None, b=None):
    return TF.batch_norm(x, *_torch_fresh_stats(x), w, b, training=True)


def _bn_updated(x, rm, rv, w, b):
    """y and the running statistics after one training step (same tensors, updated)."""
    y = RF.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3)
    return y, rm, rv


def _bn_updated_torch(x, rm, rv, w, b):
    rm, rv = rm.detach().clone(), rv.detach().clone()
    y = TF.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3)
    return y, rm, rv


def loss_row(name, rfn, ref, tfn, shapes, **kw):
    return Op(name, rfn, ref, tfn, shapes, **kw)


CE_LABELS = fixed([0, -1, 3, 2, -1, 4])  # two entries ignored with ignore_index=-1
CLASS_WEIGHT = fixed([1.0, 2.0, 0.5, 1.5, 0.7], np.float64)
BOOL_MASK = fixed([[True, False, True, False, False],
                   [False, True, True, True, False],
                   [True, True, False, False, True]], bool)


def _adam(decoupled):
    """rill's fused Adam step at step 3 (lr 0.01, betas 0.9/0.999, eps 1e-8, decay 0.1)."""
    lr, b1, b2, wd, t = 0.01, 0.9, 0.999, 0.1, 3

    def fn(p, g, m, v):
        step_size = rill.tensor(lr / (1 - b1 ** t), dtype=p.dtype, device=p.device)
        bc2 = rill.tensor(math.sqrt(1 - b2 ** t), dtype=p.dtype, device=p.device)
        return rill.ops.updates.adam_update(
            p, g, m, v, step_size, bc2, beta1=b1, beta2=b2, eps=1e-8,
            weight_decay=0.0 if decoupled else wd, decay=1 - lr * wd if decoupled else 1.0)

    def ref(p, g, m, v):
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        return p - lr / (1 - b1 ** t) * m / (np.sqrt(v) / math.sqrt(1 - b2 ** t) + 1e-8), m, v
    return fn, ref


def _positive(shape):
    return lambda rng: rng.uniform(0.01, 1.0, size=shape)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946
_ZERO_ROW_NP = np.array([[1.0], [0.0], [1.0]])


def _np_glu(x, axis):
    a, b = np.split(x, 2, axis=axis)
    return a / (1 + np.exp(-b))


def _np_cosine(x, y, axis, eps=1e-8):
    """PyTorch's documented form: x.y / max(|x| |y|, eps)."""
    x, y = np.broadcast_arrays(x, y)
    axis = axis if x.ndim > 1 else 0
    nx, ny = np.linalg.norm(x, axis=axis), np.linalg.norm(y, axis=axis)
    return np.sum(x * y, axis=axis) / np.maximum(nx * ny, eps)


def _signs(shape):
    return lambda rng: np.where(rng.random(shape) > 0.5, 1.0, -1.0)


def _np_poisson(x, y, log_input, full):
    loss = np.exp(x) - y * x if log_input else x - y * np.log(x + 1e-8)
    if full:  # Stirling's term, counted where the target exceeds 1
        stirling = y * np.log(np.where(y > 1, y, 1)) - y + 0.5 * np.log(2 * np.pi * np.where(
            y > 1, y, 1))
        loss = loss + np.where(y > 1, stirling, 0)
    return loss


def _lstm_layer(lib, reverse=False):
    """One LSTM layer from its input projections, step by step (NumPy or torch)."""
    sig = (lambda a: 1 / (1 + np.exp(-a))) if lib is np else torch.sigmoid

    def run(proj, h, c, w, b):
        hs = [None] * proj.shape[0]
        for t in (range(proj.shape[0] - 1, -1, -1) if reverse else range(proj.shape[0])):
            gates = proj[t] + h @ w.T + b
            i, f, g, o = (gates[:, k * w.shape[1]:(k + 1) * w.shape[1]] for k in range(4))
            c = sig(f) * c + sig(i) * lib.tanh(g)
            h = sig(o) * lib.tanh(c)
            hs[t] = h
        return lib.stack(hs), h, c
    return run


NN_OPS = [
    # ---- convolutions ----------------------------------------------------------------------
    conv2d_row("conv2d", [((2, 3, 4, 5), (4, 3, 3, 3), (4,)), ((1, 2, 3, 3), (3, 2, 3, 3)),
                          ((1, 2, 4, 4), (2, 2, 1, 1))]),
    conv2d_row("conv2d_stride_pad", [((1, 2, 6, 5), (3, 2, 3, 3), (3,)),
                                     ((2, 1, 5, 5), (2, 1, 2, 2))], stride=2, padding=1),
    conv2d_row("conv2d_tuples", [((1, 2, 6, 5), (2, 2, 2, 3), (2,))],
               stride=(2, 1), padding=(1, 2)),
    conv2d_row("conv2d_same_even_kernel", [((1, 2, 5, 6), (2, 2, 2, 4), (2,)),
                                           ((1, 1, 4, 4), (2, 1, 3, 3))],
               padding="same", dilation=(2, 1)),
    conv2d_row("conv2d_valid", [((1, 2, 5, 5), (3, 2, 3, 2))], padding="valid"),
    conv2d_row("conv2d_dilation", [((1, 2, 6, 6), (2, 2, 3, 3), (2,))], dilation=2, padding=2),
    conv2d_row("conv2d_groups", [((1, 4, 4, 4), (6, 2, 3, 3), (6,))], groups=2, padding=1),
    conv2d_row("conv2d_depthwise", [((2, 3, 4, 4), (6, 1, 3, 3), (6,)),
                                    ((1, 3, 5, 5), (3, 1, 2, 2))], groups=3, stride=(1, 2)),
    conv1d_row("conv1d", [((2, 3, 7), (4, 3, 3), (4,)), ((1, 2, 5), (3, 2, 1))]),
    conv1d_row("conv1d_stride_pad_dilation", [((2, 2, 9), (3, 2, 3), (3,))],
               stride=2, padding=1, dilation=2),
    conv1d_row("conv1d_groups_same", [((1, 4, 6), (4, 2, 4), (4,))], groups=2, padding="same"),
    conv_t_row("conv_transpose2d", [((2, 3, 3, 3), (3, 2, 3, 3), (2,)),
                                    ((1, 2, 2, 3), (2, 3, 2, 2))]),
    conv_t_row("conv_transpose2d_stride_pad_outpad", [((1, 2, 3, 3), (2, 3, 3, 3), (3,))],
               stride=2, padding=1, output_padding=1),
    conv_t_row("conv_transpose2d_tuples", [((1, 2, 3, 2), (2, 2, 3, 4), (2,))],
               stride=(2, 3), padding=(1, 0), output_padding=(1, 2)),
    conv_t_row("conv_transpose2d_groups_dilation", [((1, 4, 3, 3), (4, 2, 2, 2), (4,))],
               groups=2, dilation=2, padding=1),
    conv_t_row("conv_transpose2d_outpad_by_dilation", [((1, 2, 3, 3), (2, 2, 2, 2))],
               dilation=2, output_padding=1),
    # ---- pooling ---------------------------------------------------------------------------
    max_pool_row("max_pool2d", [(2, 2, 4, 4), (3, 4, 5)], kernel_size=2),
    max_pool_row("max_pool2d_stride_pad", [(1, 2, 5, 5), (2, 1, 6, 4)], kernel_size=3,
                 stride=2, padding=1),
    max_pool_row("max_pool2d_overlapping_dilated", [(1, 2, 5, 6)], kernel_size=(2, 3),
                 stride=(1, 2), padding=1, dilation=(2, 1)),
    # Taps in the padding alias the flat index of real pixels (w=4: tap (0, 2) and tap
    # (1, 0) are both offset -1); the gradient must still reach only the real winner.
    max_pool_row("max_pool2d_aliasing_taps", [(1, 2, 4, 4)], kernel_size=(2, 3), stride=1,
                 padding=1, dilation=(1, 2)),
    Op("max_pool2d_indices", lambda x: RF.max_pool2d(x, 3, 2, 1, return_indices=True),
       lambda x: np_max_pool2d(x, 3, 2, 1),
       lambda x: TF.max_pool2d(x, 3, 2, 1, return_indices=True), [(distinct((2, 2, 5, 4)),),
                                                                   (distinct((2, 5, 5)),)]),
    avg_pool_row("avg_pool2d", [(2, 2, 4, 4), (3, 4, 5)], kernel_size=2),
    *[avg_pool_row(f"avg_pool2d_pad_{'incl' if incl else 'excl'}", [(1, 2, 5, 5), (2, 1, 4, 6)],
                   kernel_size=3, stride=2, padding=1, count_include_pad=incl)
      for incl in (True, False)],
    avg_pool_row("avg_pool2d_rect_excl", [(1, 2, 4, 5)], kernel_size=(2, 3), stride=(1, 2),
                 padding=1, count_include_pad=False),
    *[Op(f"adaptive_avg_pool2d_{i}", (lambda o: lambda x: RF.adaptive_avg_pool2d(x, o))(out),
         (lambda o: lambda x: np_adaptive_avg_pool2d(x, o))(out),
         (lambda o: lambda x: TF.adaptive_avg_pool2d(x, o))(out), [(s,) for s in shapes])
      for i, (out, shapes) in enumerate((((3, 4), [(1, 2, 5, 7), (2, 7, 6)]),
                                         (1, [(2, 3, 4, 4)]),
                                         ((4, 5), [(1, 2, 3, 4)]),  # larger than the input
                                         (2, [(2, 2, 5, 3)])))],
    # ---- softmax ---------------------------------------------------------------------------
    *softmax_rows(-1, [((3, 4),), ((),), ((0, 3),), ((2, 0),), ((2, 1, 5),)], ""),
    *softmax_rows(0, [((3, 4),), ((5,),), ((),), ((0, 2),)], "_axis0"),
    *softmax_rows(1, [((2, 3, 4),), ((2, 1, 3),)], "_axis1"),
    *softmax_rows(-1, [(shifted((3, 4), 1000.0),), (shifted((2, 5), -1000.0),)], "_large"),
    # ---- normalization ---------------------------------------------------------------------
    Op("batch_norm_train", _bn_train, lambda x, w=None, b=None: np_batch_norm(x, None, None,
                                                                              w, b, True)[0],
       _bn_train_torch, [((4, 3), (3,), (3,)), ((2, 3, 2, 2), (3,), (3,)), ((3, 2, 4),)]),
    Op("batch_norm_train_no_stats", lambda x: RF.batch_norm(x, training=True),
       lambda x: np_batch_norm(x, training=True)[0],
       lambda x: TF.batch_norm(x, None, None, training=True), [((5, 2),), ((2, 3, 3),)]),
    # The running statistics after one step (momentum 0.3, unbiased variance): forward only,
    # since the update happens outside the tape.
    Op("batch_norm_running_update", _bn_updated,
       lambda x, rm, rv, w, b: np_batch_norm(x, rm, rv, w, b, True, 0.3),
       _bn_updated_torch, [((4, 3, 2), (3,), uniform((3,), 0.5, 2.0), (3,), (3,))],
       grad=False),
    Op("batch_norm_eval",
       lambda x, rm, rv, w=None, b=None: RF.batch_norm(x, rm, rv, w, b, training=False),
       lambda x, rm, rv, w=None, b=None: np_batch_norm(x, rm, rv, w, b)[0],
       lambda x, rm, rv, w=None, b=None: TF.batch_norm(x, rm, rv, w, b, training=False),
       [((4, 3), (3,), uniform((3,), 0.5, 2.0), (3,), (3,)),
        ((2, 3, 2, 2), (3,), uniform((3,), 0.5, 2.0))], nondiff_inputs=(1, 2)),
    # PyTorch does not differentiate the running statistics; finite differences do.
    Op("batch_norm_eval_stats_grad",
       lambda x, rm, rv: RF.batch_norm(x, rm, rv, training=False),
       lambda x, rm, rv: np_batch_norm(x, rm, rv)[0], None,
       [((4, 3), (3,), uniform((3,), 0.5, 2.0))]),
    *[Op(f"layer_norm_{i}", (lambda s: lambda x, w=None, b=None: RF.layer_norm(x, s, w, b))(ns),
         (lambda s: lambda x, w=None, b=None: np_layer_norm(x, _tuple(s), w, b))(ns),
         (lambda s: lambda x, w=None, b=None: TF.layer_norm(x, _tuple(s), w, b))(ns), shapes)
      for i, (ns, shapes) in enumerate(((4, [((3, 4), (4,), (4,)), ((2, 3, 4),)]),
                                        ((3, 4), [((2, 3, 4), (3, 4), (3, 4))]),
                                        ((5,), [((5,), (5,), (5,))])))],
    *[Op(f"group_norm_{g}", (lambda n: lambda x, w=None, b=None: RF.group_norm(x, n, w, b))(g),
         (lambda n: lambda x, w=None, b=None: np_group_norm(x, n, w, b))(g),
         (lambda n: lambda x, w=None, b=None: TF.group_norm(x, n, w, b))(g), shapes)
      for g, shapes in ((2, [((2, 4, 3), (4,), (4,)), ((2, 6, 2, 2),)]),
                        (1, [((2, 3, 2, 2), (3,), (3,))]),
                        (3, [((2, 3, 5), (3,), (3,))]))],  # one channel per group
    # ---- losses ----------------------------------------------------------------------------
    *[Op(f"nll_loss_{red}", (lambda r: lambda x, t: RF.nll_loss(x, t, reduction=r))(red),
         (lambda r: lambda x, t: np_nll_loss(x, t, reduction=r))(red),
         (lambda r: lambda x, t: TF.nll_loss(x, t, reduction=r))(red),
         [((5, 4), ints((5,), 0, 4)), ((2, 3, 4), ints((2, 4), 0, 3)),
          ((4,), ints((), 0, 4))])
      for red in ("mean", "sum", "none")],
    Op("nll_loss_weight_ignore",
       lambda x, t, w: RF.nll_loss(x, t, w, ignore_index=-1),
       lambda x, t, w: np_nll_loss(x, t, w, ignore_index=-1),
       lambda x, t, w: TF.nll_loss(x, t, w, ignore_index=-1),
       [((6, 5), CE_LABELS, CLASS_WEIGHT)], nondiff_inputs=(2,)),
    # PyTorch has no gradient for the class weights; rill's composite does.
    Op("nll_loss_weight_grad", lambda x, t, w: RF.nll_loss(x, t, w, ignore_index=-1),
       lambda x, t, w: np_nll_loss(x, t, w, ignore_index=-1), None,
       [((6, 5), CE_LABELS, CLASS_WEIGHT)]),
    *[Op(f"cross_entropy_{red}", (lambda r: lambda x, t: RF.cross_entropy(x, t, reduction=r))(red),
         (lambda r: lambda x, t: np_cross_entropy(x, t, reduction=r))(red),
         (lambda r: lambda x, t: TF.cross_entropy(x, t, reduction=r))(red),
         [((5, 4), ints((5,), 0, 4)), ((2, 3, 4), ints((2, 4), 0, 3)),
          ((2, 3, 2, 2), ints((2, 2, 2), 0, 3)), ((4,), ints((), 0, 4))])
      for red in ("mean", "sum", "none")],
    *[Op(f"cross_entropy_ignore_{red}",
         (lambda r: lambda x, t: RF.cross_entropy(x, t, ignore_index=-1, reduction=r))(red),
         (lambda r: lambda x, t: np_cross_entropy(x, t, ignore_index=-1, reduction=r))(red),
         (lambda r: lambda x, t: TF.cross_entropy(x, t, ignore_index=-1, reduction=r))(red),
         [((6, 5), CE_LABELS)])
      for red in ("mean", "none")],
    Op("cross_entropy_weight", lambda x, t, w: RF.cross_entropy(x, t, w, ignore_index=-1),
       lambda x, t, w: np_cross_entropy(x, t, w, ignore_index=-1),
       lambda x, t, w: TF.cross_entropy(x, t, w, ignore_index=-1),
       [((6, 5), CE_LABELS, CLASS_WEIGHT)], nondiff_inputs=(2,)),
    *[Op(f"cross_entropy_smoothing_{red}{'_weight' if wt else ''}",
         (lambda r: lambda x, t, w=None: RF.cross_entropy(
             x, t, w, ignore_index=-1, reduction=r, label_smoothing=0.2))(red),
         (lambda r: lambda x, t, w=None: np_cross_entropy(
             x, t, w, ignore_index=-1, reduction=r, label_smoothing=0.2))(red),
         (lambda r: lambda x, t, w=None: TF.cross_entropy(
             x, t, w, ignore_index=-1, reduction=r, label_smoothing=0.2))(red),
         [((6, 5), CE_LABELS, CLASS_WEIGHT) if wt else ((6, 5), CE_LABELS)],
         nondiff_inputs=(2,))
      for red in ("mean", "sum", "none") for wt in (False, True)],
    Op("cross_entropy_smoothing_nd", lambda x, t: RF.cross_entropy(x, t, label_smoothing=0.1),
       lambda x, t: np_cross_entropy(x, t, label_smoothing=0.1),
       lambda x, t: TF.cross_entropy(x, t, label_smoothing=0.1),
       [((2, 3, 4), ints((2, 4), 0, 3)), ((5,), ints((), 0, 5))]),
    Op("cross_entropy_smoothing_one", lambda x, t: RF.cross_entropy(x, t, label_smoothing=1.0),
       lambda x, t: np_cross_entropy(x, t, label_smoothing=1.0),
       lambda x, t: TF.cross_entropy(x, t, label_smoothing=1.0), [((4, 3), ints((4,), 0, 3))]),
    *[Op(f"cross_entropy_probs_{red}",
         (lambda r: lambda x, p: RF.cross_entropy(x, p, reduction=r))(red),
         (lambda r: lambda x, p: np_cross_entropy(x, p, reduction=r))(red),
         (lambda r: lambda x, p: TF.cross_entropy(x, p, reduction=r))(red),
         [((4, 5), probabilities((4, 5))), ((2, 3, 4), probabilities((2, 3, 4))),
          ((5,), probabilities((5,), 0))])
      for red in ("mean", "sum", "none")],
    Op("cross_entropy_probs_weight_smoothing",
       lambda x, p, w: RF.cross_entropy(x, p, w, label_smoothing=0.3),
       lambda x, p, w: np_cross_entropy(x, p, w, label_smoothing=0.3),
       lambda x, p, w: TF.cross_entropy(x, p, w, label_smoothing=0.3),
       [((4, 5), probabilities((4, 5)), CLASS_WEIGHT)], nondiff_inputs=(2,)),
    *[Op(f"mse_loss_{red}", (lambda r: lambda x, y: RF.mse_loss(x, y, r))(red),
         (lambda r: lambda x, y: _reduce((x - y) ** 2, r))(red),
         (lambda r: lambda x, y: TF.mse_loss(x, y, reduction=r))(red),
         [((3, 4), (3, 4)), ((), ()), ((2, 1, 3), (2, 1, 3))])
      for red in ("mean", "sum", "none")],
    *[Op(f"l1_loss_{red}", (lambda r: lambda x, y: RF.l1_loss(x, y, r))(red),
         (lambda r: lambda x, y: _reduce(np.abs(x - y), r))(red),
         (lambda r: lambda x, y: TF.l1_loss(x, y, reduction=r))(red),
         [((3, 4), (3, 4)), ((), ())])
      for red in ("mean", "sum", "none")],
    *[Op(f"huber_loss_{red}_{delta}", (lambda r, d: lambda x, y: RF.huber_loss(x, y, r, d))(
        red, delta),
         (lambda r, d: lambda x, y: np_huber(x, y, r, d))(red, delta),
         (lambda r, d: lambda x, y: TF.huber_loss(x, y, reduction=r, delta=d))(red, delta),
         [((3, 4), (3, 4)), ((), ())])
      for red, delta in (("mean", 1.0), ("sum", 0.5), ("none", 2.0))],
    *[Op(f"bce_with_logits_{red}",
         (lambda r: lambda x, y, w=None, pw=None: RF.binary_cross_entropy_with_logits(
             x, y, w, pw, reduction=r))(red),
         (lambda r: lambda x, y, w=None, pw=None: np_bce_logits(x, y, w, pw, r))(red),
         (lambda r: lambda x, y, w=None, pw=None: TF.binary_cross_entropy_with_logits(
             x, y, w, pos_weight=pw, reduction=r))(red),
         [((3, 4), uniform((3, 4), 0.0, 1.0)),
          ((3, 4), uniform((3, 4), 0.0, 1.0), uniform((4,), 0.5, 2.0), uniform((4,), 0.5, 3.0)),
          ((2, 3), hard_labels((2, 3)), (3,), uniform((3,), 0.5, 3.0))], (-4.0, 4.0),
         nondiff_inputs=(2, 3))  # PyTorch does not differentiate weight, pos_weight
      for red in ("mean", "sum", "none")],
    Op("bce_with_logits_weight_grad",
       lambda x, y, w, pw: RF.binary_cross_entropy_with_logits(x, y, w, pw),
       lambda x, y, w, pw: np_bce_logits(x, y, w, pw), None,
       [((3, 4), uniform((3, 4), 0.0, 1.0), uniform((4,), 0.5, 2.0), uniform((4,), 0.5, 3.0))],
       (-4.0, 4.0)),
    # ---- attention, linear, embedding, dropout ---------------------------------------------
    Op("sdpa", RF.scaled_dot_product_attention, np_sdpa, TF.scaled_dot_product_attention,
       [((2, 3, 4), (2, 5, 4), (2, 5, 3)), ((1, 2, 3, 2), (1, 2, 4, 2), (1, 2, 4, 2))]),
    Op("sdpa_bool_mask", RF.scaled_dot_product_attention, np_sdpa,
       TF.scaled_dot_product_attention,
       [((2, 3, 4), (2, 5, 4), (2, 5, 3), BOOL_MASK)]),
    Op("sdpa_float_mask", RF.scaled_dot_product_attention, np_sdpa,
       TF.scaled_dot_product_attention,
       [((2, 3, 4), (2, 5, 4), (2, 5, 3), (3, 5)), ((2, 3, 4), (2, 5, 4), (2, 5, 3), (2, 3, 5))]),
    Op("sdpa_causal",
       lambda q, k, v: RF.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.7),
       lambda q, k, v: np_sdpa(q, k, v, is_causal=True, scale=0.7),
       lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.7),
       [((2, 4, 3), (2, 4, 3), (2, 4, 2)), ((1, 3, 2), (1, 5, 2), (1, 5, 2))]),
    Op("linear", RF.linear, lambda x, w, b=None: x @ w.T + (0.0 if b is None else b), TF.linear,
       [((3, 4), (5, 4), (5,)), ((2, 3, 4), (2, 4)), ((4,), (3, 4), (3,))]),
    Op("embedding", RF.embedding, lambda i, w: w[i], TF.embedding,
       [(ints((2, 3), 0, 5), (5, 4)), (ints((), 0, 5), (5, 4))]),
    # padding_idx rows are looked up but, by design, get no gradient: finite differences
    # would see one, so these rows are forward only; test_nn_functional.py checks their
    # gradient against PyTorch's.
    *[Op(f"embedding_padding_idx{suffix}",
         (lambda p: lambda i, w: RF.embedding(i, w, padding_idx=p))(pad), lambda i, w: w[i],
         (lambda p: lambda i, w: TF.embedding(i, w, padding_idx=p))(pad), shapes, grad=False)
      for suffix, pad, shapes in (("", 1, [(fixed([[1, 0, 3], [1, 4, 1]]), (5, 4))]),
                                  ("_negative", -1, [(fixed([4, 2, 4, 0]), (5, 3))]))],
    Op("dropout_p0", lambda x: RF.dropout(x, 0.0), lambda x: x, lambda x: TF.dropout(x, 0.0),
       [((3, 4),), ((),)]),
    Op("dropout_eval", lambda x: RF.dropout(x, 0.5, training=False), lambda x: x,
       lambda x: TF.dropout(x, 0.5, training=False), [((3, 4),)]),
    Op("dropout_p1", lambda x: RF.dropout(x, 1.0), np.zeros_like, lambda x: TF.dropout(x, 1.0),
       [((3, 4),)]),
    *[Op(f"adam_update{'_decoupled' if d else ''}", *_adam(d), None,
         [((3, 4), (3, 4), (3, 4), _positive((3, 4))), ((), (), (), _positive(()))],
         grad=False, rtol=1e-9) for d in (False, True)],
    # ---- 3-d convolution and pooling -----------------------------------------------------
    # conv3d_weight_grad and max_pool3d_grad are gradient-only primitives: the gradient checks
    # of these rows run them (as conv2d's rows run conv2d_weight_grad).
    conv3d_row("conv3d", [((2, 2, 3, 4, 3), (3, 2, 2, 2, 2), (3,)),
                          ((1, 1, 3, 3, 3), (2, 1, 3, 3, 3))]),
    conv3d_row("conv3d_stride_pad_dilation", [((1, 2, 5, 6, 5), (2, 2, 2, 3, 2), (2,))],
               stride=(2, 1, 2), padding=(1, 0, 1), dilation=(1, 2, 1)),
    conv3d_row("conv3d_groups_same_even_kernel", [((1, 4, 3, 4, 3), (4, 2, 2, 3, 2), (4,))],
               groups=2, padding="same"),
    conv_t3d_row("conv_transpose3d", [((1, 2, 2, 3, 2), (2, 3, 2, 2, 2), (3,)),
                                      ((2, 1, 2, 2, 2), (1, 2, 3, 2, 2))]),
    conv_t3d_row("conv_transpose3d_stride_pad_outpad", [((1, 2, 2, 3, 2), (2, 2, 3, 3, 2), (2,))],
                 stride=(2, 2, 1), padding=(1, 1, 0), output_padding=(1, 0, 0)),
    conv_t3d_row("conv_transpose3d_groups_dilation", [((1, 4, 2, 2, 3), (4, 1, 2, 2, 2), (2,))],
                 groups=2, dilation=(2, 1, 2), padding=1),
    max_pool3d_row("max_pool3d", [(2, 2, 4, 4, 4), (2, 3, 4, 5)], kernel_size=2),
    max_pool3d_row("max_pool3d_stride_pad_dilation", [(1, 2, 5, 4, 5)], kernel_size=(3, 2, 2),
                   stride=(2, 1, 2), padding=(1, 0, 1), dilation=(1, 2, 1)),
    max_pool3d_row("max_pool3d_ceil_mode", [(1, 2, 5, 5, 4)], kernel_size=2, stride=2,
                   ceil_mode=True),
    Op("max_pool3d_indices", lambda x: RF.max_pool3d(x, 3, 2, 1, return_indices=True),
       lambda x: np_max_pool_nd(x, 3, 3, 2, 1),
       lambda x: TF.max_pool3d(x, 3, 2, 1, return_indices=True),
       [(distinct((1, 2, 4, 5, 4)),), (distinct((2, 3, 4, 3)),)]),
    # ---- 1-d and 3-d pooling, conv_transpose1d, adaptive pooling (composites) ---------------
    Op("conv_transpose1d",
       lambda x, w, b=None: RF.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
       lambda x, w, b=None: np_conv_transpose_nd(x, w, b, stride=2, padding=1, output_padding=1),
       lambda x, w, b=None: TF.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
       [((2, 3, 4), (3, 2, 3), (2,)), ((1, 2, 5), (2, 1, 2))]),
    Op("max_pool1d", lambda x: RF.max_pool1d(x, 3, 2, 1),
       lambda x: np_max_pool_nd(x, 1, 3, 2, 1)[0],
       lambda x: TF.max_pool1d(x, 3, 2, 1), [(distinct((2, 3, 7)),), (distinct((2, 6)),)]),
    Op("max_pool1d_ceil_dilation",
       lambda x: RF.max_pool1d(x, 2, 2, 0, dilation=2, ceil_mode=True, return_indices=True),
       lambda x: np_max_pool_nd(x, 1, 2, 2, 0, 2, True),
       lambda x: TF.max_pool1d(x, 2, 2, 0, dilation=2, ceil_mode=True, return_indices=True),
       [(distinct((1, 2, 8)),)]),
    Op("avg_pool1d", lambda x: RF.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
       lambda x: np_avg_pool_nd(x, 1, 3, 2, 1, True, False),
       lambda x: TF.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
       [((2, 3, 8),), ((2, 5),)]),
    *[Op(f"avg_pool3d{suffix}", (lambda kw: lambda x: RF.avg_pool3d(x, **kw))(kw),
         (lambda kw: lambda x: np_avg_pool_nd(x, 3, **kw))(kw),
         (lambda kw: lambda x: TF.avg_pool3d(x, **kw))(kw), [(s,) for s in shapes])
      for suffix, kw, shapes in (
          ("", dict(kernel_size=2), [(1, 2, 4, 4, 4), (2, 3, 4, 5)]),
          ("_pad_excl_ceil", dict(kernel_size=(3, 2, 2), stride=(2, 1, 2), padding=(1, 0, 1),
                                  ceil_mode=True, count_include_pad=False), [(1, 2, 5, 3, 4)]),
          ("_pad_incl_ceil", dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),
           [(1, 1, 4, 5, 3)]),
          ("_divisor_override", dict(kernel_size=2, stride=1, divisor_override=3),
           [(1, 2, 3, 3, 3)]))],
    *[Op(f"adaptive_avg_pool{rank}d_{i}",
         (lambda r, o: lambda x: getattr(RF, f"adaptive_avg_pool{r}d")(x, o))(rank, out),
         (lambda r, o: lambda x: np_adaptive_pool_nd(x, r, o))(rank, out),
         (lambda r, o: lambda x: getattr(TF, f"adaptive_avg_pool{r}d")(x, o))(rank, out),
         [(s,) for s in shapes])
      for i, (rank, out, shapes) in enumerate((
          (1, 3, [(2, 3, 7), (2, 5)]), (1, 6, [(1, 2, 4)]),
          (3, (2, 3, 2), [(1, 2, 5, 4, 3), (2, 3, 3, 3)]), (3, 1, [(2, 2, 2, 3, 2)])))],
    Op("adaptive_max_pool2d", lambda x: RF.adaptive_max_pool2d(x, (2, 3)),
       lambda x: np_adaptive_pool_nd(x, 2, (2, 3), np.max),
       lambda x: TF.adaptive_max_pool2d(x, (2, 3)),
       [(distinct((2, 2, 5, 7)),), (distinct((3, 4, 4)),)]),
    # ---- instance, rms and local response normalization (composites) ----------------------
    Op("instance_norm", lambda x, w=None, b=None: RF.instance_norm(x, weight=w, bias=b),
       lambda x, w=None, b=None: np_instance_norm(x, w, b),
       lambda x, w=None, b=None: TF.instance_norm(x, weight=w, bias=b),
       [((2, 3, 4), (3,), (3,)), ((2, 2, 3, 3),)]),
    *[Op(f"rms_norm_{i}", (lambda s, e: lambda x, w=None: RF.rms_norm(x, s, w, e))(ns, eps),
         (lambda s, e: lambda x, w=None: np_rms_norm(x, len(_tuple(s)), w, e))(ns, eps),
         (lambda s, e: lambda x, w=None: TF.rms_norm(x, _tuple(s), w, e))(ns, eps), shapes)
      for i, (ns, eps, shapes) in enumerate(((4, None, [((3, 4), (4,)), ((2, 3, 4),)]),
                                             ((3, 4), 1e-3, [((2, 3, 4), (3, 4))])))],
    Op("local_response_norm", lambda x: RF.local_response_norm(x, 3, 0.3, 0.75, 2.0),
       lambda x: np_local_response_norm(x, 3, 0.3, 0.75, 2.0),
       lambda x: TF.local_response_norm(x, 3, 0.3, 0.75, 2.0),
       [((2, 5, 3),), ((1, 4, 2, 3),)]),
    Op("local_response_norm_even", lambda x: RF.local_response_norm(x, 2),
       lambda x: np_local_response_norm(x, 2), lambda x: TF.local_response_norm(x, 2),
       [((2, 4, 3),)]),
    # ---- activation and distance composites ----------------------------------------------
    *[Op(name, getattr(RF, name), ref, getattr(TF, name), [(s,) for s in shapes], (-4.5, 4.5))
      for name, ref, shapes in (
          ("hardswish", lambda x: x * np.clip(x + 3, 0, 6) / 6, [(3, 4), (), (0, 2)]),
          ("mish", lambda x: x * np.tanh(np.logaddexp(0, x)), [(3, 4), ()]),
          ("selu", lambda x: _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(x)),
           [(3, 4), ()]),
          ("logsigmoid", lambda x: -np.logaddexp(0, -x), [(3, 4), ()]))],
    Op("logsigmoid_large", RF.logsigmoid, lambda x: -np.logaddexp(0, -x), TF.logsigmoid,
       [(lambda r: np.array([-800.0, -30.0, 30.0, 800.0]),)], dtypes=()),
    Op("glu", lambda x: RF.glu(x, 1), lambda x: _np_glu(x, 1), lambda x: TF.glu(x, 1),
       [((3, 4),), ((2, 6, 2),)]),
    Op("glu_last", RF.glu, lambda x: _np_glu(x, -1), TF.glu, [((2, 3, 4),)]),
    Op("softmin", lambda x: RF.softmin(x, 1), lambda x: np_softmax(-x, 1),
       lambda x: TF.softmin(x, 1), [((3, 4),), ((2, 3, 2),)]),
    *[Op(f"normalize_p{pp}", (lambda q: lambda x: RF.normalize(x, q, 1))(pp),
         (lambda q: lambda x: x / np.maximum(np.sum(np.abs(x) ** q, axis=1, keepdims=True)
                                             ** (1 / q), 1e-12))(pp),
         (lambda q: lambda x: TF.normalize(x, q, 1))(pp), [((3, 4),), ((2, 3, 2),)])
      for pp in (2.0, 1.0, 3.0)],
    Op("normalize_zero_row", lambda x: RF.normalize(x * _ZERO_ROW_NP, 2.0, 1),
       lambda x: x * _ZERO_ROW_NP / np.maximum(
           np.sqrt(np.sum((x * _ZERO_ROW_NP) ** 2, axis=1, keepdims=True)), 1e-12),
       lambda x: TF.normalize(x * torch.tensor(_ZERO_ROW_NP), 2.0, 1), [((3, 4),)], dtypes=()),
    Op("cosine_similarity", RF.cosine_similarity, lambda x, y: _np_cosine(x, y, 1),
       TF.cosine_similarity, [((3, 4), (3, 4)), ((2, 3, 2), (1, 3, 2)), ((3, 4), (4,))]),
    *[Op(f"pairwise_distance_p{pp}", (lambda q: lambda x, y: RF.pairwise_distance(x, y, q))(pp),
         (lambda q: lambda x, y: np.sum(np.abs(x - y + 1e-6) ** q, axis=-1) ** (1 / q))(pp),
         (lambda q: lambda x, y: TF.pairwise_distance(x, y, q))(pp),
         [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (4,))])
      for pp in (2.0, 1.0, 3.0)],
    # ---- more losses (composites) ---------------------------------------------------------
    *[Op(f"{name}_{red}", (lambda f, r: lambda *a: f(*a, reduction=r))(getattr(RF, name), red),
         (lambda f, r: lambda *a: _reduce(f(*a), r))(ref, red),
         (lambda f, r: lambda *a: f(*a, reduction=r))(getattr(TF, name), red), shapes,
         nondiff_inputs=nondiff)
      for name, ref, shapes, nondiff in (
          ("smooth_l1_loss", lambda x, y: np_huber(x, y, "none", 1.0),
           [((3, 4), (3, 4)), ((), ())], ()),
          ("kl_div", lambda x, t: t * (np.log(t) - x),
           [((3, 4), probabilities((3, 4))), ((2, 3), probabilities((2, 3)))], ()),
          ("binary_cross_entropy", lambda p, y: -(y * np.log(p) + (1 - y) * np.log(1 - p)),
           [(uniform((3, 4), 0.05, 0.95), uniform((3, 4), 0.0, 1.0)),
            (uniform((5,), 0.05, 0.95), hard_labels((5,)))], (1,)),  # torch: no target grad
          ("soft_margin_loss", lambda x, y: np.logaddexp(0, -y * x),
           [((3, 4), _signs((3, 4))), ((), _signs(()))], (1,)),  # torch: no target grad
          ("margin_ranking_loss", lambda a, b, y: np.maximum(0, -y * (a - b)),
           [((4,), (4,), _signs((4,)))], ()),
          ("cosine_embedding_loss", lambda a, b, y: np.where(
              y > 0, 1 - _np_cosine(a, b, 1, 0.0), np.maximum(0, _np_cosine(a, b, 1, 0.0))),
           [((4, 3), (4, 3), _signs((4,)))], ()),
          ("triplet_margin_loss", lambda a, p, n: np.maximum(
              0, np.linalg.norm(a - p + 1e-6, axis=-1) - np.linalg.norm(a - n + 1e-6, axis=-1)
              + 1.0), [((4, 3), (4, 3), (4, 3))], ()))
      for red in ("mean", "sum", "none")],
    Op("kl_div_log_target", lambda x, t: RF.kl_div(x, t, reduction="batchmean", log_target=True),
       lambda x, t: np.sum(np.exp(t) * (t - x)) / x.shape[0],
       lambda x, t: TF.kl_div(x, t, reduction="batchmean", log_target=True),
       [((3, 4), (3, 4))]),
    *[Op(f"poisson_nll_loss_{'log' if log else 'rate'}{'_full' if full else ''}",
         (lambda lg, fu: lambda x, y: RF.poisson_nll_loss(x, y, lg, fu))(log, full),
         (lambda lg, fu: lambda x, y: np.mean(_np_poisson(x, y, lg, fu)))(log, full),
         (lambda lg, fu: lambda x, y: TF.poisson_nll_loss(x, y, lg, fu))(log, full),
         [(uniform((3, 4), 0.2, 2.0), uniform((3, 4), 0.0, 4.0))], nondiff_inputs=(1,))
      for log in (True, False) for full in (False, True)],
    *[Op(f"gaussian_nll_loss_{red}{'_full' if full else ''}",
         (lambda r, fu: lambda x, y, v: RF.gaussian_nll_loss(x, y, v, fu, reduction=r))(red, full),
         (lambda r, fu: lambda x, y, v: _reduce(
             0.5 * (np.log(v) + (x - y) ** 2 / v) + (0.5 * math.log(2 * math.pi) if fu else 0),
             r))(red, full),
         (lambda r, fu: lambda x, y, v: TF.gaussian_nll_loss(x, y, v, fu, reduction=r))(red, full),
         [((3, 4), (3, 4), uniform((3, 4), 0.3, 2.0))])
      for red, full in (("mean", False), ("sum", True), ("none", False))],
    # ---- more activation composites, pixel shuffle, F.pad, adaptive_max_pool1d -------------
    *[Op(name, fn, ref, tfn, [((3, 4),), ((),), ((2, 0),)], (-4.5, 4.5))
      for name, fn, ref, tfn in (
          # torch's own float64 celu/hardsigmoid backward is off by ~1e-8 (single-precision
          # constants): the torch side is their documented formula in plain torch ops.
          ("celu", lambda x: RF.celu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x / 0.7)),
           lambda x: torch.where(x > 0, x, 0.7 * torch.expm1(x / 0.7))),
          ("hardsigmoid", RF.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1),
           lambda x: torch.clamp(x / 6 + 0.5, 0, 1)),
          ("hardtanh", lambda x: RF.hardtanh(x, -1.5, 2.0), lambda x: np.clip(x, -1.5, 2.0),
           lambda x: TF.hardtanh(x, -1.5, 2.0)),
          ("relu6", RF.relu6, lambda x: np.clip(x, 0, 6), TF.relu6),
          ("softsign", RF.softsign, lambda x: x / (1 + np.abs(x)), TF.softsign),
          ("tanhshrink", RF.tanhshrink, lambda x: x - np.tanh(x), TF.tanhshrink),
          ("threshold", lambda x: RF.threshold(x, 0.5, -2.0), lambda x: np.where(x > 0.5, x, -2.0),
           lambda x: TF.threshold(x, 0.5, -2.0)))],
    Op("prelu", RF.prelu, lambda x, w: np.where(x > 0, x, _channel_view(w, x) * x), TF.prelu,
       [((2, 3, 4), (3,)), ((2, 3, 2, 2), (1,)), ((4, 3), (3,))]),
    Op("pixel_shuffle", lambda x: RF.pixel_shuffle(x, 2), lambda x: _np_pixel_shuffle(x, 2),
       lambda x: TF.pixel_shuffle(x, 2), [((1, 8, 2, 3),), ((4, 3, 2),)]),
    Op("pixel_unshuffle", lambda x: RF.pixel_unshuffle(x, 2), lambda x: _np_pixel_unshuffle(x, 2),
       lambda x: TF.pixel_unshuffle(x, 2), [((1, 2, 4, 6),), ((3, 2, 4),)]),
    *[Op(f"F_pad_{mode}", (lambda m: lambda x: RF.pad(x, (2, 1, 1, 0), mode=m))(mode),
         (lambda n: lambda x: np.pad(x, ((0, 0),) * (x.ndim - 2) + ((1, 0), (2, 1)),
                                     mode=n))(nm),
         (lambda m: lambda x: TF.pad(x, (2, 1, 1, 0), mode=m))(mode), [((1, 2, 3, 4),)])
      for mode, nm in (("constant", "constant"), ("reflect", "reflect"),
                       ("replicate", "edge"), ("circular", "wrap"))],
    Op("F_pad_negative", lambda x: RF.pad(x, (-1, 2), value=0.5),
       lambda x: np.pad(x[..., 1:], ((0, 0), (0, 2)), constant_values=0.5),
       lambda x: TF.pad(x, (-1, 2), value=0.5), [((3, 4),)]),
    # return_indices=True is refused by rill's adaptive max pooling for now (an ArgumentError).
    Op("adaptive_max_pool1d", lambda x: RF.adaptive_max_pool1d(x, 3),
       lambda x: _np_adaptive_max1d(x, 3)[0], lambda x: TF.adaptive_max_pool1d(x, 3),
       [(distinct((2, 3, 7)),), (distinct((2, 5)),)]),
    # ---- interpolate (sizes given: the source coordinate is out_index * in / out) ---------
    *[Op(f"interpolate_{mode.replace('-', '_')}{'_corners' if ac else ''}",
         (lambda m, s, a: lambda x: RF.interpolate(x, size=s, mode=m, align_corners=a))(
             mode, size, ac),
         (lambda m, s, a: lambda x: _np_interpolate(x, s, m, a))(mode, size, ac),
         (lambda m, s, a: lambda x: TF.interpolate(x, size=s, mode=m, align_corners=a))(
             mode, size, ac), [(s,) for s in shapes])
      for mode, size, ac, shapes in (
          ("nearest", (5, 3), None, [(1, 2, 3, 4)]),
          ("nearest-exact", (5, 3), None, [(1, 2, 3, 4)]),
          ("linear", 7, False, [(2, 3, 4)]), ("linear", 2, True, [(2, 3, 5)]),
          ("bilinear", (5, 3), False, [(1, 2, 3, 4)]), ("bilinear", (4, 6), True, [(2, 1, 3, 4)]),
          ("trilinear", (3, 4, 2), False, [(1, 1, 2, 3, 3)]))],
    *[Op(f"lstm_sequence{'_reverse' if rev else ''}",
         (lambda r: lambda p, h, c, w, b: rill.ops.lstm_sequence.lstm_sequence(
             p, h, c, w, b, reverse=r))(rev),
         _lstm_layer(np, rev), _lstm_layer(torch, rev),
         [((4, 3, 8), (3, 2), (3, 2), (8, 2), (8,)), ((1, 1, 4), (1, 1), (1, 1), (4, 1), (4,))],
         dtypes=("float32",))
      for rev in (False, True)],
]


def _tuple(s):
    return (s,) if isinstance(s, int) else tuple(s)



def _channel_view(w, x):
    """prelu's weight along x's channel axis (1, or 0 for 1-d input)."""
    if w.size == 1 or x.ndim < 2:
        return w.reshape(())  if w.size == 1 else w
    return w.reshape((1, -1) + (1,) * (x.ndim - 2))


def _np_pixel_shuffle(x, r):
    """out[.., c, h*r + i, w*r + j] = x[.., c*r*r + i*r + j, h, w]."""
    *lead, c, h, w = x.shape
    out = np.zeros((*lead, c // (r * r), h * r, w * r))
    for idx in np.ndindex(*lead):
        for ch, i, j, hh, ww in np.ndindex(c // (r * r), r, r, h, w):
            out[idx + (ch, hh * r + i, ww * r + j)] = x[idx + (ch * r * r + i * r + j, hh, ww)]
    return out


def _np_pixel_unshuffle(x, r):
    *lead, c, h, w = x.shape
    out = np.zeros((*lead, c * r * r, h // r, w // r))
    for idx in np.ndindex(*lead):
        for ch, i, j, hh, ww in np.ndindex(c, r, r, h // r, w // r):
            out[idx + (ch * r * r + i * r + j, hh, ww)] = x[idx + (ch, hh * r + i, ww * r + j)]
    return out


def _np_adaptive_max1d(x, n):
    """(maxima, index in the length axis) of cells [floor(i L / n), ceil((i + 1) L / n))."""
    length = x.shape[-1]
    vals, idx = np.zeros(x.shape[:-1] + (n,)), np.zeros(x.shape[:-1] + (n,), dtype=np.int64)
    for i in range(n):
        lo, hi = math.floor(i * length / n), math.ceil((i + 1) * length / n)
        idx[..., i] = lo + np.argmax(x[..., lo:hi], axis=-1)
        vals[..., i] = np.max(x[..., lo:hi], axis=-1)
    return vals, idx


def _np_interpolate(x, size, mode, align_corners):
    """Separable resampling, one spatial axis at a time, by PyTorch's documented source
    coordinates: nearest floor(j * in / out), nearest-exact floor((j + 0.5) * in / out);
    linear (j + 0.5) * in / out - 0.5 clamped at 0, or j * (in - 1) / (out - 1) with
    align_corners."""
    rank = x.ndim - 2
    for d, out in enumerate(_ntuple(size, rank)):
        axis, n = 2 + d, x.shape[2 + d]
        moved = np.moveaxis(x, axis, -1)
        result = np.zeros(moved.shape[:-1] + (out,))
        for j in range(out):
            if mode in ("nearest", "nearest-exact"):
                shift = 0.5 if mode == "nearest-exact" else 0.0
                result[..., j] = moved[..., min(math.floor((j + shift) * n / out), n - 1)]
                continue
            if align_corners:
                src = j * (n - 1) / (out - 1) if out > 1 else 0.0
            else:
                src = max((j + 0.5) * n / out - 0.5, 0.0)
            i0 = min(math.floor(src), n - 1)
            i1, t = min(i0 + 1, n - 1), src - i0
            result[..., j] = (1 - t) * moved[..., i0] + t * moved[..., i1]
        x = np.moveaxis(result, -1, axis)
    return x
