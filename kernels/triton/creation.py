"""Creation GPU kernels (full, empty, arange, linspace, eye) and the copy between devices.

`full` broadcasts a one-element buffer through the elementwise copy kernel, so every dtype
keeps its exact value (a Python float kernel argument would be rounded to float32).
Bytes moved per call: the output.
"""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels
from rill.kernels.numpy.creation import _to_device

from .elementwise import launch
from .launch import BACKEND, block_for, cdiv, empty, jit, pointer, tl


def _scalar(value, storage):
    return BACKEND.from_host(np.array(value, dtype=storage), None)


def filled(shape, storage, value):
    """A new buffer of NumPy dtype `storage` holding `value` everywhere."""
    return launch("copy", (_scalar(value, storage),), shape, storage)


def _full(shape, dtype, device, value):
    return filled(shape, dtype.storage, value)  # bfloat16 is rounded as every result is


def _empty(shape, dtype, device):
    return empty(shape, dtype.storage)


@jit
def _ramp_kernel(out_ptr, start_ptr, step_ptr, stop_ptr, n, LAST_IS_STOP: tl.constexpr,
                 BLOCK: tl.constexpr):
    # out[i] = start + i * step (the last element exactly `stop` for an endpoint linspace).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    start = tl.load(start_ptr)
    value = start + offs.to(start.dtype) * tl.load(step_ptr)
    if LAST_IS_STOP:
        value = tl.where(offs == n - 1, tl.load(stop_ptr), value)
    tl.store(out_ptr + offs, value.to(out_ptr.dtype.element_ty), mask=mask)


def _ramp(n, start, step, stop, storage, last_is_stop, compute):
    out = empty((n,), storage)
    if n == 0:
        return out
    block = block_for(n)
    args = [_scalar(v, compute) for v in (start, step, stop)]
    _ramp_kernel[(cdiv(n, block),)](pointer(out), *map(pointer, args), n,
                                    LAST_IS_STOP=last_is_stop, BLOCK=block)
    return out


def _arange(start, stop, step, dtype, device):
    n = max(0, int(np.ceil((stop - start) / step)))
    compute = np.float64 if dtype.is_floating else np.int64
    return _ramp(n, start, step, stop, dtype.storage, False, compute)


def _linspace(start, stop, num, endpoint, dtype, device):
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    return _ramp(num, start, step, stop, dtype.storage, endpoint and num > 1, np.float64)


@jit
def _eye_kernel(out_ptr, n_cols, total, k, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    on_diagonal = (offs % n_cols) - (offs // n_cols) == k
    tl.store(out_ptr + offs, on_diagonal.to(out_ptr.dtype.element_ty), mask=mask)


def _eye(n, m, k, dtype, device):
    m = n if m is None else m
    out = empty((n, m), dtype.storage)
    view = out.view(np.uint8) if out.dtype == np.bool_ else out
    if out.size:
        block = block_for(out.size)
        _eye_kernel[(cdiv(out.size, block),)](pointer(view), m, out.size, k, BLOCK=block)
    return out


register_kernels("gpu", {"full": _full, "empty": _empty, "arange": _arange,
                         "linspace": _linspace, "eye": _eye, "to_device": _to_device})
