"""The eager interpreter: run a primitive's kernel on device buffers now."""
from __future__ import annotations

import os

import numpy as np

from ..dtypes import bfloat16
from ..errors import Error, IndexingError, KernelError, OutOfMemoryError
from ..tensor import Tensor

_new = object.__new__

_ndarray = np.ndarray
# Tests set RILL_CHECK_KERNELS=1: every kernel result is checked against its shape/dtype rule.
CHECK_KERNELS = os.environ.get("RILL_CHECK_KERNELS", "") not in ("", "0")


class EagerInterpreter:
    capturing = False
    reruns_python = False  # vmap's interpreter sets it: captured functions run as Python

    def apply(self, prim, args, attrs, avals, device):
        kernel = prim.kernels.get(device.kind)
        if kernel is None:
            raise prim.missing_kernel(device.kind)
        try:
            if not prim.multiple_results and avals[1] is bfloat16 and \
                    getattr(kernel, "reads_dtypes", False):
                # bfloat16 is stored as float32: a kernel that can use the narrower type (the
                # GPU's products cast their tiles) is told the operands' dtypes
                out = kernel(*[a._data for a in args], dtypes=tuple(a.dtype for a in args),
                             **attrs)
            elif len(args) == 2 and not attrs:  # the common case, kept lean
                out = kernel(args[0]._data, args[1]._data)
            else:
                out = kernel(*[a._data for a in args], **attrs)
        except Exception as e:
            kernel_failed(prim, args, e, device.kind)
        if prim.multiple_results:
            return tuple(wrap(prim, o, aval, device) for o, aval in zip(out, avals))
        return wrap(prim, out, avals, device)


def kernel_failed(prim, args, e: Exception, kind: str):
    """Raise what the user sees when `prim`'s kernel raised `e` on `args` (the compiled bind,
    kernels/native/dispatch.c, calls this too)."""
    for a in args:  # a graph value that outlived its trace: say which, not why numpy
        refusal = getattr(a._data, "host_refusal", None)
        if refusal is not None:
            raise refusal(prim.name) from None
    if isinstance(e, Error):
        raise e
    raise kernel_error(e, prim.name, kind) from e


def kernel_error(e: Exception, op: str, kind: str) -> Error:
    """What a kernel raised, as the rill error the user sees (eager or in a graph)."""
    if isinstance(e, Error):
        return e
    if isinstance(e, IndexError):
        return IndexingError(str(e), op=op)
    # NumPy says "array is too big" / "iterator is too large" (ValueError) past 2^63 bytes
    if isinstance(e, MemoryError) or isinstance(e, ValueError) and \
            ("is too big" in str(e) or "is too large" in str(e)):
        return OutOfMemoryError(f"the {kind} kernel could not allocate its result ({e}); make "
                                "the tensors smaller (a batch, a repetition count), or free "
                                "memory", op=op)
    return KernelError(f"the {kind} kernel failed: {type(e).__name__}: {e}", op=op)


def wrap(prim, out, aval, device) -> Tensor:
    """A kernel's result as a Tensor of the inferred dtype (the hot path of every op)."""
    if type(out) is not _ndarray:
        out = device.backend.as_buffer(out)  # NumPy scalars from reductions; CuPy arrays
    dtype = aval[1]
    if dtype is bfloat16:
        out = device.backend.round_to_bfloat16(out)
    if CHECK_KERNELS:
        check_kernel_result(prim, out, aval)
    # tensor.new_tensor, inlined: every op's result passes here and a call costs ~45 ns
    # (tests/eager/test_dispatch_wrap.py keeps the two making the same tensor)
    t = _new(Tensor)
    t._data = out
    t.shape = out.shape
    t.dtype = dtype
    t.device = device
    t.requires_grad = False
    t.grad = None
    t._node = None
    t._index = 0
    t._version = 0
    t._retains_grad = False
    t._origin = None
    t._alias = None
    return t


def check_kernel_result(prim, out, aval) -> None:
    shape, dtype = aval
    if out.shape != tuple(shape) or out.dtype != dtype.storage:
        raise AssertionError(f"{prim.name}: kernel returned {out.dtype}{list(out.shape)}, "
                             f"its rule inferred {dtype}{list(shape)}")


EAGER = EagerInterpreter()
