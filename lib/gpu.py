"""The `gpu` device: CuPy buffers and Triton kernels, or Triton's interpreter on the host.

    rill.gpu.is_available()   a gpu device can be made here (real, or interpreted)
    rill.gpu.interpreted()    RILL_TRITON_INTERPRET=1: buffers in host memory, kernels run by
                              Triton's interpreter (how CI tests every GPU kernel)
    rill.gpu.synchronize()    wait for the device's queued kernels
    rill.gpu.memory_stats()   bytes in use, held, peak, and the cap

Memory is taken lazily, as tensors are made, and grows on demand up to a cap: the
RILL_GPU_MEMORY_LIMIT environment variable (bytes, or with a K/M/G suffix) or
`rill.gpu.set_memory_limit`. The whole card is never reserved up front. Asking for more than
the cap raises DeviceError saying how much was asked for, in use and allowed.

The backend is built the first time a `gpu` device is asked for; until then nothing here
imports CuPy or Triton.
"""
from __future__ import annotations

import importlib.util
import os
import threading
import weakref

import numpy as np

from .errors import DeviceError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def interpreted() -> bool:
    """True when RILL_TRITON_INTERPRET=1: the gpu device runs through Triton's interpreter."""
    return os.environ.get("RILL_TRITON_INTERPRET", "") not in ("", "0")


def _parse_bytes(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1:] if text[-1:] in _UNITS and not text[-1:].isdigit() else ""
    try:
        value = float(text[:len(text) - len(unit)])
    except ValueError:
        raise DeviceError(f"RILL_GPU_MEMORY_LIMIT={os.environ['RILL_GPU_MEMORY_LIMIT']!r} is "
                          "not a size; write bytes or a number with K, M or G",
                          op="gpu") from None
    return int(value * _UNITS[unit])


def missing_parts() -> list[str]:
    """What stands between this machine and a gpu device (empty when one can be made)."""
    missing = []
    if importlib.util.find_spec("triton") is None:
        missing.append("Triton is not installed")
    if interpreted():
        if importlib.util.find_spec("torch") is None:
            missing.append("PyTorch (CPU) is not installed; Triton's interpreter needs it")
        return missing
    if importlib.util.find_spec("cupy") is None:
        missing.append("CuPy is not installed")
    elif not missing:
        try:
            import cupy
            if cupy.cuda.runtime.getDeviceCount() == 0:
                missing.append("no CUDA GPU is visible")
        except Exception as e:  # no driver, no runtime library
            missing.append(f"CUDA is not usable ({type(e).__name__}: {e})")
    if missing:
        missing.append("set RILL_TRITON_INTERPRET=1 to run the gpu device through Triton's "
                       "interpreter on the CPU")
    return missing


def is_available() -> bool:
    return not missing_parts()


class _Accounting:
    """Bytes held by live buffers, for interpreted mode (CuPy's pool does this on a GPU)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.in_use = 0
        self.peak = 0

    def take(self, nbytes: int, limit: int | None) -> None:
        with self.lock:
            if limit is not None and self.in_use + nbytes > limit:
                raise _out_of_memory(nbytes, self.in_use, limit)
            self.in_use += nbytes
            self.peak = max(self.peak, self.in_use)

    def give(self, nbytes: int) -> None:
        with self.lock:
            self.in_use -= nbytes


def _out_of_memory(nbytes, in_use, limit) -> DeviceError:
    return DeviceError(f"out of gpu memory: asked for {nbytes:,} bytes with {in_use:,} in use "
                       f"and a limit of {limit:,} (RILL_GPU_MEMORY_LIMIT)", op="gpu")


class GpuBackend:
    """Buffers and copies for device kind 'gpu' (see rill.devices.Backend)."""

    kind = "gpu"
    # float32 -> bfloat16 rounding on the device: kernels/triton/elementwise.py sets it when
    # the gpu kernels load, which `backend()` does before handing the backend out.
    bfloat16_rounding = None

    def __init__(self):
        self.interpreted = interpreted()
        text = os.environ.get("RILL_GPU_MEMORY_LIMIT")
        self.limit = _parse_bytes(text) if text else None
        if self.interpreted:
            self.xp = np
            self.accounting = _Accounting()
        else:
            import cupy
            self.xp = cupy
            self.pool = cupy.get_default_memory_pool()
            if self.limit is not None:
                self.pool.set_limit(size=self.limit)

    # -- memory -------------------------------------------------------------------------------
    def allocate(self, shape, storage_dtype):
        """A new uninitialized buffer: the one place gpu memory is taken."""
        if np.dtype(storage_dtype).kind == "c":
            raise DeviceError("complex tensors are CPU-only in rill (the gpu kernels have no "
                              "complex arithmetic); keep them on the cpu: .to('cpu')",
                              op="gpu")
        xp = self.xp
        if self.interpreted:
            buffer = np.empty(shape, dtype=storage_dtype)
            if buffer.nbytes:
                self.accounting.take(buffer.nbytes, self.limit)
                weakref.finalize(buffer, self.accounting.give, buffer.nbytes)
            return buffer
        try:
            return xp.empty(shape, dtype=storage_dtype)
        except xp.cuda.memory.OutOfMemoryError:
            raise _out_of_memory(int(np.prod(shape)) * np.dtype(storage_dtype).itemsize,
                                 self.pool.used_bytes(), self.limit or self.pool.get_limit()
                                 ) from None

    def set_limit(self, nbytes: int | None) -> None:
        self.limit = nbytes
        if not self.interpreted:
            self.pool.set_limit(size=nbytes or 0)

    def stats(self) -> dict:
        if self.interpreted:
            return {"in_use_bytes": self.accounting.in_use, "held_bytes": self.accounting.in_use,
                    "peak_bytes": self.accounting.peak, "limit_bytes": self.limit}
        return {"in_use_bytes": self.pool.used_bytes(), "held_bytes": self.pool.total_bytes(),
                "peak_bytes": None, "limit_bytes": self.limit}

    # -- copies -------------------------------------------------------------------------------
    def from_host(self, array, device):
        array = np.asarray(array)
        out = self.allocate(array.shape, array.dtype)
        if self.interpreted:
            out[...] = array
        else:
            out.set(np.asarray(array, order="C"))  # ascontiguousarray makes 0-d arrays 1-d
        return out

    def to_host(self, buffer) -> np.ndarray:
        if self.interpreted:
            return np.array(buffer, copy=True)
        return buffer.get()

    def as_buffer(self, out):
        return out if isinstance(out, self.xp.ndarray) else self.xp.asarray(out)

    def round_to_bfloat16(self, buffer):
        # The Triton kernel, set by kernels/triton/elementwise.py when the gpu kernels load
        # (before any gpu buffer exists): this module never imports the kernels' modules.
        return self.bfloat16_rounding(buffer)

    def synchronize(self) -> None:
        if not self.interpreted:
            self.xp.cuda.get_current_stream().synchronize()


_BACKEND: GpuBackend | None = None
_BACKEND_LOCK = threading.RLock()


def backend() -> GpuBackend:
    """The gpu backend, built on first use; DeviceError saying what is missing otherwise."""
    global _BACKEND
    if _BACKEND is None:
        with _BACKEND_LOCK:
            if _BACKEND is None:
                missing = missing_parts()
                if missing:
                    raise DeviceError(f"device 'gpu' is not available: {'; '.join(missing)}",
                                      op="device")
                _BACKEND = GpuBackend()
                try:
                    # The kernels register themselves on the primitives for kind 'gpu'.
                    from .kernels import triton as _  # noqa: F401
                except BaseException:
                    _BACKEND = None
                    raise
    return _BACKEND


def synchronize() -> None:
    """Wait until every kernel queued on the gpu device has finished."""
    backend().synchronize()


def memory_stats() -> dict:
    """{'in_use_bytes', 'held_bytes', 'peak_bytes', 'limit_bytes'} of the gpu device."""
    return backend().stats()


def set_memory_limit(nbytes: int | None) -> None:
    """Cap the gpu memory rill may hold (None: no cap beyond the card)."""
    backend().set_limit(nbytes)
