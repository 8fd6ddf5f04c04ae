"""Fused attention CPU kernels (formulas in rill/ops/attention.py).

NumPy's batched matmul runs the products over all leading axes at once; the softmax works in
place on the scores buffer, which becomes the probabilities. float16 and bfloat16 compute in
float32; float32 and float64 stay as they are. Without causal masking the whole (..., L, S)
score block is made at once; with it, queries go in blocks of ROWS rows, and a block stops
at its last query's key (the keys after it are masked for every row in the block), so no
score above the diagonal blocks is computed and no mask is ever larger than a ROWS x ROWS
triangle (cached). A row with no key left (a mask of -inf everywhere) gives 0 and lse -inf,
as PyTorch does.

From SPLIT_SCORES scores on, the batch is split over the cores (kernels/numpy/parallel.py):
NumPy releases the GIL in its ufunc loops and GEMMs, and per-head GEMMs run on one BLAS
thread when they are small, so without the split the softmax passes ran on one core
(PyTorch's CPU attention splits over batch and heads too).
"""
from __future__ import annotations

import functools

import numpy as np

from rill.ops import attention as _declared  # noqa: F401  (declares the primitives)
from rill.ops.primitive import register_kernels

from . import parallel

ROWS = 256  # query rows per block under causal masking
# Fewer scores than this run on the calling thread: a hand-off to the pool costs tens of
# microseconds, and on a loaded host far more (measured at the GPT benchmark's 131k scores,
# load 5 on 2 cores: 0.39 ms one thread, 0.45-3 ms split in two).
SPLIT_SCORES = 1 << 20


def _compute(dtype):
    return np.float64 if dtype == np.float64 else np.float32


def _blocks(length, keys, is_causal):
    """(first row, end row, keys used) per block of queries."""
    if not is_causal or length <= ROWS:
        return [(0, length, min(length, keys) if is_causal else keys)]
    return [(r0, min(r0 + ROWS, length), min(r0 + ROWS, length, keys))
            for r0 in range(0, length, ROWS)]


@functools.lru_cache(maxsize=32)
def _after_query(keys, rows):
    """True where key a of the diagonal block comes after query b (a > b)."""
    return np.tril(np.ones((keys, rows), dtype=bool), -1)


def _scores(k, qs_t, mask, r0, r1, kend, is_causal):
    """Scores k @ (q * scale)^T (+ mask) for keys [0, kend) and queries [r0, r1), -inf where
    a key comes after its query, in a new buffer laid out keys outermost: (keys, *batch,
    queries). Returns (buffer, its (*batch, keys, queries) view).

    With the keys outermost, the softmax's max and sum over keys are NumPy reductions along
    axis 0 of a (keys, batch * queries) array: one vectorized pass per key. Along the last
    axis, or along axis -2 of (*batch, keys, queries), NumPy runs one short inner loop per
    row, and the reductions took 3-5x as long at the GPT benchmark's shapes."""
    batch, rows = k.shape[:-2], r1 - r0
    buf = np.empty((kend,) + batch + (rows,), k.dtype)
    st = np.moveaxis(buf, 0, -2)
    np.matmul(k[..., :kend, :], qs_t[..., r0:r1], out=st)
    if mask is not None:
        mrows = slice(r0, r1) if mask.shape[-2] > 1 else slice(None)  # else broadcast
        block = mask[..., mrows, :kend] if mask.shape[-1] > 1 else mask[..., mrows, :]
        # (keys, *mask batch, queries), with 1s for the batch axes the mask lacks
        keys_first = np.ascontiguousarray(np.moveaxis(block, -1, 0))
        buf += keys_first.reshape(keys_first.shape[:1] + (1,) * (len(batch) + 2 - mask.ndim)
                                  + keys_first.shape[1:])
    if is_causal and r0 < kend - 1:
        # Only keys r0+1 .. kend-1 can come after a query of this block.
        after = _after_query(kend - r0, rows)
        np.copyto(buf[r0:kend], -np.inf,
                  where=after.reshape(after.shape[:1] + (1,) * len(batch) + after.shape[1:]))
    return buf, st


def _transposed(x):
    """x with its last two axes swapped, as a contiguous copy: a GEMM operand read transposed
    in place took 1.5x as long, an addend 2x (the copy is only q's, g's or the mask's size)."""
    out = np.empty(x.shape[:-2] + (x.shape[-1], x.shape[-2]), x.dtype)
    np.copyto(out, np.swapaxes(x, -1, -2))
    return out


def _inputs(q, k, v, mask):
    c = _compute(q.dtype)
    return (q.astype(c, copy=False), k.astype(c, copy=False), v.astype(c, copy=False),
            None if not mask else mask[0].astype(c, copy=False), c)


def _split_axis(shape):
    """The leading axis the batch is split along over the cores (the first one longer than
    1), or None."""
    for axis, size in enumerate(shape[:-2]):
        if size > 1:
            return axis
    return None


def _over_batch(fn, q, keys, arrays, mask):
    """Runs fn(*slices of `arrays`, mask slice) over parts of the batch, one per core (the
    parts write disjoint slices of the outputs among `arrays`)."""
    axis = _split_axis(q.shape)
    scores = q.size // q.shape[-1] * keys
    if axis is None or scores < SPLIT_SCORES:
        fn(*arrays, mask)
        return
    lead = (slice(None),) * axis
    mask_axis = None if mask is None else axis - (q.ndim - mask.ndim)
    if mask_axis is not None and (mask_axis < 0 or mask.shape[mask_axis] == 1):
        mask_axis = None  # the mask is broadcast along the split axis: every part reads it all

    def part(lo, hi):
        index = lead + (slice(lo, hi),)
        fn(*[a[index] for a in arrays],
           mask if mask_axis is None else mask[(slice(None),) * mask_axis + (slice(lo, hi),)])
    parallel.split(part, q.shape[axis], scores)


def _attention(q, k, v, *mask, scale, is_causal):
    dtype = q.dtype
    q, k, v, mask, c = _inputs(q, k, v, mask)
    length, keys = q.shape[-2], k.shape[-2]
    if keys == 0 or length == 0:
        return (np.zeros(q.shape[:-1] + v.shape[-1:], dtype),
                np.full(q.shape[:-1], -np.inf, c))
    out = np.empty(q.shape[:-1] + v.shape[-1:], c)  # every row is written below
    lse = np.empty(q.shape[:-1], c)

    def forward(q, k, v, out, lse, mask):
        qs_t = _transposed(q * c(scale))
        batch = q.shape[:-2]
        for r0, r1, kend in _blocks(length, keys, is_causal):
            buf, st = _scores(k, qs_t, mask, r0, r1, kend, is_causal)
            p = buf.reshape(kend, -1)  # (keys, batch * queries): becomes the probabilities
            m = p.max(axis=0)
            if mask is not None:  # only a mask can leave a query with no key
                m[m == -np.inf] = 0
            p -= m
            np.exp(p, out=p)
            total = p.sum(axis=0).reshape(batch + (r1 - r0, 1))
            o = out[..., r0:r1, :]
            np.matmul(np.swapaxes(st, -1, -2), v[..., :kend, :], out=o)
            with np.errstate(divide="ignore"):
                np.divide(o, total, out=o, where=total > 0)
                lse[..., r0:r1] = m.reshape(batch + (r1 - r0,)) + np.log(total[..., 0])
    _over_batch(forward, q, keys, (q, k, v, out, lse), mask)
    return out.astype(dtype, copy=False), lse


def _attention_grad(g, q, k, v, out, lse, *mask, scale, is_causal):
    dtype = q.dtype
    q, k, v, mask, c = _inputs(q, k, v, mask)
    g, out, lse = g.astype(c, copy=False), out.astype(c, copy=False), lse.astype(c, copy=False)
    length, keys = q.shape[-2], k.shape[-2]
    blocks = _blocks(length, keys, is_causal)
    if keys == 0 or length == 0:
        return np.zeros(q.shape, dtype), np.zeros(k.shape, dtype), np.zeros(v.shape, dtype)
    dq = np.empty(q.shape, c)  # every row is written below; dk and dv accumulate (or are
    # written once, when one block reaches every key)
    once = len(blocks) == 1 and blocks[0][2] == keys
    new = np.empty if once else np.zeros
    dk, dv = new(k.shape, c), new(v.shape, c)

    def backward(g, q, k, v, out, lse, dq, dk, dv, mask):
        if mask is not None:  # queries with no key: exp(-inf - inf) = 0 rather than nan
            lse = np.where(lse == -np.inf, np.inf, lse)
        # D = rowsum(dP * P) = rowsum(g * out), one per query
        rowdot = np.einsum("...i,...i->...", g, out)
        qs = q * c(scale)
        qs_t = _transposed(qs)
        g_t = _transposed(g)
        for r0, r1, kend in blocks:
            buf, pt = _scores(k, qs_t, mask, r0, r1, kend, is_causal)
            p = buf.reshape(kend, -1)  # keys outermost, as in the forward
            p -= lse[..., r0:r1].reshape(-1)
            np.exp(p, out=p)  # pt is now P^T, (*batch, keys, queries)
            dbuf = np.empty_like(buf)
            dst = np.moveaxis(dbuf, 0, -2)
            np.matmul(v[..., :kend, :], g_t[..., r0:r1], out=dst)
            ds = dbuf.reshape(kend, -1)
            ds -= rowdot[..., r0:r1].reshape(-1)
            ds *= p  # dst is now dS^T, the gradient of the scores
            gb = g[..., r0:r1, :]
            dq_block = dq[..., r0:r1, :]
            np.matmul(np.swapaxes(dst, -1, -2), k[..., :kend, :], out=dq_block)
            dq_block *= c(scale)
            if once:
                np.matmul(pt, gb, out=dv)
                np.matmul(dst, qs[..., r0:r1, :], out=dk)
            else:
                dv[..., :kend, :] += np.matmul(pt, gb)
                dk[..., :kend, :] += np.matmul(dst, qs[..., r0:r1, :])
    _over_batch(backward, q, keys, (g, q, k, v, out, lse, dq, dk, dv), mask)
    return dq.astype(dtype, copy=False), dk.astype(dtype, copy=False), dv.astype(dtype, copy=False)


register_kernels("cpu", {"attention": _attention, "attention_grad": _attention_grad})
