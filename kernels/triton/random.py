"""Random GPU kernels: counter-based draws (Philox-4x32-10) from the attrs' Generator.

Element i of a draw is a pure function of (key, first + i): `Generator.philox(n)` hands out
the key of the generator's seed and a fresh range of n counters, so successive draws never
overlap and a reseeded generator repeats its draws. Each counter gives four 32-bit words:
float32 uniforms take 24 bits of one word, float64 uniforms 53 bits of two; normals are
Box-Muller of two uniforms; integers are a 64-bit word reduced into [low, high). GPU draws
do not equal CPU draws (PCG64), only their distributions do.

Per call: bytes moved = the output's bytes; ~10 Philox rounds (~40 integer ops) per element,
plus a log, sqrt and cos per normal.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels

from .launch import BACKEND, block_for, cdiv, empty, jit, pointer, tl

# Kernels read only constexpr globals; launchers pass `.value`.
UNIFORM, NORMAL, INTEGER = (tl.constexpr(i) for i in range(3))
_BITS = {"float16": 11, "bfloat16": 8}  # uniform bits that the output dtype holds exactly


@jit
def _unit(word, BITS: tl.constexpr):
    """[0, 1) from the top BITS bits of a 32-bit word: exact in the output's precision, so
    rounding to it cannot reach 1 (24 bits for float32, 11 for float16, 8 for bfloat16)."""
    return (word >> (32 - BITS)).to(tl.float32) * (1.0 / (1 << BITS))


@jit
def _unit64(high, low):
    """[0, 1) from 53 bits of two words (exact in float64; NumPy's recipe)."""
    return ((high >> 5).to(tl.float64) * 67108864.0 + (low >> 6).to(tl.float64)) * \
        (1.0 / 9007199254740992.0)


@jit
def _random_kernel(out_ptr, params_ptr, n, key, first, low, span, KIND: tl.constexpr,
                   WIDE: tl.constexpr, BITS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    counter = offs + first
    c_lo = (counter & 0xFFFFFFFF).to(tl.uint32)
    c_hi = (counter >> 32).to(tl.uint32)
    zero = tl.zeros_like(c_lo)
    w0, w1, w2, w3 = tl.philox(key, c_lo, c_hi, zero, zero)
    if KIND == INTEGER:
        word = (w1.to(tl.uint64) << 32) | w0.to(tl.uint64)
        value = low + (word % span.to(tl.uint64)).to(tl.int64)
    else:
        if WIDE:  # float64: 53-bit uniforms, float64 arithmetic
            u = _unit64(w0, w1)
            v = _unit64(w2, w3)
            a = tl.load(params_ptr)
            b = tl.load(params_ptr + 1)
        else:
            u = _unit(w0, BITS)
            v = _unit(w1, 24)
            a = tl.load(params_ptr).to(tl.float32)
            b = tl.load(params_ptr + 1).to(tl.float32)
        if KIND == UNIFORM:  # a = low, b = high
            value = a + u * (b - a)
        else:  # a = mean, b = std; 1 - u is in (0, 1], so the log is finite
            radius = tl.sqrt(-2.0 * tl.log(1.0 - u))
            value = a + b * (radius * tl.cos(6.283185307179586 * v))  # 2 pi v
    tl.store(out_ptr + offs, value.to(out_ptr.dtype.element_ty), mask=mask)


def _draw(kind, shape, dtype, generator, a=0.0, b=0.0, low=0, span=1):
    out = empty(shape, dtype.storage)
    n = out.size
    if n == 0:
        return out
    key, first = generator.philox(n)
    # Float parameters travel in a float64 buffer: a float kernel argument would be float32.
    params = BACKEND.from_host(np.array([a, b], dtype=np.float64), None)
    block = block_for(n)
    _random_kernel[(cdiv(n, block),)](
        pointer(out), pointer(params), n, key, first, low, span, KIND=kind.value,
        WIDE=out.dtype == np.float64, BITS=_BITS.get(dtype.name, 24) if kind is UNIFORM else 24,
        BLOCK=block)
    return out


def _uniform(shape, dtype, device, generator, low, high):
    return _draw(UNIFORM, shape, dtype, generator, low, high)


def _normal(shape, dtype, device, generator, mean, std):
    return _draw(NORMAL, shape, dtype, generator, mean, std)


def _randint(shape, dtype, device, generator, low, high):
    return _draw(INTEGER, shape, dtype, generator, low=low, span=high - low)


register_kernels("gpu", {"uniform": _uniform, "normal": _normal, "randint": _randint})
