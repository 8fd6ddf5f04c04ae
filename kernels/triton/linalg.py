"""Linear-algebra GPU kernels: one strided contraction kernel behind matmul, linear,
linear_weight_grad and einsum.

Every product here is a contraction out[batch, m, n] = sum_k a[batch, m, k] * b[batch, k, n]
where each of batch, m, n and k is a *group* of axes (letters): batch letters are in a, b and
the output, m letters in a and the output only, n letters in b and the output only, k letters
are summed (not in the output; one that only a or only b has is read with stride 0 by the
other, which is how einsum sums an axis away). A group's axes are merged where the strides
allow, and the kernel decomposes a flat index of a group (at most 3 axes) into element offsets
through each operand's own strides. So transposed views, broadcast batches (stride 0, or the
letter simply absent from that operand), diagonals (a repeated letter: its strides add) and the
leading axes of `linear` (folded into m) are all read in place: no operand is ever copied,
except in the rare case of more than 3 unmergeable axes in one group. einsum contracts its operands
pairwise, left to right (a single operand against a one-element 1); booleans count in int64.

Inner products: tl.dot with float32 accumulation for float16 and float32 (bfloat16 is stored
as float32); float32 uses input_precision "ieee" unless ALLOW_TF32 is set. float64 and
integers multiply and tl.sum a (BLOCK_M, BLOCK_K, BLOCK_N) product (float64 / int64
accumulators). When the tiles cannot fill the GPU and K is long (weight gradients), K is split
across programs into a float32/64 workspace that a second kernel sums in a fixed order.

Per call (contraction): bytes ~ (|a| * cdiv(N, BLOCK_N) + |b| * cdiv(M, BLOCK_M) + |out|) * itemsize
(less with L2 reuse from GROUP_M ordering); FLOPs = 2 * batch * M * N * K.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels

from . import tuning
from .elementwise import launch as elementwise_launch
from .launch import BACKEND, INTERPRET, cdiv, empty, jit, pointer, strides, tl, triton

# float32 products through TF32 tensor cores (faster, ~1e-3 relative error); off by default so
# that float32 matches the CPU. A benchmark may set it.
ALLOW_TF32 = False

# tf32 on Hopper reads both tiles K-contiguous: an operand laid out otherwise (B of a row-major
# product; A of a weight gradient's g^T) ran at 126 TFLOP/s against 293 read K-contiguous
# (H200, 4096^3, bench/gpu_probe.py tf32). Such an operand is copied K-contiguous first when
# the product is large (the copy is one pass over it) and the other side has rows enough to
# repay it.
TF32_RELAYOUT_MIN_FLOPS = 1 << 31
TF32_RELAYOUT_MIN_ROWS = 256

MAX_GROUP_DIMS = 3
_INT64_SPAN = 2 ** 31 - 1
_MAX_GRID_YZ = 65535  # CUDA's limit on grid axes 1 and 2


@jit
def _group_offsets(idx, D1, D2, s0, s1, s2, DIMS: tl.constexpr):
    """Element offsets of the flat (row-major) indices `idx` of a group of DIMS axes whose
    sizes are (D0, D1, D2) (D0 implied) and strides (s0, s1, s2)."""
    if DIMS == 1:
        off = idx * s0
    elif DIMS == 2:
        off = (idx // D1) * s0 + (idx % D1) * s1
    else:
        off = (idx // (D1 * D2)) * s0 + ((idx // D2) % D1) * s1 + (idx % D2) * s2
    return off


@jit
def tile_position(tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row tile, column tile) of this program. GROUP_M row tiles sweep the column tiles
    together, so the tiles of the second operand they share stay in L2."""
    pid = tl.program_id(0)
    width = GROUP_M * tiles_n
    first_m = (pid // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (pid % width) % rows, (pid % width) // rows


@jit
def zero_accumulator(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """ACC 0: float32 (float16/32 inputs), 1: float64, 2: int64 (integers)."""
    if ACC == 0:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    elif ACC == 1:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int64)
    return acc


@jit
def multiply_add(acc, a, b, USE_DOT: tl.constexpr, PRECISION: tl.constexpr):
    """acc + a @ b for an (BM, BK) tile a and a (BK, BN) tile b."""
    if USE_DOT:
        if PRECISION == "default":
            acc = tl.dot(a, b, acc)
        elif PRECISION == "bf16":  # bfloat16 values in float32 buffers: the cast is exact
            acc = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)
        else:
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
    else:
        # float64 and integers: no tensor-core dot everywhere; multiply and sum in registers.
        acc += tl.sum(a[:, :, None].to(acc.dtype) * b[None, :, :].to(acc.dtype), axis=1)
    return acc


@jit
def _contract_kernel(
        a_ptr, b_ptr, c_ptr, bias_ptr,
        BD1, BD2, sab0, sab1, sab2, sbb0, sbb1, sbb2, scb0, scb1, scb2, batch_start,
        M, MD1, MD2, sam0, sam1, sam2, scm0, scm1, scm2,
        N, ND1, ND2, sbn0, sbn1, sbn2, scn0, scn1, scn2,
        K, KD1, KD2, sak0, sak1, sak2, sbk0, sbk1, sbk2,
        k_per_split, split_stride, bias_stride, tiles_m, tiles_n,
        B_DIMS: tl.constexpr, M_DIMS: tl.constexpr, N_DIMS: tl.constexpr,
        K_DIMS: tl.constexpr, HAS_BIAS: tl.constexpr, USE_DOT: tl.constexpr,
        PRECISION: tl.constexpr, ACC: tl.constexpr, IDX64: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr):
    pid_m, pid_n = tile_position(tiles_m, tiles_n, GROUP_M)
    batch = tl.program_id(1) + batch_start
    split = tl.program_id(2)
    if IDX64:
        batch = batch.to(tl.int64)
        split = split.to(tl.int64)
    a_base = _group_offsets(batch, BD1, BD2, sab0, sab1, sab2, B_DIMS)
    b_base = _group_offsets(batch, BD1, BD2, sbb0, sbb1, sbb2, B_DIMS)
    c_base = _group_offsets(batch, BD1, BD2, scb0, scb1, scb2, B_DIMS) + split * split_stride

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if IDX64:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
    m_ok = rm < M
    n_ok = rn < N
    a_rows = a_ptr + a_base + _group_offsets(rm, MD1, MD2, sam0, sam1, sam2, M_DIMS)[:, None]
    b_cols = b_ptr + b_base + _group_offsets(rn, ND1, ND2, sbn0, sbn1, sbn2, N_DIMS)[None, :]

    acc = zero_accumulator(BLOCK_M, BLOCK_N, ACC)
    k_lo = split * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < k_hi
        a = tl.load(a_rows + _group_offsets(rk, KD1, KD2, sak0, sak1, sak2, K_DIMS)[None, :],
                    mask=m_ok[:, None] & k_ok[None, :], other=0)
        b = tl.load(b_cols + _group_offsets(rk, KD1, KD2, sbk0, sbk1, sbk2, K_DIMS)[:, None],
                    mask=k_ok[:, None] & n_ok[None, :], other=0)
        acc = multiply_add(acc, a, b, USE_DOT, PRECISION)

    if HAS_BIAS:
        bias = tl.load(bias_ptr + rn * bias_stride, mask=n_ok, other=0).to(acc.dtype)
        acc += tl.where(split == 0, bias, 0)[None, :]
    c_offs = (c_base + _group_offsets(rm, MD1, MD2, scm0, scm1, scm2, M_DIMS)[:, None]
              + _group_offsets(rn, ND1, ND2, scn0, scn1, scn2, N_DIMS)[None, :])
    tl.store(c_ptr + c_offs, acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@jit
def _sum_splits_kernel(ws_ptr, out_ptr, size, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    # out = sum over the K splits of the workspace, in split order (deterministic).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    parts = ws_ptr + offs
    acc = tl.load(parts, mask=mask, other=0)
    for _ in range(1, SPLIT):
        parts += size  # pointer steps: no int32 product that could overflow
        acc += tl.load(parts, mask=mask, other=0)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


# ---- the launcher --------------------------------------------------------------------------

def axes_of(buffer, letters, sizes) -> dict:
    """{letter: element stride} of a buffer whose axes are `letters`. Axes of length 1 are left
    out (broadcast, or nothing to index); a repeated letter (a diagonal) adds its strides."""
    found: dict = {}
    for letter, length, stride in zip(letters, buffer.shape, strides(buffer)):
        if length == 1 or sizes[letter] == 1:
            continue
        found[letter] = found.get(letter, 0) + stride
    return found


def _merge(letters, sizes, operands):
    """The axes of one group as [size, stride in each operand], neighbours merged where every
    operand lets them (a letter absent from an operand has stride 0 there)."""
    dims: list = []
    for letter in letters:
        st = [op.get(letter, 0) for op in operands]
        if dims and all(prev == s * sizes[letter] for prev, s in zip(dims[-1][1:], st)):
            dims[-1][0] *= sizes[letter]
            dims[-1][1:] = st
        else:
            dims.append([sizes[letter]] + st)
    return dims or [[1] + [0] * len(operands)]


def _sorted(letters, primary):
    """Letters by decreasing |stride| in `primary`: outer axes first, so that merges happen."""
    return sorted(letters, key=lambda c: -abs(primary.get(c, 0)))


def _span(buffer) -> int:
    return sum(abs(s) * (d - 1) for s, d in zip(strides(buffer), buffer.shape)) + 1


class GemmTypes:
    """How a GEMM kernel treats one input dtype: path ('dot' or 'fma'), tl.dot precision,
    accumulator (kind for the kernel, NumPy dtype for a workspace), tuning-cache name."""

    def __init__(self, dtype, bf16: bool = False):
        dtype = np.dtype(dtype)
        self.path = "dot" if dtype in (np.float16, np.float32) else "fma"
        # bfloat16 operands (kept in float32) take the tensor cores in bfloat16, where Triton
        # computes it right: its interpreter's bfloat16 dot is not (errors of 1e10 measured)
        bf16 = bf16 and dtype == np.float32 and not INTERPRET
        tf32 = ALLOW_TF32 and dtype == np.float32 and not bf16
        self.precision = "default" if dtype == np.float16 else \
            "bf16" if bf16 else "tf32" if tf32 else "ieee"
        self.acc = {"f": 0 if dtype.itemsize <= 4 else 1}.get(dtype.kind, 2)
        self.acc_dtype = (np.float32, np.float64, np.int64)[self.acc]
        self.key = "bfloat16" if bf16 else dtype.name + ("-tf32" if tf32 else "")


def contract(a, a_axes, b, b_axes, out, out_axes, sizes, bias=None, op="matmul",
             bf16: bool = False):
    """out[...] = sum over the letters not in out of a[...] * b[...] (+ bias along n), and
    the result: `out`, a new contiguous buffer in its letters' order (or, in the fallback, a
    buffer laid out the same way).

    a_axes/b_axes/out_axes map letters to element strides (see axes_of); `sizes` maps every
    letter to its length. A bias is indexed by the n group, which must be a single letter."""
    if out.size == 0:
        return out
    in_a, in_b, in_out = set(a_axes), set(b_axes), set(out_axes)
    batch = _sorted([c for c in out_axes if c in in_a and c in in_b], out_axes)
    m = _sorted([c for c in out_axes if c in in_a and c not in in_b], out_axes)
    n = _sorted([c for c in out_axes if c in in_b and c not in in_a], out_axes)
    # Summed letters; one that only a or b has is read with stride 0 by the other.
    k = sorted([c for c in dict.fromkeys(list(a_axes) + list(b_axes)) if c not in in_out],
               key=lambda c: (-abs(a_axes.get(c, 0)), -abs(b_axes.get(c, 0))))
    groups = {"b": _merge(batch, sizes, (a_axes, b_axes, out_axes)),
              "m": _merge(m, sizes, (a_axes, out_axes)),
              "n": _merge(n, sizes, (b_axes, out_axes)),
              "k": _merge(k, sizes, (a_axes, b_axes))}
    if max(len(g) for g in groups.values()) > MAX_GROUP_DIMS:
        return _contract_copied(a, a_axes, b, b_axes, out, out_axes, sizes, bias, op,
                                batch, m, n, k, bf16)

    size = {g: int(np.prod([d[0] for d in dims])) for g, dims in groups.items()}
    nbatch, M, N, K = size["b"], size["m"], size["n"], size["k"]
    types = GemmTypes(a.dtype, bf16)
    if types.precision == "tf32" and 2 * nbatch * M * N * K >= TF32_RELAYOUT_MIN_FLOPS:
        move_a = N >= TF32_RELAYOUT_MIN_ROWS and _strays_from_k(a_axes, k)
        move_b = M >= TF32_RELAYOUT_MIN_ROWS and _strays_from_k(b_axes, k)
        if move_a:
            a, a_axes = _k_last(a, a_axes, batch + m, k, sizes)
        if move_b:
            b, b_axes = _k_last(b, b_axes, batch + n, k, sizes)
        if move_a or move_b:
            return contract(a, a_axes, b, b_axes, out, out_axes, sizes, bias, op)

    def flat(dims, column):
        """(D1, D2, s0, s1, s2) of a group for one operand's column of strides."""
        sizes_ = [d[0] for d in dims] + [1] * (3 - len(dims))
        st = [d[column] for d in dims] + [0] * (3 - len(dims))
        return sizes_[1:], st

    def run(config: tuning.Config):
        bm, bn, bk = config.block_m, config.block_n, config.block_k
        tiles_m, tiles_n = cdiv(M, bm), cdiv(N, bn)
        split = split_k(nbatch * tiles_m * tiles_n, K, bk)
        target = out
        if split > 1:
            target = empty((split,) + out.shape, types.acc_dtype)
        long_index = max(_span(a), _span(b), target.size, (bias.size if bias is not None else 0)
                         ) > _INT64_SPAN
        k_per_split = cdiv(cdiv(max(K, 1), split), bk) * bk
        (bd, sab), (_, sbb), (_, scb) = (flat(groups["b"], c) for c in (1, 2, 3))
        (md, sam), (_, scm) = (flat(groups["m"], c) for c in (1, 2))
        (nd, sbn), (_, scn) = (flat(groups["n"], c) for c in (1, 2))
        (kd, sak), (_, sbk) = (flat(groups["k"], c) for c in (1, 2))
        bias_args = (pointer(bias), strides(bias)[0]) if bias is not None else (
            pointer(out), 0)
        for start in range(0, nbatch, _MAX_GRID_YZ):
            count = min(_MAX_GRID_YZ, nbatch - start)
            _contract_kernel[(tiles_m * tiles_n, count, split)](
                pointer(a), pointer(b), pointer(target), bias_args[0],
                *bd, *sab, *sbb, *scb, start,
                M, *md, *sam, *scm, N, *nd, *sbn, *scn, K, *kd, *sak, *sbk,
                k_per_split, out.size, bias_args[1], tiles_m, tiles_n,
                B_DIMS=len(groups["b"]), M_DIMS=len(groups["m"]), N_DIMS=len(groups["n"]),
                K_DIMS=len(groups["k"]), HAS_BIAS=bias is not None, USE_DOT=types.path == "dot",
                PRECISION=types.precision, ACC=types.acc, IDX64=long_index,
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config.group_m,
                num_warps=config.num_warps, num_stages=config.num_stages)
        if split > 1:
            sum_splits(target, out, split)

    run(tuning.config_for(op, types.path, types.key, M, N, K, nbatch, run))
    return out


def split_k(tiles: int, k: int, block_k: int) -> int:
    """How many programs share K: enough to fill the GPU when the tiles alone cannot, each
    keeping at least 8 steps of BLOCK_K. Never under the interpreter (no parallelism)."""
    if INTERPRET:
        return 1
    sms = tuning.sm_count()
    if tiles >= sms:
        return 1
    split = min(cdiv(2 * sms, tiles), k // (8 * block_k), _MAX_GRID_YZ, 64)
    return max(split, 1)


def sum_splits(workspace, out, split):
    size = out.size
    block = 1024 if not INTERPRET else triton.next_power_of_2(max(size, 16))
    _sum_splits_kernel[(cdiv(size, block),)](pointer(workspace), pointer(out), size,
                                             SPLIT=split, BLOCK=block)


def _contract_copied(a, a_axes, b, b_axes, out, out_axes, sizes, bias, op, batch, m, n, k,
                     bf16):
    """The rare fallback for more than MAX_GROUP_DIMS unmergeable axes in a group: copy the
    operands contiguous in group order (every group then merges into one axis), contract
    into a (batch, m, n) buffer, and copy that into a buffer laid out as `out`."""
    a2 = _gathered(a, a_axes, batch + m + k, sizes)
    b2 = _gathered(b, b_axes, batch + k + n, sizes)
    c2 = empty([sizes[c] for c in batch + m + n], out.dtype)
    c2 = contract(a2, axes_of(a2, batch + m + k, sizes), b2, axes_of(b2, batch + k + n, sizes),
                  c2, axes_of(c2, batch + m + n, sizes), sizes, bias, op, bf16)
    c2_axes = axes_of(c2, batch + m + n, sizes)
    order = list(out_axes)  # out is contiguous in this order (callers allocate it so)
    view = _view(c2, [sizes[c] for c in order], [c2_axes[c] for c in order])
    return elementwise_launch("copy", (view,), view.shape, view.dtype).reshape(out.shape)


def _gathered(buffer, axes, letters, sizes):
    """A contiguous copy with the letters' axes in order (0 stride where one is absent)."""
    view = _view(buffer, [sizes[c] for c in letters], [axes.get(c, 0) for c in letters])
    return elementwise_launch("copy", (view,), view.shape, view.dtype)


def _strays_from_k(axes, k) -> bool:
    """True when an operand holding every summed letter does not have one at stride 1."""
    return bool(k) and all(c in axes for c in k) and 1 not in (abs(axes[c]) for c in k)


def _k_last(buffer, axes, kept, k, sizes):
    """(copy, its axes): the operand contiguous with its summed letters innermost."""
    letters = [c for c in kept if c in axes] + k
    copy = _gathered(buffer, axes, letters, sizes)
    return copy, axes_of(copy, letters, sizes)


def _view(buffer, shape, element_strides):
    """A view of `buffer` with the given shape and element strides (metadata only)."""
    size = buffer.itemsize
    return BACKEND.xp.lib.stride_tricks.as_strided(
        buffer, shape=tuple(shape), strides=tuple(s * size for s in element_strides))


# ---- primitives ----------------------------------------------------------------------------

def _letters(count: int, prefix: str) -> list:
    return [f"{prefix}{i}" for i in range(count)]


def _bf16(dtypes) -> bool:
    """True when every operand is bfloat16 (the interpreter's `dtypes`, for kernels that read
    them): the values are bfloat16-exact, so a product may take them in bfloat16."""
    return dtypes is not None and all(d.name == "bfloat16" for d in dtypes)


def _matmul(x, y, dtypes=None):
    xs = x.shape if x.ndim > 1 else (1,) + x.shape
    ys = y.shape if y.ndim > 1 else y.shape + (1,)
    batch_shape = np.broadcast_shapes(xs[:-2], ys[:-2])
    bl = _letters(len(batch_shape), "b")
    sizes = dict(zip(bl, batch_shape), m=xs[-2], k=xs[-1], n=ys[-1])
    x_letters = bl[len(bl) - (x.ndim - 2):] + ["m", "k"] if x.ndim > 1 else ["k"]
    y_letters = bl[len(bl) - (y.ndim - 2):] + ["k", "n"] if y.ndim > 1 else ["k"]
    out_letters = bl + ["m"] * (x.ndim > 1) + ["n"] * (y.ndim > 1)
    out = empty([sizes[c] for c in out_letters], x.dtype)
    return contract(x, axes_of(x, x_letters, sizes), y, axes_of(y, y_letters, sizes),
                    out, axes_of(out, out_letters, sizes), sizes, bf16=_bf16(dtypes))


def _linear(x, w, *bias, dtypes=None):
    lead = _letters(x.ndim - 1, "l")
    sizes = dict(zip(lead, x.shape[:-1]), k=x.shape[-1], n=w.shape[0])
    out = empty(x.shape[:-1] + (w.shape[0],), x.dtype)
    return contract(x, axes_of(x, lead + ["k"], sizes), w, axes_of(w, ["n", "k"], sizes),
                    out, axes_of(out, lead + ["n"], sizes), sizes,
                    bias=bias[0] if bias else None, op="linear", bf16=_bf16(dtypes))


def _linear_weight_grad(g, x, dtypes=None):
    # g^T x: (out, in), summed over the leading axes (the rows) of both.
    lead = _letters(g.ndim - 1, "r")
    sizes = dict(zip(lead, g.shape[:-1]), m=g.shape[-1], n=x.shape[-1])
    out = empty((g.shape[-1], x.shape[-1]), x.dtype)
    return contract(g, axes_of(g, lead + ["m"], sizes), x, axes_of(x, lead + ["n"], sizes),
                    out, axes_of(out, ["m", "n"], sizes), sizes, op="linear_weight_grad",
                    bf16=_bf16(dtypes))


for _kernel in (_matmul, _linear, _linear_weight_grad):
    _kernel.reads_dtypes = True  # eager/interpreter.py passes `dtypes` for bfloat16 results


_ONES: dict = {}


def _one(dtype):
    """A one-element buffer holding 1: the second operand of a one-operand einsum."""
    dtype = np.dtype(dtype)
    if dtype not in _ONES:
        _ONES[dtype] = BACKEND.from_host(np.ones((), dtype), None)
    return _ONES[dtype]


def _einsum(*xs, inputs, output):
    if xs[0].dtype == np.bool_:
        # Booleans: count the true terms in int64 (bytes in, as 0/1), then "any".
        counts = _contract_all([x.view(np.uint8) for x in xs], inputs, output, np.int64)
        return elementwise_launch("cast_to_bool", (counts,), counts.shape, np.bool_)
    return _contract_all(xs, inputs, output, xs[0].dtype)


def _contract_all(xs, inputs, output, dtype):
    sizes: dict = {}
    for subs, x in zip(inputs, xs):
        for c, length in zip(subs, x.shape):
            if sizes.get(c, 1) == 1:
                sizes[c] = length
    operands = [(x, axes_of(x, subs, sizes), subs) for x, subs in zip(xs, inputs)]
    if len(operands) == 1:
        operands.append((_one(xs[0].dtype), {}, ""))
    # Left to right, pairwise; an intermediate keeps the letters still needed later.
    while True:
        (a, a_axes, a_subs), (b, b_axes, b_subs) = operands[0], operands[1]
        rest = operands[2:]
        if rest:
            needed = set(output).union(*(set(s) for _, _, s in rest))
            subs = "".join(c for c in dict.fromkeys(a_subs + b_subs) if c in needed)
        else:
            subs = output
        out = empty([sizes[c] for c in subs], dtype)
        out = contract(a, a_axes, b, b_axes, out, axes_of(out, subs, sizes), sizes,
                       op="einsum")
        if not rest:
            return out
        operands = [(out, axes_of(out, subs, sizes), subs)] + rest


register_kernels("gpu", {"matmul": _matmul, "einsum": _einsum, "linear": _linear,
                         "linear_weight_grad": _linear_weight_grad})
