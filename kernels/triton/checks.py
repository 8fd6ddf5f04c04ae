"""The GPU kernel of `check`: raise the named rill error unless every element of `ok` holds.

One kernel folds `ok` into a one-element flag (programs that see a false element clear it),
and the flag is read back to the host. That one-element device-to-host read, which waits for
the queued kernels, is the op's purpose: an assert has to see the value to raise.

Per call: bytes moved = the condition's bytes (one byte per element) + 4 bytes read back.
"""
from __future__ import annotations

import numpy as np

from rill import errors
from rill.ops.primitive import register_kernels

from .launch import BACKEND, block_for, cdiv, empty, jit, pointer, strides, tl
from .shape import as_bytes, collapse, unravel


@jit
def _set_kernel(flag_ptr):
    tl.store(flag_ptr, 1)


@jit
def _all_kernel(flag_ptr, ok_ptr, n, D1, D2, D3, D4, D5, s0, s1, s2, s3, s4, s5,
                BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i0, i1, i2, i3, i4, i5 = unravel(offs, D1, D2, D3, D4, D5)
    ok = tl.load(ok_ptr + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 + i4 * s4 + i5 * s5,
                 mask=mask, other=1)
    failed = tl.sum(tl.where(ok == 0, 1, 0), axis=0)
    # Every program that sees a false element writes the same 0: a race that cannot matter.
    tl.store(flag_ptr, 0, mask=failed > 0)


def all_true(ok) -> bool:
    """Whether every element of the bool buffer `ok` is true (reads one int to the host)."""
    flag = empty((1,), np.int32)
    _set_kernel[(1,)](pointer(flag))
    if ok.size:
        ok = as_bytes(ok)
        dims, (s,), _ = collapse(ok.shape, [strides(ok)])
        block = block_for(ok.size)
        _all_kernel[(cdiv(ok.size, block),)](pointer(flag), pointer(ok), ok.size, *dims[1:],
                                             *s, BLOCK=block)
    # The one device-to-host read of this op: an assert must see its condition.
    return bool(BACKEND.to_host(flag)[0])


def check(ok, value, message, error, op):
    if not all_true(ok):
        raise getattr(errors, error)(message, op=op)
    return value


register_kernels("gpu", {"check": check})
