"""softmax, log_softmax and the fused softmax cross-entropy (loss and gradient) on the GPU.

A row (along any axis: the input viewed as (A, R, B), rows of stride B) is shifted by its
max, which is replaced by 0 where it is -inf or NaN and by NaN where it is +inf (the CPU
kernel's rule: a row of -inf, or holding +inf, gives NaN, as PyTorch). A row that fits one block is loaded once and kept in registers;
a longer row is read twice: an online pass keeps, per lane, the running max and the sum of
exp(x - max) rescaled whenever the max grows, then a pass writes the result. The cross-
entropy kernels compute the row statistics the same way and read the target's logit
directly; 'sum' and 'mean' are finished by one small program over the per-row losses.
float16 is computed in float32.

Per call: softmax/log_softmax read x once (twice for long rows) and write it once, ~4 FLOPs
per element; cross-entropy reads the logits once and writes N (or 1) values; its gradient
reads the logits twice and writes them once.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels
from rill.ops.rules import normalize_axis

from .elementwise import contiguous
from .launch import INTERPRET, cdiv, empty, jit, pointer, strides, tl, triton
from .reduce import _TL, _layout, _max_nan, _max_rows, _rows, count_not_equal

# Elements per program tile, and the longest row kept in registers in one piece.
TILE = 1 << 16 if INTERPRET else 4096
SINGLE_MAX = 1 << 16 if INTERPRET else 4096


@jit
def _finite_or_zero(m):
    return tl.where((m - m) == 0, m, 0.0)


@jit
def _shift(m):
    """A row's shift from its max: the max where finite, NaN where +inf (every result NaN,
    as the CPU's and PyTorch's inf - inf), else 0 (a row of -inf, or with a NaN)."""
    return tl.where((m - m) == 0, m, tl.where(m == float("inf"), float("nan"), 0.0))


@jit
def _row_stats(x_ptr, base, mask_m, R, step, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_R: tl.constexpr):
    """Per row: f (the shift: the max, see _shift), sum(exp(x - f)) and sum(x), in one pass."""
    run_m = tl.full([BLOCK_M, BLOCK_R], float("-inf"), ACC)
    run_s = tl.zeros([BLOCK_M, BLOCK_R], ACC)
    run_x = tl.zeros([BLOCK_M, BLOCK_R], ACC)
    cols = tl.arange(0, BLOCK_R)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + cols
        mask = mask_m[:, None] & (r < R)[None, :]
        x = tl.load(x_ptr + base[:, None] + r[None, :].to(tl.int64) * step, mask=mask,
                    other=0).to(ACC)
        run_x += tl.where(mask, x, 0.0)
        x = tl.where(mask, x, float("-inf"))
        new_m = _max_nan(run_m, x)
        f_new = _shift(new_m)
        # An empty lane (sum 0) stays 0: its rescale factor may be inf.
        kept = tl.where(run_s == 0, 0.0, run_s * tl.exp(_finite_or_zero(run_m) - f_new))
        run_s = kept + tl.exp(x - f_new)
        run_m = new_m
    f = _shift(_max_rows(run_m))
    scaled = tl.where(run_s == 0, 0.0, run_s * tl.exp(_finite_or_zero(run_m) - f[:, None]))
    return f, tl.sum(scaled, 1), tl.sum(run_x, 1)


@jit
def _softmax_kernel(x_ptr, out_ptr, A, R, B, NB, LOG: tl.constexpr, SINGLE: tl.constexpr,
                    ACC: tl.constexpr, INNER: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_R: tl.constexpr):
    pid = tl.program_id(0)
    a, b, mask_m = _rows(pid, A, B, NB, INNER, BLOCK_M)
    base = a * R * B + b
    cols = tl.arange(0, BLOCK_R)
    if SINGLE:
        mask = mask_m[:, None] & (cols < R)[None, :]
        offs = base[:, None] + cols[None, :].to(tl.int64) * B
        x = tl.load(x_ptr + offs, mask=mask, other=0).to(ACC)
        x = tl.where(mask, x, float("-inf"))
        f = _shift(_max_rows(x))
        z = x - f[:, None]
        e = tl.exp(z)
        s = tl.sum(e, 1)
        if LOG:
            y = z - tl.log(s)[:, None]
        else:
            y = e / s[:, None]
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        f, s, _ = _row_stats(x_ptr, base, mask_m, R, B, ACC, BLOCK_M, BLOCK_R)
        log_s = tl.log(s)
        for r0 in range(0, R, BLOCK_R):
            r = r0 + cols
            mask = mask_m[:, None] & (r < R)[None, :]
            offs = base[:, None] + r[None, :].to(tl.int64) * B
            z = tl.load(x_ptr + offs, mask=mask, other=0).to(ACC) - f[:, None]
            if LOG:
                y = z - log_s[:, None]
            else:
                y = tl.exp(z) / s[:, None]
            tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _float_acc(dtype):
    return np.float32 if dtype.itemsize < 4 else dtype


def _softmax(log):
    def run(x, axis):
        out = empty(x.shape, x.dtype)
        if x.size == 0:
            return out
        axes = (normalize_axis(axis, x.ndim),) if x.ndim else ()
        buf, A, R, B = _layout(x, axes)
        inner = B == 1
        rows = A if inner else B
        single = R <= SINGLE_MAX
        block_r = triton.next_power_of_2(R) if single else min(
            triton.next_power_of_2(R), TILE if INTERPRET else 2048)
        block_m = max(1, min(triton.next_power_of_2(rows), TILE // block_r))
        if inner and not single and not INTERPRET:
            block_m = 1  # long rows: one per program, so that many programs run
        if not inner and not INTERPRET:
            block_m = min(block_m, 64)  # 64 neighbouring columns: coalesced, few registers
        nb = 1 if inner else cdiv(B, block_m)
        programs = cdiv(A, block_m) if inner else A * nb
        warps = 4 if block_m * block_r <= 2048 else 8
        _softmax_kernel[(programs,)](pointer(buf), pointer(out), A, R, B, nb, LOG=log,
                                     SINGLE=single, ACC=_TL[np.dtype(_float_acc(x.dtype))],
                                     INNER=inner, BLOCK_M=block_m, BLOCK_R=block_r,
                                     num_warps=warps)
        return out
    return run


# ---- softmax cross-entropy over class indices --------------------------------------------


@jit
def _target(t_ptr, rows, mask_m, C, IGNORE: tl.constexpr):
    """Each row's class, whether it counts (not IGNORE) and whether it is a class at all."""
    t = tl.load(t_ptr + rows, mask=mask_m, other=IGNORE).to(tl.int64)
    valid = t != IGNORE
    in_range = (t >= 0) & (t < C)
    return t, valid, in_range


@jit
def _xent_kernel(x_ptr, t_ptr, loss_ptr, N, C, IGNORE: tl.constexpr, EPS: tl.constexpr,
                 ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = rows < N
    base = rows * C
    f, s, total = _row_stats(x_ptr, base, mask_m, C, 1, ACC, BLOCK_M, BLOCK_R)
    t, valid, in_range = _target(t_ptr, rows, mask_m, C, IGNORE)
    xt = tl.load(x_ptr + base + tl.where(in_range, t, 0), mask=mask_m & in_range,
                 other=0).to(ACC)
    log_s = tl.log(s)
    loss = -((xt - f) - log_s)
    if EPS != 0.0:
        c = tl.zeros([BLOCK_M], ACC) + C
        mean_lp = (total - c * f) / c - log_s
        loss = tl.full([BLOCK_M], 1.0 - EPS, ACC) * loss - tl.full([BLOCK_M], EPS, ACC) * mean_lp
    # A class outside [0, C) has no loss: nan (the CPU kernel raises; a GPU cannot here).
    loss = tl.where(valid, tl.where(in_range, loss, float("nan")), 0.0)
    tl.store(loss_ptr + rows, loss.to(loss_ptr.dtype.element_ty), mask=mask_m)


@jit
def _xent_finish_kernel(loss_ptr, t_ptr, out_ptr, N, IGNORE: tl.constexpr, MEAN: tl.constexpr,
                        ACC: tl.constexpr, BLOCK: tl.constexpr):
    # One program: the sum of the per-row losses (over the rows not ignored, for the mean).
    total = tl.zeros([BLOCK], ACC)
    count = tl.zeros([BLOCK], tl.int64)
    for r0 in range(0, N, BLOCK):
        r = r0 + tl.arange(0, BLOCK)
        mask = r < N
        total += tl.load(loss_ptr + r, mask=mask, other=0)
        count += (tl.load(t_ptr + r, mask=mask, other=IGNORE) != IGNORE).to(tl.int64)
    result = tl.sum(total, 0)
    if MEAN:
        result = result / tl.sum(count, 0).to(ACC)
    tl.store(out_ptr, result.to(out_ptr.dtype.element_ty))


@jit
def _xent_grad_kernel(x_ptr, t_ptr, g_ptr, count_ptr, out_ptr, N, C, G_STRIDE,
                      IGNORE: tl.constexpr, EPS: tl.constexpr, MEAN: tl.constexpr,
                      ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr):
    # d loss / d x = scale * (softmax(x) - eps / C - (1 - eps) * onehot(t)),
    # scale = g * valid (/ count of valid rows for the mean).
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = rows < N
    base = rows * C
    f, s, _ = _row_stats(x_ptr, base, mask_m, C, 1, ACC, BLOCK_M, BLOCK_R)
    t, valid, in_range = _target(t_ptr, rows, mask_m, C, IGNORE)
    g = tl.load(g_ptr + rows * G_STRIDE, mask=mask_m, other=0).to(ACC)
    scale = g * valid.to(ACC)
    if MEAN:
        scale = scale / tl.load(count_ptr).to(ACC)
    scale = tl.where(valid & ~in_range, float("nan"), scale)
    c = tl.zeros([BLOCK_M], ACC) + C
    smooth = tl.full([BLOCK_M], EPS, ACC) / c
    hit = tl.full([BLOCK_M], 1.0 - EPS, ACC)
    cols = tl.arange(0, BLOCK_R)
    for r0 in range(0, C, BLOCK_R):
        r = r0 + cols
        mask = mask_m[:, None] & (r < C)[None, :]
        offs = base[:, None] + r[None, :]
        p = tl.exp(tl.load(x_ptr + offs, mask=mask, other=0).to(ACC) - f[:, None]) / s[:, None]
        if EPS != 0.0:
            p = p - smooth[:, None]
        p = tl.where(r[None, :] == t[:, None], p - hit[:, None], p)
        tl.store(out_ptr + offs, (p * scale[:, None]).to(out_ptr.dtype.element_ty), mask=mask)


def _xent_blocks(n, c):
    block_r = min(triton.next_power_of_2(max(c, 1)), TILE if INTERPRET else 1024)
    block_m = max(1, min(triton.next_power_of_2(max(n, 1)), TILE // block_r))
    return block_m, block_r


def softmax_cross_entropy(logits, target, ignore_index, label_smoothing, reduction):
    n, c = logits.shape
    x = contiguous(logits)
    t = contiguous(target)
    acc = np.dtype(_float_acc(logits.dtype))
    if reduction == "none":
        out = empty((n,), logits.dtype)
    else:
        out = empty((), logits.dtype)
    per_row = out if reduction == "none" else empty((n,), acc)
    block_m, block_r = _xent_blocks(n, c)
    if n:
        _xent_kernel[(cdiv(n, block_m),)](pointer(x), pointer(t), pointer(per_row), n, c,
                                          IGNORE=int(ignore_index), EPS=float(label_smoothing),
                                          ACC=_TL[acc], BLOCK_M=block_m, BLOCK_R=block_r)
    if reduction != "none":
        _xent_finish_kernel[(1,)](pointer(per_row), pointer(t), pointer(out), n,
                                  IGNORE=int(ignore_index), MEAN=reduction == "mean",
                                  ACC=_TL[acc], BLOCK=1024)
    return out


def softmax_cross_entropy_grad(logits, target, g, ignore_index, label_smoothing, reduction):
    n, c = logits.shape
    out = empty((n, c), logits.dtype)
    if out.size == 0:
        return out
    x = contiguous(logits)
    t = contiguous(target)
    acc = np.dtype(_float_acc(logits.dtype))
    mean = reduction == "mean"
    count = count_not_equal(t, int(ignore_index)) if mean else t
    g_stride = strides(g)[0] if g.ndim else 0
    block_m, block_r = _xent_blocks(n, c)
    _xent_grad_kernel[(cdiv(n, block_m),)](pointer(x), pointer(t), pointer(g), pointer(count),
                                           pointer(out), n, c, g_stride,
                                           IGNORE=int(ignore_index), EPS=float(label_smoothing),
                                           MEAN=mean, ACC=_TL[acc], BLOCK_M=block_m,
                                           BLOCK_R=block_r)
    return out


register_kernels("gpu", {"softmax": _softmax(False), "log_softmax": _softmax(True),
                         "softmax_cross_entropy": softmax_cross_entropy,
                         "softmax_cross_entropy_grad": softmax_cross_entropy_grad})
