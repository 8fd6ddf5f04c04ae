"""Linear-algebra CPU kernels (BLAS through NumPy)."""
from __future__ import annotations

import math

import numpy as np

from rill import cpu_memory
from rill.kernels.onednn import matmul as onednn_matmul
from rill.ops.primitive import register_kernels

from . import parallel


# GEMMs of this many multiply-adds and up OpenBLAS runs on its threads; below SMALL_GEMM
# those threads gain little and leave a worker spinning that takes a core from the passes
# kernels/numpy/parallel.py splits (measured in parallel.py's note), so they run at one.
_THREADED = 1 << 18


# OpenBLAS (0.3.x, SkylakeX sgemm) runs x @ w.T for an x of few rows 1.3-2x slower than the
# same product computed as (w @ x.T).T, e.g. (16, 784) @ (784, 512): 203 against 115 us on
# two threads, 382 against 176 on one (PyTorch's MKL: 123); from 512 rows the direct form
# wins. The transposed product is copied back to C order (with the bias added in the same
# pass): handed on as a transposed view, it made the elementwise ops after it mix layouts,
# which NumPy runs several times slower (relu's gradient at (128, 512): 20 -> 150 us).
# Measured in the captured MLP step of bench/capture.py, interleaved: batch 16 0.89x the
# direct form's time, batch 128 (where the copy costs what the GEMM saves) 1.0x.
_FEW_ROWS = 32


# float32 products of SMALL_GEMM multiply-adds and up, the ones BLAS would run on its threads,
# run on oneDNN's OpenMP team where the optional library is installed and a convolution or
# LSTM layer has started that team: one pool of threads instead of two spinning against each
# other (kernels/onednn/matmul.py; alternating in one process, eager: the LSTM step 40 -> 37
# ms, AlexNet's 304 -> 266, VGG-11's 724 -> 670). Benchmarks set this False to compare.
ONEDNN = True


def _onednn(a, b, bias=None, *, multiply_adds: int, out=None):
    """a @ b (+ bias) by oneDNN (into `out` where given), or None (small, not float32, not
    installed, declined)."""
    if not ONEDNN or multiply_adds < parallel.SMALL_GEMM or a.dtype != np.float32 or \
            b.dtype != np.float32:
        return None
    return onednn_matmul.matmul(a, b, bias, out=out)


def _gemm(fn, *args, multiply_adds: int):
    if _THREADED <= multiply_adds < parallel.SMALL_GEMM:
        with parallel.blas_at_one_thread():
            return fn(*args)
    return fn(*args)


def _product(a, b, out, multiply_adds: int):
    """a @ b into `out` (a C-ordered array of the result's shape and dtype) or a new array:
    oneDNN where it takes the product, else NumPy's BLAS."""
    y = _onednn(a, b, multiply_adds=multiply_adds, out=out) if a.ndim == b.ndim else None
    if y is not None:
        return y
    if out is None:
        return _gemm(np.matmul, a, b, multiply_adds=multiply_adds)
    return _gemm(lambda x, w: np.matmul(x, w, out=out), a, b, multiply_adds=multiply_adds)


def _matmul(a, b):
    multiply_adds = a.size * (b.shape[-1] if b.ndim > 1 else 1)
    flat = _as_one_gemm(a, b)
    if flat is not None:
        rows, b2, shape = flat
        # The GEMM writes the rows of a result that owns its memory, not a reshaped view of
        # its own: a captured step then adds the bias in that buffer (capture/donation.py
        # donates only arrays that own theirs; the GPT step 2-4 % faster, paired in one process)
        result = np.empty(shape, np.result_type(rows, b2))
        _product(rows, b2, result.reshape(rows.shape[:1] + b2.shape[1:]), multiply_adds)
        return result
    if a.ndim == b.ndim == 2:
        return _product(a, b, None, multiply_adds)
    # stacked products stay on NumPy: each of attention's small products runs on one core in
    # either library, and oneDNN's took as long (0.29 against 0.26 ms for (16, 4, 64, 32) @
    # (16, 4, 32, 64))
    return _gemm(np.matmul, a, b, multiply_adds=multiply_adds)


def _as_one_gemm(a, b):
    """(rows, b2, shape): a stacked product whose right operand is one matrix (or vector) for
    every batch, x @ W with x (B, T, C), as one GEMM of a's rows, (B*T, C) @ (C, D), reshaped
    to `shape`; None where a is not C-contiguous (its rows may not be one strided matrix
    without a copy: a transposed view), or b has a batch. NumPy's stacked matmul runs one
    small GEMM per batch on one thread: 1.3-5x the time of the single GEMM on two (measured
    in docs/benchmarks-history.md)."""
    if a.ndim < 3 or any(d != 1 for d in b.shape[:-2]):
        return None
    b2 = b.reshape(b.shape[-2:]) if b.ndim > 2 else b
    if not a.flags.c_contiguous:  # its rows may not be one strided matrix without a copy
        return None
    rows = a.reshape(int(np.prod(a.shape[:-1])), a.shape[-1])
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return rows, b2, batch + a.shape[-2:-1] + b2.shape[1:]


def _weight_grad(g, x):
    """g.T @ x over all leading axes (g (..., out), x (..., in)): a linear layer's weight
    gradient. Its buffer is a kept one where a buffer of
    its shape was given back (cpu_memory): VGG-11's first dense layer's gradient is 411 MB,
    and a fresh one page-faulted through its first write (40 ms a step, and 270-470 ms when
    the OS compacted memory for huge pages on the way)."""
    if g.ndim > 2:  # rows over all leading axes (a view where they are contiguous)
        rows = math.prod(g.shape[:-1])  # not -1, which a last axis of 0 leaves unknown
        g, x = g.reshape(rows, g.shape[-1]), x.reshape(rows, x.shape[-1])
    multiply_adds = g.size * x.shape[-1]
    y = _onednn(g.T, x, multiply_adds=multiply_adds)
    if y is not None:
        return y
    out = cpu_memory.empty((g.shape[1], x.shape[1]), np.result_type(g, x))
    return _gemm(lambda a, b: np.matmul(a, b, out=out), g.T, x, multiply_adds=multiply_adds)


def _einsum(*xs, inputs, output):
    return np.einsum(",".join(inputs) + "->" + output, *xs, optimize=len(xs) > 2)


def _linear(x, w, *bias):
    rows = x if x.ndim == 2 else x.reshape(-1, x.shape[-1])  # a 1-d x is one row
    m, n = rows.shape[0], w.shape[0]
    y = _onednn(rows, w.T, *bias, multiply_adds=m * w.size)  # the bias added by the product
    if y is None:
        y = _linear_by_blas(rows, w, bias)
    return y if x.ndim == 2 else y.reshape(x.shape[:-1] + (n,))


def _linear_by_blas(rows, w, bias):
    m, n = rows.shape[0], w.shape[0]
    if m <= _FEW_ROWS < n:  # (w @ x.T).T, see _FEW_ROWS
        yt = _gemm(np.matmul, w, rows.T, multiply_adds=m * w.size)
        y = np.empty((m, n), yt.dtype)
        if bias:
            np.add(yt.T, bias[0], out=y)
        else:
            np.copyto(y, yt.T)
        return y
    # One 2-d GEMM over all leading axes: NumPy's stacked matmul runs one small GEMM per row
    # of the batch, measured several times slower for (N, T, F) sequences.
    y = _gemm(np.matmul, rows, w.T, multiply_adds=m * w.size)  # w read transposed
    if bias:
        y += bias[0]  # into the fresh product: no second buffer
    return y


register_kernels("cpu", {"matmul": _matmul, "einsum": _einsum, "linear": _linear,
                         "linear_weight_grad": _weight_grad})
