"""`rill.cuda`: the names PyTorch programs use to ask about the accelerator, answered for
rill's `gpu` device (`rill.gpu` has the full set)."""
from __future__ import annotations

from . import gpu
from .random import manual_seed as seed_all


def is_available() -> bool:
    """True when a real GPU is here. PyTorch programs ask this to pick a fast device, so
    Triton's interpreter (RILL_TRITON_INTERPRET=1), which rill.gpu.is_available() counts, is
    not one: `device = "cuda" if rill.cuda.is_available() else "cpu"` picks the cpu there."""
    return gpu.is_available() and not gpu.interpreted()


def device_count() -> int:
    """How many gpu devices rill can use here (0 or 1)."""
    return 1 if is_available() else 0


def current_device() -> int:
    return 0


def synchronize(device=None) -> None:
    """Wait for the gpu's queued kernels."""
    gpu.synchronize()


def manual_seed(seed: int) -> None:
    """Seed rill's generator (one generator serves every device)."""
    seed_all(seed)


manual_seed_all = manual_seed
