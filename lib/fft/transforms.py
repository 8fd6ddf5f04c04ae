"""The fft extension's functions, with the Array API standard's signatures.

Each crops or zero-pads its input to the asked length (getitem / pad, differentiable), then
runs one primitive (lib/fft/primitives.py). hfft and ihfft are irfft and rfft of the
conjugate, with the opposite scaling. CPU only: on the gpu each is a DeviceError naming it.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import ArgumentError, DeviceError, DTypeError, ShapeError, reports_as
from ..ops.arguments import as_axis, as_choice, as_float, as_int, as_tensor
from ..ops.rules import normalize_axis
from .primitives import ADJOINT_NORM, NORMS, fft_p_bind, irfft_p_bind, rfft_p_bind
from ..ops.shape import pad, roll
from ..ops.elementwise import conj
from ..ops.creation import tensor


def _input(x, op, kinds="iufc"):
    x = as_tensor(x, "x", op)
    if x.device.kind != "cpu":
        raise DeviceError(f"rill.fft.{op} has no gpu kernel (the fft extension runs on the CPU "
                          f"only); compute it there: rill.fft.{op}(x.to('cpu'))", op=op)
    if x.dtype.kind not in kinds:
        want = "a real floating (or integer)" if "c" not in kinds else "a floating or complex"
        raise DTypeError(f"expected {want} tensor, got {x.dtype}", op=op)
    return x


def _norm(norm, op):
    return as_choice(norm, "norm", op, NORMS)


def _complex(x):
    if x.dtype.is_complex:
        return x
    return x.astype(dt.complex_of(dt.to_float(x.dtype)))


def _real_float(x):
    return x if x.dtype.is_floating else x.astype(dt.default_float)


def _resize(x, axis, n):
    """x cropped or zero-padded to length n along axis."""
    size = x.shape[axis]
    if n == size:
        return x
    if n < size:
        from ..ops.shape import slice_axis
        return slice_axis(x, axis, 0, n)
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, n - size)
    return pad(x, widths)


def _length(n, op, what="n"):
    if n is None:
        return None
    return as_int(n, what, op, low=1)


def _one_axis(x, n, axis, op):
    if x.ndim == 0:
        raise ShapeError("needs at least a 1-d tensor", op=op)
    axis = normalize_axis(as_axis(axis, op), x.ndim)
    return axis, _length(n, op)


def _axes_and_sizes(x, s, axes, op):
    """The standard's rule: axes default to all (or the last len(s)); s to their sizes."""
    if s is not None:
        if not isinstance(s, (tuple, list)):
            raise ArgumentError(f"s must be a tuple of lengths, got {s!r}", op=op)
        s = tuple(-1 if v == -1 else as_int(v, "s", op, low=1) for v in s)
    if axes is None:
        axes = tuple(range(x.ndim - (len(s) if s is not None else x.ndim), x.ndim))
    else:
        if isinstance(axes, int):
            axes = (axes,)
        axes = tuple(normalize_axis(as_axis(a, op), x.ndim) for a in axes)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"repeated axis in {axes}", op=op)
    if not axes:
        raise ShapeError("needs at least one axis to transform", op=op)
    if s is not None and len(s) != len(axes):
        raise ShapeError(f"s has {len(s)} lengths for {len(axes)} axes", op=op)
    return axes, s


def _c2c(x, s, axes, norm, inverse, op):
    x = _complex(_input(x, op))
    axes, s = _axes_and_sizes(x, s, axes, op)
    for a, n in zip(axes, s or ()):
        if n != -1:
            x = _resize(x, a, n)
    return fft_p_bind(x, axes, inverse, _norm(norm, op))


@reports_as("fft")
def fft(x, /, *, n=None, axis=-1, norm="backward"):
    """The 1-d discrete Fourier transform along `axis` (cropped or zero-padded to n).

    >>> rill.fft.fft(rill.tensor([1.0, 0.0, 0.0, 0.0]))
    tensor([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j])
    """
    x = _input(x, "fft")
    axis, n = _one_axis(x, n, axis, "fft")
    return _c2c(x, None if n is None else (n,), (axis,), norm, False, "fft")


@reports_as("ifft")
def ifft(x, /, *, n=None, axis=-1, norm="backward"):
    """The inverse of fft (scaled by 1/n under norm='backward')."""
    x = _input(x, "ifft")
    axis, n = _one_axis(x, n, axis, "ifft")
    return _c2c(x, None if n is None else (n,), (axis,), norm, True, "ifft")


@reports_as("fftn")
def fftn(x, /, *, s=None, axes=None, norm="backward"):
    """The n-d discrete Fourier transform over `axes` (all by default)."""
    return _c2c(x, s, axes, norm, False, "fftn")


@reports_as("ifftn")
def ifftn(x, /, *, s=None, axes=None, norm="backward"):
    """The inverse of fftn."""
    return _c2c(x, s, axes, norm, True, "ifftn")


def _r2c(x, s, axes, norm, op):
    x = _real_float(_input(x, op, "iuf"))
    axes, s = _axes_and_sizes(x, s, axes, op)
    for a, n in zip(axes, s or ()):
        if n != -1:
            x = _resize(x, a, n)
    return rfft_p_bind(x, axes, _norm(norm, op))


def _c2r(x, s, axes, norm, op):
    x = _complex(_input(x, op))
    axes, s = _axes_and_sizes(x, s, axes, op)
    last = axes[-1]
    n = 2 * (x.shape[last] - 1) if s is None or s[-1] == -1 else s[-1]
    if n < 1:
        raise ShapeError(f"the output length would be {n}; pass n (or s)", op=op)
    for a, size in zip(axes[:-1], s or ()):
        if size != -1:
            x = _resize(x, a, size)
    return irfft_p_bind(_resize(x, last, n // 2 + 1), axes, n, _norm(norm, op))


@reports_as("rfft")
def rfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The DFT of a real signal: its n//2 + 1 non-negative frequency bins."""
    x = _input(x, "rfft", "iuf")
    axis, n = _one_axis(x, n, axis, "rfft")
    return _r2c(x, None if n is None else (n,), (axis,), norm, "rfft")


@reports_as("irfft")
def irfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The inverse of rfft: a real signal of length n (2 * (m - 1) by default)."""
    x = _input(x, "irfft")
    axis, n = _one_axis(x, n, axis, "irfft")
    return _c2r(x, None if n is None else (n,), (axis,), norm, "irfft")


@reports_as("rfftn")
def rfftn(x, /, *, s=None, axes=None, norm="backward"):
    """The n-d DFT of a real signal; the last of `axes` keeps its n//2 + 1 bins."""
    return _r2c(x, s, axes, norm, "rfftn")


@reports_as("irfftn")
def irfftn(x, /, *, s=None, axes=None, norm="backward"):
    """The inverse of rfftn."""
    return _c2r(x, s, axes, norm, "irfftn")


@reports_as("hfft")
def hfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The DFT of a signal with Hermitian symmetry given by its first half: a real result."""
    x = _input(x, "hfft")
    axis, n = _one_axis(x, n, axis, "hfft")
    return _c2r(conj(_complex(x)), None if n is None else (n,), (axis,),
                ADJOINT_NORM[_norm(norm, "hfft")], "hfft")


@reports_as("ihfft")
def ihfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The inverse of hfft: the half spectrum of a real signal, conjugated."""
    x = _input(x, "ihfft", "iuf")
    axis, n = _one_axis(x, n, axis, "ihfft")
    return conj(_r2c(x, None if n is None else (n,), (axis,),
                     ADJOINT_NORM[_norm(norm, "ihfft")], "ihfft"))


def _frequencies(values, n, d, dtype, device, op):
    import numpy as np
    d = as_float(d, "d", op)
    if d == 0:
        raise ArgumentError("d (the sample spacing) must not be 0", op=op)
    dtype = dt.default_float if dtype is None else dt.as_dtype(dtype, op)
    if not dtype.is_floating:
        raise DTypeError(f"frequencies are real floating, got dtype={dtype}", op=op)
    return tensor(np.asarray(values, dtype=np.float64) / (d * n), dtype=dtype, device=device)


def fftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """The sample frequencies of an n-point fft: [0, 1, ..., -2, -1] / (d * n).

    >>> rill.fft.fftfreq(4)
    tensor([ 0.  ,  0.25, -0.5 , -0.25])
    """
    n = as_int(n, "n", "fftfreq", low=1)
    values = list(range((n - 1) // 2 + 1)) + list(range(-(n // 2), 0))
    return _frequencies(values, n, d, dtype, device, "fftfreq")


def rfftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """The sample frequencies of an n-point rfft: [0, 1, ..., n // 2] / (d * n)."""
    n = as_int(n, "n", "rfftfreq", low=1)
    return _frequencies(list(range(n // 2 + 1)), n, d, dtype, device, "rfftfreq")


def _shift(x, axes, sign, op):
    x = as_tensor(x, "x", op)
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, int):
        axes = (axes,)
    axes = tuple(normalize_axis(as_axis(a, op), x.ndim) for a in axes)
    if not axes:
        return x
    return roll(x, tuple(sign * (x.shape[a] // 2) for a in axes), axis=axes)


def fftshift(x, /, *, axes=None):
    """The zero frequency moved to the middle (of every axis, or of `axes`)."""
    return _shift(x, axes, 1, "fftshift")


def ifftshift(x, /, *, axes=None):
    """The inverse of fftshift (they differ for odd lengths)."""
    return _shift(x, axes, -1, "ifftshift")
