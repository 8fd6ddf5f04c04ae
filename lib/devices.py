"""Devices, after the paper's device abstraction: allocate, run a kernel, copy to/from host.

`cpu` buffers are NumPy arrays. `cpu:1`, `cpu:2`, ... are virtual CPU devices with the same
buffers, so that placement and mixed-device errors are testable on one machine. `gpu:N`
buffers are CuPy arrays (or host arrays under RILL_TRITON_INTERPRET=1; see rill.gpu); the gpu
backend is built the first time a gpu device is asked for, and asking for one where it cannot
be built says what is missing.
"""
from __future__ import annotations

import numpy as np

from . import cpu_memory  # noqa: F401  (tunes the CPU allocator once, at import)
from .dtypes import round_to_bfloat16
from .errors import DeviceError


class Backend:
    """What a device kind must provide. Kernels are registered per kind on each primitive."""

    kind = "?"

    def from_host(self, array: np.ndarray, device: "Device"):
        raise NotImplementedError

    def to_host(self, buffer) -> np.ndarray:
        raise NotImplementedError


class CpuBackend(Backend):
    kind = "cpu"
    xp = np

    def from_host(self, array, device):
        return array

    def to_host(self, buffer):
        return buffer

    as_buffer = staticmethod(np.asarray)
    round_to_bfloat16 = staticmethod(round_to_bfloat16)


_BACKENDS: dict[str, Backend] = {"cpu": CpuBackend()}


def register_backend(backend: Backend) -> None:
    _BACKENDS[backend.kind] = backend


class Device:
    """A place where buffers live and kernels run. Interned: compare with `is` or `==`."""

    __slots__ = ("kind", "index", "backend")

    def __init__(self, kind: str, index: int, backend: Backend):
        self.kind = kind
        self.index = index
        self.backend = backend

    @property
    def type(self) -> str:
        """The kind ('cpu' or 'gpu'), under PyTorch's name."""
        return self.kind

    def __repr__(self) -> str:
        return f"device('{self}')"

    def __str__(self) -> str:
        return self.kind if self.index == 0 and self.kind == "cpu" else f"{self.kind}:{self.index}"

    def __reduce__(self):
        return (device, (str(self),))


_DEVICES: dict[tuple[str, int], Device] = {}


# PyTorch programs say "cuda" for the accelerator rill calls "gpu".
_SPELLINGS = {"cuda": "gpu"}


def device(spec="cpu") -> Device:
    """Parse 'cpu', 'cpu:1', 'gpu', 'gpu:0' (or pass a Device through); 'cuda' and 'cuda:0'
    are PyTorch's names for 'gpu'."""
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise DeviceError(f"expected a device name like 'cpu' or 'gpu:0', got {spec!r}",
                          op="device")
    kind, _, index_text = spec.partition(":")
    kind = _SPELLINGS.get(kind, kind)
    try:
        index = int(index_text) if index_text else 0
    except ValueError:
        raise DeviceError(f"bad device index in {spec!r}", op="device") from None
    if index < 0:
        raise DeviceError(f"bad device index in {spec!r}", op="device")
    key = (kind, index)
    found = _DEVICES.get(key)
    if found is not None:
        return found
    backend = _BACKENDS.get(kind)
    if backend is None and kind == "gpu":
        from . import gpu
        try:
            backend = gpu.backend()
        except DeviceError as e:
            raise DeviceError(e.message.replace("'gpu'", repr(spec), 1), op="device") from None
        register_backend(backend)
    if backend is None:
        raise DeviceError(f"unknown device kind {kind!r}; expected 'cpu' or 'gpu'",
                          op="device")
    found = _DEVICES[key] = Device(kind, index, backend)
    return found


cpu = device("cpu")
