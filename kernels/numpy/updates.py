"""Fused optimizer update CPU kernels (see rill.ops.updates), in the parameter's dtype.

The update runs a block of CHUNK elements at a time through every one of its steps, into
temporaries made once per thread, and the blocks are split over the cores
(kernels/numpy/parallel.py). Whole-array steps would each be a pass through memory: over a
10M-parameter tensor, ten passes through 40 MB temporaries, twice the time of the same work
in cache-sized pieces (measured: 77-89 ms against 35-41 ms for one (10M,) float32 tensor).
The arithmetic is the same, step for step and in the same order, so the bits are too.

Where a C compiler is at hand, float32 and float64 parameters take kernels/native/updates.c
instead: the same operations in one pass, no temporaries (same bits), the elements split over
the cores as the blocks are here.
"""
from __future__ import annotations

import numpy as np

from rill import cpu_memory
from rill.kernels.native import build as native
from rill.ops.primitive import register_kernels

from . import parallel
from .parallel import split

# The compiled modules (kernels/native) these kernels may load: built ahead of a captured
# step's first call (build.prefetch).
COMPILED = ('updates',)

# Elements per block: 1 MB of float32 per array. Measured over (10M,) float32: 2^16 30 ms,
# 2^17 26, 2^18 26, 2^19 50 (past the caches); the old whole-array passes 68.
CHUNK = 1 << 18


def _adam_block(p, g, m, v, out, temps, step_size, bias_correction2_sqrt, beta1, beta2, eps,
                weight_decay, decay):
    """One block's update into out = (p', m', v'), through two temporaries."""
    t = p.dtype.type
    ta, tb = temps
    p2, m2, v2 = out
    if decay != 1.0:
        p = np.multiply(p, t(decay), out=p2)
    if weight_decay != 0.0:
        g = np.add(g, np.multiply(p, t(weight_decay), out=tb), out=tb)
    # lerp in the form that is exact at its ends (rill.optim.optimizer.lerp)
    keep = 1.0 - beta1
    np.subtract(g, m, out=ta)
    if keep < 0.5:
        ta *= t(keep)
        np.add(m, ta, out=m2)
    else:
        ta *= t(beta1)
        np.subtract(g, ta, out=m2)
    np.multiply(g, t(1.0 - beta2), out=ta)
    ta *= g
    np.multiply(v, t(beta2), out=v2)
    v2 += ta
    np.sqrt(v2, out=ta)
    ta /= bias_correction2_sqrt
    ta += t(eps)
    np.divide(m2, ta, out=ta)
    ta *= step_size
    np.subtract(p, ta, out=p2)


def _adam_compiled(p, g, m, v, outs, step_size, bias_correction2_sqrt, beta1, beta2, eps,
                   weight_decay, decay) -> bool:
    """adam_update by kernels/native/updates.c; False where it does not take these arrays."""
    compiled = native.for_arrays("updates", p, g, m, v)
    if compiled is None:
        return False
    constants = (float(step_size), float(bias_correction2_sqrt), beta1, 1.0 - beta1, beta2,
                 1.0 - beta2, eps, weight_decay, decay, p.dtype == np.float64)
    if p.size < parallel.MIN_ELEMENTS:  # one pass, as split would run it: no closure
        compiled.adam(p, g, m, v, *outs, 0, p.size, *constants)
        return True

    def run(lo, hi):  # blocks lo..hi
        compiled.adam(p, g, m, v, *outs, lo * CHUNK, min(hi * CHUNK, p.size), *constants)
    split(run, -(-p.size // CHUNK), p.size)
    return True


def _adam_update(p, g, m, v, *scalars, **attrs):
    # C-ordered outputs, whatever p's layout: the blocks below write through their flat
    # views (reshape(-1) of another layout would be a copy, and the writes would be lost).
    outs = tuple(cpu_memory.empty_like(p) for _ in range(3))  # replaced slots, where free
    if _adam_compiled(p, g, m, v, outs, *scalars, **attrs):
        return outs
    if p.size <= CHUNK:
        _adam_block(p, g, m, v, outs, (np.empty_like(p), np.empty_like(p)), *scalars, **attrs)
        return outs
    flat = [a.reshape(-1) for a in (p, g, m, v) + outs]

    def run(lo, hi):  # blocks lo..hi
        temps = (np.empty(CHUNK, p.dtype), np.empty(CHUNK, p.dtype))
        for start in range(lo * CHUNK, min(hi * CHUNK, p.size), CHUNK):
            stop = min(start + CHUNK, p.size)
            part = [a[start:stop] for a in flat]
            _adam_block(*part[:4], part[4:], [tmp[:stop - start] for tmp in temps], *scalars,
                        **attrs)
    split(run, -(-p.size // CHUNK), p.size)
    return outs


register_kernels("cpu", {"adam_update": _adam_update})
