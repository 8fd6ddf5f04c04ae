"""Indexing GPU kernels: gathers, and scatters into updated copies.

A key of ints, slices and None is a view (as on the CPU). A key with integer index arrays is
planned on the host from metadata alone: the basic part becomes a view of x whose indexed
axes come first, and the indexed region is a list of A "rows" (one per index position) of R
elements each. `_rows_kernel` moves rows between that strided view and a dense buffer laid
out like x[key]: a gather for getitem, a store for index_set, an atomic add for index_add
(repeated indices add up). An embedding lookup is the case of one index array into a 2-d
table: one program per block of rows, each row a contiguous vectorized load.

take_along_axis, scatter_add, scatter and scatter_reduce (`_along_kernel`) read the index of
every element; scatter_reduce's amax/amin use atomic max/min and its prod a compare-and-swap
loop (prod works in 64-bit words, the others widen as scatter_add does).

Negative indices count from the end; out-of-range indices read 0 and write nothing (the
GPU does not check them: that would need a device-to-host read per call).

Per call: getitem and take_along_axis read and write the output's bytes once (plus the
indices); index_add / index_set / scatter_add copy x (2x its bytes) and then read the values
once and update their targets (atomically for the adds); no FLOPs besides the adds.
"""
from __future__ import annotations

import numpy as np

from rill.ops.indexing import ARRAY, NEW, _expand_key, numpy_key
from rill.ops.primitive import register_kernels

from rill.kernels.numpy.indexing import _identity

from .creation import filled
from .elementwise import contiguous, launch
from .launch import INTERPRET, block_for, cdiv, empty, jit, pointer, strides, tl, triton, xp
from .shape import MAX_DIMS, as_bytes, collapse, remap, unravel

# Kernels read only constexpr globals; launchers pass `.value`.
MISSING = tl.constexpr(-(1 << 62))  # offset of an out-of-range index (never a real offset)
GATHER, SET, ADD, MAX, MIN, MUL = (tl.constexpr(i) for i in range(6))

# Dtypes Triton can add atomically; the others are widened for the add and narrowed after.
_ATOMIC = {np.dtype(t) for t in (np.float32, np.float64, np.int32, np.uint32, np.int64,
                                 np.uint64)}


def _widened(dtype):
    dtype = np.dtype(dtype)
    if dtype in _ATOMIC:
        return dtype
    return np.dtype(np.float32 if dtype.kind == "f" else np.int32)


@jit
def _rows_kernel(view_ptr, index_ptr, dense_ptr, A, R, blocks_r, index_stride, index_len,
                 dense_a_stride, D1, D2, D3, D4, D5, v0, v1, v2, v3, v4, v5,
                 e0, e1, e2, e3, e4, e5, MODE: tl.constexpr, HAS_INDEX: tl.constexpr,
                 WRAP: tl.constexpr, REST_FLAT: tl.constexpr, BLOCK_A: tl.constexpr,
                 BLOCK_R: tl.constexpr):
    # Row a of the indexed region starts at view offset index[a] * index_stride (or at the
    # offset index[a] itself when not WRAP); element r of a row is at the rest offset (v) in
    # the view and (e) in the dense buffer, whose row a starts at a * dense_a_stride.
    pid = tl.program_id(0)
    a = (pid // blocks_r).to(tl.int64) * BLOCK_A + tl.arange(0, BLOCK_A)
    r = (pid % blocks_r).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    a_in = a < A
    r_in = r < R
    valid = a_in
    if HAS_INDEX:
        idx = tl.load(index_ptr + a, mask=a_in, other=0).to(tl.int64)
        if WRAP:
            idx = tl.where(idx < 0, idx + index_len, idx)
            valid = a_in & (idx >= 0) & (idx < index_len)
            start = idx * index_stride
        else:
            valid = a_in & (idx != MISSING)
            start = idx
    else:
        start = tl.zeros([BLOCK_A], tl.int64)
    if REST_FLAT:
        view_r = r * v5
        dense_r = r * e5
    else:
        i0, i1, i2, i3, i4, i5 = unravel(r, D1, D2, D3, D4, D5)
        view_r = i0 * v0 + i1 * v1 + i2 * v2 + i3 * v3 + i4 * v4 + i5 * v5
        dense_r = i0 * e0 + i1 * e1 + i2 * e2 + i3 * e3 + i4 * e4 + i5 * e5
    view_at = start[:, None] + view_r[None, :]
    dense_at = a[:, None] * dense_a_stride + dense_r[None, :]
    inside = a_in[:, None] & r_in[None, :]
    mask = valid[:, None] & r_in[None, :]
    if MODE == GATHER:
        value = tl.load(view_ptr + view_at, mask=mask, other=0)
        tl.store(dense_ptr + dense_at, value, mask=inside)
    else:
        value = tl.load(dense_ptr + dense_at, mask=mask).to(view_ptr.dtype.element_ty)
        if MODE == SET:
            tl.store(view_ptr + view_at, value, mask=mask)
        else:
            tl.atomic_add(view_ptr + view_at, value, mask=mask)


@jit
def _offsets_kernel(off_ptr, index_ptr, n, stride, length, FIRST: tl.constexpr,
                    BLOCK: tl.constexpr):
    # off += wrap(index) * stride for one of several index arrays; MISSING once out of range.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    idx = tl.load(index_ptr + offs, mask=mask, other=0).to(tl.int64)
    idx = tl.where(idx < 0, idx + length, idx)
    bad = (idx < 0) | (idx >= length)
    if FIRST:
        before = tl.zeros([BLOCK], tl.int64)
    else:
        before = tl.load(off_ptr + offs, mask=mask, other=0)
        bad = bad | (before == MISSING)
    tl.store(off_ptr + offs, tl.where(bad, MISSING, before + idx * stride), mask=mask)


@jit
def _claim_kernel(claims_ptr, off_ptr, A, BLOCK: tl.constexpr):
    # The last of several rows aimed at one target wins (NumPy's order for x[idx] = v).
    a = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    off = tl.load(off_ptr + a, mask=a < A, other=MISSING)
    tl.atomic_max(claims_ptr + off, a.to(tl.int32), mask=(a < A) & (off != MISSING))


@jit
def _winners_kernel(off_ptr, claims_ptr, A, BLOCK: tl.constexpr):
    # Rows that lost their target's claim are dropped (their offset becomes MISSING).
    a = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    off = tl.load(off_ptr + a, mask=a < A, other=MISSING)
    ok = (a < A) & (off != MISSING)
    winner = tl.load(claims_ptr + off, mask=ok, other=-1)
    tl.store(off_ptr + a, tl.where(winner.to(tl.int64) == a, off, MISSING), mask=a < A)


# ---- planning an indexed region ------------------------------------------------------------


class _Region:
    """x[key] as rows: `view` (x's basic view, indexed axes first), `index`/`stride`/`length`
    (what locates row a), `shape` (of x[key]) and `perm` (x[key]'s axes in the order
    indexed-then-rest)."""

    def __init__(self, x, arrays, key):
        key = _expand_key(key, x.ndim)
        view_key, roles, positions = [], [], []
        k = 0
        for pos, item in enumerate(key):
            if item == NEW:
                view_key.append(None)
                roles.append(None)
            elif item[0] == "slice":
                view_key.append(slice(*item[1:]))
                roles.append(None)
            elif item[0] == "int":
                view_key.append(item[1])
                positions.append(pos)
            else:
                view_key.append(slice(None))
                roles.append(k)
                positions.append(pos)
                k += 1
        adv = [i for i, role in enumerate(roles) if role is not None]
        rest = [i for i, role in enumerate(roles) if role is None]
        self.view_key, self.order = tuple(view_key) + (Ellipsis,), adv + rest
        self.view = self.view_of(x)
        self.adv_shape = tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
        self.rest_shape = self.view.shape[len(adv):]
        # Indexed axes that sit together in the key keep their place; else they lead.
        together = positions == list(range(positions[0], positions[0] + len(positions)))
        at = adv[0] if together else 0
        nadv = len(self.adv_shape)
        self.shape = self.rest_shape[:at] + self.adv_shape + self.rest_shape[at:]
        self.perm = list(range(at, at + nadv)) + list(range(at)) + \
            list(range(at + nadv, len(self.shape)))
        self.A = int(np.prod(self.adv_shape))
        self.R = int(np.prod(self.rest_shape))
        view_strides = strides(self.view)
        if len(arrays) == 1:
            index = arrays[0]
            self.index = contiguous(index) if index.ndim else index.reshape(1)
            self.stride, self.length, self.wrap = view_strides[0], self.view.shape[0], True
        else:
            self.index = self._offsets(arrays, view_strides)
            self.stride, self.length, self.wrap = 1, 0, False

    def view_of(self, buffer):
        """The basic part of the key applied to `buffer`, indexed axes first (the Ellipsis
        makes even a 0-d result a view, never a scalar)."""
        return buffer[self.view_key].transpose(self.order)

    def _offsets(self, arrays, view_strides):
        off = empty((max(self.A, 1),), np.int64)
        if self.A == 0:
            return off
        block = block_for(self.A)
        for k, index in enumerate(arrays):
            flat = contiguous(xp.broadcast_to(index, self.adv_shape)).reshape(-1)
            _offsets_kernel[(cdiv(self.A, block),)](
                pointer(off), pointer(flat), self.A, view_strides[k], self.view.shape[k],
                FIRST=k == 0, BLOCK=block)
        return off

    def run(self, dense, mode):
        """Move rows between the view and `dense` (a contiguous buffer of self.shape)."""
        if self.A == 0 or self.R == 0:
            return
        view = as_bytes(self.view)
        dense = as_bytes(dense)
        dense_t = dense.transpose(self.perm)
        nadv = len(self.adv_shape)
        dense_s = strides(dense_t)
        a_stride = dense_s[nadv - 1] if nadv else 0
        view_s = strides(view)[len(self.view.shape) - len(self.rest_shape):]
        dims, (v_s, e_s), _ = collapse(self.rest_shape, [view_s, dense_s[nadv:]])
        rest_flat = all(d == 1 for d in dims[:-1])
        if INTERPRET:
            block_r = block_for(self.R)
            block_a = min(triton.next_power_of_2(self.A), max(1, (1 << 16) // block_r))
        else:
            # ~4K elements per program: whole rows of up to 1K elements, several rows each.
            block_r = min(triton.next_power_of_2(self.R), 1024)
            block_a = min(triton.next_power_of_2(self.A), max(1, 4096 // block_r))
        blocks_r = cdiv(self.R, block_r)
        grid = (cdiv(self.A, block_a) * blocks_r,)
        _rows_kernel[grid](
            pointer(view), pointer(self.index), pointer(dense), self.A, self.R, blocks_r,
            self.stride, self.length, a_stride, *dims[1:], *v_s, *e_s, MODE=mode.value,
            HAS_INDEX=True, WRAP=self.wrap, REST_FLAT=rest_flat, BLOCK_A=block_a,
            BLOCK_R=block_r)

    def keep_last_writes(self, target):
        """Drop all but the last of rows that share a target (for index_set)."""
        if self.wrap:  # one index array: make offsets to compare targets
            self.index = self._offsets([self.index.reshape(self.adv_shape)],
                                       strides(self.view))
            self.stride, self.length, self.wrap = 1, 0, False
        if self.A == 0:
            return
        # The claims buffer has target's shape and layout, so the same offsets address it.
        claims = filled(target.shape, np.int32, -1)
        claims_view = self.view_of(claims)
        block = block_for(self.A)
        grid = (cdiv(self.A, block),)
        _claim_kernel[grid](pointer(claims_view), pointer(self.index), self.A, BLOCK=block)
        _winners_kernel[grid](pointer(self.index), pointer(claims_view), self.A, BLOCK=block)


# ---- kernels -------------------------------------------------------------------------------


def _has_arrays(key):
    return any(item == ARRAY for item in key)


def _basic_view(buffer, key):
    """buffer[key] for a key of ints, slices, None and Ellipsis: always a view (an Ellipsis
    makes even a 0-d result an array, never a scalar)."""
    key = numpy_key(key, ())
    return buffer[key if Ellipsis in key else key + (Ellipsis,)]


def _getitem(x, *arrays, key):
    if not _has_arrays(key):
        return _basic_view(x, key)
    region = _Region(x, arrays, key)
    out = empty(region.shape, x.dtype)
    region.run(out, GATHER)
    return out


def _dense_values(values, shape, dtype):
    """values broadcast to `shape`, as a contiguous buffer of `dtype`."""
    shape = tuple(shape)
    if values.shape == tuple(shape) and values.dtype == dtype and values.flags.c_contiguous:
        return values
    if values.dtype == dtype and values.flags.c_contiguous and values.size == int(np.prod(shape)):
        return values.reshape(shape)
    return launch("copy", (values,), shape, dtype)


def _copy(x, dtype=None):
    return launch("copy", (x,), x.shape, x.dtype if dtype is None else dtype)


def _update(x, values, arrays, key, mode):
    """A copy of x with `values` stored or added at x[key]."""
    work = _widened(x.dtype) if mode is ADD else x.dtype
    out = _copy(x, work)
    if _has_arrays(key):
        region = _Region(out, arrays, key)
        if mode is SET:
            region.keep_last_writes(out)
        region.run(_dense_values(values, region.shape, work), mode)
    else:
        target = _basic_view(out, key)
        dense = _dense_values(values, target.shape, work)
        if mode is SET:
            _store_into(target, dense)
        else:
            _add_into(target, dense)
    return out if work == x.dtype else _narrow(out, x.dtype)


def _narrow(x, dtype):
    if dtype == np.bool_:
        return launch("cast_to_bool", (x,), x.shape, np.bool_)
    return _copy(x, dtype)


def _store_into(target, dense):
    remap(target, dense)


def _add_into(target, dense):
    """target += dense, for a basic (non-overlapping) region of a fresh buffer."""
    total = launch("add", (target, dense), target.shape, target.dtype)
    remap(target, total)


def _index_add(x, values, *arrays, key):
    return _update(x, values, arrays, key, ADD)


def _index_set(x, values, *arrays, key):
    return _update(x, values, arrays, key, SET)


# ---- along an axis -------------------------------------------------------------------------


@jit
def _along_kernel(x_ptr, idx_ptr, out_ptr, n, length, D1, D2, D3, D4, D5,
                  x0, x1, x2, x3, x4, x5, i0s, i1s, i2s, i3s, i4s, i5s,
                  o0, o1, o2, o3, o4, o5, a0, a1, a2, a3, a4, a5,
                  MODE: tl.constexpr, BLOCK: tl.constexpr):
    # Over the index's elements: position p along the axis (a_k marks it) becomes idx[p].
    # GATHER: out[p] = x[p with idx]; the others update x[p with idx] with upd[p] (`out` is
    # upd): SET stores, ADD / MAX / MIN combine atomically, MUL by compare-and-swap.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    j0, j1, j2, j3, j4, j5 = unravel(offs, D1, D2, D3, D4, D5)
    idx = tl.load(idx_ptr + j0 * i0s + j1 * i1s + j2 * i2s + j3 * i3s + j4 * i4s + j5 * i5s,
                  mask=mask, other=0).to(tl.int64)
    idx = tl.where(idx < 0, idx + length, idx)
    valid = mask & (idx >= 0) & (idx < length)
    # The axis' own term in x's offset uses idx instead of its position.
    x_at = (tl.where(a0 != 0, idx, j0) * x0 + tl.where(a1 != 0, idx, j1) * x1 +
            tl.where(a2 != 0, idx, j2) * x2 + tl.where(a3 != 0, idx, j3) * x3 +
            tl.where(a4 != 0, idx, j4) * x4 + tl.where(a5 != 0, idx, j5) * x5)
    o_at = j0 * o0 + j1 * o1 + j2 * o2 + j3 * o3 + j4 * o4 + j5 * o5
    if MODE == GATHER:
        tl.store(out_ptr + o_at, tl.load(x_ptr + x_at, mask=valid, other=0), mask=mask)
    else:
        upd = tl.load(out_ptr + o_at, mask=valid).to(x_ptr.dtype.element_ty)
        if MODE == ADD:
            tl.atomic_add(x_ptr + x_at, upd, mask=valid)
        elif MODE == SET:
            tl.store(x_ptr + x_at, upd, mask=valid)
        elif MODE == MAX:
            tl.atomic_max(x_ptr + x_at, upd, mask=valid)
        elif MODE == MIN:
            tl.atomic_min(x_ptr + x_at, upd, mask=valid)
        else:
            # No atomic multiply: read, multiply, and swap in only if the target still holds
            # what was read; lanes that lost a race retry with the value they found. x holds
            # 64-bit values here (the launcher widens), compared as bits. atomic_cas takes no
            # mask, so idle lanes swap a value for itself at offset 0, which changes nothing.
            bits = (x_ptr + tl.where(valid, x_at, 0)).to(tl.pointer_type(tl.int64),
                                                         bitcast=True)
            seen = tl.load(bits, mask=valid, other=0)
            pending = valid
            while tl.max(pending.to(tl.int32), 0) > 0:
                product = (seen.to(x_ptr.dtype.element_ty, bitcast=True) * upd).to(
                    tl.int64, bitcast=True)
                found = tl.atomic_cas(bits, seen, tl.where(pending, product, seen))
                pending = pending & (found != seen)
                seen = found


def _along(x, idx, other, axis, mode):
    """Launch _along_kernel over idx's shape (`other` is the output or the updates)."""
    n = idx.size
    if n == 0:
        return
    x, other = as_bytes(x), as_bytes(other)
    # The axis keeps its own dim (its stride in x is replaced per element).
    marks = [1 if a == axis else 0 for a in range(idx.ndim)]
    dims, (xs, iss, os_, ms), _ = collapse(
        idx.shape, [strides(x), strides(idx), strides(other), marks], keep={axis})
    ms = [1 if m else 0 for m in ms]
    block = block_for(n)
    _along_kernel[(cdiv(n, block),)](
        pointer(x), pointer(idx), pointer(other), n, x.shape[axis], *dims[1:], *xs, *iss,
        *os_, *ms, MODE=mode.value, BLOCK=block)


def _take_along_axis(x, idx, axis):
    axis %= x.ndim
    shape = tuple(idx.shape[a] if a == axis else max(x.shape[a], idx.shape[a]) if
                  min(x.shape[a], idx.shape[a]) != 0 else 0 for a in range(x.ndim))
    out = empty(shape, x.dtype)
    # x and idx broadcast against each other off the axis (x keeps its own axis length).
    xb = xp.broadcast_to(x, tuple(x.shape[a] if a == axis else shape[a] for a in range(x.ndim)))
    _along(xb, xp.broadcast_to(idx, shape), out, axis, GATHER)
    return out


def _scatter_add(x, idx, updates, axis):
    axis %= x.ndim
    work = _widened(x.dtype)
    out = _copy(x, work)
    _along(out, idx, updates, axis, ADD)
    return out if work == x.dtype else _narrow(out, x.dtype)


def _scatter(x, idx, src, axis):
    out = _copy(x)
    _along(out, idx, src, axis % x.ndim, SET)
    return out


_REDUCE_MODES = {"prod": MUL, "amax": MAX, "amin": MIN}


def _scatter_reduce(x, idx, src, axis, reduce, include_self):
    axis %= x.ndim
    if reduce == "prod":  # the swap loop works on 64-bit words
        work = np.dtype(np.float64 if x.dtype.kind == "f" else np.int64)
    else:
        work = _widened(x.dtype)
    out = _copy(x, work)
    if not include_self:  # targets start from the identity instead of input's entry
        _along(out, idx, filled(idx.shape, work, _identity(reduce, work)), axis, SET)
    _along(out, idx, src, axis, _REDUCE_MODES[reduce])
    return out if work == x.dtype else _narrow(out, x.dtype)


register_kernels("gpu", {
    "getitem": _getitem,
    "index_add": _index_add,
    "index_set": _index_set,
    "take_along_axis": _take_along_axis,
    "scatter_add": _scatter_add,
    "scatter": _scatter,
    "scatter_reduce": _scatter_reduce,
})

assert MAX_DIMS == 6  # the kernels above spell out six dims
