"""`rill.__array_namespace_info__()`: what the Array API standard lets a library ask of rill.

Capabilities, the default device, the default dtypes and the supported dtypes per kind, and
the devices available here. Dtypes come from lib/dtypes.py (`ALL`, each dtype's kind), so a
dtype added there shows up here; float16 and bfloat16 are rill's own and, as the standard
asks, not listed by `dtypes()`.
"""
from __future__ import annotations

from . import dtypes as dt
from .errors import Error
from .devices import cpu, device as as_device, device
from .ops.data_types import dtypes_of_kind

# The dtypes the standard names; dtypes() lists those of them rill has.
STANDARD_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                   "uint64", "float32", "float64", "complex64", "complex128")

# Buffers are NumPy (CPU) or CuPy (gpu) arrays, which hold at most 64 dimensions.
MAX_DIMENSIONS = 64


def _device(device, op: str):
    """None (the default device) or a device rill can place tensors on."""
    if device is None:
        return cpu
    try:
        return as_device(device)
    except Error as e:
        e.op = op
        raise


class Info:
    """The inspection functions of rill's namespace (see `__array_namespace_info__`)."""

    __slots__ = ()

    def capabilities(self) -> dict:
        """rill supports boolean indexing and data-dependent shapes (nonzero, unique_*,
        repeat with a tensor) eagerly; a captured graph refuses the latter."""
        return {"boolean indexing": True, "data-dependent shapes": True,
                "max dimensions": MAX_DIMENSIONS}

    def default_device(self):
        """rill.device('cpu'): tensors are made there unless a device is given."""
        return cpu

    def default_dtypes(self, *, device=None) -> dict:
        """The default dtype of each kind: float32, complex64, int64 and int64 for indices
        (the same on every device)."""
        _device(device, "default_dtypes")
        complex_default = getattr(dt, "default_complex", None)
        if complex_default is None:
            complex_default = next((d for d in dt.ALL if d.kind == "c"), None)
        return {"real floating": dt.default_float, "complex floating": complex_default,
                "integral": dt.default_int, "indexing": dt.int64}

    def dtypes(self, *, device=None, kind=None) -> dict:
        """{name: dtype} of the standard's dtypes that rill has, all of them or those of
        `kind` (a kind name such as 'integral' or 'real floating', or a tuple of them)."""
        _device(device, "dtypes")
        found = dtypes_of_kind(kind, "dtypes")
        return {name: d for name, d in found.items() if name in STANDARD_DTYPES}

    def devices(self) -> list:
        """The devices tensors can be placed on here: cpu, and gpu when one is available."""
        from . import gpu
        return [cpu, device("gpu")] if gpu.is_available() else [cpu]

    def __repr__(self) -> str:
        return "rill.__array_namespace_info__()"


def __array_namespace_info__() -> Info:
    """The Array API's inspection namespace for rill.

    >>> info = __array_namespace_info__()
    >>> info.default_dtypes()["integral"]
    rill.int64
    """
    return Info()
