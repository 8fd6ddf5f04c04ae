"""CPU kernels of rill.fft: NumPy's pocketfft. NumPy 2 keeps complex64 in complex64 (and
float32 in float32), as the Array API standard asks; the cast below only guards that."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _fft(x, axes, inverse, norm):
    fn = np.fft.ifftn if inverse else np.fft.fftn
    return np.asarray(fn(x, axes=axes, norm=norm)).astype(x.dtype, copy=False)


def _rfft(x, axes, norm):
    x = x.astype(np.float32) if x.dtype == np.float16 else x
    out = np.fft.rfftn(x, axes=axes, norm=norm)
    return np.asarray(out).astype(np.complex128 if x.dtype == np.float64 else np.complex64,
                                  copy=False)


def _irfft(x, axes, n, norm):
    s = [x.shape[a] for a in axes[:-1]] + [n]
    out = np.fft.irfftn(x, s=s, axes=axes, norm=norm)
    return np.asarray(out).astype(np.float64 if x.dtype == np.complex128 else np.float32,
                                  copy=False)


register_kernels("cpu", {"fft": _fft, "rfft": _rfft, "irfft": _irfft})
