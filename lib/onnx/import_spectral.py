"""ONNX DFT and STFT -> rill ops (rows of import_ops.TABLE).

Signals are real (last axis of size 1) or complex (last axis of size 2: real, imaginary).
The transform length is static, so the DFT is a product with fixed cosine and sine
matrices built in float64 (X_k = sum_t x_t e^(-2 pi i k t / n), the inverse with the
opposite sign and a 1 / n factor): exact to rounding, differentiable, and the same on
every device. `onesided` keeps the n // 2 + 1 non-redundant bins of a real signal's
transform; with `inverse` it takes them and returns the real signal.
"""
from __future__ import annotations

import numpy as np

from .errors import ONNXError
from .import_ops import axis_of, const, ints, rill, row


def _matrices(n_in, n_out, length, inverse):
    """cos and sin of 2 pi k t / length for t < n_in (input), k < n_out (output)."""
    from .limits import meter
    meter().elements((4, n_in, n_out), "the DFT's matrices")
    t = np.arange(n_in).reshape(-1, 1)
    k = np.arange(n_out).reshape(1, -1)
    angle = 2 * np.pi * ((t * k) % length) / length
    return np.cos(angle), np.sin(angle)


def _fit(x, n):
    """x (..., m) truncated or zero-padded to n along its last axis."""
    r = rill()
    m = x.shape[-1]
    if m > n:
        return x[..., :n]
    if m < n:
        return r.pad(x, ((0, 0),) * (x.ndim - 1) + ((0, n - m),), mode="constant", value=0.0)
    return x


def dft(x, axis, length, inverse, onesided):
    """The DFT of x (..., n, ..., 1|2) along `axis` (an axis of the signal, not the last)."""
    r = rill()
    dtype = x.dtype
    work = r.moveaxis(x.astype(r.float64), axis, -2)  # (..., n, 1|2)
    re = work[..., 0]  # (..., n)
    im = work[..., 1] if x.shape[-1] == 2 else None
    n = length if length is not None else (
        2 * (re.shape[-1] - 1) if inverse and onesided else re.shape[-1])
    if inverse and onesided:  # half spectrum in, real signal out
        bins = n // 2 + 1
        re, im = _fit(re, bins), None if im is None else _fit(im, bins)
        cos, sin = _matrices(bins, n, n, True)
        weight = np.full((bins, 1), 2.0)
        weight[0] = 1.0
        if n % 2 == 0:
            weight[-1] = 1.0
        out = r.matmul(re, const(cos * weight / n))
        if im is not None:
            out = out - r.matmul(im, const(sin * weight / n))
        outs = [out]
    else:
        re, im = _fit(re, n), None if im is None else _fit(im, n)
        bins = n // 2 + 1 if onesided else n
        cos, sin = _matrices(n, bins, n, inverse)
        scale = 1.0 / n if inverse else 1.0
        sign = 1.0 if inverse else -1.0  # e^(sign i theta)
        out_re = r.matmul(re, const(cos * scale))
        out_im = r.matmul(re, const(sin * sign * scale))
        if im is not None:
            out_re = out_re - r.matmul(im, const(sin * sign * scale))
            out_im = out_im + r.matmul(im, const(cos * scale))
        outs = [out_re, out_im]
    y = r.stack(outs, axis=-1)  # (..., bins, 1|2)
    return r.moveaxis(y, -2, axis).astype(dtype)


@row("DFT")
def _dft(run, node, ins, a):
    x = ins[0]
    length = ints(node, ins[1], "dft_length")[0] if len(ins) > 1 and ins[1] is not None \
        else None
    if run.opset >= 20:
        axis = ints(node, ins[2], "axis")[0] if len(ins) > 2 and ins[2] is not None else -2
    else:
        axis = a.get("axis", 1)
    axis = axis_of(axis, x.ndim)
    return dft(x, axis, length, bool(a.get("inverse", 0)), bool(a.get("onesided", 0)))


@row("STFT")
def _stft(run, node, ins, a):
    r = rill()
    ins = list(ins) + [None] * (4 - len(ins))
    signal, step, window, frame_length = ins
    step = ints(node, step, "frame_step")[0]
    if frame_length is not None:
        size = ints(node, frame_length, "frame_length")[0]
    else:
        size = window.shape[0]
    if step < 1 or size < 1:
        raise ONNXError(f"frame_step ({step}) and the frame length ({size}) must be >= 1",
                        op="STFT")
    frames = (signal.shape[1] - size) // step + 1
    run.meter.elements((max(frames, 0), size), "STFT's frame indices")
    index = np.arange(frames).reshape(-1, 1) * step + np.arange(size).reshape(1, -1)
    framed = r.take(signal, const(index.reshape(-1)), axis=1)
    framed = framed.reshape((signal.shape[0], frames, size, signal.shape[2]))
    if window is not None:
        framed = framed * window.astype(signal.dtype).reshape((1, 1, size, 1))
    onesided = bool(a.get("onesided", 1)) and signal.shape[2] == 1
    return dft(framed, 2, size, False, onesided)
