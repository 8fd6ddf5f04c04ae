"""Max-pooling GPU kernels (NCHW), mirroring the CPU kernels value for value (three spatial
axes run the 2-d kernels once per depth tap: end of the file).

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

from .launch import block_for, cdiv, empty, jit, pointer, strides, tl, xp


@jit
def _tap(base, oh, ow, t, H, W, sxh, sxw, SH, SW, PH, PW, DH, DW, KW: tl.constexpr, mask):
    """The pixel under tap t of each output's window; -inf in the padding."""
    ih = oh * SH - PH + (t // KW) * DH
    iw = ow * SW - PW + (t % KW) * DW
    inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    return tl.load(base + ih * sxh + iw * sxw, mask=mask & inside, other=float("-inf"))


@jit
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


@jit
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


# ---- three spatial axes: the depth folded into the batch of the 2-d kernels ----------------
#
# Depth tap kd of the window meets the depth-strided slice x[:, :, kd*dd :: sd]; as a batch of
# N*OD images each tap is one 2-d pooling, and the taps are merged in order with the same
# rule (strictly greater, or NaN), the 3-d tap number being kd * KH*KW + the 2-d one. So the
# winners, and the gradient, equal the CPU's.

def _depth_padded(x, pad, fill):
    if not pad:
        return x
    out = xp.full(x.shape[:2] + (x.shape[2] + 2 * pad,) + x.shape[3:], fill, x.dtype)
    out[:, :, pad:pad + x.shape[2]] = x
    return out


def _as_images(v):
    n, c, d, h, w = v.shape
    return xp.ascontiguousarray(v.transpose(0, 2, 1, 3, 4)).reshape(n * d, c, h, w)


def _as_volume(v, n):
    nd, c, h, w = v.shape
    return v.reshape(n, nd // n, c, h, w).transpose(0, 2, 1, 3, 4)


def _plane(kernel_size, stride, padding, dilation):
    return dict(kernel_size=kernel_size[1:], stride=stride[1:], padding=padding[1:],
                dilation=dilation[1:])


def max_pool3d(x, kernel_size, stride, padding, dilation):
    n = x.shape[0]
    kd, sd, pd, dd = kernel_size[0], stride[0], padding[0], dilation[0]
    xpad = _depth_padded(x, pd, float("-inf"))
    od = _output_size(x.shape[2], kd, sd, pd, dd)
    taps = kernel_size[1] * kernel_size[2]
    small = np.int8 if kd * taps < 128 else np.int32
    best = winner = None
    for t in range(kd):
        plane = xpad[:, :, t * dd:t * dd + (od - 1) * sd + 1:sd]
        b, w = max_pool2d(_as_images(plane), **_plane(kernel_size, stride, padding, dilation))
        b, w = _as_volume(b, n), _as_volume(w, n).astype(np.int32) + t * taps
        if best is None:
            best, winner = b, w
            continue
        wins = (b > best) | (b != b)
        best, winner = xp.where(wins, b, best), xp.where(wins, w, winner)
    return xp.ascontiguousarray(best), xp.ascontiguousarray(winner.astype(small))


def max_pool3d_grad(g, winners, input_shape, kernel_size, stride, padding, dilation):
    n, c, d, h, w = input_shape
    kd, sd, pd, dd = kernel_size[0], stride[0], padding[0], dilation[0]
    od = g.shape[2]
    taps = kernel_size[1] * kernel_size[2]
    plane_winners = np.int8 if taps < 128 else np.int32
    grads = xp.zeros((n, c, d + 2 * pd, h, w), g.dtype)
    winners = winners.astype(np.int32)
    for t in range(kd):
        mine = (winners // taps) == t
        part = max_pool2d_grad(_as_images(g * mine.astype(g.dtype)),
                               _as_images((winners % taps).astype(plane_winners)),
                               (n * od, c, h, w), **_plane(kernel_size, stride, padding,
                                                             dilation))
        grads[:, :, t * dd:t * dd + (od - 1) * sd + 1:sd] += _as_volume(part, n)
    return xp.ascontiguousarray(grads[:, :, pd:pd + d])


register_kernels("gpu", {"max_pool2d": max_pool2d, "max_pool2d_grad": max_pool2d_grad,
                         "max_pool3d": max_pool3d, "max_pool3d_grad": max_pool3d_grad})
