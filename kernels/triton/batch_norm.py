"""batch_norm_train GPU kernels (formulas in rill/ops/batch_norm.py), on (N, C, M) views.

A channel's values are N runs of M (one per image). Forward: programs over (channel, group
of images) sum x - k and its squares (k one of the channel's values, as the CPU kernel: one
sweep, stable while k is within a few deviations of the mean) into partial sums; one small
kernel adds each channel's partials in a fixed order (deterministic: no atomics) and makes
mean, var and the affine's per-channel scale and offset; then y = x * scale + offset.
Backward is the same shape: partial sums of g and g * (x - mean), a finalize that makes db,
dw and the per-channel coefficients of dx = g * a + x * s + t, and one elementwise pass.
Bytes ~ 2 * x + y forward, 2 * (x + g) + dx backward.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels

from .elementwise import contiguous
from .launch import INTERPRET, cdiv, empty, jit, pointer, tl, triton


@jit
def _partial_sums_kernel(a_ptr, b_ptr, shift_ptr, first_ptr, second_ptr, images, channels,
                         m, per_program, PRODUCT: tl.constexpr, BLOCK: tl.constexpr):
    # (channel, group) program: sums of a - shift[c] and of (a - shift[c]) * (b or a - shift)
    c = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1).to(tl.int64)
    acc = tl.float64 if a_ptr.dtype.element_ty == tl.float64 else tl.float32
    shift = tl.load(shift_ptr + c).to(acc)
    cols = tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], dtype=acc)
    total2 = tl.zeros([BLOCK], dtype=acc)
    for i in range(0, per_program):
        n = group * per_program + i
        if n < images:
            row = (n * channels + c) * m
            for start in range(0, m, BLOCK):
                mask = start + cols < m
                a = tl.load(a_ptr + row + start + cols, mask=mask, other=0.0).to(acc)
                if PRODUCT:  # sums of b, and of b * (a - shift)
                    b = tl.load(b_ptr + row + start + cols, mask=mask, other=0.0).to(acc)
                    total += b
                    total2 += b * tl.where(mask, a - shift, 0.0)
                else:        # sums of a - shift, and of its square
                    d = tl.where(mask, a - shift, 0.0)
                    total += d
                    total2 += d * d
    groups = tl.num_programs(1)
    tl.store(first_ptr + c * groups + group, tl.sum(total, axis=0))
    tl.store(second_ptr + c * groups + group, tl.sum(total2, axis=0))


@jit
def _channel_totals(first_ptr, second_ptr, c, mask, groups, BLOCK: tl.constexpr):
    # Each channel's partial sums, added in group order (deterministic).
    acc = tl.float64 if first_ptr.dtype.element_ty == tl.float64 else tl.float32
    first = tl.zeros([BLOCK], dtype=acc)
    second = tl.zeros([BLOCK], dtype=acc)
    for g in range(0, groups):
        first += tl.load(first_ptr + c * groups + g, mask=mask, other=0.0)
        second += tl.load(second_ptr + c * groups + g, mask=mask, other=0.0)
    return first, second


@jit
def _forward_stats_kernel(first_ptr, second_ptr, shift_ptr, w_ptr, b_ptr, mean_ptr, var_ptr,
                          scale_ptr, offset_ptr, channels, groups, count,
                          EPS: tl.constexpr, BLOCK: tl.constexpr):
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = c < channels
    acc = tl.float64 if first_ptr.dtype.element_ty == tl.float64 else tl.float32
    s, s2 = _channel_totals(first_ptr, second_ptr, c, mask, groups, BLOCK)
    shifted_mean = s / count
    var = tl.maximum(s2 / count - shifted_mean * shifted_mean, 0.0)
    mean = shifted_mean + tl.load(shift_ptr + c, mask=mask, other=0.0).to(acc)
    scale = tl.load(w_ptr + c, mask=mask, other=0.0).to(acc) / tl.sqrt(var + EPS)
    offset = tl.load(b_ptr + c, mask=mask, other=0.0).to(acc) - mean * scale
    tl.store(mean_ptr + c, mean.to(mean_ptr.dtype.element_ty), mask=mask)
    tl.store(var_ptr + c, var.to(var_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + c, scale, mask=mask)
    tl.store(offset_ptr + c, offset, mask=mask)


@jit
def _backward_stats_kernel(first_ptr, second_ptr, w_ptr, mean_ptr, var_ptr, dw_ptr, db_ptr,
                           a_ptr, s_ptr, t_ptr, channels, groups, count,
                           EPS: tl.constexpr, BLOCK: tl.constexpr):
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = c < channels
    acc = tl.float64 if first_ptr.dtype.element_ty == tl.float64 else tl.float32
    db, dot = _channel_totals(first_ptr, second_ptr, c, mask, groups, BLOCK)
    rstd = 1.0 / tl.sqrt(tl.load(var_ptr + c, mask=mask, other=1.0).to(acc) + EPS)
    mean = tl.load(mean_ptr + c, mask=mask, other=0.0).to(acc)
    dw = dot * rstd
    a = tl.load(w_ptr + c, mask=mask, other=0.0).to(acc) * rstd
    s = -a * rstd * dw / count
    tl.store(dw_ptr + c, dw.to(dw_ptr.dtype.element_ty), mask=mask)
    tl.store(db_ptr + c, db.to(db_ptr.dtype.element_ty), mask=mask)
    tl.store(a_ptr + c, a, mask=mask)
    tl.store(s_ptr + c, s, mask=mask)
    tl.store(t_ptr + c, -a * db / count - mean * s, mask=mask)


@jit
def _per_channel_kernel(x_ptr, g_ptr, a_ptr, s_ptr, t_ptr, out_ptr, channels, m,
                        WITH_G: tl.constexpr, BLOCK: tl.constexpr):
    # out = x * s[c] + t[c] (+ g * a[c]) over one image's channel run
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < m
    c = row % channels
    acc = s_ptr.dtype.element_ty
    x = tl.load(x_ptr + row * m + cols, mask=mask, other=0.0).to(acc)
    out = x * tl.load(s_ptr + c) + tl.load(t_ptr + c)
    if WITH_G:
        g = tl.load(g_ptr + row * m + cols, mask=mask, other=0.0).to(acc)
        out += g * tl.load(a_ptr + c)
    tl.store(out_ptr + row * m + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _layout(x):
    n, c = x.shape[:2]
    m = x.size // (n * c) if n * c else 0
    return contiguous(x), n, c, m


def _groups(n):
    groups = max(1, min(n, 4 if INTERPRET else 64))
    return groups, cdiv(n, groups)


def _block(m):
    return min(triton.next_power_of_2(max(m, 1)), 1 << 16 if INTERPRET else 1024)


def _channel_block(c):
    return min(triton.next_power_of_2(max(c, 1)), 1024)


def _partials(a, b, shift, n, c, m, product):
    groups, per = _groups(n)
    acc = np.float64 if a.dtype == np.float64 else np.float32
    first, second = empty((c, groups), acc), empty((c, groups), acc)
    _partial_sums_kernel[(c, groups)](pointer(a), pointer(b), pointer(shift), pointer(first),
                                      pointer(second), n, c, m, per, PRODUCT=product,
                                      BLOCK=_block(m))
    return first, second, groups


def _batch_norm(x, w, b, eps):
    x, n, c, m = _layout(x)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    shift = contiguous(x.reshape(n, c, m)[0, :, 0])  # k: each channel's first value
    first, second, groups = _partials(x, x, shift, n, c, m, False)
    mean, var = empty((c,), x.dtype), empty((c,), x.dtype)
    scale, offset = empty((c,), acc), empty((c,), acc)
    cb = _channel_block(c)
    _forward_stats_kernel[(cdiv(c, cb),)](pointer(first), pointer(second), pointer(shift),
                                          pointer(contiguous(w)), pointer(contiguous(b)),
                                          pointer(mean), pointer(var), pointer(scale),
                                          pointer(offset), c, groups, n * m, EPS=eps, BLOCK=cb)
    y = empty(x.shape, x.dtype)
    block = _block(m)
    _per_channel_kernel[(n * c, cdiv(m, block))](pointer(x), pointer(x), pointer(scale),
                                                 pointer(scale), pointer(offset), pointer(y),
                                                 c, m, WITH_G=False, BLOCK=block)
    return y, mean, var


def _batch_norm_grad(g, x, w, mean, var, eps):
    x, n, c, m = _layout(x)
    g, mean = contiguous(g), contiguous(mean)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    first, second, groups = _partials(x, g, mean, n, c, m, True)
    dw, db = empty((c,), w.dtype), empty((c,), w.dtype)
    a, s, t = (empty((c,), acc) for _ in range(3))
    cb = _channel_block(c)
    _backward_stats_kernel[(cdiv(c, cb),)](pointer(first), pointer(second),
                                           pointer(contiguous(w)), pointer(mean),
                                           pointer(contiguous(var)), pointer(dw), pointer(db),
                                           pointer(a), pointer(s), pointer(t), c, groups,
                                           n * m, EPS=eps, BLOCK=cb)
    dx = empty(x.shape, x.dtype)
    block = _block(m)
    _per_channel_kernel[(n * c, cdiv(m, block))](pointer(x), pointer(g), pointer(a),
                                                 pointer(s), pointer(t), pointer(dx), c, m,
                                                 WITH_G=True, BLOCK=block)
    return dx, dw, db


register_kernels("gpu", {"batch_norm_train": _batch_norm, "batch_norm_grad": _batch_norm_grad})
