"""bfloat16 through DLPack, both ways, although neither NumPy nor CuPy has a bfloat16 dtype.

A DLPack capsule is a C struct whose dtype field says how to read its memory. bfloat16 is
code kDLBfloat with 16 bits: the upper half of a float32. rill holds bfloat16 in float32
buffers, so both directions are a copy:
- export: the upper 16 bits of each float32 go into a uint16 array, whose capsule (made by
  NumPy or CuPy) is relabelled kDLBfloat before the consumer (PyTorch, JAX, ...) reads it;
- import: the producer's bfloat16 capsule is relabelled uint16, read by NumPy or CuPy, and
  the bits are shifted back into float32.
The relabelling writes one byte of a capsule no one has consumed yet; the memory, its owner
and its deleter stay the producer's.
"""
from __future__ import annotations

import ctypes

# dlpack.h: DLDataTypeCode.
_UINT, _BFLOAT = 1, 4
# DLTensor: void* data (8 bytes), DLDevice device (8), int32 ndim (4), then DLDataType
# {uint8 code, uint8 bits, uint16 lanes}.
_DTYPE_OFFSET = 20
# DLManagedTensorVersioned (DLPack 1.x) puts version (8), manager_ctx (8), deleter (8) and
# flags (8) before its DLTensor; DLManagedTensor (0.x) starts with it.
_NAMES = {b"dltensor_versioned": 32, b"dltensor": 0}

_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype, _is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_pointer.restype, _pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _dtype_field(capsule):
    """The (code, bits) bytes of an unconsumed DLPack capsule's dtype, writable; None for
    anything else (a consumed capsule is renamed used_dltensor...)."""
    for name, tensor_offset in _NAMES.items():
        if _is_valid(capsule, name):
            address = _pointer(capsule, name) + tensor_offset + _DTYPE_OFFSET
            return (ctypes.c_uint8 * 2).from_address(address)
    return None


def relabel(capsule, code: int, to_code: int) -> bool:
    """Change a 16-bit capsule's dtype code from `code` to `to_code`; False (and nothing
    changed) when the capsule does not hold 16-bit `code` values."""
    field = _dtype_field(capsule)
    if field is None or (field[0], field[1]) != (code, 16):
        return False
    field[0] = to_code
    return True


class _OneCapsule:
    """An exporter that hands out a capsule already made: NumPy's and CuPy's from_dlpack
    take an object with __dlpack__, not a capsule."""

    def __init__(self, capsule, device):
        self._capsule, self._device = capsule, device

    def __dlpack__(self, **_):
        capsule, self._capsule = self._capsule, None
        return capsule

    def __dlpack_device__(self):
        return self._device


def _capsule_of(x):
    try:
        return x.__dlpack__(max_version=(1, 0))
    except TypeError:  # an exporter from before DLPack 1.0 takes no max_version
        return x.__dlpack__()


def read_bfloat16(x, from_dlpack):
    """x's bfloat16 values as a new float32 array, read by `from_dlpack` (NumPy's or
    CuPy's); None when x does not hold bfloat16."""
    capsule = _capsule_of(x)
    if not relabel(capsule, _BFLOAT, _UINT):
        return None
    bits = from_dlpack(_OneCapsule(capsule, x.__dlpack_device__()))
    wide = bits.reshape(bits.shape or (1,)).astype("uint32")  # 0-d shifts give scalars
    return (wide << 16).view("float32").reshape(bits.shape)


def bfloat16_capsule(buffer, **kwargs):
    """A DLPack capsule of kDLBfloat values for a float32 buffer that holds bfloat16 values
    (NumPy or CuPy); kwargs go to the uint16 array's __dlpack__."""
    wide = buffer.reshape(buffer.shape or (1,)).view("uint32")  # 0-d shifts give scalars
    bits = (wide >> 16).astype("uint16").reshape(buffer.shape)
    capsule = bits.__dlpack__(**kwargs)
    if not relabel(capsule, _UINT, _BFLOAT):
        raise BufferError("the uint16 capsule made for a bfloat16 export has an unexpected "
                          "layout")  # the producer's DLPack struct changed: never mislabel
    return capsule
