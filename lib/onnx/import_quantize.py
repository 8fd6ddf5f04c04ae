"""ONNX quantization ops -> rill ops (rows of import_ops.TABLE).

Linear quantization maps a real value v to q = saturate(round(v / scale) + zero_point)
(rounding half to even, saturating to the integer type's range) and back with
v = (q - zero_point) * scale; the scale and zero point are per tensor, per axis (1-D along
`axis`) or blocked (each repeated `block_size` times along `axis`). The integer ops
(MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) subtract the zero points and
accumulate exactly: products of 8- and 16-bit integers summed in float64 are exact far
beyond these ops' sizes, so rill's float kernels stand in for integer accumulators.
"""
from __future__ import annotations

import numpy as np

from .dtypes import rill_dtype
from .errors import ONNXError
from .import_ops import TABLE, axis_of, rill, row


def _along(scale, x, axis, block):
    """A scale or zero point shaped to broadcast against x (per tensor, axis or block)."""
    r = rill()
    if scale.ndim == 0 or scale.size == 1 and block == 0:
        return scale.reshape(())
    axis = axis_of(axis, x.ndim)
    if block:  # blocked: the same rank as x, each entry repeated block times along axis
        wide = r.repeat_interleave(scale, block, axis=axis)
        return r.take(wide, r.arange(x.shape[axis]), axis=axis)
    return scale.reshape(tuple(-1 if i == axis else 1 for i in range(x.ndim)))


def _saturate(r, v, dtype):
    """round half to even, clip to dtype's range, cast."""
    info = np.iinfo(dtype.storage)
    return r.clip(r.round(v), info.min, info.max).astype(dtype)


def quantize(v, scale, zero, dtype):
    """Real v (float64) to `dtype` with the (broadcastable) scale and zero point."""
    r = rill()
    q = r.round(v / scale)
    if zero is not None:
        q = q + zero.astype(r.float64)
    return _saturate(r, q, dtype)


def _real(x, zero):
    """x - zero point, as float64 (exact for the integer types these ops take)."""
    r = rill()
    out = x.astype(r.float64)
    return out if zero is None else out - zero.astype(r.float64)


@row("QuantizeLinear")
def _quantize_linear(run, node, ins, a):
    r = rill()
    x, scale = ins[0], ins[1]
    zero = ins[2] if len(ins) > 2 else None
    if a.get("output_dtype"):
        dtype = rill_dtype(a["output_dtype"], "QuantizeLinear")
    else:
        dtype = zero.dtype if zero is not None else r.uint8
    if dtype.kind not in "iu":
        raise ONNXError(f"quantizing to {dtype} is not supported (rill has no float8 or "
                        "4-bit types)", op="QuantizeLinear")
    axis, block = a.get("axis", 1), a.get("block_size", 0)
    precision = rill_dtype(a["precision"]) if a.get("precision") else scale.dtype
    s = _along(scale, x, axis, block).astype(precision)
    v = (x.astype(precision) / s).astype(r.float64)
    z = None if zero is None else _along(zero, x, axis, block)
    return quantize(v, r.ones((), dtype=r.float64), z, dtype)


@row("DequantizeLinear")
def _dequantize_linear(run, node, ins, a):
    x, scale = ins[0], ins[1]
    zero = ins[2] if len(ins) > 2 else None
    axis, block = a.get("axis", 1), a.get("block_size", 0)
    dtype = rill_dtype(a["output_dtype"]) if a.get("output_dtype") else scale.dtype
    v = _real(x, None if zero is None else _along(zero, x, axis, block))
    return (v * _along(scale, x, axis, block).astype(rill().float64)).astype(dtype)


@row("DynamicQuantizeLinear")
def _dynamic_quantize_linear(run, node, ins, a):
    """uint8 with the scale and zero point that map [min(x, 0), max(x, 0)] onto [0, 255]."""
    r = rill()
    x = ins[0]
    low = r.minimum(r.min(x), 0).astype(x.dtype)
    high = r.maximum(r.max(x), 0).astype(x.dtype)
    scale = (high - low) / 255
    zero = _saturate(r, (0 - low / scale).astype(r.float64), r.uint8)
    safe = r.where(scale == 0, r.ones_like(scale), scale)
    y = quantize((x / safe).astype(r.float64), r.ones((), dtype=r.float64), zero, r.uint8)
    return [y, scale, zero]


def _row_col(zero, ndim, is_left):
    """A per-row (left operand) or per-column (right operand) zero point or scale."""
    if zero is None or zero.ndim == 0 or zero.size == 1:
        return None if zero is None else zero.reshape(())
    return zero.reshape((-1, 1)) if is_left else zero.reshape((1, -1))


@row("MatMulInteger")
def _matmul_integer(run, node, ins, a):
    r = rill()
    ins = list(ins) + [None] * (4 - len(ins))
    left = _real(ins[0], _row_col(ins[2], ins[0].ndim, True))
    right = _real(ins[1], _row_col(ins[3], ins[1].ndim, False))
    return r.matmul(left, right).astype(r.int32)


@row("QLinearMatMul")
def _qlinear_matmul(run, node, ins, a):
    r = rill()
    qa, sa, za, qb, sb, zb, sy, zy = ins
    acc = r.matmul(_real(qa, _row_col(za, qa.ndim, True)),
                   _real(qb, _row_col(zb, qb.ndim, False)))
    scale = _row_col(sa, qa.ndim, True).astype(r.float64) * \
        _row_col(sb, qb.ndim, False).astype(r.float64)
    return quantize(acc * scale / sy.astype(r.float64).reshape(()), r.ones((), dtype=r.float64),
                    zy.reshape(()), zy.dtype)


def _conv_of(run, node, x, w, a):
    """Conv (with the node's pads, strides, groups) of float64 x and w."""
    return TABLE["Conv"](run, node, [x, w], a)


def _per_channel(v, ndim):
    """A per-tensor or per-output-channel value shaped for (N, C, ...) outputs."""
    if v is None or v.ndim == 0 or v.size == 1:
        return None if v is None else v.reshape(())
    return v.reshape((1, -1) + (1,) * (ndim - 2))


@row("ConvInteger")
def _conv_integer(run, node, ins, a):
    r = rill()
    ins = list(ins) + [None] * (4 - len(ins))
    x, w, zx, zw = ins
    wz = None if zw is None else (zw.reshape(()) if zw.size == 1 else
                                  zw.reshape((-1,) + (1,) * (w.ndim - 1)))
    acc = _conv_of(run, node, _real(x, None if zx is None else zx.reshape(())),
                   _real(w, wz), a)
    return acc.astype(r.int32)


@row("QLinearConv")
def _qlinear_conv(run, node, ins, a):
    r = rill()
    ins = list(ins) + [None] * (9 - len(ins))
    x, sx, zx, w, sw, zw, sy, zy, bias = ins
    wz = None if zw is None else (zw.reshape(()) if zw.size == 1 else
                                  zw.reshape((-1,) + (1,) * (w.ndim - 1)))
    acc = _conv_of(run, node, _real(x, zx.reshape(())), _real(w, wz), a)
    if bias is not None:  # int32, quantized with scale sx * sw and zero point 0
        acc = acc + _per_channel(bias.astype(r.float64), acc.ndim)
    scale = sx.astype(r.float64).reshape(()) * _per_channel(sw.astype(r.float64), acc.ndim)
    return quantize(acc * scale / sy.astype(r.float64).reshape(()), r.ones((), dtype=r.float64),
                    zy.reshape(()), zy.dtype)
