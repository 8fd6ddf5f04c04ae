"""`rill.accelerator`: PyTorch's device-neutral questions about the accelerator."""
from __future__ import annotations

from . import gpu
from .devices import device


def is_available() -> bool:
    """True when a real GPU is here (not Triton's interpreter; see rill.cuda.is_available)."""
    return gpu.is_available() and not gpu.interpreted()


def current_accelerator():
    """The gpu device when there is one, else None (as torch.accelerator)."""
    return device("gpu") if is_available() else None


def device_count() -> int:
    return 1 if is_available() else 0


def synchronize(device=None) -> None:
    gpu.synchronize()
