"""Convolution GPU kernels (NCHW) as implicit GEMMs: no im2col buffer is ever built. Three
spatial axes (conv3d) run the 2-d kernels once per depth tap (end of the file).

Each kernel is a tiled GEMM whose operand tiles are gathered straight from the image: a row
or column index is decomposed into (image, pixel) or (channel, filter tap), and the image
address is computed from the output position and the tap (masked where it falls in the
padding). One program grid axis runs over the groups. The GEMM loop (tl.dot with float32
accumulation, or multiply-and-sum for float64) and the tile configs are those of linalg.py
and tuning.py.

    conv2d              y[n, o, p]  = sum_{c, tap} x[n, c, p*stride + tap*dil - pad] w[o, c, tap]
                        M = N*OH*OW, N = O/G, K = C/G*KH*KW
    conv2d_weight_grad  gw[o, c, tap] = sum_{n, p} g[n, o, p] x[n, c, p*stride + tap*dil - pad]
                        M = O/G, N = C/G*KH*KW, K = N*OH*OW (split-K when the tiles are few)
    conv_transpose2d    dx[n, c, q] = sum_{o, tap, p: p*stride + tap*dil - pad = q} g[n, o, p]
                                                                           * w[o, c, tap]
                        M = N*H*W, N = C/G, K = O/G*KH*KW (taps that miss the stride are
                        masked: with stride s, only ~1/s^2 of the K loop does useful work)

Per call: FLOPs = 2*M*N*K*G; bytes ~ (x + w + y) * itemsize once per tile row/column reuse
(x is re-read cdiv(O/G, BLOCK_N) times for the forward pass, from L2 mostly).
"""
from __future__ import annotations

from rill.ops.primitive import register_kernels

from . import tuning
from .linalg import (GemmTypes, multiply_add, split_k, sum_splits, tile_position,
                     zero_accumulator)
from .launch import cdiv, empty, jit, pointer, strides, tl, xp

_INT64_SPAN = 2 ** 31 - 1


@jit
def _conv2d_kernel(
        x_ptr, w_ptr, y_ptr, bias_ptr,
        sxn, sxc, sxh, sxw, swo, swc, swh, sww,
        H, W, OH, OW, C_G, O_G, O, M, K, tiles_m, tiles_n,
        SH, SW, PT, PL, DH, DW,
        KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr, USE_DOT: tl.constexpr,
        PRECISION: tl.constexpr, ACC: tl.constexpr, IDX64: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr):
    pid_m, pid_n = tile_position(tiles_m, tiles_n, GROUP_M)
    group = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output pixel (n, oh, ow)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output channel within the group
    if IDX64:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
    m_ok = rm < M
    n_ok = rn < O_G
    img = rm // (OH * OW)
    pix = rm % (OH * OW)
    ih0 = (pix // OW) * SH - PT
    iw0 = (pix % OW) * SW - PL
    x_rows = x_ptr + img * sxn + group * C_G * sxc
    w_cols = w_ptr + (group * O_G + rn) * swo

    acc = zero_accumulator(BLOCK_M, BLOCK_N, ACC)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)  # (input channel, tap i, tap j)
        k_ok = rk < K
        c = rk // (KH * KW)
        ti = (rk % (KH * KW)) // KW
        tj = rk % KW
        ih = ih0[:, None] + (ti * DH)[None, :]
        iw = iw0[:, None] + (tj * DW)[None, :]
        inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(x_rows[:, None] + (c * sxc)[None, :] + ih * sxh + iw * sxw,
                    mask=m_ok[:, None] & k_ok[None, :] & inside, other=0)
        b = tl.load(w_cols[None, :] + (c * swc + ti * swh + tj * sww)[:, None],
                    mask=k_ok[:, None] & n_ok[None, :], other=0)
        acc = multiply_add(acc, a, b, USE_DOT, PRECISION)

    if HAS_BIAS:
        acc += tl.load(bias_ptr + group * O_G + rn, mask=n_ok, other=0).to(acc.dtype)[None, :]
    # y is a new contiguous (N, O, OH, OW) buffer.
    y_offs = (img * O * OH * OW + pix)[:, None] + ((group * O_G + rn) * OH * OW)[None, :]
    tl.store(y_ptr + y_offs, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@jit
def _conv2d_weight_grad_kernel(
        x_ptr, g_ptr, gw_ptr,
        sxn, sxc, sxh, sxw, sgn, sgc, sgh, sgw,
        H, W, OH, OW, C_G, O_G, M, N, K, k_per_split, split_stride, tiles_m, tiles_n,
        SH, SW, PT, PL, DH, DW,
        KH: tl.constexpr, KW: tl.constexpr, USE_DOT: tl.constexpr,
        PRECISION: tl.constexpr, ACC: tl.constexpr, IDX64: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr):
    pid_m, pid_n = tile_position(tiles_m, tiles_n, GROUP_M)
    group = tl.program_id(1)
    split = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output channel within the group
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (input channel, tap i, tap j)
    if IDX64:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
        split = split.to(tl.int64)
    m_ok = rm < M
    n_ok = rn < N
    c = rn // (KH * KW)
    ti = (rn % (KH * KW)) // KW
    tj = rn % KW
    g_rows = g_ptr + (group * O_G + rm) * sgc
    x_cols = x_ptr + (group * C_G + c) * sxc

    acc = zero_accumulator(BLOCK_M, BLOCK_N, ACC)
    k_lo = split * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)  # (image, output pixel)
        k_ok = rk < k_hi
        img = rk // (OH * OW)
        oh = (rk % (OH * OW)) // OW
        ow = rk % OW
        a = tl.load(g_rows[:, None] + (img * sgn + oh * sgh + ow * sgw)[None, :],
                    mask=m_ok[:, None] & k_ok[None, :], other=0)
        ih = (oh * SH - PT)[:, None] + (ti * DH)[None, :]
        iw = (ow * SW - PL)[:, None] + (tj * DW)[None, :]
        inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        b = tl.load(x_cols[None, :] + (img * sxn)[:, None] + ih * sxh + iw * sxw,
                    mask=k_ok[:, None] & n_ok[None, :] & inside, other=0)
        acc = multiply_add(acc, a, b, USE_DOT, PRECISION)

    # gw (or its split-K workspace) is contiguous (O, C/G, KH, KW).
    offs = split * split_stride + ((group * O_G + rm) * N)[:, None] + rn[None, :]
    tl.store(gw_ptr + offs, acc.to(gw_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@jit
def _conv_transpose2d_kernel(
        g_ptr, w_ptr, dx_ptr,
        sgn, sgc, sgh, sgw, swo, swc, swh, sww,
        H, W, OH, OW, C_G, O_G, C, M, K, tiles_m, tiles_n,
        SH, SW, PT, PL, DH, DW,
        KH: tl.constexpr, KW: tl.constexpr, USE_DOT: tl.constexpr,
        PRECISION: tl.constexpr, ACC: tl.constexpr, IDX64: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr):
    pid_m, pid_n = tile_position(tiles_m, tiles_n, GROUP_M)
    group = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # input pixel (n, h, w)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # input channel within the group
    if IDX64:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
    m_ok = rm < M
    n_ok = rn < C_G
    img = rm // (H * W)
    pix = rm % (H * W)
    h = pix // W
    w = pix % W
    g_rows = g_ptr + img * sgn + group * O_G * sgc
    w_cols = w_ptr + rn * swc

    acc = zero_accumulator(BLOCK_M, BLOCK_N, ACC)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)  # (output channel, tap i, tap j)
        k_ok = rk < K
        o = rk // (KH * KW)
        ti = (rk % (KH * KW)) // KW
        tj = rk % KW
        # The output pixel p that reaches (h, w) through this tap: p*stride = q + pad - tap*dil.
        th = (h + PT)[:, None] - (ti * DH)[None, :]
        tw = (w + PL)[:, None] - (tj * DW)[None, :]
        # Negative th/tw are masked before their quotient could matter (the interpreter's
        # // rounds down, a GPU's toward zero).
        oh = th // SH
        ow = tw // SW
        hit = ((th >= 0) & (th - oh * SH == 0) & (oh < OH) &
               (tw >= 0) & (tw - ow * SW == 0) & (ow < OW))
        a = tl.load(g_rows[:, None] + (o * sgc)[None, :] + oh * sgh + ow * sgw,
                    mask=m_ok[:, None] & k_ok[None, :] & hit, other=0)
        b = tl.load(w_cols[None, :] + ((group * O_G + o) * swo + ti * swh + tj * sww)[:, None],
                    mask=k_ok[:, None] & n_ok[None, :], other=0)
        acc = multiply_add(acc, a, b, USE_DOT, PRECISION)

    # dx is a new contiguous (N, C, H, W) buffer.
    dx_offs = (img * C * H * W + pix)[:, None] + ((group * C_G + rn) * H * W)[None, :]
    tl.store(dx_ptr + dx_offs, acc.to(dx_ptr.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


def _long(*buffers) -> bool:
    """Whether some offset may pass 2^31 (then the kernels index in int64)."""
    span = max(sum(abs(s) * (d - 1) for s, d in zip(strides(b), b.shape)) + b.size
               for b in buffers)
    return span > _INT64_SPAN


def _launch_args(config: tuning.Config, types: GemmTypes, long_index: bool) -> dict:
    return dict(USE_DOT=types.path == "dot", PRECISION=types.precision, ACC=types.acc,
                IDX64=long_index, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                BLOCK_K=config.block_k, GROUP_M=config.group_m, num_warps=config.num_warps,
                num_stages=config.num_stages)


def _geometry(stride, padding, dilation) -> tuple:
    """(SH, SW, PT, PL, DH, DW): only the top/left pads place pixels; the bottom/right ones
    are implied by the output sizes."""
    return (stride[0], stride[1], padding[0][0], padding[1][0], dilation[0], dilation[1])


def conv2d(x, w, *bias, stride, padding, dilation, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = ((s + p[0] + p[1] - d * (k - 1) - 1) // st + 1 for s, p, d, k, st in
              zip((h, wd), padding, dilation, (kh, kw), stride))
    y = empty((n, o, oh, ow), x.dtype)
    if y.size == 0:
        return y
    og = o // groups
    M, K = n * oh * ow, cg * kh * kw
    types = GemmTypes(x.dtype)
    long_index = _long(x, w, y)
    bias_ptr = pointer(bias[0]) if bias else pointer(y)

    def run(config):
        tiles_m, tiles_n = cdiv(M, config.block_m), cdiv(og, config.block_n)
        _conv2d_kernel[(tiles_m * tiles_n, groups)](
            pointer(x), pointer(w), pointer(y), bias_ptr, *strides(x), *strides(w),
            h, wd, oh, ow, cg, og, o, M, K, tiles_m, tiles_n,
            *_geometry(stride, padding, dilation), KH=kh, KW=kw, HAS_BIAS=bool(bias),
            **_launch_args(config, types, long_index))

    run(tuning.config_for("conv2d", types.path, types.key, M, og, K, groups, run))
    return y


def conv2d_weight_grad(x, g, kernel_size, stride, padding, dilation, groups):
    n, c, h, wd = x.shape
    o, (oh, ow) = g.shape[1], g.shape[2:]
    kh, kw = kernel_size
    cg, og = c // groups, o // groups
    gw = empty((o, cg, kh, kw), x.dtype)
    if gw.size == 0:
        return gw
    M, N, K = og, cg * kh * kw, n * oh * ow
    types = GemmTypes(x.dtype)

    def run(config):
        tiles_m, tiles_n = cdiv(M, config.block_m), cdiv(N, config.block_n)
        split = split_k(tiles_m * tiles_n * groups, K, config.block_k)
        target = gw if split == 1 else empty((split,) + gw.shape, types.acc_dtype)
        k_per_split = cdiv(cdiv(max(K, 1), split), config.block_k) * config.block_k
        _conv2d_weight_grad_kernel[(tiles_m * tiles_n, groups, split)](
            pointer(x), pointer(g), pointer(target), *strides(x), *strides(g),
            h, wd, oh, ow, cg, og, M, N, K, k_per_split, gw.size, tiles_m, tiles_n,
            *_geometry(stride, padding, dilation), KH=kh, KW=kw,
            **_launch_args(config, types, _long(x, g, target)))
        if split > 1:
            sum_splits(target, gw, split)

    run(tuning.config_for("conv2d_weight_grad", types.path, types.key, M, N, K, groups, run))
    return gw


def conv_transpose2d(g, w, input_size, stride, padding, dilation, groups):
    n, o = g.shape[:2]
    _, cg, kh, kw = w.shape
    h, wd = input_size
    c, og = cg * groups, o // groups
    dx = empty((n, c, h, wd), g.dtype)
    if dx.size == 0:
        return dx
    M, K = n * h * wd, og * kh * kw
    types = GemmTypes(g.dtype)
    long_index = _long(g, w, dx)

    def run(config):
        tiles_m, tiles_n = cdiv(M, config.block_m), cdiv(cg, config.block_n)
        _conv_transpose2d_kernel[(tiles_m * tiles_n, groups)](
            pointer(g), pointer(w), pointer(dx), *strides(g), *strides(w),
            h, wd, g.shape[2], g.shape[3], cg, og, c, M, K, tiles_m, tiles_n,
            *_geometry(stride, padding, dilation), KH=kh, KW=kw,
            **_launch_args(config, types, long_index))

    run(tuning.config_for("conv_transpose2d", types.path, types.key, M, cg, K, groups, run))
    return dx


# ---- three spatial axes: the depth folded into the batch of the 2-d kernels ----------------
#
# Tap kd of the depth kernel meets the depth-strided slice x[:, :, kd*dd :: sd] (OD planes);
# seen as a batch of N*OD images, each tap is one 2-d convolution, and
#     conv3d(x, w)[:, :, od] = sum_kd conv2d(x[:, :, od*sd + kd*dd], w[:, :, kd]).
# That is KD launches of the tuned 2-d kernels and a copy of the slice per tap (x is read KD
# times), instead of a second family of hand-written kernels.

def _depth_padded(x, pad):
    """x padded (or cropped, for a negative pad) with zeros along the depth axis."""
    lo, hi = pad
    d = x.shape[2]
    x = x[:, :, max(-lo, 0):d - max(-hi, 0)]
    lo, hi = max(lo, 0), max(hi, 0)
    if lo or hi:
        padded = xp.zeros(x.shape[:2] + (x.shape[2] + lo + hi,) + x.shape[3:], x.dtype)
        padded[:, :, lo:lo + x.shape[2]] = x
        x = padded
    return x


def _as_images(v):
    """(N, C, D, H, W) as a contiguous batch of N*D images (N*D, C, H, W)."""
    n, c, d, h, w = v.shape
    return xp.ascontiguousarray(v.transpose(0, 2, 1, 3, 4)).reshape(n * d, c, h, w)


def _as_volume(v, n):
    """(N*D, C, H, W) back as (N, C, D, H, W)."""
    nd, c, h, w = v.shape
    return v.reshape(n, nd // n, c, h, w).transpose(0, 2, 1, 3, 4)


def _depth_slice(kd, dilation, out, stride):
    return slice(kd * dilation, kd * dilation + (out - 1) * stride + 1, stride)


def conv3d(x, w, *bias, stride, padding, dilation, groups):
    n, kd = x.shape[0], w.shape[2]
    xpad = _depth_padded(x, padding[0])
    od = (xpad.shape[2] - dilation[0] * (kd - 1) - 1) // stride[0] + 1
    plane = dict(stride=stride[1:], padding=padding[1:], dilation=dilation[1:], groups=groups)
    total = None
    for t in range(kd):
        images = _as_images(xpad[:, :, _depth_slice(t, dilation[0], od, stride[0])])
        part = conv2d(images, xp.ascontiguousarray(w[:, :, t]),
                      *(bias if t == 0 else ()), **plane)
        total = part if total is None else total + part
    return xp.ascontiguousarray(_as_volume(total, n))


def conv3d_weight_grad(x, g, kernel_size, stride, padding, dilation, groups):
    kd = kernel_size[0]
    xpad = _depth_padded(x, padding[0])
    od = g.shape[2]
    grads = _as_images(g)
    plane = dict(kernel_size=kernel_size[1:], stride=stride[1:], padding=padding[1:],
                 dilation=dilation[1:], groups=groups)
    taps = [conv2d_weight_grad(_as_images(xpad[:, :, _depth_slice(t, dilation[0], od,
                                                                  stride[0])]), grads, **plane)
            for t in range(kd)]
    return xp.ascontiguousarray(xp.stack(taps, axis=2))


def conv_transpose3d(g, w, input_size, stride, padding, dilation, groups):
    n, od = g.shape[0], g.shape[2]
    kd = w.shape[2]
    (lo, hi), d = padding[0], input_size[0]
    grads = _as_images(g)
    plane = dict(input_size=input_size[1:], stride=stride[1:], padding=padding[1:],
                 dilation=dilation[1:], groups=groups)
    # The gradient of the depth-padded image, with room for every tap (pads may be negative:
    # output_padding), cropped to the input at the end.
    room = max(d + lo + hi, (od - 1) * stride[0] + dilation[0] * (kd - 1) + 1, lo + d)
    c = w.shape[1] * groups
    full = xp.zeros((n, c, room) + tuple(input_size[1:]), g.dtype)
    for t in range(kd):
        part = conv_transpose2d(grads, xp.ascontiguousarray(w[:, :, t]), **plane)
        full[:, :, _depth_slice(t, dilation[0], od, stride[0])] += _as_volume(part, n)
    return xp.ascontiguousarray(full[:, :, lo:lo + d])


register_kernels("gpu", {"conv2d": conv2d, "conv_transpose2d": conv_transpose2d,
                         "conv2d_weight_grad": conv2d_weight_grad, "conv3d": conv3d,
                         "conv_transpose3d": conv_transpose3d,
                         "conv3d_weight_grad": conv3d_weight_grad})
