"""Reduction and scan GPU kernels: sum, mean, prod, max, min, all, any, norm, var,
logsumexp, argmax, argmin (one row-reduction kernel), cumsum, cumprod (one scan kernel).

Every reduction views its input as (A, R, B) and reduces R: the reduced axes are moved
together (a transpose view, then a contiguous copy only when they are not already adjacent).
B == 1 reduces contiguous rows; B > 1 reduces with stride B, each program taking BLOCK_M
neighbouring columns so its loads stay coalesced. A constexpr picks the per-element map
(PRE), the combine (sum / prod / max / min) and the final map (POST), so mean, norm, var,
logsumexp are one kernel with a different recipe; var and logsumexp take two launches
(mean, then squared deviations; max, then sum of exp). When too few programs would cover a
long R (a GPU idles), R is split into S segments whose partials a second launch combines.
float16 accumulates in float32, integers in int64, float64 in float64.

Per call: reduce reads the input once per launch (var/logsumexp: twice) and writes the
output, ~1-3 FLOPs per element; arg reduce: the same with an index per element; scan: reads
and writes the input once, ~1 FLOP per element.
"""
from __future__ import annotations

import math

import numpy as np

from rill.ops.primitive import register_kernels
from rill.ops.rules import normalize_axes, normalize_axis, reduced_shape

from .libdevice import libdevice
from .elementwise import contiguous
from .launch import INTERPRET, cdiv, empty, jit, pointer, tl, triton

# Elements per program tile. The interpreter runs a tile as one NumPy step: few, big tiles.
TILE = 1 << 16 if INTERPRET else 4096
# Split a reduction over R when fewer programs than this would run (0: never). Measured on an
# H200 (132 SMs; bench/gpu_probe.py splits, 16384^2 float32, GB/s of sum(axis=0) / max() /
# sum(axis=1)): 512: 2233 / 3254 / 4187; 1024: 3600 / 4168 / 4237; 2048: 3581 / 4221 / 4219;
# 8192: 3733 / 4179 / 4015. About 16 programs an SM keeps every load in flight.
SPLIT_PROGRAMS = 0 if INTERPRET else 2048

# PRE: per-element map before combining.
ID, ABS, SQUARE, POW, NONZERO, SQDEV, EXPDEV, NE_CONST = range(8)
# COMBINE
SUM, PROD, MAX, MIN = range(4)
# POST: map of the reduced value.
NONE, DIV_N, SQRT, ROOT, VAR, LSE, FINITE = range(7)

_TL = {np.dtype(np.float32): tl.float32, np.dtype(np.float64): tl.float64,
       np.dtype(np.int64): tl.int64, np.dtype(np.int32): tl.int32,
       np.dtype(np.int16): tl.int16, np.dtype(np.int8): tl.int8,
       np.dtype(np.uint8): tl.uint8}


@jit
def _max_nan(a, b):
    return tl.where((a > b) | (a != a), a, b)


@jit
def _min_nan(a, b):
    return tl.where((a < b) | (a != a), a, b)


@jit
def _combine(a, b, COMBINE: tl.constexpr):
    if COMBINE == 0:
        r = a + b
    elif COMBINE == 1:
        r = a * b
    elif COMBINE == 2:
        r = _max_nan(a, b)
    else:
        r = _min_nan(a, b)
    return r


@jit
def _nan_or_zero(x):
    """Per row (axis 1): nan if the row holds a NaN, else 0 (in x's dtype)."""
    return tl.sum(tl.where(x != x, x, tl.zeros_like(x)), 1)


@jit
def _max_rows(x):
    # Only the builtin reductions (sum, max, min, cumsum, cumprod) are fast in Triton's
    # interpreter; NaN is found apart since max and min may ignore it.
    nan = _nan_or_zero(x)
    return tl.where(nan != nan, nan, tl.max(x, 1))


@jit
def _min_rows(x):
    nan = _nan_or_zero(x)
    return tl.where(nan != nan, nan, tl.min(x, 1))


@jit
def _last_column(y):
    """y[:, -1], exactly (one value plus zeros)."""
    last = tl.arange(0, y.shape[1]) == y.shape[1] - 1
    return tl.sum(tl.where(last[None, :], y, tl.zeros_like(y)), 1)


@jit
def _reduce_axis1(acc, COMBINE: tl.constexpr):
    if COMBINE == 0:
        r = tl.sum(acc, 1)
    elif COMBINE == 1:
        r = _last_column(tl.cumprod(acc, 1))
    elif COMBINE == 2:
        r = _max_rows(acc)
    else:
        r = _min_rows(acc)
    return r


@jit
def _rows(pid, A, B, NB, INNER: tl.constexpr, BLOCK_M: tl.constexpr):
    """The (a, b) rows of program block `pid`: their flat row index a*B + b, a mask, and the
    first element's offset a*R*B + b (times R is left to the caller)."""
    lanes = tl.arange(0, BLOCK_M)
    if INNER:
        a = pid.to(tl.int64) * BLOCK_M + lanes
        b = tl.zeros([BLOCK_M], tl.int64)
        mask = a < A
    else:
        a = tl.zeros([BLOCK_M], tl.int64) + pid // NB
        b = (pid % NB).to(tl.int64) * BLOCK_M + lanes
        mask = b < B
    return a, b, mask


@jit
def _reduce_kernel(x_ptr, out_ptr, aux_ptr, A, R, B, NB, S, L, N,
                   PRE: tl.constexpr, COMBINE: tl.constexpr, POST: tl.constexpr,
                   IDENT: tl.constexpr, P: tl.constexpr, ACC: tl.constexpr,
                   INNER: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr):
    # One program: BLOCK_M rows, segment s of R ([s*L, s*L + L)), in BLOCK_R chunks.
    pid = tl.program_id(0)
    s = pid % S
    a, b, mask_m = _rows(pid // S, A, B, NB, INNER, BLOCK_M)
    row = a * B + b
    base = a * R * B + b
    if PRE == 5 or PRE == 6 or POST == 5:  # a per-row value from an earlier launch
        aux = tl.load(aux_ptr + row, mask=mask_m, other=0).to(ACC)
    ident = tl.full([BLOCK_M, BLOCK_R], IDENT, ACC)
    acc = ident
    r_start = s * L
    r_end = tl.minimum(r_start + L, R)
    cols = tl.arange(0, BLOCK_R)
    for r0 in range(r_start, r_end, BLOCK_R):
        r = r0 + cols
        mask = mask_m[:, None] & (r < r_end)[None, :]
        x = tl.load(x_ptr + base[:, None] + r[None, :].to(tl.int64) * B, mask=mask, other=0)
        if PRE == 0:
            v = x.to(ACC)
        elif PRE == 1:
            v = tl.abs(x.to(ACC))
        elif PRE == 2:
            v = x.to(ACC) * x.to(ACC)
        elif PRE == 3:
            v = libdevice.pow(tl.abs(x.to(ACC)), tl.full([BLOCK_M, BLOCK_R], P, ACC))
        elif PRE == 4:
            v = (x != 0).to(ACC)
        elif PRE == 5:
            d = x.to(ACC) - aux[:, None]
            v = d * d
        elif PRE == 6:
            v = tl.exp(x.to(ACC) - aux[:, None])
        else:
            v = (x != P).to(ACC)
        acc = _combine(acc, tl.where(mask, v, ident), COMBINE)
    total = _reduce_axis1(acc, COMBINE)
    if POST == 1:
        total = total / (tl.zeros([BLOCK_M], ACC) + N)
    elif POST == 2:
        total = tl.sqrt(total)
    elif POST == 3:
        total = libdevice.pow(total, tl.full([BLOCK_M], 1.0, ACC) / tl.full([BLOCK_M], P, ACC))
    elif POST == 4:  # P holds the correction: divide by max(N - correction, 0)
        n = tl.zeros([BLOCK_M], ACC) + N
        total = total / tl.maximum(n - tl.full([BLOCK_M], P, ACC), 0.0)
    elif POST == 5:
        total = tl.log(total) + aux
    elif POST == 6:
        total = tl.where((total - total) == 0, total, 0.0)
    out = (a * S + s) * B + b
    tl.store(out_ptr + out, total.to(out_ptr.dtype.element_ty), mask=mask_m)


@jit
def _arg_pick(v1, i1, v2, i2, LARGEST: tl.constexpr):
    """The winner of two (value, index) candidates: the extreme value, NaN beating all, the
    lower index on ties (NumPy's first occurrence)."""
    n1 = v1 != v1
    n2 = v2 != v2
    if LARGEST:
        better = v1 > v2
    else:
        better = v1 < v2
    tie = (v1 == v2) | (n1 & n2)
    wins = (n1 & ~n2) | better | (tie & (i1 < i2))
    return tl.where(wins, v1, v2), tl.where(wins, i1, i2)


@jit
def _arg_kernel(x_ptr, idx_in_ptr, val_out_ptr, idx_out_ptr, A, R, B, NB, S, L,
                LARGEST: tl.constexpr, HAS_IDX: tl.constexpr, WRITE_VAL: tl.constexpr,
                IDENT: tl.constexpr, ACC: tl.constexpr, INNER: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr):
    # As _reduce_kernel, carrying each candidate's index along R (or, when combining the
    # partials of a split, the index stored beside it).
    pid = tl.program_id(0)
    s = pid % S
    a, b, mask_m = _rows(pid // S, A, B, NB, INNER, BLOCK_M)
    base = a * R * B + b
    best_v = tl.full([BLOCK_M, BLOCK_R], IDENT, ACC)
    best_i = tl.full([BLOCK_M, BLOCK_R], 9223372036854775807, tl.int64)  # after any index
    r_start = s * L
    r_end = tl.minimum(r_start + L, R)
    cols = tl.arange(0, BLOCK_R)
    for r0 in range(r_start, r_end, BLOCK_R):
        r = (r0 + cols).to(tl.int64)
        mask = mask_m[:, None] & (r < r_end)[None, :]
        offs = base[:, None] + r[None, :] * B
        v = tl.load(x_ptr + offs, mask=mask, other=0).to(ACC)
        if HAS_IDX:
            i = tl.load(idx_in_ptr + offs, mask=mask, other=0)
        else:
            i = tl.zeros([BLOCK_M, BLOCK_R], tl.int64) + r[None, :]
        v = tl.where(mask, v, best_v)
        i = tl.where(mask, i, best_i)
        best_v, best_i = _arg_pick(best_v, best_i, v, i, LARGEST)
    # Across lanes: the first NaN if any, else the first lane holding the extreme.
    big = tl.full([BLOCK_M, BLOCK_R], 9223372036854775807, tl.int64)
    first_nan = tl.min(tl.where(best_v != best_v, best_i, big), 1)
    if LARGEST:
        v = _max_rows(best_v)
    else:
        v = _min_rows(best_v)
    i = tl.min(tl.where(best_v == v[:, None], best_i, big), 1)
    i = tl.where(v != v, first_nan, i)
    out = (a * S + s) * B + b
    tl.store(idx_out_ptr + out, i, mask=mask_m)
    if WRITE_VAL:
        tl.store(val_out_ptr + out, v.to(val_out_ptr.dtype.element_ty), mask=mask_m)


@jit
def _scan_kernel(x_ptr, out_ptr, carry_ptr, A, R, B, NB, S, L, PROD: tl.constexpr,
                 ACC: tl.constexpr, INNER: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_R: tl.constexpr):
    # Each chunk is scanned in registers and offset by the running total of the chunks
    # before; a segment s > 0 of a split R starts from carry[s - 1], the scanned totals of
    # the segments before it.
    pid = tl.program_id(0)
    s = pid % S
    a, b, mask_m = _rows(pid // S, A, B, NB, INNER, BLOCK_M)
    base = a * R * B + b
    if PROD:
        ident = tl.full([BLOCK_M, BLOCK_R], 1, ACC)
    else:
        ident = tl.full([BLOCK_M, BLOCK_R], 0, ACC)
    first = tl.max(ident, 1)  # the identity, one per row
    later = (b * 0 + s) > 0  # per row, so the mask is a vector
    carry = tl.load(carry_ptr + (a * S + s - 1) * B + b, mask=mask_m & later, other=first)
    carry = carry.to(ACC)
    r_start = s * L
    r_end = tl.minimum(r_start + L, R)
    cols = tl.arange(0, BLOCK_R)
    for r0 in range(r_start, r_end, BLOCK_R):
        r = r0 + cols
        mask = mask_m[:, None] & (r < r_end)[None, :]
        offs = base[:, None] + r[None, :].to(tl.int64) * B
        x = tl.where(mask, tl.load(x_ptr + offs, mask=mask, other=0).to(ACC), ident)
        if PROD:
            y = tl.cumprod(x, 1) * carry[:, None]
        else:
            y = tl.cumsum(x, 1) + carry[:, None]
        carry = _last_column(y)
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


# ---- launchers -------------------------------------------------------------------------------


def _np2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


def _as_bytes(x):
    # Booleans travel as bytes (0/1).
    return x.view(np.uint8) if x.dtype == np.bool_ else x


def _layout(x, axes):
    """A contiguous buffer and (A, R, B) such that reducing x over `axes` is reducing R."""
    shape = x.shape
    size = lambda dims: math.prod(shape[d] for d in dims)  # noqa: E731
    real = [d for d in range(x.ndim) if shape[d] != 1]  # size-1 dims never block a merge
    reduced = [d for d in real if d in axes]
    positions = [real.index(d) for d in reduced]
    if not reduced or positions == list(range(positions[0], positions[0] + len(positions))):
        first = positions[0] if reduced else len(real)
        before = real[:first]
        after = real[first + len(reduced):]
        return _as_bytes(contiguous(x)), size(before), size(reduced), size(after)
    kept = [d for d in range(x.ndim) if d not in axes]
    moved = contiguous(x.transpose(kept + list(axes)))
    return _as_bytes(moved), size(kept), size(axes), 1


def _tiles(inner: bool, rows: int, R: int):
    """(BLOCK_M, BLOCK_R): rows per program and elements of R per step."""
    if inner:
        block_r = min(_np2(R), TILE if INTERPRET else 1024)
        return max(1, min(_np2(rows), TILE // block_r)), block_r
    block_m = min(_np2(rows), TILE if INTERPRET else 64)
    return block_m, max(1, min(_np2(R), TILE // block_m))


def _segments(programs: int, R: int, block_r: int):
    """(S, L): R split into S segments of L elements (a multiple of block_r)."""
    if programs >= SPLIT_PROGRAMS or R <= 2 * block_r:
        return 1, max(R, 1)
    s = min(cdiv(SPLIT_PROGRAMS, programs), cdiv(R, 2 * block_r))
    length = cdiv(cdiv(R, s), block_r) * block_r
    return cdiv(R, length), length


def _run(x, A, R, B, out_dtype, pre=ID, combine=SUM, post=NONE, ident=0, p=0.0, acc=None,
         aux=None, n=None):
    """Reduce the contiguous (A, R, B) buffer x over R into a new (A*B,) buffer."""
    acc = np.dtype(out_dtype if acc is None else acc)
    out = empty((A * B,), out_dtype)
    if A * B == 0:
        return out
    inner = B == 1
    block_m, block_r = _tiles(inner, A if inner else B, R)
    nb = 1 if inner else cdiv(B, block_m)
    programs = cdiv(A, block_m) if inner else A * nb
    S, L = _segments(programs, R, block_r)
    n = R if n is None else n
    aux = out if aux is None else aux
    common = dict(PRE=pre, COMBINE=combine, IDENT=ident, P=p, ACC=_TL[acc], INNER=inner,
                  BLOCK_M=block_m, BLOCK_R=block_r)
    if S == 1:
        _reduce_kernel[(programs,)](pointer(x), pointer(_as_bytes(out)), pointer(aux),
                                    A, R, B, nb, 1, L, n, POST=post, **common)
        return out
    # Partials in the accumulator dtype, laid out (A, S, B), then combined over S.
    partial = empty((A * S * B,), acc)
    _reduce_kernel[(programs * S,)](pointer(x), pointer(partial), pointer(aux),
                                    A, R, B, nb, S, L, n, POST=NONE, **common)
    return _run(partial, A, S, B, out_dtype, ID, combine, post, ident, p, acc, aux, n)


def _float_acc(dtype):
    return np.float32 if dtype.itemsize < 4 else dtype


def _int_or_float_acc(dtype):
    return np.int64 if dtype.kind in "biu" else _float_acc(dtype)


def _reduction(x, axis, keepdims, **recipe):
    axes = normalize_axes(axis, x.ndim)
    out_shape = reduced_shape(x.shape, axes, keepdims)
    buf, A, R, B = _layout(x, axes)
    return _run(buf, A, R, B, **recipe).reshape(out_shape)


def _lowest(dtype):
    return -math.inf if dtype.kind == "f" else int(np.iinfo(dtype).min)


def _highest(dtype):
    return math.inf if dtype.kind == "f" else int(np.iinfo(dtype).max)


def _sum(x, axis, keepdims):
    acc = _int_or_float_acc(x.dtype)
    out = np.int64 if x.dtype.kind in "biu" else x.dtype
    return _reduction(x, axis, keepdims, out_dtype=out, acc=acc)


def _prod(x, axis, keepdims):
    acc = _int_or_float_acc(x.dtype)
    out = np.int64 if x.dtype.kind in "biu" else x.dtype
    return _reduction(x, axis, keepdims, out_dtype=out, acc=acc, combine=PROD, ident=1)


def _mean(x, axis, keepdims):
    return _reduction(x, axis, keepdims, out_dtype=x.dtype, acc=_float_acc(x.dtype),
                      post=DIV_N)


def _extremum(largest):
    def run(x, axis, keepdims):
        acc = _float_acc(_as_bytes(x).dtype) if x.dtype.kind == "f" else _as_bytes(x).dtype
        ident = _lowest(np.dtype(acc)) if largest else _highest(np.dtype(acc))
        out = _reduction(x, axis, keepdims, out_dtype=_as_bytes(x).dtype, acc=acc,
                         combine=MAX if largest else MIN, ident=ident)
        return out.view(np.bool_) if x.dtype == np.bool_ else out
    return run


def _logical(every):
    def run(x, axis, keepdims):
        # x != 0 as 0/1, combined by min (all; nothing to check gives 1) or max (any: 0).
        out = _reduction(x, axis, keepdims, out_dtype=np.uint8, acc=np.int32, pre=NONZERO,
                         combine=MIN if every else MAX, ident=1 if every else 0)
        return out.view(np.bool_)
    return run


def _two_pass(x, axis, keepdims, first, second):
    """Reduce once for a per-row value (mean, max), then again using it."""
    axes = normalize_axes(axis, x.ndim)
    out_shape = reduced_shape(x.shape, axes, keepdims)
    buf, A, R, B = _layout(x, axes)
    acc = _float_acc(x.dtype)
    row_value = _run(buf, A, R, B, acc, acc=acc, **first)
    return _run(buf, A, R, B, x.dtype, acc=acc, aux=row_value, **second).reshape(out_shape)


def _var(x, axis, keepdims, correction):
    return _two_pass(x, axis, keepdims, dict(post=DIV_N),
                     dict(pre=SQDEV, post=VAR, p=float(correction)))


def _logsumexp(x, axis, keepdims):
    # The max (0 where not finite, as the CPU kernel), then log(sum(exp(x - max))) + max.
    return _two_pass(x, axis, keepdims, dict(combine=MAX, ident=-math.inf, post=FINITE),
                     dict(pre=EXPDEV, post=LSE))


def _norm(x, ord, axis, keepdims):
    acc = _float_acc(x.dtype)
    if ord == 2:
        recipe = dict(pre=SQUARE, post=SQRT)
    elif ord == 1:
        recipe = dict(pre=ABS)
    elif ord == math.inf:
        recipe = dict(pre=ABS, combine=MAX, ident=0.0)
    elif ord == -math.inf:
        recipe = dict(pre=ABS, combine=MIN, ident=math.inf)
    elif ord == 0:
        recipe = dict(pre=NONZERO)
    else:
        recipe = dict(pre=POW, post=ROOT, p=float(ord))
    return _reduction(x, axis, keepdims, out_dtype=x.dtype, acc=acc, **recipe)


def _arg(largest):
    def run(x, axis, keepdims):
        x = _as_bytes(x)
        acc = np.dtype(_float_acc(x.dtype) if x.dtype.kind == "f" else x.dtype)
        ident = _lowest(acc) if largest else _highest(acc)
        if axis is None:
            buf, A, R, B = _layout(x, tuple(range(x.ndim)))
            out_shape = (1,) * x.ndim if keepdims else ()
        else:
            a = normalize_axis(axis, x.ndim)
            buf, A, R, B = _layout(x, (a,))
            out_shape = reduced_shape(x.shape, (a,), keepdims)
        return _arg_run(buf, None, A, R, B, largest, ident, acc, False)[1].reshape(out_shape)
    return run


def _arg_run(x, idx, A, R, B, largest, ident, acc, write_values):
    values = empty((A * B,), acc) if write_values else None
    out = empty((A * B,), np.int64)
    if A * B == 0:
        return values, out
    inner = B == 1
    block_m, block_r = _tiles(inner, A if inner else B, R)
    nb = 1 if inner else cdiv(B, block_m)
    programs = cdiv(A, block_m) if inner else A * nb
    S, L = _segments(programs, R, block_r)
    common = dict(LARGEST=largest, HAS_IDX=idx is not None, IDENT=ident, ACC=_TL[acc],
                  INNER=inner, BLOCK_M=block_m, BLOCK_R=block_r)
    idx_ptr = pointer(out if idx is None else idx)
    if S == 1:
        _arg_kernel[(programs,)](pointer(x), idx_ptr, pointer(values if write_values else out),
                                 pointer(out), A, R, B, nb, 1, L, WRITE_VAL=write_values,
                                 **common)
        return values, out
    part_v = empty((A * S * B,), acc)
    part_i = empty((A * S * B,), np.int64)
    _arg_kernel[(programs * S,)](pointer(x), idx_ptr, pointer(part_v), pointer(part_i),
                                 A, R, B, nb, S, L, WRITE_VAL=True, **common)
    return _arg_run(part_v, part_i, A, S, B, largest, ident, acc, write_values)


def _scan(prod):
    def run(x, axis):
        out_dtype = np.int64 if x.dtype.kind in "biu" else x.dtype
        if axis is None:
            buf, A, R, B = _as_bytes(contiguous(x)).reshape(-1), 1, x.size, 1
            out_shape = (x.size,)
        else:
            a = normalize_axis(axis, x.ndim)
            buf, A, R, B = _layout(x, (a,))
            out_shape = x.shape
        out = empty(out_shape, out_dtype)
        if out.size:
            _scan_run(buf, out, A, R, B, prod, np.dtype(_int_or_float_acc(x.dtype)))
        return out
    return run


def _scan_run(x, out, A, R, B, prod, acc):
    """Scan the contiguous (A, R, B) buffer x along R into out."""
    inner = B == 1
    block_m, block_r = _tiles(inner, A if inner else B, R)
    nb = 1 if inner else cdiv(B, block_m)
    programs = cdiv(A, block_m) if inner else A * nb
    S, L = _segments(programs, R, block_r)
    common = dict(ACC=_TL[acc], INNER=inner, BLOCK_M=block_m, BLOCK_R=block_r)
    carries = out  # not read unless R is split
    if S > 1:
        # Each segment's total (the reduction's first stage), scanned over the segments.
        totals = empty((A * S * B,), acc)
        _reduce_kernel[(programs * S,)](pointer(x), pointer(totals), pointer(totals),
                                        A, R, B, nb, S, L, R, PRE=ID,
                                        COMBINE=PROD if prod else SUM, POST=NONE,
                                        IDENT=1 if prod else 0, P=0.0, **common)
        carries = empty((A * S * B,), acc)
        _scan_run(totals, carries, A, S, B, prod, acc)
    _scan_kernel[(programs * S,)](pointer(x), pointer(out), pointer(carries), A, R, B, nb,
                                  S, L, PROD=prod, **common)


def count_not_equal(x, value: int):
    """How many elements of the integer buffer x differ from `value`, as a (1,) int64 buffer
    (for softmax_cross_entropy's mean over the rows not ignored)."""
    buf = _as_bytes(contiguous(x)).reshape(-1)
    return _run(buf, 1, buf.size, 1, np.int64, pre=NE_CONST, p=int(value))


register_kernels("gpu", {
    "sum": _sum, "prod": _prod, "mean": _mean, "var": _var,
    "max": _extremum(True), "min": _extremum(False),
    "argmax": _arg(True), "argmin": _arg(False),
    "logsumexp": _logsumexp, "all": _logical(True), "any": _logical(False),
    "cumsum": _scan(False), "cumprod": _scan(True), "norm": _norm,
})
