"""One NumPy pass split over the cores, for the CPU kernels' copies and elementwise loops.

NumPy releases the GIL inside copies and ufunc loops, so threads that each run a slice of
one large pass run in parallel. BLAS already spreads a GEMM over the cores; without this,
the im2col copies, scatter-adds and pooling passes around the GEMMs ran on one core while
the others idled (PyTorch runs those on all of them). A pass whose slices each run GEMMs of
their own (split(..., serial_blas=True)) holds BLAS at one thread meanwhile: BLAS would
otherwise split each of those GEMMs over the same cores again, and its threads, which spin
for a while after each call, would compete with ours.
"""
from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from rill.kernels.onednn import library as dnnl

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


def _forget_pool_in_child() -> None:
    """A forked child has none of the pool's threads, but the executor still counts them (a
    pass split there waited forever): the child makes a pool of its own when it needs one."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _run(fn, lo, hi):
    _inside.active = True
    try:
        fn(lo, hi)
    finally:
        _inside.active = False


def split(fn, n: int, elements: int, serial_blas: bool = False) -> None:
    """Runs fn(lo, hi) over consecutive chunks covering range(n), one chunk per core, when
    the pass touches at least MIN_ELEMENTS `elements`; else fn(0, n). The chunks must write
    disjoint outputs. serial_blas: the chunks run GEMMs, so BLAS is held at one thread while
    they run; with fewer items than threads the pass is not split, and fn(0, n) keeps BLAS's
    threads (one image on many cores: BLAS splits its GEMMs over all of them)."""
    global _pool
    if _blas_pending is not None:
        settle_blas_threads()
    parts = min(THREADS, n)
    if parts < 2 or elements < MIN_ELEMENTS or getattr(_inside, "active", False) or \
            (serial_blas and n < THREADS):
        fn(0, n)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=THREADS - 1, thread_name_prefix="rill-cpu")
    bounds = [n * i // parts for i in range(parts + 1)]
    with blas_at_one_thread() if serial_blas else contextlib.nullcontext():
        futures = [_pool.submit(_run, fn, bounds[i], bounds[i + 1]) for i in range(1, parts)]
        try:
            fn(bounds[0], bounds[1])
        finally:
            for f in futures:
                f.result()  # waits for every chunk; re-raises the first failure


# C passes (kernels/native) that take a thread count run on GNU OpenMP's team, the one
# oneDNN's convolutions and LSTM layers run on, once that team exists: a hand-off to its
# workers (which spin after each call) costs a few microseconds, where one to this module's
# pool costs ~45 and its thread then competes for a core with those spinning workers
# (relu_grad of 802,816 float32 elements beside a convolution: 0.16 ms split here, 0.06 on
# the team). Before the team exists (no oneDNN; a GPT, which has no convolution) the passes
# split here: starting OpenMP's spinning workers for them would set them against BLAS's.
TEAM_MIN_ELEMENTS = 1 << 15


def team_threads(elements: int) -> int:
    """Threads of OpenMP's team for a C pass over `elements`: THREADS where the team exists
    (and this is not a forked child of a process that ran it, nor a thread of this module's
    pool), else 1."""
    if THREADS < 2 or elements < TEAM_MIN_ELEMENTS or not dnnl.teams_started() or \
            dnnl.forked_after_teams() or getattr(_inside, "active", False):
        return 1
    return THREADS


_blas = None  # threadpoolctl's controllers of the loaded BLAS libraries, found on first use
_blas_lock = threading.Lock()
_blas_holders = 0  # passes now holding BLAS at one thread (passes on several threads nest)
_blas_threads: list = []  # the thread counts to restore when the last one ends
_blas_pending: list | None = None  # counts a restore could not set (see _restore)


def _blas_controllers():
    global _blas
    if _blas is None:
        try:  # optional: without it, BLAS keeps its threads (slower, still correct)
            from threadpoolctl import ThreadpoolController
            _blas = ThreadpoolController().select(user_api="blas").lib_controllers
        except Exception:  # noqa: BLE001 - not installed, or a library it cannot drive
            _blas = []
    return _blas


# GEMMs smaller than this many multiply-adds gain little from BLAS's threads (OpenBLAS
# threads them from 2^18), and each threaded call leaves a BLAS worker spinning (for tens of
# milliseconds, before shorten_blas_spin below), competing with the passes split here. A kernel can run such a GEMM under
# blas_at_one_thread() (measured: the CNN step of bench/train.py with its three small
# linear-layer GEMMs so held, 2 threads: 22.3 ms instead of 29.8 on a quiet host, and 31.5
# instead of 79.6 at load ~5; medians, `bench/conv.py --hold-small-gemms` and interleaved).
SMALL_GEMM = 1 << 22


@contextlib.contextmanager
def blas_at_one_thread():
    """BLAS held at one thread inside (process-wide: BLAS has one setting; nests and may be
    entered from several threads at once; the last to leave restores the thread counts).
    Without threadpoolctl it does nothing."""
    global _blas_holders, _blas_pending
    with _blas_lock:
        if _blas_holders == 0:
            # counts a restore could not set are still the ones to go back to (else a count
            # stuck at 1 would be saved, and restored, ever after)
            _blas_threads[:] = _blas_pending or [c.get_num_threads()
                                                 for c in _blas_controllers()]
            _blas_pending = None
            for c, t in zip(_blas_controllers(), _blas_threads):
                if t != 1:
                    c.set_num_threads(1)
        _blas_holders += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_holders -= 1
            if _blas_holders == 0:
                _restore(_blas_threads)


# OpenBLAS (0.3.31 measured) ignores a request from a thread other than the main one to raise
# the thread count after the main thread lowered it: a captured step's parallel schedule,
# whose kernels hold BLAS at one thread on pool threads, left every later GEMM of the process
# on one thread (Overfeat's captured step 620 -> 950 ms; its GEMMs 1.7x slower). A restore
# that does not take is kept in _blas_pending, and the main thread makes it
# (settle_blas_threads).


def _restore(counts) -> None:
    """Set BLAS's thread counts back (with _blas_lock held); what does not take is pending."""
    global _blas_pending
    controllers = _blas_controllers()
    for c, t in zip(controllers, counts):
        if t != 1:
            c.set_num_threads(t)
    if any(c.get_num_threads() != t for c, t in zip(controllers, counts)):
        _blas_pending = list(counts)


def settle_blas_threads() -> None:
    """On the main thread, with no hold in force: make a restore another thread could not.
    Cheap when there is none (one global read); called where work returns to the main thread
    (a split, a captured step's parallel run)."""
    global _blas_pending
    if _blas_pending is None or threading.current_thread() is not threading.main_thread():
        return
    with _blas_lock:
        if _blas_pending is not None and _blas_holders == 0:
            counts, _blas_pending = _blas_pending, None
            _restore(counts)


# ---- how long BLAS's idle workers spin ------------------------------------------------------
#
# OpenBLAS's worker threads spin after each threaded call, waiting for the next, for
# 2^OPENBLAS_THREAD_TIMEOUT cycles (default 28: ~90 ms at 3 GHz) before they sleep. A training
# step alternates GEMMs with passes split here (im2col copies, col2im adds, pooling, the
# per-image convolutions), so a spinning worker took a core from nearly every one of those:
# on 2 cores they ran at half speed (a per-image convolution after a 2-thread GEMM: 8.9 ->
# 17.5 ms; ResNet-18's step 413 -> ~350 ms, GoogLeNet's 509 -> ~405, the LSTM's 71 -> 46
# with the shorter spin below). 2^20 cycles (~0.3 ms) keeps a worker awake across a run of
# GEMMs and lets it sleep before a pass. The timeout is read once, when OpenBLAS starts its
# workers, so rill restarts them (exported OpenBLAS functions, at import, when no BLAS call
# can be running on this thread) with the thread counts they had. An OPENBLAS_THREAD_TIMEOUT
# the user set is left alone (OPENBLAS_THREAD_TIMEOUT=28 keeps OpenBLAS's default).
BLAS_SPIN_LOG2_CYCLES = 20


def shorten_blas_spin(log2_cycles: int = BLAS_SPIN_LOG2_CYCLES) -> list:
    """Restart each loaded OpenBLAS's workers with a spin of 2^log2_cycles cycles; returns the
    libraries' paths it did this for (none without threadpoolctl, or for other BLAS)."""
    import ctypes
    if os.environ.get("OPENBLAS_THREAD_TIMEOUT"):
        return []
    done = []
    for c in _blas_controllers():
        if c.internal_api != "openblas":
            continue
        try:
            lib = ctypes.CDLL(c.filepath)  # already loaded: the same library, not a copy
            read_env, shutdown, start = (getattr(lib, name) for name in (
                "openblas_read_env", "blas_thread_shutdown_", "blas_thread_init"))
        except (OSError, AttributeError):
            continue  # an OpenBLAS that does not export them: left as it is
        threads = c.get_num_threads()
        with _blas_lock:
            os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(log2_cycles)
            try:
                read_env()
            finally:
                del os.environ["OPENBLAS_THREAD_TIMEOUT"]  # not passed on to child processes
            shutdown()
            start()  # reads the environment's thread count: the one in force is set again
            c.set_num_threads(threads)
        done.append(c.filepath)
    return done


shorten_blas_spin()
