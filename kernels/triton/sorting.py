"""Sorting GPU kernels: sort (values and indices, stable) and topk, by a bitonic network.

The sorted axis is moved last (a contiguous copy when it is not) and each row padded to
P = a power of two. Elements are compared as (value, index) pairs, so every key is distinct
and the network's result is the stable order; NaN sorts after every number (NumPy), padding
after everything, and descending is the exact reverse of the stable ascending order (as the
CPU kernel's flip). Rows of up to CHUNK elements are sorted by one program each: every
compare-exchange stage reads and writes the program's own chunk of a scratch buffer (cache
resident) with a barrier between stages. Longer rows add, per merge size, the stages whose
partners lie in different chunks as whole-buffer launches.

Per call: ~log2(P)^2 / 2 compare-exchange stages over M*P (value, int32 index) pairs; reads
the input once and writes values and int64 indices once.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels
from rill.ops.rules import normalize_axis

from .elementwise import contiguous, launch
from .launch import INTERPRET, cdiv, empty, pointer, tl, triton

# Longest row (padded) that one program sorts on its own.
CHUNK = 1 << 16 if INTERPRET else 4096


@triton.jit
def _after(va, ia, vb, ib, R, DESC: tl.constexpr):
    """Whether (va, ia) comes after (vb, ib) in the final order."""
    a_nan = va != va
    b_nan = vb != vb
    a_gt = (a_nan & ~b_nan) | (va > vb)
    b_gt = (b_nan & ~a_nan) | (vb > va)
    tie = (va == vb) | (a_nan & b_nan)
    if DESC:
        key = b_gt | (tie & (ia < ib))
    else:
        key = a_gt | (tie & (ia > ib))
    a_pad = ia >= R
    b_pad = ib >= R
    return tl.where(a_pad != b_pad, a_pad, tl.where(a_pad, ia > ib, key))


@triton.jit
def _exchange(keys_ptr, idx_ptr, row_start, lo, j, k, R, DESC: tl.constexpr):
    """Compare-exchange positions lo and lo + j of the rows starting at row_start; ascending
    where (lo & k) == 0, descending elsewhere (the bitonic pattern for merge size k)."""
    hi = lo + j
    va = tl.load(keys_ptr + row_start + lo)
    ia = tl.load(idx_ptr + row_start + lo)
    vb = tl.load(keys_ptr + row_start + hi)
    ib = tl.load(idx_ptr + row_start + hi)
    up = (lo & k) == 0
    swap = tl.where(up, _after(va, ia, vb, ib, R, DESC), _after(vb, ib, va, ia, R, DESC))
    tl.store(keys_ptr + row_start + lo, tl.where(swap, vb, va))
    tl.store(idx_ptr + row_start + lo, tl.where(swap, ib, ia))
    tl.store(keys_ptr + row_start + hi, tl.where(swap, va, vb))
    tl.store(idx_ptr + row_start + hi, tl.where(swap, ia, ib))


@triton.jit
def _chunk_kernel(src_ptr, keys_ptr, idx_ptr, R, P, S_LO, S_HI, INIT: tl.constexpr,
                  DESC: tl.constexpr, CHUNK: tl.constexpr, LOG_CHUNK: tl.constexpr):
    # One program: one CHUNK of one padded row. For merge sizes k = 2**s, s in [S_LO, S_HI],
    # every stage whose partner distance j is below CHUNK.
    start = tl.program_id(0).to(tl.int64) * CHUNK
    row = start // P
    row_start = row * P
    offset = start - row_start  # the chunk's place in its row
    if INIT:
        pos = offset + tl.arange(0, CHUNK)
        value = tl.load(src_ptr + row * R + pos, mask=pos < R, other=0)
        tl.store(keys_ptr + row_start + pos, value)
        tl.store(idx_ptr + row_start + pos, pos.to(tl.int32))
        tl.debug_barrier()
    half = tl.arange(0, CHUNK // 2)
    for s in range(S_LO, S_HI + 1):
        k = 1 << s
        top = tl.minimum(s, LOG_CHUNK) - 1  # log2 of the first distance handled here
        for q in range(0, top + 1):
            e = top - q
            j = 1 << e
            lo = offset + ((half >> e) << (e + 1)) + (half & (j - 1))
            _exchange(keys_ptr, idx_ptr, row_start, lo, j, k, R, DESC)
            tl.debug_barrier()


@triton.jit
def _global_kernel(keys_ptr, idx_ptr, R, P, pairs, s, e, DESC: tl.constexpr,
                   BLOCK: tl.constexpr):
    # One compare-exchange stage (merge size 2**s, distance 2**e) over every row.
    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    t = tl.minimum(t, pairs - 1)  # the tail repeats the last pair: same result, no mask
    half = P // 2
    row_start = (t // half) * P
    tt = t % half
    j = 1 << e
    lo = ((tt >> e) << (e + 1)) + (tt & (j - 1))
    _exchange(keys_ptr, idx_ptr, row_start, lo, j, 1 << s, R, DESC)


def _sorted_rows(x, axis, descending):
    """Scratch (rows..., P) values and indices: each row of x along `axis`, sorted."""
    src = contiguous(_moved(x, axis))
    R = x.shape[axis]
    M = x.size // R
    P = max(2, triton.next_power_of_2(R))
    keys = empty(src.shape[:-1] + (P,), src.dtype)
    idx = empty(src.shape[:-1] + (P,), np.int32)
    chunk = min(P, CHUNK)
    log_chunk = chunk.bit_length() - 1
    log_p = P.bit_length() - 1
    warps = 4 if chunk <= 1024 else 8
    flat = (pointer(keys), pointer(idx), R, P)
    _chunk_kernel[(M * P // chunk,)](pointer(src), *flat, 1, log_chunk, INIT=True,
                                     DESC=bool(descending), CHUNK=chunk, LOG_CHUNK=log_chunk,
                                     num_warps=warps)
    pairs = M * P // 2
    block = 1024
    for s in range(log_chunk + 1, log_p + 1):
        for e in range(s - 1, log_chunk - 1, -1):
            _global_kernel[(cdiv(pairs, block),)](*flat, pairs, s, e, DESC=bool(descending),
                                                  BLOCK=block)
        _chunk_kernel[(M * P // chunk,)](pointer(src), *flat, s, s, INIT=False,
                                         DESC=bool(descending), CHUNK=chunk,
                                         LOG_CHUNK=log_chunk, num_warps=warps)
    return keys, idx


def _moved(x, axis):
    order = [d for d in range(x.ndim) if d != axis] + [axis]
    return x.transpose(order)


def _first(scratch, k, axis, dtype):
    """The first k of each sorted row, with the axis put back, as a new contiguous buffer."""
    view = scratch[..., :k]
    nd = view.ndim
    back = list(range(axis)) + [nd - 1] + list(range(axis, nd - 1))
    view = view.transpose(back)
    return launch("copy", (view,), view.shape, dtype)


def _sort_k(x, k, axis, descending):
    axis = normalize_axis(axis, x.ndim)
    is_bool = x.dtype == np.bool_
    xb = x.view(np.uint8) if is_bool else x
    shape = tuple(k if d == axis else n for d, n in enumerate(x.shape))
    if xb.size == 0 or k == 0:
        return empty(shape, x.dtype), empty(shape, np.int64)
    keys, idx = _sorted_rows(xb, axis, descending)
    values = _first(keys, k, axis, xb.dtype)
    return (values.view(np.bool_) if is_bool else values), _first(idx, k, axis, np.int64)


def _sort(x, axis, descending):
    return _sort_k(x, x.shape[normalize_axis(axis, x.ndim)], axis, descending)


def _topk(x, k, axis, largest):
    return _sort_k(x, k, axis, largest)


register_kernels("gpu", {"sort": _sort, "topk": _topk})
