"""What every launcher needs: the array module, buffer pointers, allocation, grids.

On a GPU, buffers are CuPy arrays and a kernel gets their device addresses. Under
RILL_TRITON_INTERPRET=1 buffers are NumPy arrays in host memory, and Triton's interpreter
reaches them through PyTorch CPU tensors that share their memory. Launchers use `xp` only
for views and allocation (metadata: reshape, transpose, slicing); every value a kernel
computes is computed by a Triton kernel.
"""
from __future__ import annotations

import inspect
import os

import numpy as np

from rill.gpu import backend, interpreted

INTERPRET = interpreted()
if INTERPRET:
    # Triton picks its interpreter when a kernel is decorated, so this comes before them.
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402,F401

BACKEND = backend()
xp = BACKEND.xp

if INTERPRET:
    import ctypes

    import torch
    from triton.runtime import interpreter as _interpreter

    def pointer(buffer):
        """A one-element tensor at the buffer's first element: the interpreter needs only
        its address and dtype (strides may be negative or zero, which PyTorch refuses, and
        read-only views such as broadcasts are only read)."""
        address = buffer.__array_interface__["data"][0]
        cell = (ctypes.c_char * buffer.itemsize).from_address(address)
        return torch.from_numpy(np.ctypeslib.as_array(cell).view(buffer.dtype))

    _run_grid = _interpreter.GridExecutor.__call__

    def _run_grid_quietly(self, *args, **kwargs):
        # inf and nan are values on a GPU; the interpreter's NumPy would warn about them.
        with np.errstate(all="ignore"):
            return _run_grid(self, *args, **kwargs)

    _interpreter.GridExecutor.__call__ = _run_grid_quietly
else:
    class _DevicePointer:
        """What Triton asks of a pointer argument: an address and an element dtype."""

        __slots__ = ("ptr", "dtype")

        def __init__(self, ptr, dtype):
            self.ptr = ptr
            self.dtype = dtype

        def data_ptr(self):
            return self.ptr

    def pointer(buffer):
        return _DevicePointer(buffer.data.ptr, buffer.dtype)


def jit(fn):
    """triton.jit for rill's kernels, with two rules the compiled kernels need:

    - no floating-point contraction: a * b + c rounds twice, as NumPy and Triton's
      interpreter round it. With contraction (Triton's default) a fused kernel's multiply-add
      became one FMA where the unfused kernels round in between: captured steps stopped
      equalling eager ones bit for bit (seen on an H200). tl.dot is unaffected.
    - no Python float as a runtime argument: compiled Triton passes it as float32 (the
      interpreter keeps float64), which silently rounded float64 attention's scale on the
      H200. Such a value goes as a tl.constexpr, or in a float64 buffer; a launch that breaks
      the rule raises, under the interpreter too, so the CPU test suite catches it."""
    kernel = triton.jit(fn)
    params = list(inspect.signature(fn).parameters.values())
    runtime = tuple("constexpr" not in str(p.annotation) for p in params)
    runtime_names = {p.name for p, r in zip(params, runtime) if r}
    run = kernel.run  # what kernel[grid](...) calls

    def checked_run(*args, **kwargs):
        for i, (value, is_runtime) in enumerate(zip(args, runtime)):
            if is_runtime and isinstance(value, float):  # np.float64 too
                _float_argument(fn, params[i].name, value)
        for name, value in kwargs.items():
            if isinstance(value, float) and name in runtime_names:
                _float_argument(fn, name, value)
        if not INTERPRET:
            kwargs.setdefault("enable_fp_fusion", False)
        return run(*args, **kwargs)
    kernel.run = checked_run
    return kernel


def _float_argument(fn, name, value):
    raise TypeError(f"{fn.__name__}: the Python float {name}={value!r} would reach the compiled "
                    "kernel as float32; pass it as a tl.constexpr or in a float64 buffer")


def empty(shape, dtype):
    """A new contiguous buffer of NumPy storage dtype `dtype` on the gpu device."""
    return BACKEND.allocate(tuple(shape), np.dtype(dtype))


def strides(buffer) -> list[int]:
    """Strides in elements (NumPy and CuPy count bytes)."""
    size = buffer.itemsize
    return [s // size for s in buffer.strides]


def block_for(n: int, cap: int = 1024) -> int:
    """Elements per program. The interpreter runs each program as one NumPy step, so there
    fewer, larger programs are much faster; a GPU wants ~1K-element programs."""
    if INTERPRET:
        cap = 1 << 16
    return max(16, min(cap, triton.next_power_of_2(max(n, 1))))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def is_contiguous(buffer) -> bool:
    return bool(buffer.flags.c_contiguous)
