"""Sorting GPU kernels: sort (values and indices, stable) and topk, by a bitonic network.

The sorted axis is moved last (a contiguous copy when it is not) and each row padded to
P = a power of two. Elements are compared as (value, index) pairs, so every key is distinct
and the network's result is the stable order; NaN sorts after every number (NumPy), padding
after everything, and descending is stable too: equal values keep the lower index first (as
the CPU kernel, ONNX and PyTorch), NaN before every number. Rows of up to CHUNK elements are
sorted by one program each: every compare-exchange stage reads and writes the program's own
chunk of a scratch buffer (cache resident) with a barrier between stages. Longer rows add,
per merge size, the stages whose partners lie in different chunks as whole-buffer launches.

Per call: ~log2(P)^2 / 2 compare-exchange stages over M*P (value, int32 index) pairs; reads
the input once and writes values and int64 indices once.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels
from rill.ops.rules import normalize_axis

from .elementwise import contiguous, launch
from .launch import INTERPRET, cdiv, empty, jit, pointer, tl, triton

# Longest row (padded) that one program sorts on its own.
CHUNK = 1 << 16 if INTERPRET else 4096
# Elements one program works on: short rows are grouped several to a program.
GROUP_ELEMENTS = 1 << 16 if INTERPRET else 2048


@jit
def _after(va, ia, vb, ib, R, DESC: tl.constexpr):
    """Whether (va, ia) comes after (vb, ib) in the final order."""
    a_nan = va != va
    b_nan = vb != vb
    a_gt = (a_nan & ~b_nan) | (va > vb)
    b_gt = (b_nan & ~a_nan) | (vb > va)
    tie = (va == vb) | (a_nan & b_nan)
    if DESC:
        key = b_gt | (tie & (ia > ib))
    else:
        key = a_gt | (tie & (ia > ib))
    a_pad = ia >= R
    b_pad = ib >= R
    return tl.where(a_pad != b_pad, a_pad, tl.where(a_pad, ia > ib, key))


@jit
def _exchange(keys_ptr, idx_ptr, row_start, lo, j, k, R, mask, DESC: tl.constexpr):
    """Compare-exchange positions lo and lo + j of the rows starting at row_start; ascending
    where (lo & k) == 0, descending elsewhere (the bitonic pattern for merge size k)."""
    at_lo = row_start + lo
    at_hi = at_lo + j
    va = tl.load(keys_ptr + at_lo, mask=mask)
    ia = tl.load(idx_ptr + at_lo, mask=mask)
    vb = tl.load(keys_ptr + at_hi, mask=mask)
    ib = tl.load(idx_ptr + at_hi, mask=mask)
    up = (lo & k) == 0
    swap = tl.where(up, _after(va, ia, vb, ib, R, DESC), _after(vb, ib, va, ia, R, DESC))
    tl.store(keys_ptr + at_lo, tl.where(swap, vb, va), mask=mask)
    tl.store(idx_ptr + at_lo, tl.where(swap, ib, ia), mask=mask)
    tl.store(keys_ptr + at_hi, tl.where(swap, va, vb), mask=mask)
    tl.store(idx_ptr + at_hi, tl.where(swap, ia, ib), mask=mask)


@jit
def _chunk_kernel(src_ptr, keys_ptr, idx_ptr, R, P, chunks, S_LO, S_HI, INIT: tl.constexpr,
                  DESC: tl.constexpr, CHUNK: tl.constexpr, LOG_CHUNK: tl.constexpr,
                  GROUP: tl.constexpr):
    # One program: GROUP consecutive chunks of CHUNK elements (short rows: several rows).
    # For merge sizes k = 2**s, s in [S_LO, S_HI], every stage whose partner distance j is
    # below CHUNK.
    c = tl.program_id(0).to(tl.int64) * GROUP + tl.arange(0, GROUP)
    live = (c < chunks)[:, None]
    start = c * CHUNK
    row = start // P
    row_start = (row * P)[:, None]
    offset = (start % P)[:, None]  # each chunk's place in its row
    if INIT:
        pos = offset + tl.arange(0, CHUNK)[None, :]
        value = tl.load(src_ptr + row[:, None] * R + pos, mask=live & (pos < R), other=0)
        tl.store(keys_ptr + row_start + pos, value, mask=live)
        tl.store(idx_ptr + row_start + pos, pos.to(tl.int32), mask=live)
        tl.debug_barrier()
    half = tl.arange(0, CHUNK // 2)[None, :]
    for s in range(S_LO, S_HI + 1):
        k = 1 << s
        top = tl.minimum(s, LOG_CHUNK) - 1  # log2 of the first distance handled here
        for q in range(0, top + 1):
            e = top - q
            j = 1 << e
            lo = offset + ((half >> e) << (e + 1)) + (half & (j - 1))
            _exchange(keys_ptr, idx_ptr, row_start, lo, j, k, R, live, DESC)
            tl.debug_barrier()


@jit
def _global_kernel(keys_ptr, idx_ptr, R, P, pairs, s, e, DESC: tl.constexpr,
                   BLOCK: tl.constexpr):
    # One compare-exchange stage (merge size 2**s, distance 2**e) over every row.
    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    half = P // 2
    row_start = (t // half) * P
    tt = t % half
    j = 1 << e
    lo = ((tt >> e) << (e + 1)) + (tt & (j - 1))
    _exchange(keys_ptr, idx_ptr, row_start, lo, j, 1 << s, R, t < pairs, DESC)


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
    chunks = M * P // chunk
    group = min(triton.next_power_of_2(chunks), max(1, GROUP_ELEMENTS // chunk))
    warps = 4 if group * chunk <= 2048 else 8
    flat = (pointer(keys), pointer(idx), R, P)
    local = dict(DESC=bool(descending), CHUNK=chunk, LOG_CHUNK=log_chunk, GROUP=group,
                 num_warps=warps)
    grid = (cdiv(chunks, group),)
    _chunk_kernel[grid](pointer(src), *flat, chunks, 1, log_chunk, INIT=True, **local)
    pairs = M * P // 2
    block = 1024
    for s in range(log_chunk + 1, log_p + 1):
        for e in range(s - 1, log_chunk - 1, -1):
            _global_kernel[(cdiv(pairs, block),)](*flat, pairs, s, e, DESC=bool(descending),
                                                  BLOCK=block)
        _chunk_kernel[grid](pointer(src), *flat, chunks, s, s, INIT=False, **local)
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
