"""ONNX op -> rill ops, one row per op type: `fn(run, node, ins, attrs) -> outputs`.

`ins` are rill tensors (None for an omitted optional input), `attrs` the node's attributes
as Python values, `run` the Runner (its `opset` decides between an op's versions). Rows for
the neural-network ops live in import_nn.py, control flow in import_control.py.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as dt
from .. import ops as _ops  # noqa: F401  (rill.ops loaded before the names below)
from .errors import ONNXError
from ..errors import Error

TABLE: dict = {}
ALWAYS_STATIC = {"Shape", "Size", "Constant"}  # known at trace time whatever the inputs
# Float inputs that must be known when the graph is traced (scales, regions, sizes): a float
# initializer feeding one stays a constant instead of becoming a trainable Parameter.
TRACE_TIME_INPUTS = {"Resize": (1, 2, 3), "Upsample": (1,)}
CONTROL_FLOW = {"If", "Loop", "Scan"}  # their bodies may read the enclosing graph's values
NEVER_STATIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                "Bernoulli", "Multinomial"}


def rill():
    import rill as module
    return module


def row(*names):
    def register(fn):
        for name in names:
            TABLE[name] = fn
        return fn
    return register


def known(node, value, what: str) -> np.ndarray:
    """The value of an input that gives a shape, axes or count, as NumPy."""
    from .specialize import needs_values
    try:
        return np.asarray(value.numpy())
    except Error:
        raise needs_values(node, value, what) from None


def ints(node, value, what: str) -> list:
    from .limits import MAX_SHAPE_VALUES
    found = known(node, value, what).reshape(-1)
    if found.size > MAX_SHAPE_VALUES:
        raise ONNXError(f"its {what} holds {found.size:,} values; a shape, axes or sizes "
                        f"input holds a few per axis (at most {MAX_SHAPE_VALUES:,})",
                        op=node.op_type)
    return [int(v) for v in found]


def const(array, dtype=None):
    from .dtypes import as_rill
    return as_rill(np.asarray(array, dtype=dtype))


def axis_of(axis, ndim):
    return axis + ndim if axis < 0 else axis


# ---- elementwise ---------------------------------------------------------------------------

def _unary(name):
    return lambda run, node, ins, a: getattr(rill(), name)(ins[0])


for _onnx, _rill in {"Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
                     "Sin": "sin", "Cos": "cos", "Tan": "tan", "Tanh": "tanh", "Sinh": "sinh",
                     "Cosh": "cosh", "Asin": "arcsin", "Acos": "arccos", "Atan": "arctan",
                     "Asinh": "arcsinh", "Acosh": "arccosh", "Atanh": "arctanh",
                     "Sigmoid": "sigmoid", "Relu": "relu", "Erf": "erf", "Floor": "floor",
                     "Ceil": "ceil", "Round": "round", "Sign": "sign",
                     "Reciprocal": "reciprocal", "IsNaN": "isnan", "Not": "logical_not",
                     "BitwiseNot": "bitwise_invert"}.items():
    TABLE[_onnx] = _unary(_rill)


def _binary(name):
    return lambda run, node, ins, a: getattr(rill(), name)(ins[0], ins[1])


for _onnx, _rill in {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Equal": "equal",
                     "Greater": "greater", "Less": "less", "GreaterOrEqual": "greater_equal",
                     "LessOrEqual": "less_equal", "And": "logical_and", "Or": "logical_or",
                     "Xor": "logical_xor", "BitwiseAnd": "bitwise_and",
                     "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
                     "MatMul": "matmul"}.items():
    TABLE[_onnx] = _binary(_rill)


@row("Identity")
def _identity(run, node, ins, a):
    return ins[0]


@row("Div")
def _div(run, node, ins, a):
    r = rill()
    x, y = ins
    if x.dtype.kind in "iu":  # integer division truncates toward zero
        q = r.floor_divide(x, y)
        inexact = r.logical_and(r.not_equal(r.remainder(x, y), 0),
                                r.not_equal(r.less(x, 0), r.less(y, 0)))
        return r.where(inexact, q + 1, q)
    return r.divide(x, y)


@row("Pow")
def _pow(run, node, ins, a):
    r = rill()
    x, y = ins
    if y.dtype is not x.dtype:
        y = y.astype(x.dtype) if x.dtype.kind == "f" else y
    out = r.power(x, y)
    return out if out.dtype is x.dtype else out.astype(x.dtype)


@row("Mod")
def _mod(run, node, ins, a):
    r = rill()
    x, y = ins
    if a.get("fmod", 0):  # C's fmod: the sign of the dividend
        if x.dtype.kind == "f":
            return x - y * r.trunc(x / y)
        q = _div(run, node, ins, a)
        return x - y * q
    return r.remainder(x, y)


@row("BitShift")
def _bit_shift(run, node, ins, a):
    r = rill()
    shift = r.bitwise_left_shift if a["direction"] == b"LEFT" or a["direction"] == "LEFT" \
        else r.bitwise_right_shift
    return shift(ins[0], ins[1])


def _variadic(name):
    def fn(run, node, ins, a):
        out = ins[0]
        for x in ins[1:]:
            out = getattr(rill(), name)(out, x)
        return out
    return fn


TABLE["Max"] = _variadic("maximum")
TABLE["Min"] = _variadic("minimum")
TABLE["Sum"] = _variadic("add")


@row("Mean")
def _mean(run, node, ins, a):
    return _variadic("add")(run, node, ins, a) / len(ins)


@row("Where")
def _where(run, node, ins, a):
    return rill().where(ins[0], ins[1], ins[2])


@row("Clip")
def _clip(run, node, ins, a):
    r = rill()
    x = ins[0]
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else (
        const(a["min"], x.dtype.storage) if "min" in a else None)
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else (
        const(a["max"], x.dtype.storage) if "max" in a else None)
    if lo is not None:
        x = r.maximum(x, lo)
    if hi is not None:
        x = r.minimum(x, hi)
    return x


@row("IsInf")
def _isinf(run, node, ins, a):
    r = rill()
    x = ins[0]
    pos, neg = a.get("detect_positive", 1), a.get("detect_negative", 1)
    inf = r.isinf(x)
    if pos and neg:
        return inf
    return r.logical_and(inf, r.greater(x, 0) if pos else r.less(x, 0))


@row("Cast")
def _cast(run, node, ins, a):
    from .dtypes import rill_dtype
    return ins[0].astype(rill_dtype(a["to"]))


@row("CastLike")
def _cast_like(run, node, ins, a):
    return ins[0].astype(ins[1].dtype)


# ---- activations ---------------------------------------------------------------------------

@row("Softplus")
def _softplus(run, node, ins, a):
    return rill().softplus(ins[0])


@row("Softsign")
def _softsign(run, node, ins, a):
    return ins[0] / (rill().abs(ins[0]) + 1)


@row("Elu")
def _elu(run, node, ins, a):
    return rill().elu(ins[0], a.get("alpha", 1.0))


@row("Celu")
def _celu(run, node, ins, a):
    r, x, alpha = rill(), ins[0], a.get("alpha", 1.0)
    return r.maximum(x, 0) + r.minimum(r.expm1(x / alpha) * alpha, 0)


@row("Selu")
def _selu(run, node, ins, a):
    r, x = rill(), ins[0]
    alpha, gamma = a.get("alpha", 1.67326319217681884765625), a.get("gamma",
                                                                     1.05070102214813232421875)
    return r.where(x > 0, x, r.expm1(x) * alpha) * gamma


@row("LeakyRelu")
def _leaky_relu(run, node, ins, a):
    return rill().leaky_relu(ins[0], a.get("alpha", 0.01))


@row("PRelu")
def _prelu(run, node, ins, a):
    x, slope = ins
    return rill().where(x < 0, x * slope, x)


@row("ThresholdedRelu")
def _thresholded_relu(run, node, ins, a):
    x = ins[0]
    return rill().where(x > a.get("alpha", 1.0), x, x * 0)


@row("HardSigmoid")
def _hard_sigmoid(run, node, ins, a):
    x = ins[0]
    return rill().clip(x * a.get("alpha", 0.2) + a.get("beta", 0.5), 0, 1)


@row("HardSwish")
def _hard_swish(run, node, ins, a):
    x = ins[0]
    return x * rill().clip(x / 6 + 0.5, 0, 1)


@row("Mish")
def _mish(run, node, ins, a):
    r = rill()
    return ins[0] * r.tanh(r.softplus(ins[0]))


@row("Swish")
def _swish(run, node, ins, a):
    return ins[0] * rill().sigmoid(ins[0] * a.get("alpha", 1.0))


@row("Gelu")
def _gelu(run, node, ins, a):
    approximate = a.get("approximate", "none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    return rill().gelu(ins[0], approximate=approximate)


@row("Shrink")
def _shrink(run, node, ins, a):
    r, x = rill(), ins[0]
    lambd, bias = a.get("lambd", 0.5), a.get("bias", 0.0)
    return r.where(x < -lambd, x + bias, r.where(x > lambd, x - bias, x * 0))


def _softmax_like(kind):
    def fn(run, node, ins, a):
        r, x = rill(), ins[0]
        if run.opset < 13:  # older versions: flatten to 2-D at `axis`, normalize the rows
            axis = axis_of(a.get("axis", 1), x.ndim)
            flat = x.reshape((math.prod(x.shape[:axis]), -1))
            return _softmax_rows(r, flat, -1, kind).reshape(x.shape)
        return _softmax_rows(r, x, a.get("axis", -1), kind)
    return fn


def _softmax_rows(r, x, axis, kind):
    if kind == "softmax":
        return r.softmax(x, axis=axis)
    if kind == "log_softmax":
        return r.log_softmax(x, axis=axis)
    hot = r.argmax(x, axis=axis, keepdims=True)  # Hardmax: 1 at the first maximum
    positions = r.arange(x.shape[axis]).reshape(
        tuple(-1 if i == axis_of(axis, x.ndim) else 1 for i in range(x.ndim)))
    return r.equal(positions, hot).astype(x.dtype)


TABLE["Softmax"] = _softmax_like("softmax")
TABLE["LogSoftmax"] = _softmax_like("log_softmax")
TABLE["Hardmax"] = _softmax_like("hardmax")


# ---- reductions ----------------------------------------------------------------------------

def _reduce_axes(run, node, ins, a, axes_input_from):
    if run.opset >= axes_input_from:
        axes = ins[1] if len(ins) > 1 and ins[1] is not None else None
        axes = None if axes is None else ints(node, axes, "axes")
    else:
        axes = a.get("axes")
        axes = None if axes is None else list(axes)
    if not axes:
        return () if a.get("noop_with_empty_axes", 0) else None
    return tuple(axis_of(x, ins[0].ndim) for x in axes)


def _reduction(fn, axes_input_from=18):
    def reduce(run, node, ins, a):
        axes = _reduce_axes(run, node, ins, a, axes_input_from)
        keep = bool(a.get("keepdims", 1))
        x = ins[0]
        if axes == ():
            return fn(rill(), x, None, keep, True)
        if axes is None:
            axes = tuple(range(x.ndim))
        return fn(rill(), x, axes, keep, False)
    return reduce


def _sum(r, x, axes, keep, noop):
    return x if noop else r.sum(x, axis=axes, keepdims=keep)


def _extreme(name):
    def fn(r, x, axes, keep, noop):
        if noop:
            return x
        if x.size == 0:  # the identity of max/min on an empty set
            shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keep else \
                tuple(s for i, s in enumerate(x.shape) if i not in axes)
            fill = -np.inf if name == "max" else np.inf
            if x.dtype.kind != "f":
                info = np.iinfo(x.dtype.storage)
                fill = info.min if name == "max" else info.max
            return r.full(shape, fill, dtype=x.dtype)
        return getattr(r, name)(x, axis=axes, keepdims=keep)
    return fn


TABLE["ReduceSum"] = _reduction(_sum, 13)
TABLE["ReduceMean"] = _reduction(lambda r, x, ax, k, n: x if n else r.mean(x, axis=ax,
                                                                          keepdims=k))
TABLE["ReduceMax"] = _reduction(_extreme("max"))
TABLE["ReduceMin"] = _reduction(_extreme("min"))
TABLE["ReduceProd"] = _reduction(lambda r, x, ax, k, n: x if n else r.prod(x, axis=ax,
                                                                          keepdims=k))
TABLE["ReduceL1"] = _reduction(lambda r, x, ax, k, n: r.abs(x) if n else
                               r.sum(r.abs(x), axis=ax, keepdims=k))
TABLE["ReduceL2"] = _reduction(lambda r, x, ax, k, n: r.abs(x) if n else
                               r.sqrt(r.sum(x * x, axis=ax, keepdims=k)).astype(x.dtype))
TABLE["ReduceSumSquare"] = _reduction(lambda r, x, ax, k, n: x * x if n else
                                      r.sum(x * x, axis=ax, keepdims=k))
TABLE["ReduceLogSum"] = _reduction(lambda r, x, ax, k, n: r.log(x) if n else
                                   r.log(r.sum(x, axis=ax, keepdims=k)))
TABLE["ReduceLogSumExp"] = _reduction(lambda r, x, ax, k, n: x if n else
                                      _logsumexp(r, x, ax, k))


def _logsumexp(r, x, axes, keep):
    if x.size == 0:
        return r.log(r.sum(x, axis=axes, keepdims=keep))
    return r.logsumexp(x, axis=axes, keepdims=keep).astype(x.dtype)


@row("ArgMax", "ArgMin")
def _arg_reduce(run, node, ins, a):
    r, x = rill(), ins[0]
    axis = axis_of(a.get("axis", 0), x.ndim)
    keep = bool(a.get("keepdims", 1))
    find = r.argmax if node.op_type == "ArgMax" else r.argmin
    if a.get("select_last_index", 0):
        flipped = find(r.flip(x, axis=axis), axis=axis, keepdims=keep)
        return (x.shape[axis] - 1 - flipped).astype(dt.int64)
    return find(x, axis=axis, keepdims=keep).astype(dt.int64)


@row("CumSum")
def _cumsum(run, node, ins, a):
    r, x = rill(), ins[0]
    axis = axis_of(ints(node, ins[1], "axis")[0], x.ndim)
    if a.get("reverse", 0):
        x = r.flip(x, axis=axis)
    out = r.cumsum(x, axis=axis)
    if a.get("exclusive", 0):
        out = out - x
    if a.get("reverse", 0):
        out = r.flip(out, axis=axis)
    return out.astype(ins[0].dtype)


@row("CumProd")
def _cumprod(run, node, ins, a):
    r, x = rill(), ins[0]
    axis = axis_of(ints(node, ins[1], "axis")[0], x.ndim)
    if a.get("reverse", 0):
        x = r.flip(x, axis=axis)
    out = r.cumprod(x, axis=axis)
    if a.get("exclusive", 0):  # shift right by one along axis, a 1 in front
        ones = r.ones_like(r.take(x, r.tensor([0]), axis=axis))
        rest = r.take(out, r.arange(0, x.shape[axis] - 1), axis=axis) if x.shape[axis] > 1 \
            else None
        out = ones if rest is None else r.concat([ones, rest], axis=axis)
    if a.get("reverse", 0):
        out = r.flip(out, axis=axis)
    return out.astype(ins[0].dtype)


from . import (import_attention, import_control, import_dynamic, import_nn, import_recurrent,  # noqa: E402,F401,I001
               import_pool, import_quantize, import_resize, import_sample, import_shape,
               import_spectral, import_training)
