"""The fft extension's three primitives and their gradients.

Sizes are settled before a primitive runs (rill.fft crops or zero-pads with getitem/pad,
which have their own gradients), so each primitive is a fixed linear map over `axes`:

    fft:   complex -> complex, the DFT (inverse=False) or its inverse, scaled by `norm`
    rfft:  real -> complex, the DFT's first n//2 + 1 bins along the last of `axes`
    irfft: complex -> real of length n along the last of `axes`, the inverse of rfft

Gradients follow PyTorch's convention for complex numbers (lib/autodiff/backward.py): the
cotangent of a linear map A is A^H g. For the DFT, A^H is the opposite transform with the
scaling kept: "backward" (no scale forward) pairs with an unscaled inverse, which NumPy calls
norm="forward", and "ortho" with "ortho". rfft's adjoint zero-pads the half spectrum and
takes the real part; irfft's counts each bin that stands for two (k and n - k) twice.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..ops.primitive import COMPLEX_RULES
from ..errors import DTypeError, ShapeError
from ..ops import attrs as A
from ..ops import batching
from ..ops.primitive import primitive
from ..ops.rules import normalize_axis
from ..ops.elementwise import real
from ..ops.shape import pad, reshape
from ..ops.creation import tensor
from ..eager.bind import bind

NORMS = ("backward", "ortho", "forward")
ADJOINT_NORM = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _check_axes(x, axes, op):
    for a in axes:
        normalize_axis(a, x.ndim)
    if len(set(a % x.ndim for a in axes)) != len(axes):
        raise ShapeError(f"repeated axis in {axes}", op=op)
    for a in axes:
        if x.shape[a] == 0:
            raise ShapeError(f"cannot transform an empty axis ({a} of shape {x.shape})", op=op)


def _fft_infer(x, *, axes, inverse, norm):
    if not x.dtype.is_complex:
        raise DTypeError(f"fft transforms complex tensors, got {x.dtype}")
    _check_axes(x, axes, "fft")
    return x.shape, x.dtype


def _rfft_infer(x, *, axes, norm):
    if not x.dtype.is_floating:
        raise DTypeError(f"rfft transforms real floating tensors, got {x.dtype}")
    _check_axes(x, axes, "rfft")
    shape = list(x.shape)
    shape[axes[-1]] = shape[axes[-1]] // 2 + 1
    return tuple(shape), dt.complex_of(x.dtype)


def _irfft_infer(x, *, axes, n, norm):
    if not x.dtype.is_complex:
        raise DTypeError(f"irfft transforms complex tensors, got {x.dtype}")
    _check_axes(x, axes, "irfft")
    shape = list(x.shape)
    if shape[axes[-1]] != n // 2 + 1:
        raise ShapeError(f"irfft of length {n} needs {n // 2 + 1} bins, got {shape[axes[-1]]}")
    shape[axes[-1]] = n
    return tuple(shape), dt.real_of(x.dtype)


def _fft_vjp(g, out, x, axes, inverse, norm):
    return (fft_p_bind(g, axes, not inverse, ADJOINT_NORM[norm]),)


def _rfft_vjp(g, out, x, axes, norm):
    last = axes[-1] % x.ndim
    widths = [(0, 0)] * x.ndim
    widths[last] = (0, x.shape[last] - g.shape[last])
    full = pad(g, widths)
    return (real(fft_p_bind(full, axes, True, ADJOINT_NORM[norm])),)


def _irfft_vjp(g, out, x, axes, n, norm):
    last = axes[-1] % x.ndim
    bins = x.shape[last]
    # Bins 1 .. (n-1)//2 each stand for two of the full spectrum's; 0 and n/2 for one.
    weights = [1.0] + [2.0] * (bins - 1)
    if n % 2 == 0:
        weights[-1] = 1.0
    w = reshape(tensor(weights, dtype=dt.real_of(x.dtype), device=x.device),
                tuple(bins if i == last else 1 for i in range(x.ndim)))
    return (rfft_p_bind(g, axes, ADJOINT_NORM[norm]) * w,)


_AXES = A.TupleOf(A.INT)
# Complex tensors live on the CPU only (the gpu device has no complex buffers), so the
# transforms have NumPy kernels only.
_CPU = "complex tensors are CPU-only in rill; the transforms run through numpy.fft"
fft_p = primitive("fft", _fft_infer, _fft_vjp, cpu_only=_CPU,
                  attrs={"axes": _AXES, "inverse": A.BOOL, "norm": A.Choice(*NORMS)},
                  batch=batching.along("axes"))
rfft_p = primitive("rfft", _rfft_infer, _rfft_vjp, cpu_only=_CPU,
                   attrs={"axes": _AXES, "norm": A.Choice(*NORMS)}, batch=batching.along("axes"))
irfft_p = primitive("irfft", _irfft_infer, _irfft_vjp, cpu_only=_CPU,
                    attrs={"axes": _AXES, "n": A.INT, "norm": A.Choice(*NORMS)},
                    batch=batching.along("axes"))
# Each rule above is already the conjugate-transpose PyTorch's convention asks for.
COMPLEX_RULES.update({"fft", "rfft", "irfft"})


def fft_p_bind(x, axes, inverse, norm):
    return bind(fft_p, x, axes=tuple(axes), inverse=bool(inverse), norm=norm)


def rfft_p_bind(x, axes, norm):
    return bind(rfft_p, x, axes=tuple(axes), norm=norm)


def irfft_p_bind(x, axes, n, norm):
    return bind(irfft_p, x, axes=tuple(axes), n=int(n), norm=norm)


from ..kernels.numpy import fft as _kernels  # noqa: E402,F401 - registers the CPU kernels
