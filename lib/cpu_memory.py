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
import threading

import numpy as np

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


# ---- buffers past the mmap threshold --------------------------------------------------------
#
# Above MMAP_THRESHOLD glibc still maps and unmaps each buffer. An eager training step replaces
# every parameter and optimizer slot with a new buffer (rill's buffers are never written once
# made: views, `.numpy()` and saved tensors rely on it), and a fresh 150 MB buffer (AlexNet's
# first FC layer) page-faults through its first write, or waits for the OS to compact memory
# for huge pages: the SGD update of that layer took 17-240 ms instead of ~10. The buffer it
# replaced is garbage at that moment, so the next result of its size is written there.
#
# `give(a)` is called with a buffer that has just been replaced (ops/methods.update_in_place).
# It keeps `a` only if nothing else holds it, proved by its reference count: no tensor, view,
# array handed out by `.numpy()`, DLPack capsule or tape node refers to it, so no one can see
# what is written into it next. A captured step's assign gives the buffers it replaces too
# (capture/graph_ops.py), and so do a gradient's replacement there and zero_grad. `empty(shape,
# dtype)` (kernels that allocate their result: scaled_add, adam_update, fused groups, a
# linear layer's weight gradient) returns a kept buffer of that shape and dtype, else a new
# one. At most RECYCLE_MAX_BYTES are kept; `clear()` frees them.

RECYCLE_MIN_BYTES = MMAP_THRESHOLD  # smaller ones malloc keeps and reuses (above)
RECYCLE_MAX_BYTES = 2 << 30         # at most this much memory kept
# ... and at most this many of one shape and dtype: a training step frees and then asks for
# three of a weight's shape (the weight, its momentum, its gradient); one whose shape no
# kernel asks for again (a gradient made by a kernel that allocates its own) stops here.
RECYCLE_PER_SHAPE = 4
_kept: dict = {}   # (shape, dtype) -> [arrays held only here]
_kept_bytes = 0
_lock = threading.Lock()


def give(a, _measure: bool = False):
    """Keep `a` for a later result if no one else holds it (the caller holds it by one name
    and lets go of it after this call)."""
    global _kept_bytes
    if not _measure and (type(a) is not np.ndarray or a.nbytes < RECYCLE_MIN_BYTES or
                         a.base is not None or not a.flags.owndata or
                         not a.flags.writeable or not a.flags.c_contiguous):
        return None
    references = sys.getrefcount(a)
    if _measure:
        return references
    if references != _UNSHARED:
        return None
    with _lock:
        kept = _kept.setdefault((a.shape, a.dtype), [])
        if _kept_bytes + a.nbytes <= RECYCLE_MAX_BYTES and len(kept) < RECYCLE_PER_SHAPE:
            kept.append(a)
            _kept_bytes += a.nbytes
    return None


def _unshared() -> int:
    """The count `give` sees of a buffer its caller holds by one name and no one else holds:
    measured, not assumed, as interpreters count references to arguments differently."""
    probe = np.empty(1)
    return give(probe, _measure=True)


_UNSHARED = _unshared()


def empty(shape: tuple, dtype) -> np.ndarray:
    """A C-ordered buffer, uninitialized: a kept one of this shape and dtype if there is one."""
    global _kept_bytes
    if _kept:
        with _lock:
            found = _kept.get((tuple(shape), np.dtype(dtype)))
            if found:
                a = found.pop()
                _kept_bytes -= a.nbytes
                return a
    return np.empty(shape, dtype)


def empty_like(x) -> np.ndarray:
    return empty(x.shape, x.dtype)


def clear() -> None:
    global _kept_bytes
    with _lock:
        _kept.clear()
        _kept_bytes = 0
