"""Shape GPU kernels: views where the CPU kernel returns views, one remapping kernel otherwise.

reshape (a view when the strides allow one, else a copy), transpose, broadcast_to, split and
flip are views, as on the CPU (rill never writes a buffer). pad, roll, tril/triu and the
pieces of concat run `_remap_kernel`: each output element finds its source element through
per-axis maps (shift, clamp, reflect, wrap), so no operand is made contiguous first.

Per call: views move no bytes; reshape of a non-viewable buffer, concat, pad, roll, tril and
triu read each source element once and write each output element once (~2x the output bytes),
no FLOPs.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels
from rill.ops.shape import _resolve_shape

from .elementwise import launch
from .launch import BACKEND, block_for, cdiv, empty, jit, pointer, strides, tl, xp

MAX_DIMS = 6

# How _remap_kernel maps an output index i to a source index along an axis (lo, length L),
# and which triangle it keeps. Kernels read only constexpr globals; launchers pass `.value`.
COPY, CONSTANT, EDGE, REFLECT, ROLL = (tl.constexpr(i) for i in range(5))
_PAD_MODES = {"constant": CONSTANT, "edge": EDGE, "reflect": REFLECT}
NO_TRIANGLE, LOWER, UPPER = (tl.constexpr(i) for i in range(3))


def as_bytes(buffer):
    """Booleans travel as bytes (0/1): Triton's 1-bit pointers are not byte arrays everywhere."""
    return buffer.view(np.uint8) if buffer.dtype == np.bool_ else buffer


def collapse(shape, stride_lists, keep=()):
    """The fewest dims that walk `shape` in C order for every operand: size-1 dims dropped and
    neighbours merged where each operand's strides allow, except for the axes in `keep`
    (which stay, one each). Returns (dims, strides per operand, axis of `shape` behind each
    dim or -1), padded in front to MAX_DIMS."""
    dims, merged, axes = [], [[] for _ in stride_lists], []
    for i, d in enumerate(shape):
        if d == 1 and i not in keep:
            continue
        if (dims and i not in keep and axes[-1] not in keep and
                all(m[-1] == s[i] * d for m, s in zip(merged, stride_lists))):
            dims[-1] *= d
            axes[-1] = i
            for m, s in zip(merged, stride_lists):
                m[-1] = s[i]
        else:
            dims.append(d)
            axes.append(i)
            for m, s in zip(merged, stride_lists):
                m.append(s[i])
    if len(dims) > MAX_DIMS:
        raise NotImplementedError(f"{len(dims)} dims that cannot be merged (at most {MAX_DIMS})")
    pad = MAX_DIMS - len(dims)
    return [1] * pad + dims, [[0] * pad + m for m in merged], [-1] * pad + axes


@jit
def unravel(flat, D1, D2, D3, D4, D5):
    """The 6-d index (i0..i5) of C-order position `flat` in dims (D0, D1, ..., D5)."""
    i5 = flat % D5
    rest = flat // D5
    i4 = rest % D4
    rest = rest // D4
    i3 = rest % D3
    rest = rest // D3
    i2 = rest % D2
    rest = rest // D2
    i1 = rest % D1
    return rest // D1, i1, i2, i3, i4, i5


@jit
def _source(i, lo, L, MODE: tl.constexpr):
    """Source index along one axis for output index i (an output of padding or shifting)."""
    j = i - lo
    if MODE == EDGE:
        j = tl.minimum(tl.maximum(j, 0), L - 1)
    if MODE == REFLECT:  # mirror without repeating the edge; the pad is shorter than the axis
        j = tl.where(j < 0, -j, j)
        j = tl.where(j >= L, 2 * (L - 1) - j, j)
    if MODE == ROLL:  # lo is the shift, already in [0, L)
        j = tl.where(j < 0, j + L, j)
    return j


@jit
def _remap_kernel(dst_ptr, src_ptr, value_ptr, n, D1, D2, D3, D4, D5,
                  d0, d1, d2, d3, d4, d5, s0, s1, s2, s3, s4, s5,
                  lo0, lo1, lo2, lo3, lo4, lo5, L0, L1, L2, L3, L4, L5, K,
                  MODE: tl.constexpr, TRIANGLE: tl.constexpr, DST_FLAT: tl.constexpr,
                  BLOCK: tl.constexpr):
    # dst[i] = src[map(i)] over a 6-d index; dst and src each through their own strides.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i0, i1, i2, i3, i4, i5 = unravel(offs, D1, D2, D3, D4, D5)
    j0 = _source(i0, lo0, L0, MODE)
    j1 = _source(i1, lo1, L1, MODE)
    j2 = _source(i2, lo2, L2, MODE)
    j3 = _source(i3, lo3, L3, MODE)
    j4 = _source(i4, lo4, L4, MODE)
    j5 = _source(i5, lo5, L5, MODE)
    inside = mask
    if MODE == CONSTANT:
        inside = (mask & (j0 >= 0) & (j0 < L0) & (j1 >= 0) & (j1 < L1) & (j2 >= 0) & (j2 < L2) &
                  (j3 >= 0) & (j3 < L3) & (j4 >= 0) & (j4 < L4) & (j5 >= 0) & (j5 < L5))
    at = j0 * s0 + j1 * s1 + j2 * s2 + j3 * s3 + j4 * s4 + j5 * s5
    value = tl.load(src_ptr + at, mask=inside)
    if MODE == CONSTANT:
        value = tl.where(inside, value, tl.load(value_ptr))
    if TRIANGLE == LOWER:  # rows are axis 4, columns axis 5
        value = tl.where(i5 - i4 <= K, value, tl.zeros_like(value))
    if TRIANGLE == UPPER:
        value = tl.where(i5 - i4 >= K, value, tl.zeros_like(value))
    if DST_FLAT:
        dst_at = offs
    else:
        dst_at = i0 * d0 + i1 * d1 + i2 * d2 + i3 * d3 + i4 * d4 + i5 * d5
    tl.store(dst_ptr + dst_at, value.to(dst_ptr.dtype.element_ty), mask=mask)


def remap(dst, src, mode=COPY, lo=None, value=None, triangle=NO_TRIANGLE, k=0):
    """dst[i] = src[map(i)] with, per axis a, map(i) = i - lo[a] by `mode` within the source's
    length. Shapes: dst.shape is the output; src has dst's rank. Writes into `dst`."""
    n = dst.size
    if n == 0:
        return dst
    result = dst
    ndim = dst.ndim
    lo = [0] * ndim if lo is None else list(lo)
    lengths = list(src.shape)
    # Axes that map or hold the triangle keep their own index; the rest may merge.
    keep = {a for a in range(ndim) if lo[a] or lengths[a] != dst.shape[a]}
    if triangle.value:
        keep |= {ndim - 2, ndim - 1}
    dst, src = as_bytes(dst), as_bytes(src)
    dims, (dst_s, src_s), axes = collapse(dst.shape, [strides(dst), strides(src)], keep)
    # A kept axis maps by its own (lo, length); a merged one is the identity over its dims.
    los = [lo[a] if a in keep else 0 for a in axes]
    lens = [lengths[a] if a in keep else d for a, d in zip(axes, dims)]
    dst_flat = bool(dst.flags.c_contiguous)
    value = src if value is None else as_bytes(value)
    block = block_for(n)
    _remap_kernel[(cdiv(n, block),)](
        pointer(dst), pointer(src), pointer(value), n, *dims[1:], *dst_s, *src_s, *los, *lens,
        k, MODE=mode.value, TRIANGLE=triangle.value, DST_FLAT=dst_flat, BLOCK=block)
    return result


def _new_like(x, shape=None):
    return empty(x.shape if shape is None else shape, x.dtype)


# ---- views ---------------------------------------------------------------------------------


def view_strides(shape, new_shape, elem_strides):
    """Element strides that show `shape` (strides `elem_strides`) as `new_shape` without a
    copy, or None when the layout does not allow it (NumPy's rule: each group of old axes
    that becomes a group of new axes must be contiguous within itself)."""
    old = [(d, s) for d, s in zip(shape, elem_strides) if d != 1]
    new_dims = [d for d in new_shape if d != 1]
    out, i, j = [], 0, 0
    while i < len(old) and j < len(new_dims):
        # Take the shortest runs of old and new axes with equal products.
        oi, nj = i + 1, j + 1
        po, pn = old[i][0], new_dims[j]
        while po != pn:
            if po < pn:
                po *= old[oi][0]
                oi += 1
            else:
                pn *= new_dims[nj]
                nj += 1
        for a in range(i, oi - 1):
            if old[a][1] != old[a + 1][1] * old[a + 1][0]:
                return None
        stride = old[oi - 1][1]
        group = []
        for d in reversed(new_dims[j:nj]):
            group.append(stride)
            stride *= d
        out.extend(reversed(group))
        i, j = oi, nj
    it = iter(out)
    return [0 if d == 1 else next(it) for d in new_shape]


def _reshape(x, shape):
    shape = _resolve_shape(x.shape, shape)  # the attr may hold a -1
    if x.flags.c_contiguous:
        return x.reshape(shape)
    if x.size:
        found = view_strides(x.shape, shape, strides(x))
        if found is not None:
            return xp.lib.stride_tricks.as_strided(
                x, shape, tuple(s * x.itemsize for s in found))
    return launch("copy", (x,), x.shape, x.dtype).reshape(shape)


def _split(x, sizes, axis):
    axis %= x.ndim
    pieces, start = [], 0
    lead = (slice(None),) * axis
    for s in sizes:
        pieces.append(x[lead + (slice(start, start + s),)])
        start += s
    return pieces


def _flip(x, axes):
    return x[tuple(slice(None, None, -1) if a in axes else slice(None) for a in range(x.ndim))]


# ---- copies --------------------------------------------------------------------------------


def _concat(*xs, axis):
    axis %= xs[0].ndim
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    out = empty(shape, np.result_type(*xs))
    start = 0
    lead = (slice(None),) * axis
    for x in xs:
        remap(out[lead + (slice(start, start + x.shape[axis]),)], x)
        start += x.shape[axis]
    return out


def _pad(x, widths, mode, value):
    out = _new_like(x, [n + lo + hi for (lo, hi), n in zip(widths, x.shape)])
    fill = None
    if mode == "constant":
        # The fill value travels in a buffer of x's dtype, exact for every dtype.
        fill = BACKEND.from_host(np.array(value).astype(x.dtype), None)
    return remap(out, x, _PAD_MODES[mode], [lo for lo, _ in widths], value=fill)


def _roll(x, shift, axes):
    if axes is None:
        total = sum(shift) if isinstance(shift, tuple) else shift
        flat = _reshape(x, (x.size,))
        return _roll(flat, total, (0,)).reshape(x.shape)
    shifts = shift if isinstance(shift, tuple) else (shift,) * len(axes)
    lo = [0] * x.ndim
    for s, a in zip(shifts, axes):  # a repeated axis shifts by the sum
        lo[a % x.ndim] += s
    lo = [s % n if n else 0 for s, n in zip(lo, x.shape)]
    return remap(_new_like(x), x, ROLL, lo)


def _triangle(which):
    def kernel(x, k):
        return remap(_new_like(x), x, COPY, triangle=which, k=k)
    return kernel


register_kernels("gpu", {
    "reshape": _reshape,
    "transpose": lambda x, axes: x.transpose(axes),
    "broadcast_to": lambda x, shape: xp.broadcast_to(x, shape),
    "concat": _concat,
    "split": _split,
    "pad": _pad,
    "flip": _flip,
    "roll": _roll,
    "tril": _triangle(LOWER),
    "triu": _triangle(UPPER),
})
