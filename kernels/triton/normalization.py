"""layer_norm GPU kernels: one program per row forward; rows in groups backward.

Forward reads x three times per row (mean, variance, write: the repeat reads of a row hit
the cache) and writes y: bytes ~ 2 * x + w + b; FLOPs ~ 8 per element.
Backward recomputes the row statistics from x rather than keeping them, writes dx, and
accumulates dw and db per group of rows in the group's own partial row, summed at the end
in a fixed order (deterministic: no atomics). Bytes ~ 2 * x + g + dx + partials.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels

from .creation import filled
from .elementwise import contiguous
from .launch import INTERPRET, cdiv, empty, jit, pointer, tl, triton


@jit
def _row_stats(x_row, d, eps, BLOCK: tl.constexpr):
    # Mean, then the variance about it (two passes: stable for rows with a large mean).
    cols = tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], dtype=tl.float32 if x_row.dtype.element_ty != tl.float64
                     else tl.float64)
    for start in range(0, d, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < d, other=0.0)
        total += x.to(total.dtype)
    mu = tl.sum(total, axis=0) / d
    total = total * 0
    for start in range(0, d, BLOCK):
        m = start + cols < d
        x = tl.load(x_row + start + cols, mask=m, other=0.0).to(total.dtype)
        c = tl.where(m, x - mu, 0.0)
        total += c * c
    rstd = 1.0 / tl.sqrt(tl.sum(total, axis=0) / d + eps)
    return mu, rstd


@jit
def _forward_kernel(x_ptr, w_ptr, b_ptr, y_ptr, d, EPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * d
    mu, rstd = _row_stats(x_row, d, EPS, BLOCK)
    cols = tl.arange(0, BLOCK)
    for start in range(0, d, BLOCK):
        m = start + cols < d
        x = tl.load(x_row + start + cols, mask=m, other=0.0).to(mu.dtype)
        w = tl.load(w_ptr + start + cols, mask=m, other=0.0).to(mu.dtype)
        b = tl.load(b_ptr + start + cols, mask=m, other=0.0).to(mu.dtype)
        y = (x - mu) * rstd * w + b
        tl.store(y_ptr + row * d + start + cols, y.to(y_ptr.dtype.element_ty), mask=m)


@jit
def _backward_kernel(g_ptr, x_ptr, w_ptr, dx_ptr, dw_part_ptr, db_part_ptr, rows, d,
                     rows_per_program, EPS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    first = pid * rows_per_program
    for r in range(0, rows_per_program):
        row = first + r
        if row < rows:
            x_row = x_ptr + row * d
            g_row = g_ptr + row * d
            mu, rstd = _row_stats(x_row, d, EPS, BLOCK)
            # mean(a) and mean(a * xhat), a = g * w
            sum_a = tl.zeros([BLOCK], dtype=mu.dtype)
            sum_ax = tl.zeros([BLOCK], dtype=mu.dtype)
            for start in range(0, d, BLOCK):
                m = start + cols < d
                x = tl.load(x_row + start + cols, mask=m, other=0.0).to(mu.dtype)
                g = tl.load(g_row + start + cols, mask=m, other=0.0).to(mu.dtype)
                w = tl.load(w_ptr + start + cols, mask=m, other=0.0).to(mu.dtype)
                a = g * w
                sum_a += a
                sum_ax += a * tl.where(m, (x - mu) * rstd, 0.0)
            mean_a = tl.sum(sum_a, axis=0) / d
            mean_ax = tl.sum(sum_ax, axis=0) / d
            for start in range(0, d, BLOCK):
                m = start + cols < d
                x = tl.load(x_row + start + cols, mask=m, other=0.0).to(mu.dtype)
                g = tl.load(g_row + start + cols, mask=m, other=0.0).to(mu.dtype)
                w = tl.load(w_ptr + start + cols, mask=m, other=0.0).to(mu.dtype)
                xhat = (x - mu) * rstd
                dx = rstd * (g * w - mean_a - xhat * mean_ax)
                tl.store(dx_ptr + row * d + start + cols, dx.to(dx_ptr.dtype.element_ty), mask=m)
                part = pid * d + start + cols
                tl.store(dw_part_ptr + part, tl.load(dw_part_ptr + part, mask=m) + g * xhat,
                         mask=m)
                tl.store(db_part_ptr + part, tl.load(db_part_ptr + part, mask=m) + g, mask=m)


@jit
def _sum_parts_kernel(part_ptr, out_ptr, parts, d, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = cols < d
    total = tl.zeros([BLOCK], dtype=part_ptr.dtype.element_ty)
    for p in range(0, parts):
        total += tl.load(part_ptr + p * d + cols, mask=m, other=0.0)
    tl.store(out_ptr + cols, total.to(out_ptr.dtype.element_ty), mask=m)


def _block(d):
    return min(triton.next_power_of_2(max(d, 1)), 1 << 16 if INTERPRET else 4096)


def _split(x, axes):
    d = int(np.prod(x.shape[x.ndim - axes:], dtype=np.int64))
    return contiguous(x), x.size // d if d else 0, d


def _layer_norm(x, w, b, eps, axes):
    x, rows, d = _split(x, axes)
    y = empty(x.shape, x.dtype)
    if y.size:
        _forward_kernel[(rows,)](pointer(x), pointer(contiguous(w)), pointer(contiguous(b)),
                                 pointer(y), d, EPS=eps, BLOCK=_block(d))
    return y


def _layer_norm_grad(g, x, w, eps, axes):
    x, rows, d = _split(x, axes)
    g, w = contiguous(g), contiguous(w)
    dx = empty(x.shape, x.dtype)
    dw, db = empty(w.shape, w.dtype), empty(w.shape, w.dtype)
    if not w.size:
        return dx, dw, db
    accumulate = np.float64 if x.dtype == np.float64 else np.float32
    programs = max(1, min(rows, 4 if INTERPRET else 256))
    per_program = cdiv(rows, programs) if rows else 0
    dw_part, db_part = filled((programs, d), accumulate, 0), filled((programs, d), accumulate, 0)
    if rows:
        _backward_kernel[(programs,)](pointer(g), pointer(x), pointer(w), pointer(dx),
                                      pointer(dw_part), pointer(db_part), rows, d, per_program,
                                      EPS=eps, BLOCK=_block(d))
    block = _block(d)
    for part, out in ((dw_part, dw), (db_part, db)):
        _sum_parts_kernel[(cdiv(d, block),)](pointer(part), pointer(out), programs, d,
                                             BLOCK=block)
    return dx, dw, db


register_kernels("gpu", {"layer_norm": _layer_norm, "layer_norm_grad": _layer_norm_grad})
