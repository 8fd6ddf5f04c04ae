"""Fused attention GPU kernels, flash-attention style (formulas in rill/ops/attention.py).

Forward: one program per (batch, block of BLOCK_M queries) makes one pass over the key and
value blocks, keeping per row the running max m, the running sum l of exp(s - m) and the
unnormalized output, all rescaled by exp(m_old - m_new) when the max grows (online softmax).
The (L, S) scores never reach memory; causal masking compares row and key indices, and a
program stops at its last query's key. Writes out and lse = m + log(l) per row.
Bytes ~ |q| + (|k| + |v|) * cdiv(L, BLOCK_M) + |out| + |lse| (+ mask reads); FLOPs ~
2 * B * L * S * (E + Ev) (about half under causal masking).

Backward, two kernels, no atomics (deterministic): per query block, dq (recomputing
p = exp(s - lse) block by block, and storing D = rowsum(g * out) for the second kernel);
per key block, dk and dv over the query blocks that see it. FLOPs ~ 2.5x the forward's.

Products run through tl.dot with float32 accumulation (float16 and bfloat16 are loaded as
float32; float32 uses "ieee" precision unless linalg.ALLOW_TF32) and, for float64, as a sum of
a (BLOCK_M, BLOCK_K, BLOCK_N) product, as kernels/triton/linalg.py does.

The score scale is a constexpr, not a runtime argument: compiled Triton passes a Python float
argument as float32, which rounds a float64 attention's scale (seen on an H200: 1e-8 relative
errors), while a constexpr multiplies a tensor in the tensor's own dtype. One compile per head
size.
"""
from __future__ import annotations

import numpy as np

from rill.ops import attention as _declared  # noqa: F401  (declares the primitives)
from rill.ops.primitive import register_kernels

from . import linalg
from .creation import filled
from .elementwise import contiguous
from .launch import INTERPRET, cdiv, empty, jit, pointer, strides, tl, triton, xp

# Queries and keys per tile (the interpreter runs each program as NumPy steps: fewer, larger
# programs are faster there; tests shrink these to reach the loops and tails).
BLOCK_M = 128 if INTERPRET else 64
BLOCK_N = 128 if INTERPRET else 64
BLOCK_F64 = BLOCK_M if INTERPRET else 16  # float64 multiplies a 3-d (M, K, N) product in
# registers (not tl.dot): smaller tiles on a GPU


@jit
def _dot(a, b, FMA: tl.constexpr, PRECISION: tl.constexpr):
    """a (M, K) @ b (K, N) in a's dtype (float32, or float64 by multiply and sum)."""
    if FMA:
        c = tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    else:
        c = tl.dot(a, b, input_precision=PRECISION)
    return c


@jit
def _load_rows(ptr, base, rows, n_rows, cols, n_cols, ACC: tl.constexpr):
    """A (rows, cols) tile of a contiguous (n_rows, n_cols) matrix at ptr + base, zeros
    outside it."""
    ok = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    return tl.load(ptr + base + rows[:, None] * n_cols + cols[None, :], mask=ok,
                   other=0.0).to(ACC)


@jit
def _scores(q, k_ptr, mask_ptr, b, rows, keys, L, S, E, heads, m_outer, m_inner, m_row, m_col,
            ecols, HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, FMA: tl.constexpr,
            PRECISION: tl.constexpr, ACC: tl.constexpr):
    """Scores of the query tile q (already scaled) against keys `keys`: q @ k^T (+ mask),
    -inf at keys past S, rows past L and (causal) keys after their query."""
    key_ok = keys < S
    kt = tl.load(k_ptr + b * S * E + keys[None, :] * E + ecols[:, None],
                 mask=key_ok[None, :] & (ecols < E)[:, None], other=0.0).to(ACC)
    s = _dot(q, kt, FMA, PRECISION)
    valid = key_ok[None, :] & (rows < L)[:, None]
    if HAS_MASK:
        s += tl.load(mask_ptr + (b // heads) * m_outer + (b % heads) * m_inner
                     + rows[:, None] * m_row + keys[None, :] * m_col, mask=valid,
                     other=0.0).to(ACC)
    if CAUSAL:
        valid = valid & (keys[None, :] <= rows[:, None])
    return tl.where(valid, s, float("-inf"))


@jit
def _forward_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, lse_ptr,
                    L, S, E, EV, row_blocks, heads, m_outer, m_inner, m_row, m_col,
                    SCALE: tl.constexpr,
                    HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, FMA: tl.constexpr,
                    PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr):
    # q (B, L, E), k (B, S, E), v (B, S, EV), out (B, L, EV), lse (B, L): contiguous. The mask
    # is read through strides: batch b is (b // heads, b % heads), strides 0 where broadcast.
    pid = tl.program_id(0)
    b = (pid // row_blocks).to(tl.int64)
    first = (pid % row_blocks) * BLOCK_M
    rows = first + tl.arange(0, BLOCK_M)
    ecols = tl.arange(0, BLOCK_E)
    vcols = tl.arange(0, BLOCK_EV)
    q = _load_rows(q_ptr, b * L * E, rows, L, ecols, E, ACC) * SCALE
    m_i = tl.full([BLOCK_M], float("-inf"), ACC)
    l_i = tl.zeros([BLOCK_M], ACC)
    acc = tl.zeros([BLOCK_M, BLOCK_EV], ACC)
    end = S
    if CAUSAL:
        end = tl.minimum(S, first + BLOCK_M)
    for n0 in range(0, end, BLOCK_N):
        keys = n0 + tl.arange(0, BLOCK_N)
        s = _scores(q, k_ptr, mask_ptr, b, rows, keys, L, S, E, heads, m_outer, m_inner,
                    m_row, m_col, ecols, HAS_MASK, CAUSAL, FMA, PRECISION, ACC)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row with no key yet (max -inf) shifts by 0: exp(-inf - 0) = 0, never nan.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - shift)
        p = tl.exp(s - shift[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load_rows(v_ptr, b * S * EV, keys, S, vcols, EV, ACC)
        acc = acc * alpha[:, None] + _dot(p, v, FMA, PRECISION)
        m_i = m_new
    seen = l_i > 0  # a row with no key left gives 0 and lse -inf
    out = tl.where(seen[:, None], acc / tl.where(seen, l_i, 1.0)[:, None], 0.0)
    lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), float("-inf"))
    row_ok = rows < L
    tl.store(out_ptr + b * L * EV + rows[:, None] * EV + vcols[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & (vcols < EV)[None, :])
    tl.store(lse_ptr + b * L + rows, lse.to(lse_ptr.dtype.element_ty), mask=row_ok)


@jit
def _probabilities(s, lse):
    """exp(s - lse) per row; 0 for a row with no key (lse -inf), never nan."""
    return tl.exp(s - tl.where(lse == float("-inf"), float("inf"), lse)[:, None])


@jit
def _dq_kernel(g_ptr, q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, mask_ptr, dq_ptr, rowdot_ptr,
               L, S, E, EV, row_blocks, heads, m_outer, m_inner, m_row, m_col,
               SCALE: tl.constexpr,
               HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, FMA: tl.constexpr,
               PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr):
    # Inputs as the forward's, g (B, L, EV) the cotangent of out; writes dq (B, L, E) and
    # rowdot (B, L) = rowsum(g * out), which _dkdv_kernel reads.
    pid = tl.program_id(0)
    b = (pid // row_blocks).to(tl.int64)
    first = (pid % row_blocks) * BLOCK_M
    rows = first + tl.arange(0, BLOCK_M)
    row_ok = rows < L
    ecols = tl.arange(0, BLOCK_E)
    vcols = tl.arange(0, BLOCK_EV)
    q = _load_rows(q_ptr, b * L * E, rows, L, ecols, E, ACC) * SCALE
    g = _load_rows(g_ptr, b * L * EV, rows, L, vcols, EV, ACC)
    rowdot = tl.sum(g * _load_rows(out_ptr, b * L * EV, rows, L, vcols, EV, ACC), 1)
    lse = tl.load(lse_ptr + b * L + rows, mask=row_ok, other=0.0).to(ACC)
    dq = tl.zeros([BLOCK_M, BLOCK_E], ACC)
    end = S
    if CAUSAL:
        end = tl.minimum(S, first + BLOCK_M)
    for n0 in range(0, end, BLOCK_N):
        keys = n0 + tl.arange(0, BLOCK_N)
        p = _probabilities(_scores(q, k_ptr, mask_ptr, b, rows, keys, L, S, E, heads, m_outer,
                                   m_inner, m_row, m_col, ecols, HAS_MASK, CAUSAL, FMA,
                                   PRECISION, ACC), lse)
        vt = tl.load(v_ptr + b * S * EV + keys[None, :] * EV + vcols[:, None],
                     mask=(keys < S)[None, :] & (vcols < EV)[:, None], other=0.0).to(ACC)
        ds = p * (_dot(g, vt, FMA, PRECISION) - rowdot[:, None])
        dq += _dot(ds, _load_rows(k_ptr, b * S * E, keys, S, ecols, E, ACC), FMA, PRECISION)
    tl.store(dq_ptr + b * L * E + rows[:, None] * E + ecols[None, :],
             (dq * SCALE).to(dq_ptr.dtype.element_ty),
             mask=row_ok[:, None] & (ecols < E)[None, :])
    tl.store(rowdot_ptr + b * L + rows, rowdot, mask=row_ok)


@jit
def _dkdv_kernel(g_ptr, q_ptr, k_ptr, v_ptr, lse_ptr, rowdot_ptr, mask_ptr, dk_ptr, dv_ptr,
                 L, S, E, EV, key_blocks, heads, m_outer, m_inner, m_row, m_col,
                 SCALE: tl.constexpr,
                 HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, FMA: tl.constexpr,
                 PRECISION: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr):
    # One program per (batch, block of BLOCK_N keys): dk (B, S, E) and dv (B, S, EV) summed
    # over the query blocks that see these keys (under causal masking, those from the
    # keys' own block on).
    pid = tl.program_id(0)
    b = (pid // key_blocks).to(tl.int64)
    first = (pid % key_blocks) * BLOCK_N
    keys = first + tl.arange(0, BLOCK_N)
    key_ok = keys < S
    ecols = tl.arange(0, BLOCK_E)
    vcols = tl.arange(0, BLOCK_EV)
    v = _load_rows(v_ptr, b * S * EV, keys, S, vcols, EV, ACC)
    dk = tl.zeros([BLOCK_N, BLOCK_E], ACC)
    dv = tl.zeros([BLOCK_N, BLOCK_EV], ACC)
    start = 0
    if CAUSAL:
        start = (first // BLOCK_M) * BLOCK_M
    for m0 in range(start, L, BLOCK_M):
        rows = m0 + tl.arange(0, BLOCK_M)
        row_ok = rows < L
        q = _load_rows(q_ptr, b * L * E, rows, L, ecols, E, ACC) * SCALE
        g = _load_rows(g_ptr, b * L * EV, rows, L, vcols, EV, ACC)
        lse = tl.load(lse_ptr + b * L + rows, mask=row_ok, other=0.0).to(ACC)
        rowdot = tl.load(rowdot_ptr + b * L + rows, mask=row_ok, other=0.0).to(ACC)
        p = _probabilities(_scores(q, k_ptr, mask_ptr, b, rows, keys, L, S, E, heads, m_outer,
                                   m_inner, m_row, m_col, ecols, HAS_MASK, CAUSAL, FMA,
                                   PRECISION, ACC), lse)
        pt = tl.trans(p)
        dv += _dot(pt, g, FMA, PRECISION)
        ds = p * (_dot(g, tl.trans(v), FMA, PRECISION) - rowdot[:, None])
        dk += _dot(tl.trans(ds), q, FMA, PRECISION)  # q carries the scale
    tl.store(dk_ptr + b * S * E + keys[:, None] * E + ecols[None, :],
             dk.to(dk_ptr.dtype.element_ty), mask=key_ok[:, None] & (ecols < E)[None, :])
    tl.store(dv_ptr + b * S * EV + keys[:, None] * EV + vcols[None, :],
             dv.to(dv_ptr.dtype.element_ty), mask=key_ok[:, None] & (vcols < EV)[None, :])


# ---- launchers -----------------------------------------------------------------------------

def _single_stride(shape, steps):
    """One stride that walks the row-major flat index of axes `shape` with strides `steps`,
    or None when the axes do not merge (0 when they are all broadcast)."""
    kept = [(d, s) for d, s in zip(shape, steps) if d != 1]
    if not kept or all(s == 0 for _, s in kept):
        return 0
    for (_, outer), (d, inner) in zip(kept, kept[1:]):
        if outer != inner * d:
            return None
    return kept[-1][1]


def _mask_layout(mask, batch, length, keys):
    """(buffer, heads, outer, inner, row, column strides) reading the mask as (B, L, S) with
    batch b at (b // heads, b % heads); broadcast axes have stride 0, and a mask whose outer
    batch axes do not merge is copied."""
    view = xp.broadcast_to(mask, tuple(batch) + (length, keys))
    steps = strides(view)
    heads = batch[-1] if batch else 1
    inner = steps[len(batch) - 1] if batch else 0
    outer = _single_stride(batch[:-1], steps[:len(batch) - 1]) if len(batch) > 1 else 0
    if outer is None:
        view = contiguous(view)
        steps = strides(view)
        outer = _single_stride(batch[:-1], steps[:len(batch) - 1])
    return view, max(heads, 1), outer, inner, steps[-2], steps[-1]


def _common(q, k, v, mask):
    batch = tuple(q.shape[:-2])
    count = int(np.prod(batch, dtype=np.int64))
    length, keys, e, ev = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    flat = [contiguous(t) for t in (q, k, v)]
    fma = q.dtype == np.float64
    precision = "tf32" if linalg.ALLOW_TF32 and q.dtype == np.float32 else "ieee"
    block_m, block_n = (BLOCK_F64, BLOCK_F64) if fma else (BLOCK_M, BLOCK_N)
    if mask is None:
        layout = (flat[0], 1, 0, 0, 0, 0)
    else:
        layout = _mask_layout(mask, batch, length, keys)
    sizes = dict(L=length, S=keys, E=e, EV=ev)
    meta = dict(HAS_MASK=mask is not None, FMA=fma, PRECISION=precision,
                ACC=tl.float64 if fma else tl.float32, BLOCK_M=block_m,
                BLOCK_N=block_n, BLOCK_E=max(16, triton.next_power_of_2(max(e, 1))),
                BLOCK_EV=max(16, triton.next_power_of_2(max(ev, 1))))
    return batch, count, flat, layout, sizes, meta


def _lse_dtype(dtype):
    return np.float64 if dtype == np.float64 else np.float32


def _attention(q, k, v, *mask, scale, is_causal):
    batch, count, (q, k, v), layout, n, meta = _common(q, k, v, mask[0] if mask else None)
    out_shape = batch + (n["L"], n["EV"])
    if count == 0 or n["L"] == 0 or n["S"] == 0:
        return filled(out_shape, q.dtype, 0), filled(batch + (n["L"],), _lse_dtype(q.dtype),
                                                     float("-inf"))
    out, lse = empty(out_shape, q.dtype), empty(batch + (n["L"],), _lse_dtype(q.dtype))
    row_blocks = cdiv(n["L"], meta["BLOCK_M"])
    mask_buffer, *mask_steps = layout
    _forward_kernel[(count * row_blocks,)](
        pointer(q), pointer(k), pointer(v), pointer(mask_buffer), pointer(out), pointer(lse),
        n["L"], n["S"], n["E"], n["EV"], row_blocks, *mask_steps,
        SCALE=float(scale), CAUSAL=is_causal, **meta)
    return out, lse


def _attention_grad(g, q, k, v, out, lse, *mask, scale, is_causal):
    batch, count, (q, k, v), layout, n, meta = _common(q, k, v, mask[0] if mask else None)
    if count == 0 or n["L"] == 0 or n["S"] == 0:
        return tuple(filled(t.shape, t.dtype, 0) for t in (q, k, v))
    g, out, lse = contiguous(g), contiguous(out), contiguous(lse)
    dq, dk, dv = empty(q.shape, q.dtype), empty(k.shape, k.dtype), empty(v.shape, v.dtype)
    rowdot = empty(lse.shape, lse.dtype)
    mask_buffer, *mask_steps = layout
    sizes = (n["L"], n["S"], n["E"], n["EV"])
    row_blocks = cdiv(n["L"], meta["BLOCK_M"])
    _dq_kernel[(count * row_blocks,)](
        pointer(g), pointer(q), pointer(k), pointer(v), pointer(out), pointer(lse),
        pointer(mask_buffer), pointer(dq), pointer(rowdot), *sizes, row_blocks, *mask_steps,
        SCALE=float(scale), CAUSAL=is_causal, **meta)
    key_blocks = cdiv(n["S"], meta["BLOCK_N"])
    _dkdv_kernel[(count * key_blocks,)](
        pointer(g), pointer(q), pointer(k), pointer(v), pointer(lse), pointer(rowdot),
        pointer(mask_buffer), pointer(dk), pointer(dv), *sizes, key_blocks, *mask_steps,
        SCALE=float(scale), CAUSAL=is_causal, **meta)
    return dq, dk, dv


register_kernels("gpu", {"attention": _attention, "attention_grad": _attention_grad})
