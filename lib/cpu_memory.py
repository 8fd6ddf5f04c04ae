"""CPU memory: let freed kernel buffers be reused instead of returned to the system.

Eager kernels allocate a fresh NumPy buffer per result. glibc serves requests above its mmap
threshold with mmap and unmaps them on free, so each large buffer is page-faulted in anew on
its first write: a small CNN's training step took ~5,000 minor faults (~20 MB of fresh
pages) per step, and 15-25% longer, than with the thresholds below, which make glibc keep
freed memory in its heap for reuse, as a framework's caching allocator would. The cost:
up to TRIM_THRESHOLD bytes of freed memory stay with the process.

Done once, at import; Linux with glibc only. RILL_CPU_MALLOC=system leaves malloc as it is.
"""
from __future__ import annotations

import ctypes
import os
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 1024 * 1024   # the largest value glibc accepts on 64-bit systems
TRIM_THRESHOLD = 512 * 1024 * 1024


def keep_freed_buffers() -> bool:
    """Raise glibc's mmap and trim thresholds; True if malloc took both settings."""
    if os.environ.get("RILL_CPU_MALLOC", "").lower() == "system" or \
            not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl, ...)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and \
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1


TUNED = keep_freed_buffers()
