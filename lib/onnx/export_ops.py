"""rill primitive -> ONNX nodes: one row per primitive, keyed by its name.

Each row is `fn(b, node, ins) -> [names]`: `b` the Builder, `node` the rill graph node (its
attrs are the primitive's), `ins` the ONNX names of its inputs. It returns one name per
output of the node, None for an output ONNX cannot give (max_pool2d's window offsets); a
later use of such an output is refused by the exporter.
Control flow (switch, scan, while) lives in export_control.py.
"""
from __future__ import annotations

import math

import numpy as np

from .builder import INT64_MAX, INT64_MIN
from .dtypes import onnx_type
from .errors import ONNXError
from ..ops.indexing import ARRAY, ELLIPSIS, NEW

TABLE: dict = {}


def _row(*names):
    def register(fn):
        for name in names:
            TABLE[name] = fn
        return fn
    return register


def _same(op_type, **attrs):
    """A primitive that is one ONNX op on the same inputs."""
    return lambda b, node, ins: [b.op(op_type, ins, **attrs)]


def _dtype(node, i=0):
    return node.inputs[i].dtype


def _out_dtype(node):
    return node.outputs[0].dtype


for _rill, _onnx in {
        "abs": "Abs", "neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "sin": "Sin",
        "cos": "Cos", "tan": "Tan", "tanh": "Tanh", "sinh": "Sinh", "cosh": "Cosh",
        "arcsin": "Asin", "arccos": "Acos", "arctan": "Atan", "arcsinh": "Asinh",
        "arccosh": "Acosh", "arctanh": "Atanh", "sigmoid": "Sigmoid", "relu": "Relu",
        "erf": "Erf", "floor": "Floor", "ceil": "Ceil", "round": "Round", "sign": "Sign",
        "reciprocal": "Reciprocal", "isnan": "IsNaN", "isinf": "IsInf", "softplus": "Softplus",
        "logical_not": "Not", "add": "Add", "subtract": "Sub", "multiply": "Mul",
        "divide": "Div", "power": "Pow", "maximum": "Max", "minimum": "Min", "equal": "Equal",
        "greater": "Greater", "greater_equal": "GreaterOrEqual", "less": "Less",
        "less_equal": "LessOrEqual", "logical_and": "And", "logical_or": "Or",
        "logical_xor": "Xor", "matmul": "MatMul", "where": "Where", "to_device": "Identity",
        "det": "Det"}.items():
    TABLE[_rill] = _same(_onnx)


def _bitwise(op_type):
    def row(b, node, ins):
        if b.opset < 18:
            raise ONNXError(f"{op_type} needs opset 18 or later (asked for {b.opset})",
                            op=node.op)
        return [b.op(op_type, ins)]
    return row


for _rill, _onnx in {"bitwise_and": "BitwiseAnd", "bitwise_or": "BitwiseOr",
                     "bitwise_xor": "BitwiseXor", "bitwise_invert": "BitwiseNot"}.items():
    TABLE[_rill] = _bitwise(_onnx)


@_row("not_equal")
def _not_equal(b, node, ins):
    return [b.op("Not", [b.op("Equal", ins)])]


@_row("rsqrt")
def _rsqrt(b, node, ins):
    return [b.op("Reciprocal", [b.op("Sqrt", ins)])]


@_row("square")
def _square(b, node, ins):
    return [b.op("Mul", [ins[0], ins[0]])]


@_row("expm1")
def _expm1(b, node, ins):
    return [b.op("Sub", [b.op("Exp", ins), b.scalar_like(1, _dtype(node))])]


@_row("log1p")
def _log1p(b, node, ins):
    return [b.op("Log", [b.op("Add", [ins[0], b.scalar_like(1, _dtype(node))])])]


@_row("log2", "log10")
def _log_base(b, node, ins):
    base = 2.0 if node.op == "log2" else 10.0
    return [b.op("Div", [b.op("Log", ins), b.scalar_like(math.log(base), _dtype(node))])]


@_row("exp2")
def _exp2(b, node, ins):
    return [b.op("Pow", [b.scalar_like(2, _dtype(node)), ins[0]])]


@_row("isfinite")
def _isfinite(b, node, ins):
    if _dtype(node).kind != "f":  # integers and bools are finite: x == x is all True
        return [b.op("Equal", [ins[0], ins[0]])]
    bad = b.op("Or", [b.op("IsNaN", ins), b.op("IsInf", ins)])
    return [b.op("Not", [bad])]


@_row("trunc")
def _trunc(b, node, ins):
    negative = b.op("Less", [ins[0], b.scalar_like(0, _dtype(node))])
    return [b.op("Where", [negative, b.op("Ceil", ins), b.op("Floor", ins)])]


@_row("silu")
def _silu(b, node, ins):
    return [b.op("Mul", [ins[0], b.op("Sigmoid", ins)])]


@_row("gelu")
def _gelu(b, node, ins):
    x, d = ins[0], _dtype(node)
    if b.opset >= 20:
        return [b.op("Gelu", [x], approximate=node.attrs.get("approximate", "none"))]
    half = b.op("Mul", [x, b.scalar_like(0.5, d)])
    if node.attrs.get("approximate", "none") == "tanh":
        cube = b.op("Mul", [b.op("Mul", [x, x]), x])
        inner = b.op("Add", [x, b.op("Mul", [cube, b.scalar_like(0.044715, d)])])
        inner = b.op("Mul", [inner, b.scalar_like(math.sqrt(2 / math.pi), d)])
        return [b.op("Mul", [half, b.op("Add", [b.op("Tanh", [inner]),
                                                 b.scalar_like(1, d)])])]
    scaled = b.op("Div", [x, b.scalar_like(math.sqrt(2.0), d)])
    return [b.op("Mul", [half, b.op("Add", [b.op("Erf", [scaled]), b.scalar_like(1, d)])])]


@_row("elu")
def _elu(b, node, ins):
    return [b.op("Elu", ins, alpha=float(node.attrs["alpha"]))]


@_row("leaky_relu")
def _leaky_relu(b, node, ins):
    return [b.op("LeakyRelu", ins, alpha=float(node.attrs["alpha"]))]


@_row("remainder")
def _remainder(b, node, ins):
    if _out_dtype(node).kind in "iu":  # Mod with fmod=0 takes the divisor's sign, as rill
        return [b.op("Mod", ins, fmod=0)]
    x, y = ins
    floor = b.op("Floor", [b.op("Div", [x, y])])
    return [b.op("Sub", [x, b.op("Mul", [y, floor])])]


@_row("floor_divide")
def _floor_divide(b, node, ins):
    d = _out_dtype(node)
    if d.kind in "iu":  # Div truncates integers; floor in float64 (exact below 2**53)
        x, y = (b.op("Cast", [v], to=onnx_type_of("float64")) for v in ins)
        return [b.op("Cast", [b.op("Floor", [b.op("Div", [x, y])])], to=onnx_type(d))]
    return [b.op("Floor", [b.op("Div", ins)])]


def onnx_type_of(name: str) -> int:
    from .. import dtypes as dt
    return onnx_type(getattr(dt, name))


@_row("logaddexp")
def _logaddexp(b, node, ins):
    x, y = ins
    m = b.op("Max", [x, y])
    total = b.op("Add", [b.op("Exp", [b.op("Sub", [x, m])]), b.op("Exp", [b.op("Sub", [y, m])])])
    return [b.op("Add", [m, b.op("Log", [total])])]


@_row("hypot")
def _hypot(b, node, ins):
    x, y = ins
    return [b.op("Sqrt", [b.op("Add", [b.op("Mul", [x, x]), b.op("Mul", [y, y])])])]


@_row("clip")
def _clip(b, node, ins):
    x, lo, hi = ins
    return [b.op("Min", [b.op("Max", [x, lo]), hi])]


@_row("scaled_add")
def _scaled_add(b, node, ins):
    d = _out_dtype(node)
    x = b.op("Mul", [ins[0], b.scalar_like(node.attrs["alpha"], d)])
    y = b.op("Mul", [ins[1], b.scalar_like(node.attrs["beta"], d)])
    return [b.op("Add", [x, y])]


@_row("cast")
def _cast(b, node, ins):
    return [b.op("Cast", ins, to=onnx_type(node.attrs["dtype"]))]


@_row("check")
def _check(b, node, ins):  # the check ran when the graph was traced; ONNX cannot raise
    return [b.op("Identity", [ins[1]])]


# ---- reductions ----------------------------------------------------------------------------

def _axes(node):
    axis = node.attrs.get("axis")
    if axis is None:
        return None
    return (axis,) if isinstance(axis, int) else tuple(axis)


def _reduction(op_type):
    def row(b, node, ins):
        return [b.reduce(op_type, ins[0], _axes(node), node.attrs["keepdims"])]
    return row


for _rill, _onnx in {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax",
                     "min": "ReduceMin", "prod": "ReduceProd",
                     "logsumexp": "ReduceLogSumExp"}.items():
    TABLE[_rill] = _reduction(_onnx)


@_row("all", "any")
def _all_any(b, node, ins):
    as_int = b.op("Cast", ins, to=onnx_type_of("int32"))
    found = b.reduce("ReduceMin" if node.op == "all" else "ReduceMax", as_int, _axes(node),
                     node.attrs["keepdims"])
    return [b.op("Cast", [found], to=onnx_type_of("bool_"))]


@_row("argmax", "argmin")
def _arg_reduce(b, node, ins):
    op_type = "ArgMax" if node.op == "argmax" else "ArgMin"
    axis, keep = node.attrs["axis"], int(node.attrs["keepdims"])
    x = ins[0]
    if axis is None:
        x = b.op("Reshape", [x, b.ints([-1])])
        out = b.op(op_type, [x], axis=0, keepdims=0)
        if keep:
            out = b.op("Reshape", [out, b.ints([1] * node.inputs[0].ndim)])
    else:
        out = b.op(op_type, [x], axis=axis, keepdims=keep)
    return [b.op("Cast", [out], to=onnx_type(_out_dtype(node)))]


def _count(node):
    shape = node.inputs[0].shape
    axes = _axes(node)
    axes = range(len(shape)) if axes is None else axes
    return math.prod(shape[a] for a in axes)


@_row("var")
def _var(b, node, ins):
    x, d, axes = ins[0], _out_dtype(node), _axes(node)
    centered = b.op("Sub", [x, b.reduce("ReduceMean", x, axes, True)])
    total = b.reduce("ReduceSum", b.op("Mul", [centered, centered]), axes,
                     node.attrs["keepdims"])
    dof = max(_count(node) - node.attrs["correction"], 0)
    return [b.op("Div", [total, b.scalar_like(dof, d)])]


@_row("norm")
def _norm(b, node, ins):
    x, d, axes, keep = ins[0], _out_dtype(node), _axes(node), node.attrs["keepdims"]
    p = float(node.attrs["ord"])
    if p == 2:
        return [b.reduce("ReduceL2", x, axes, keep)]
    if p == 1:
        return [b.reduce("ReduceL1", x, axes, keep)]
    magnitude = b.op("Abs", [x])
    if p == math.inf:
        return [b.reduce("ReduceMax", magnitude, axes, keep)]
    if p == -math.inf:
        return [b.reduce("ReduceMin", magnitude, axes, keep)]
    if p == 0:
        nonzero = b.op("Cast", [b.op("Not", [b.op("Equal", [x, b.scalar_like(0, d)])])],
                       to=onnx_type(d))
        return [b.reduce("ReduceSum", nonzero, axes, keep)]
    powered = b.op("Pow", [magnitude, b.scalar_like(p, d)])
    return [b.op("Pow", [b.reduce("ReduceSum", powered, axes, keep),
                         b.scalar_like(1 / p, d)])]


@_row("cumsum")
def _cumsum(b, node, ins):
    x, axis = ins[0], node.attrs["axis"]
    if axis is None:
        x, axis = b.op("Reshape", [x, b.ints([-1])]), 0
    return [b.op("CumSum", [x, b.const(np.asarray(axis, np.int64))])]


@_row("softmax", "log_softmax")
def _softmax(b, node, ins):
    return [b.op("Softmax" if node.op == "softmax" else "LogSoftmax", ins,
                 axis=node.attrs["axis"])]


# ---- shapes --------------------------------------------------------------------------------

@_row("reshape")
def _reshape(b, node, ins):
    alt = b.alternative(node)
    return [b.op("Reshape", [ins[0], b.shape(node.attrs["shape"],
                                              alt and alt.attrs["shape"])])]


@_row("broadcast_to")
def _broadcast_to(b, node, ins):
    alt = b.alternative(node)
    return [b.op("Expand", [ins[0], b.shape(node.attrs["shape"],
                                             alt and alt.attrs["shape"])])]


@_row("transpose")
def _transpose(b, node, ins):
    ndim = node.inputs[0].ndim
    return [b.op("Transpose", ins, perm=[a % ndim for a in node.attrs["axes"]])]


@_row("concat")
def _concat(b, node, ins):
    return [b.op("Concat", ins, axis=node.attrs["axis"])]


@_row("split")
def _split(b, node, ins):
    return b.split(ins[0], node.attrs["sizes"], node.attrs["axis"])


@_row("flip")
def _flip(b, node, ins):
    axes = list(node.attrs["axes"])
    if not axes:
        return [b.op("Identity", ins)]
    return [b.slice(ins[0], [-1] * len(axes), [INT64_MIN] * len(axes), axes, [-1] * len(axes))]


@_row("roll")
def _roll(b, node, ins):
    x, shape = ins[0], node.inputs[0].shape
    shifts, axes = node.attrs["shift"], node.attrs["axes"]
    if axes is None:  # roll the flattened tensor
        flat = b.op("Reshape", [x, b.ints([-1])])
        rolled = _roll_axis(b, flat, int(shifts if isinstance(shifts, int) else shifts[0]),
                            0, math.prod(shape))
        return [b.op("Reshape", [rolled, b.ints(shape)])]
    shifts = (shifts,) * len(axes) if isinstance(shifts, int) else shifts
    for s, a in zip(shifts, axes):
        x = _roll_axis(b, x, s, a, shape[a])
    return [x]


def _roll_axis(b, x, shift, axis, n):
    if n == 0 or shift % n == 0:
        return x
    k = shift % n  # the last k entries move to the front
    tail = b.slice(x, [n - k], [n], [axis], [1])
    head = b.slice(x, [0], [n - k], [axis], [1])
    return b.op("Concat", [tail, head], axis=axis)


@_row("pad")
def _pad(b, node, ins):
    widths, mode = node.attrs["widths"], node.attrs["mode"]
    pads = [w[0] for w in widths] + [w[1] for w in widths]
    inputs = [ins[0], b.ints(pads)]
    if mode == "constant":
        inputs.append(b.scalar_like(node.attrs["value"], _dtype(node)))
    return [b.op("Pad", inputs, mode={"edge": "edge", "reflect": "reflect"}.get(mode,
                                                                              "constant"))]


@_row("tril", "triu")
def _tri(b, node, ins):
    return [b.op("Trilu", [ins[0], b.const(np.asarray(node.attrs["k"], np.int64))],
                 upper=int(node.op == "triu"))]


@_row("take_along_axis")
def _take_along_axis(b, node, ins):
    return [b.op("GatherElements", ins, axis=node.attrs["axis"])]


@_row("scatter")
def _scatter(b, node, ins):
    return [b.op("ScatterElements", ins, axis=node.attrs["axis"])]


@_row("scatter_add")
def _scatter_add(b, node, ins):
    if b.opset < 16:
        raise ONNXError("scatter_add needs opset 16 or later", op="scatter_add")
    return [b.op("ScatterElements", ins, axis=node.attrs["axis"], reduction="add")]


@_row("scatter_reduce")
def _scatter_reduce(b, node, ins):
    reduction = {"prod": "mul", "amax": "max", "amin": "min"}[node.attrs["reduce"]]
    if not node.attrs["include_self"] or b.opset < (16 if reduction == "mul" else 18):
        raise ONNXError("scatter_reduce maps to ScatterElements only with include_self=True "
                        "(and opset 18 for amax/amin)", op="scatter_reduce")
    return [b.op("ScatterElements", ins, axis=node.attrs["axis"], reduction=reduction)]


@_row("getitem")
def _getitem(b, node, ins):
    """Basic indexing (ints, slices, None, ...) and one integer index array."""
    x, arrays = ins[0], list(ins[1:])
    array_ndims = [v.ndim for v in node.inputs[1:]]
    key = list(node.attrs["key"])
    ndim = node.inputs[0].ndim
    consumed = sum(1 for k in key if k != NEW and k != ELLIPSIS)
    if ELLIPSIS in key:
        i = key.index(ELLIPSIS)
        key[i:i + 1] = [("slice", None, None, None)] * (ndim - consumed)
    key += [("slice", None, None, None)] * (ndim - sum(1 for k in key if k != NEW))
    if len(arrays) > 1 or (arrays and any(k[0] == "int" for k in key if k != NEW)):
        raise ONNXError("only one integer index array (with slices) maps to ONNX Gather",
                        op="getitem")
    # Slices first, on the input's own axes.
    starts, ends, axes, steps = [], [], [], []
    dim = 0
    for k in key:
        if k == NEW:
            continue
        if k[0] == "slice" and k[1:] != (None, None, None):
            _, start, stop, step = k
            step = 1 if step is None else step
            starts.append(start if start is not None else (0 if step > 0 else -1))
            ends.append(stop if stop is not None else (INT64_MAX if step > 0 else INT64_MIN))
            axes.append(dim)
            steps.append(step)
        dim += 1
    if axes:
        x = b.slice(x, starts, ends, axes, steps)
    # Then ints and the array, right to left so the axes to their left keep their numbers.
    positions, dim = [], 0
    for k in key:
        if k != NEW:
            positions.append((dim, k))
            dim += 1
    for dim, k in reversed(positions):
        if k[0] == "int":
            x = b.op("Gather", [x, b.const(np.asarray(k[1], np.int64))], axis=dim)
        elif k == ARRAY:
            x = b.op("Gather", [x, arrays[0]], axis=dim)
    new_axes, out = [], 0
    for k in key:
        if k == NEW:
            new_axes.append(out)
            out += 1
        elif k[0] == "slice":
            out += 1
        elif k == ARRAY:
            out += array_ndims[0]
    if new_axes:
        x = b.unsqueeze(x, new_axes)
    return [x]


# ---- creation ------------------------------------------------------------------------------

@_row("full", "empty")
def _full(b, node, ins):
    d = _out_dtype(node)
    value = node.attrs.get("value", 0)
    alt = b.alternative(node)
    if alt is not None and alt.attrs["shape"] != node.attrs["shape"]:
        shape = b.shape(node.attrs["shape"], alt.attrs["shape"])
        return [b.op("Expand", [b.scalar_like(value, d), shape])]
    return [b.const(np.full(node.attrs["shape"], value, dtype=d.storage), hint="full")]


@_row("arange")
def _arange(b, node, ins):
    a = node.attrs
    values = np.arange(a["start"], a["stop"], a["step"]).astype(_out_dtype(node).storage)
    return [b.const(values, hint="arange")]


@_row("linspace")
def _linspace(b, node, ins):
    a = node.attrs
    values = np.linspace(a["start"], a["stop"], a["num"], endpoint=a["endpoint"])
    return [b.const(values.astype(_out_dtype(node).storage), hint="linspace")]


@_row("eye")
def _eye(b, node, ins):
    a = node.attrs
    return [b.const(np.eye(a["n"], a["m"], a["k"], dtype=_out_dtype(node).storage),
                    hint="eye")]


# ---- neural-network ops --------------------------------------------------------------------

@_row("linear")
def _linear(b, node, ins):
    x, w = ins[0], ins[1]
    if node.inputs[0].ndim == 2:
        return [b.op("Gemm", [x, w] + ins[2:3], transB=1)]
    out = b.op("MatMul", [x, b.op("Transpose", [w], perm=[1, 0])])
    return [b.op("Add", [out, ins[2]]) if len(ins) > 2 else out]


def _conv_attrs(node):
    a = node.attrs
    pads = [p[0] for p in a["padding"]] + [p[1] for p in a["padding"]]
    return dict(strides=list(a["stride"]), pads=pads, dilations=list(a["dilation"]),
                group=a["groups"])


@_row("conv2d", "conv3d")
def _conv(b, node, ins):
    kernel = list(node.inputs[1].shape[2:])
    return [b.op("Conv", ins, kernel_shape=kernel, **_conv_attrs(node))]


@_row("conv_transpose2d", "conv_transpose3d")
def _conv_transpose(b, node, ins):
    kernel = list(node.inputs[1].shape[2:])
    return [b.op("ConvTranspose", ins, kernel_shape=kernel,
                 output_shape=list(node.outputs[0].shape[2:]), **_conv_attrs(node))]


@_row("max_pool2d", "max_pool3d")
def _max_pool(b, node, ins):
    a = node.attrs
    out = b.op("MaxPool", ins, kernel_shape=list(a["kernel_size"]), strides=list(a["stride"]),
               pads=list(a["padding"]) * 2, dilations=list(a["dilation"]))
    return [out, None]  # rill's second output (offsets in the window) has no ONNX form


@_row("layer_norm")
def _layer_norm(b, node, ins):
    x, w, bias = ins
    axes, eps, d = node.attrs["axes"], node.attrs["eps"], _out_dtype(node)
    if b.opset >= 17:
        return [b.op("LayerNormalization", ins, axis=-axes, epsilon=float(eps))]
    rows = list(range(node.inputs[0].ndim - axes, node.inputs[0].ndim))
    centered = b.op("Sub", [x, b.reduce("ReduceMean", x, rows, True)])
    variance = b.reduce("ReduceMean", b.op("Mul", [centered, centered]), rows, True)
    std = b.op("Sqrt", [b.op("Add", [variance, b.scalar_like(eps, d)])])
    return [b.op("Add", [b.op("Mul", [b.op("Div", [centered, std]), w]), bias])]


@_row("batch_norm_train")
def _batch_norm_train(b, node, ins):
    """Batch statistics in plain ops (ONNX's BatchNormalization has no portable training
    mode): y, and the per-channel mean and biased variance the running statistics read."""
    x, w, bias = ins
    ndim, d = node.inputs[0].ndim, _out_dtype(node)
    axes = [0] + list(range(2, ndim))
    per_channel = b.ints([1, -1] + [1] * (ndim - 2))
    mean = b.reduce("ReduceMean", x, axes, True)
    centered = b.op("Sub", [x, mean])
    variance = b.reduce("ReduceMean", b.op("Mul", [centered, centered]), axes, True)
    std = b.op("Sqrt", [b.op("Add", [variance, b.scalar_like(node.attrs["eps"], d)])])
    y = b.op("Mul", [b.op("Div", [centered, std]), b.op("Reshape", [w, per_channel])])
    y = b.op("Add", [y, b.op("Reshape", [bias, per_channel])])
    return [y, b.op("Reshape", [mean, b.ints([-1])]), b.op("Reshape", [variance, b.ints([-1])])]


@_row("einsum")
def _einsum(b, node, ins):
    equation = ",".join(node.attrs["inputs"]) + "->" + node.attrs["output"]
    return [b.op("Einsum", ins, equation=equation)]


@_row("sort")
def _sort(b, node, ins):
    axis = node.attrs["axis"]
    n = node.inputs[0].shape[axis]
    values, indices = b.op("TopK", [ins[0], b.ints([n])], n_out=2, axis=axis,
                           largest=int(node.attrs["descending"]), sorted=1)
    return [values, b.op("Cast", [indices], to=onnx_type(node.outputs[1].dtype))]


@_row("topk")
def _topk(b, node, ins):
    a = node.attrs
    values, indices = b.op("TopK", [ins[0], b.ints([a["k"]])], n_out=2, axis=a["axis"],
                           largest=int(a["largest"]), sorted=1)
    return [values, b.op("Cast", [indices], to=onnx_type(node.outputs[1].dtype))]


@_row("softmax_cross_entropy")
def _cross_entropy(b, node, ins):
    a = node.attrs
    if a["label_smoothing"] or node.inputs[1].dtype.kind not in "iu":
        raise ONNXError("cross entropy maps to ONNX only with class indices and no label "
                        "smoothing", op="softmax_cross_entropy")
    labels = b.op("Cast", [ins[1]], to=onnx_type_of("int64"))
    return [b.op("SoftmaxCrossEntropyLoss", [ins[0], labels], reduction=a["reduction"],
                 ignore_index=a["ignore_index"])]


@_row("attention")
def _attention(b, node, ins):
    """softmax(q @ k^T * scale + mask) @ v, the causal mask as a constant; the row
    statistics output (kept for rill's backward) has no use in an exported graph."""
    q, k, v = ins[:3]
    d = _out_dtype(node)
    ndim = node.inputs[0].ndim
    perm = list(range(ndim - 2)) + [ndim - 1, ndim - 2]
    scores = b.op("MatMul", [q, b.op("Transpose", [k], perm=perm)])
    scores = b.op("Mul", [scores, b.scalar_like(node.attrs["scale"], d)])
    if len(ins) > 3:
        scores = b.op("Add", [scores, ins[3]])
    if node.attrs["is_causal"]:
        length, keys = node.inputs[0].shape[-2], node.inputs[1].shape[-2]
        hidden = np.triu(np.ones((length, keys), bool), k=1)
        scores = b.op("Add", [scores, b.const(np.where(hidden, -np.inf, 0).astype(d.storage))])
    return [b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v]), None]


from ..ops.lstm_cell_onnx import export_lstm_cell  # noqa: E402 - the fused cell's row

TABLE["lstm_cell"] = export_lstm_cell
