"""Matrix products through oneDNN's matmul primitive, for float32 arrays of 2-12 axes.

Why, when NumPy's BLAS computes a product as fast alone (1024x128 @ 128x384: 0.53 against
0.55 ms): a process that runs oneDNN's convolutions or LSTM also has oneDNN's GNU OpenMP team,
whose workers spin for a while after each call, and OpenBLAS's own workers, which do the
same after each threaded GEMM. On two cores each pool's spinning workers took a core from the
other's next call: in the LSTM step a (1600, 256) @ (256, 256) product took 1.7-3.5 ms right
after the LSTM layer against 1.1 alone, and the layer 10-11 ms against 8.5. Products large
enough to thread (kernels/numpy/linalg.py asks for those) run on the one OpenMP team here,
once a convolution or LSTM layer has started it. Before that, or in a process that never
does, they stay on BLAS: there the products would bring the second pool (the GPT step, whose
only threaded work is products and rill's own split passes, ran 71 -> 76 ms eager and 59 ->
64 captured with every product on oneDNN).

`matmul(a, b, bias)` returns None where oneDNN is not there or has no implementation for
the case; the caller then computes the product itself. The operands are described by their
own strides (a transposed view is read in place) and no reorder is made: the primitive is
created for exactly those layouts, or not at all.
"""
from __future__ import annotations

import numpy as np

from rill import cpu_memory
from rill.kernels.onednn import library as dnnl
from rill.kernels.onednn.primitive import Cache, Prepared, contiguous_strides, user_md

_cache = Cache()


def _strides(a) -> tuple:
    """a's strides in bytes, with a length-1 axis given the stride of a dense layout (its
    stride is never used, and NumPy may report anything, even 0, for it)."""
    strides = list(a.strides)
    for i in range(a.ndim - 1, -1, -1):
        if a.shape[i] == 1:
            strides[i] = strides[i + 1] * a.shape[i + 1] if i + 1 < a.ndim else a.itemsize
    return tuple(strides)


def _usable(*arrays) -> bool:
    return all(type(a) is np.ndarray and a.dtype == np.float32 and
               all(s > 0 and s % 4 == 0 for s in _strides(a)) for a in arrays)


def matmul(a, b, bias=None, out=None):
    """a @ b (+ bias) for float32 a (..., m, k) and b (..., k, n) of equal rank, their batch
    axes equal or 1 (broadcast), and bias (n,): into `out` (a C-ordered float32 array of the
    result's shape) where given, else a new C-ordered (..., m, n) array; or None."""
    if not dnnl.teams_started():
        return None
    lib = dnnl.library()
    if lib is None or a.ndim != b.ndim or not 2 <= a.ndim <= dnnl.MAX_NDIMS or \
            not _usable(a, b) or (bias is not None and not (
                _usable(bias) and bias.ndim == 1 and bias.strides == (4,))):
        return None
    batch = tuple(max(x, y) for x, y in zip(a.shape[:-2], b.shape[:-2]))
    out_shape = batch + (a.shape[-2], b.shape[-1])
    a_strides, b_strides = _strides(a), _strides(b)
    key = ("matmul", a.shape, a_strides, b.shape, b_strides, bias is not None)

    def make():
        a_md, b_md = user_md(lib, a.shape, a_strides), user_md(lib, b.shape, b_strides)
        y_md = lib.plain_md(out_shape, contiguous_strides(out_shape))
        arguments = {dnnl.ARG_SRC: (a_md, False), dnnl.ARG_WEIGHTS: (b_md, False),
                     dnnl.ARG_DST: (y_md, True)}
        bias_md = None
        if bias is not None:
            bias_shape = (1,) * (a.ndim - 1) + (bias.shape[0],)
            bias_md = lib.plain_md(bias_shape, contiguous_strides(bias_shape))
            arguments[dnnl.ARG_BIAS] = (bias_md, False)
        pd = lib.make("dnnl_matmul_primitive_desc_create", lib.engine, a_md, b_md, bias_md,
                      y_md, lib.attr)
        return Prepared(lib, pd, arguments)
    prepared = _cache.get(lib, key, make)
    if prepared is None or prepared.reorders:
        return None  # no implementation reads these layouts as they are
    if out is not None and (out.shape != out_shape or out.dtype != np.float32 or
                            not out.flags.c_contiguous):
        return None
    # a large weight's gradient: a kept buffer
    y = cpu_memory.empty(out_shape, np.float32) if out is None else out
    arrays = {dnnl.ARG_SRC: a, dnnl.ARG_WEIGHTS: b, dnnl.ARG_DST: y}
    if bias is not None:
        arrays[dnnl.ARG_BIAS] = bias
    prepared(arrays)
    return y

