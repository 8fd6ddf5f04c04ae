"""Tensors from other objects, as the Array API standard has them: asarray and from_dlpack.

`copy` means what the standard says: True always gives a new tensor, None reuses the input's
memory when it can, False must not copy and is an error (ArgumentError, a ValueError) where a
copy is needed: a list, a dtype or device change, a NumPy array whose dtype has no rill
storage. rill treats buffers as immutable, so a tensor sharing a NumPy array's memory sees
later writes to that array: copy=True (or rill.tensor) when the array will change.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..devices import cpu, device, Device
from ..errors import ArgumentError, DeviceError, DTypeError, Error, reports_as
from ..tensor import Tensor, new_tensor
from .arguments import array_like, as_dtype, describe
from .creation import as_tensor, tensor

# DLPack device types (dlpack.h: DLDeviceType).
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


def _copy_flag(copy, op: str):
    if copy is None or copy is True or copy is False:
        return copy
    raise ArgumentError(f"copy must be True, False or None, got {describe(copy)}", op=op)


def _no_copy(why: str, op: str):
    return ArgumentError(f"copy=False, but {why} needs a copy; pass copy=None to allow one",
                         op=op)


def _place(out: Tensor, source: Tensor, dtype, device, copy, op: str) -> Tensor:
    """`out` (made from `source`) cast and moved as asked; copy=False refuses either."""
    from .creation import to_device
    from .data_types import fresh
    from .elementwise import cast
    if dtype is not None and dtype is not out.dtype:
        if copy is False:
            raise _no_copy(f"converting {out.dtype} to {dtype}", op)
        out = cast(out, dtype)
    if device is not None and device is not out.device:
        if copy is False:
            raise _no_copy(f"moving from {out.device} to {device}", op)
        out = to_device(out, device)
    if copy and out is source:
        out = fresh(source)
    return out


def _target_device(device, op: str):
    from .creation import _device
    return None if device is None else _device(device, op)


@reports_as("asarray")
def asarray(obj, /, *, dtype=None, device=None, copy=None) -> Tensor:
    """`obj` as a tensor: a tensor, a Python scalar, a (nested) sequence of scalars, a NumPy
    array, an object with the buffer protocol, `__dlpack__` or `__array__`.

    With no dtype, Python bools give bool, ints int64, floats float32; arrays keep theirs.
    copy=None shares the memory of a tensor or NumPy array when dtype and device allow;
    copy=True always gives a new tensor; copy=False raises where a copy would be needed.

    >>> asarray([[1, 2], [3, 4]], dtype=rill.float64)
    tensor([[1., 2.],
            [3., 4.]], dtype=float64)
    """
    op = "asarray"
    copy = _copy_flag(copy, op)
    dtype = None if dtype is None else as_dtype(dtype, op)
    target = _target_device(device, op)
    if isinstance(obj, Tensor):
        return _place(obj, obj, dtype, target, copy, op)
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray):
        made = from_dlpack(obj, copy=copy)
        return _place(made, None, dtype, target, False if copy is False else None, op)
    if not isinstance(obj, np.ndarray) and (array_like(obj) or dt.scalar_kind(obj) is not None
                                            or type(obj) is complex):
        # Python scalars, (nested) sequences, NumPy scalars: always read into a new buffer,
        # and typed as rill.tensor types them (float -> float32, int -> int64).
        if copy is False:
            raise _no_copy(f"making a tensor from {describe(obj)}", op)
        return tensor(obj, dtype=dtype, device=target)
    return _from_host(_host_array(obj, copy, op), dtype, target, copy, op)


def _host_array(obj, copy, op: str) -> np.ndarray:
    """An ndarray, a buffer-protocol object or an object with __array__ as a NumPy array,
    sharing its memory where NumPy can."""
    if isinstance(obj, np.ndarray):
        return obj
    if not hasattr(obj, "__array__"):
        try:
            obj = memoryview(obj)  # the buffer protocol: bytes, array.array, mmap, ...
        except TypeError:
            raise ArgumentError(f"cannot make a tensor from {describe(obj)}: it is not a "
                                "number, a sequence, an array, or an object with the buffer "
                                "protocol, __array__ or __dlpack__", op=op) from None
    try:
        return np.asarray(obj, copy=False) if copy is False else np.asarray(obj)
    except ValueError:
        if copy is False:
            raise _no_copy(f"making a tensor from {describe(obj)}", op) from None
        raise
    except Error:
        raise
    except Exception as e:  # noqa: BLE001 - an object's own __array__ failing
        raise ArgumentError(f"cannot make a tensor from {describe(obj)}: {e}", op=op) from None


def _from_host(array: np.ndarray, dtype, target, copy, op: str) -> Tensor:
    if copy:
        return tensor(array, dtype=dtype, device=target)
    array = _storable(array, copy, op)
    if copy is False:
        stored = dt.from_numpy(array.dtype)
        wanted = dtype if dtype is not None else stored
        if stored is None or stored is not wanted or wanted is dt.bfloat16:
            raise _no_copy(f"a NumPy {array.dtype} array as {wanted or 'a rill tensor'}", op)
        if target is not None and target.kind != "cpu":
            raise _no_copy(f"placing host memory on {target}", op)
    return as_tensor(array, dtype=dtype, device=target)


# ---- DLPack --------------------------------------------------------------------------------


def _dlpack_device(x, op: str):
    try:
        kind, index = x.__dlpack_device__()
    except AttributeError:
        raise ArgumentError(f"from_dlpack needs an object with __dlpack__ and "
                            f"__dlpack_device__, got {describe(x)}", op=op) from None
    return int(kind), int(index)


def _wrap(buffer, device: Device, op: str) -> Tensor:
    """A tensor on `device` holding `buffer` (a NumPy or CuPy array) without a copy."""
    from .creation import _made
    found = dt.from_numpy(np.dtype(buffer.dtype))
    if found is None:
        raise DTypeError(f"a DLPack tensor of dtype {buffer.dtype} has no rill dtype", op=op)
    return _made(new_tensor(buffer, found, device))


@reports_as("from_dlpack")
def from_dlpack(x, /, *, device=None, copy=None) -> Tensor:
    """A tensor holding the data of `x`, any object with `__dlpack__` (a NumPy array, a
    PyTorch or CuPy tensor, a rill tensor): CPU memory through NumPy, CUDA memory through
    CuPy on rill's gpu device. copy=None shares memory when it can; copy=True copies;
    copy=False raises where sharing is impossible (another device was asked for).

    >>> import numpy as np
    >>> from_dlpack(np.arange(3.0))
    tensor([0., 1., 2.], dtype=float64)
    """
    op = "from_dlpack"
    copy = _copy_flag(copy, op)
    target = _target_device(device, op)
    if isinstance(x, Tensor):
        return _place(x, x, None, target, copy, op)
    kind, index = _dlpack_device(x, op)
    if kind in (_DL_CPU, _DL_CUDA_HOST):
        try:
            array = np.from_dlpack(x, copy=copy)
        except Exception as e:  # noqa: BLE001 - the exporter's own error (BufferError, ...)
            bfloat16 = _bfloat16_import(x, np.from_dlpack, copy, op)
            if bfloat16 is None:
                raise ArgumentError(f"cannot read {describe(x)} through DLPack: {e}",
                                    op=op) from None
            return _place(bfloat16, None, None, target, None, op)
        if copy is not True:  # rill never writes a buffer; a read-only view keeps it so here
            array = array.view()
        made = _wrap(_storable(array, copy, op), _cpu(), op)
    elif kind in (_DL_CUDA, _DL_CUDA_MANAGED):
        made = _cupy_import(x, copy, op)
        made = made if isinstance(made, Tensor) else _wrap(made, _gpu(index, op), op)
    else:
        raise DeviceError(f"DLPack device type {kind} is not one rill can read (CPU or CUDA)",
                          op=op)
    return _place(made, None, None, target, False if copy is False else None, op)


# Packages whose from_dlpack imports a buffer writable whatever its read-only flag says
# (PyTorch 2.x takes DLPack 1.0 capsules and ignores the flag): they get a copy.
FLAG_IGNORED_BY = ("torch",)


def dlpack_export(t: Tensor, max_version, copy, caller: str):
    """(buffer, copy) for t.__dlpack__: never a writable alias of t's buffer, which rill
    treats as immutable (a tape may hold it for backward). DLPack 1.0 capsules carry a
    read-only flag, which NumPy honours: a consumer that asks for 1.0 gets t's buffer itself,
    flagged read-only. A consumer that cannot be told (DLPack before 1.0), one known to
    ignore the flag (FLAG_IGNORED_BY, by the package of `caller`, the module that called
    __dlpack__), and every gpu export (CuPy sets no flag) get a copy; copy=False is then a
    BufferError, as the standard asks when a copy is needed and forbidden."""
    op = "__dlpack__"
    on_cpu = t.device.kind == "cpu"
    buffer = t._host(op + "()") if on_cpu else t._data
    if t.dtype is dt.bfloat16:  # float32 storage: the bfloat16 bits are always a new array
        if copy is False:
            raise BufferError("rill holds bfloat16 in float32, so its bfloat16 export is a "
                              "copy, and copy=False forbids it; pass copy=None")
        return buffer, None
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    ignores = caller.split(".")[0] in FLAG_IGNORED_BY
    if on_cpu and versioned and not ignores and copy is not True:
        return buffer, copy  # rill's buffer, flagged read-only
    if copy is False:
        why = ("DLPack before 1.0 cannot mark the buffer read-only" if not versioned else
               f"{caller.split('.')[0]} ignores DLPack's read-only flag" if ignores else
               "a gpu buffer cannot be marked read-only")
        raise BufferError(f"{why}, so rill exports a copy (its buffers are never written), "
                          "and copy=False forbids it; pass copy=None")
    return buffer.copy(), None


def dlpack_capsule(t: Tensor, stream, max_version, dl_device, copy, caller: str):
    """The capsule t.__dlpack__ returns, of the buffer dlpack_export chooses."""
    buffer, copy = dlpack_export(t, max_version, copy, caller)
    kwargs = {} if max_version is None else {"max_version": max_version}
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    if copy is not None:
        kwargs["copy"] = copy
    if t.dtype is dt.bfloat16:
        from .dlpack_bfloat16 import bfloat16_capsule
        return bfloat16_capsule(buffer, stream=stream, **kwargs)
    return buffer.__dlpack__(stream=stream, **kwargs)


def _storable(array: np.ndarray, copy, op: str) -> np.ndarray:
    """rill's kernels take aligned arrays in native byte order: anything else is copied."""
    if array.dtype.isnative and array.flags.aligned:
        return array
    if copy is False:
        raise _no_copy(f"a {array.dtype} array that is not aligned and native-endian", op)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))


def _cpu():
    return cpu


def _gpu(index: int, op: str) -> Device:
    try:
        return device(f"gpu:{index}")
    except Error as e:
        e.op = op
        raise


def _cupy_import(x, copy, op: str):
    try:
        import cupy
    except ImportError:
        raise DeviceError("this DLPack tensor lives in CUDA memory, which rill reads through "
                          "CuPy; install cupy (or move the tensor to the CPU first)",
                          op=op) from None
    try:
        array = cupy.from_dlpack(x)
    except Exception:  # noqa: BLE001 - CuPy has no bfloat16; anything else is re-raised
        bfloat16 = _bfloat16_import(x, cupy.from_dlpack, copy, op)
        if bfloat16 is None:
            raise
        return bfloat16
    return array.copy() if copy else cupy.ascontiguousarray(array)


def _bfloat16_import(x, from_dlpack, copy, op: str):
    """A bfloat16 tensor of x's values when x holds bfloat16 (ops/dlpack_bfloat16.py), read
    by NumPy's or CuPy's from_dlpack, else None. Always a copy: rill holds bfloat16 in
    float32."""
    from .dlpack_bfloat16 import read_bfloat16
    values = read_bfloat16(x, from_dlpack)
    if values is None:
        return None
    if copy is False:
        raise _no_copy("a bfloat16 tensor (rill holds bfloat16 in float32)", op)
    kind, index = _dlpack_device(x, op)
    device = _cpu() if kind in (_DL_CPU, _DL_CUDA_HOST) else _gpu(index, op)
    from .creation import _made
    return _made(new_tensor(values, dt.bfloat16, device))
