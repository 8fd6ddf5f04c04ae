"""Max-pooling GPU kernels (NCHW), mirroring the CPU kernels value for value.

max_pool2d returns the maxima and, per output, which tap of its window won (int8, or int32
for windows of 128 taps or more). Taps are visited in row-major order; a tap wins when it is
strictly greater (so the first maximum is kept) or NaN (so a NaN wins and the last NaN is the
winner); taps in the padding read -inf.

max_pool2d_grad is a gather, not a scatter: each input pixel visits, in tap order, the
outputs whose window reaches it through that tap, and adds g * (winner == tap). That is the
CPU's sum, term for term and in the same order (so results match bit for bit, overlapping
windows included), with no atomics and no zero-fill pass.

Per call: max_pool2d reads x about KH*KW/(SH*SW) times (from cache mostly) and writes the
maxima and winners; max_pool2d_grad reads g and winners up to KH*KW/(SH*SW) times and writes
the input-sized gradient. FLOPs: one comparison (or multiply-add) per tap per element.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels

from .launch import block_for, cdiv, empty, pointer, strides, tl, triton


@triton.jit
def _tap(base, oh, ow, t, H, W, sxh, sxw, SH, SW, PH, PW, DH, DW, KW: tl.constexpr, mask):
    """The pixel under tap t of each output's window; -inf in the padding."""
    ih = oh * SH - PH + (t // KW) * DH
    iw = ow * SW - PW + (t % KW) * DW
    inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    return tl.load(base + ih * sxh + iw * sxw, mask=mask & inside, other=float("-inf"))


@triton.jit
def _max_pool2d_kernel(x_ptr, best_ptr, winner_ptr, total, C, H, W, OH, OW,
                       sxn, sxc, sxh, sxw, SH, SW, PH, PW, DH, DW,
                       KH: tl.constexpr, KW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    ow = offs % OW
    oh = (offs // OW) % OH
    c = (offs // (OW * OH)) % C
    n = offs // (OW * OH * C)
    base = x_ptr + n * sxn + c * sxc
    best = _tap(base, oh, ow, 0, H, W, sxh, sxw, SH, SW, PH, PW, DH, DW, KW, mask)
    winner = tl.zeros((BLOCK,), dtype=tl.int32)
    for t in range(1, KH * KW):  # a loop, not unrolled: windows may be large
        tap = _tap(base, oh, ow, t, H, W, sxh, sxw, SH, SW, PH, PW, DH, DW, KW, mask)
        wins = (tap > best) | (tap != tap)
        best = tl.where(wins, tap, best)
        winner = tl.where(wins, t, winner)
    tl.store(best_ptr + offs, best, mask=mask)
    tl.store(winner_ptr + offs, winner.to(winner_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _max_pool2d_grad_kernel(g_ptr, winner_ptr, out_ptr, total, C, H, W, OH, OW,
                            sgn, sgc, sgh, sgw, swn, swc, swh, sww, SH, SW, PH, PW, DH, DW,
                            KH: tl.constexpr, KW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    w = offs % W
    h = (offs // W) % H
    c = (offs // (W * H)) % C
    n = offs // (W * H * C)
    g_base = g_ptr + n * sgn + c * sgc
    w_base = winner_ptr + n * swn + c * swc
    acc = tl.zeros((BLOCK,), dtype=g_ptr.dtype.element_ty)
    for t in range(KH * KW):
        # The output whose window holds (h, w) at tap t: o*stride = pixel + pad - tap*dil.
        th = h + PH - (t // KW) * DH
        tw = w + PW - (t % KW) * DW
        oh = th // SH  # negatives are masked below (// rounds differently there)
        ow = tw // SW
        hit = (mask & (th >= 0) & (th - oh * SH == 0) & (oh < OH) &
               (tw >= 0) & (tw - ow * SW == 0) & (ow < OW))
        g = tl.load(g_base + oh * sgh + ow * sgw, mask=hit, other=0)
        won = tl.load(w_base + oh * swh + ow * sww, mask=hit, other=-1) == t
        # As the CPU: g * (winner == t), so an inf or NaN in g poisons the pixels that see it.
        acc = tl.where(hit, acc + g * won.to(g.dtype), acc)
    tl.store(out_ptr + offs, acc, mask=mask)


def _output_size(size, kernel, stride, pad, dilation):
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def max_pool2d(x, kernel_size, stride, padding, dilation):
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    oh, ow = _output_size(h, kh, sh, ph, dh), _output_size(w, kw, sw, pw, dw)
    best = empty((n, c, oh, ow), x.dtype)
    winner = empty((n, c, oh, ow), np.int8 if kh * kw < 128 else np.int32)
    total = best.size
    if total:
        block = block_for(total)
        _max_pool2d_kernel[(cdiv(total, block),)](
            pointer(x), pointer(best), pointer(winner), total, c, h, w, oh, ow, *strides(x),
            sh, sw, ph, pw, dh, dw, KH=kh, KW=kw, BLOCK=block)
    return best, winner


def max_pool2d_grad(g, winners, input_shape, kernel_size, stride, padding, dilation):
    n, c, h, w = input_shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    out = empty((n, c, h, w), g.dtype)
    total = out.size
    if total:
        block = block_for(total)
        _max_pool2d_grad_kernel[(cdiv(total, block),)](
            pointer(g), pointer(winners), pointer(out), total, c, h, w, g.shape[2], g.shape[3],
            *strides(g), *strides(winners), sh, sw, ph, pw, dh, dw, KH=kh, KW=kw, BLOCK=block)
    return out


register_kernels("gpu", {"max_pool2d": max_pool2d, "max_pool2d_grad": max_pool2d_grad})
