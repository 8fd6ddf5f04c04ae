"""One NumPy pass split over the cores, for the CPU kernels' copies and elementwise loops.

NumPy releases the GIL inside copies and ufunc loops, so threads that each run a slice of
one large pass run in parallel. BLAS already spreads a GEMM over the cores; without this,
the im2col copies, scatter-adds and pooling passes around the GEMMs ran on one core while
the others idled (PyTorch runs those on all of them).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

# Below this many elements a pass takes tens of microseconds: a hand-off costs as much.
MIN_ELEMENTS = 1 << 16


def _thread_count() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    for name in ("RILL_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        if os.environ.get(name, "").isdigit() and int(os.environ[name]) > 0:
            return min(cores, int(os.environ[name]))
    return min(cores, 8)


THREADS = _thread_count()
_pool: ThreadPoolExecutor | None = None
_inside = threading.local()  # set in the pool's threads: a nested split runs serially


def _run(fn, lo, hi):
    _inside.active = True
    try:
        fn(lo, hi)
    finally:
        _inside.active = False


def split(fn, n: int, elements: int) -> None:
    """Runs fn(lo, hi) over consecutive chunks covering range(n), one chunk per core, when
    the pass touches at least MIN_ELEMENTS `elements`; else fn(0, n). The chunks must write
    disjoint outputs."""
    global _pool
    parts = min(THREADS, n)
    if parts < 2 or elements < MIN_ELEMENTS or getattr(_inside, "active", False):
        fn(0, n)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=THREADS - 1, thread_name_prefix="rill-cpu")
    bounds = [n * i // parts for i in range(parts + 1)]
    futures = [_pool.submit(_run, fn, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    try:
        fn(bounds[0], bounds[1])
    finally:
        for f in futures:
            f.result()  # waits for every chunk; re-raises the first failure
