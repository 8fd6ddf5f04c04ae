"""Elementwise GPU kernels, generated from one table of Triton expressions.

Each entry of EXPRESSIONS is one primitive: its inputs (x, y, ...) and its value as a Triton
expression. `_kernel_source` writes the kernel around it: a flat index per program, the
N-d index decomposed only for inputs that are not flat, each input read through its own
strides (a broadcast input has stride 0, so broadcasting never copies), float16 computed in
float32, the result stored contiguously in the output dtype. Scalar attrs (alpha, approximate)
are compile-time constants.

Per call: bytes moved = sum of input bytes + output bytes; FLOPs ~ one expression per element.
"""
from __future__ import annotations

import linecache
import math

import numpy as np

from rill import gpu as _gpu_backend
from rill.errors import ArgumentError, DeviceError
from rill.ops.primitive import register_kernels

from .libdevice import libdevice
from .launch import block_for, cdiv, empty, jit, pointer, strides

MAX_DIMS = 8
_SQRT_HALF = 1 / math.sqrt(2.0)
_GELU_TANH = math.sqrt(2.0 / math.pi)

# name -> (inputs, expression). The result dtype comes from the inputs (or BOOL / the cast's
# dtype); float16 inputs are widened to float32 first.
EXPRESSIONS = {
    "copy": ("x", "x"),
    "neg": ("x", "-x"),
    "abs": ("x", "tl.abs(x)"),
    "sign": ("x", "tl.where(x != x, x, tl.where(x > 0, 1, tl.where(x < 0, -1, 0)).to(x.dtype))"),
    "square": ("x", "x * x"),
    "relu": ("x", "tl.where(x < 0, 0, x).to(x.dtype)"),
    "floor": ("x", "libdevice.floor(x)"), "ceil": ("x", "libdevice.ceil(x)"),
    "round": ("x", "libdevice.rint(x)"), "trunc": ("x", "libdevice.trunc(x)"),
    "exp": ("x", "tl.exp(x)"), "exp2": ("x", "tl.exp2(x)"), "log": ("x", "tl.log(x)"),
    "log2": ("x", "tl.log2(x)"), "log1p": ("x", "libdevice.log1p(x)"),
    "expm1": ("x", "libdevice.expm1(x)"), "sqrt": ("x", "tl.sqrt(x)"),
    "rsqrt": ("x", "1.0 / tl.sqrt(x)"), "reciprocal": ("x", "1.0 / x"),
    "sin": ("x", "tl.sin(x)"), "cos": ("x", "tl.cos(x)"), "tan": ("x", "libdevice.tan(x)"),
    "tanh": ("x", "libdevice.tanh(x)"), "sinh": ("x", "libdevice.sinh(x)"),
    "cosh": ("x", "libdevice.cosh(x)"), "arcsin": ("x", "libdevice.asin(x)"),
    "arccos": ("x", "libdevice.acos(x)"), "arctan": ("x", "libdevice.atan(x)"),
    "arcsinh": ("x", "libdevice.asinh(x)"), "arccosh": ("x", "libdevice.acosh(x)"),
    "arctanh": ("x", "libdevice.atanh(x)"), "log10": ("x", "libdevice.log10(x)"),
    "signbit": ("x", "_signbit_float(x)"), "signbit_int": ("x", "x < 0"),
    "imag_of_real": ("x", "tl.zeros_like(x)"),
    "bitwise_invert": ("x", "~x"),
    "sigmoid": ("x", "1.0 / (1.0 + tl.exp(-x))"),
    "softplus": ("x", "tl.where(x > 0, x, 0.0) + libdevice.log1p(tl.exp(-tl.abs(x)))"),
    "silu": ("x", "x / (1.0 + tl.exp(-x))"),
    "erf": ("x", "libdevice.erf(x)"),
    "leaky_relu": ("x", "tl.where(x > 0, x, x * ALPHA)"),
    "elu": ("x", "tl.where(x > 0, x, ALPHA * libdevice.expm1(tl.where(x < 0, x, 0.0)))"),
    "gelu_exact": ("x", f"0.5 * x * (1.0 + libdevice.erf(x * {_SQRT_HALF!r}))"),
    "gelu_tanh": ("x", f"0.5 * x * (1.0 + libdevice.tanh({_GELU_TANH!r} * "
                       "(x + 0.044715 * x * x * x)))"),
    "isnan": ("x", "x != x"),
    "isinf": ("x", "(x == x) & ((x - x) != 0)"),
    "isfinite": ("x", "(x - x) == 0"),
    "logical_not": ("x", "x == 0"),
    "cast": ("x", "x"),
    "cast_to_bool": ("x", "x != 0"),
    "add": ("xy", "x + y"), "subtract": ("xy", "x - y"), "multiply": ("xy", "x * y"),
    "divide": ("xy", "x / y"),
    "floor_divide_int": ("xy", "x // y - ((x % y != 0) & ((x < 0) != (y < 0))).to(x.dtype)"),
    "floor_divide": ("xy", "_floor_divide_float(x, y)"),
    "remainder": ("xy", "tl.where((x % y != 0) & ((x % y < 0) != (y < 0)), x % y + y, x % y)"),
    "power": ("xy", "libdevice.pow(x, y)"),
    "maximum": ("xy", "tl.where((x > y) | (x != x), x, y)"),
    "minimum": ("xy", "tl.where((x < y) | (x != x), x, y)"),
    "arctan2": ("xy", "libdevice.atan2(x, y)"),
    # x == y first: inf with inf (and equal finite values) would make x - y NaN.
    "logaddexp": ("xy", f"tl.where(x == y, x + {math.log(2.0)!r}, tl.where(x > y, x, y) + "
                        "libdevice.log1p(tl.exp(-tl.abs(x - y))))"),
    "hypot": ("xy", "libdevice.hypot(x, y)"), "copysign": ("xy", "libdevice.copysign(x, y)"),
    "nextafter": ("xy", "libdevice.nextafter(x, y)"),
    "bitwise_left_shift": ("xy", "_shift_left(x, y)"),
    "bitwise_right_shift": ("xy", "_shift_right(x, y)"),
    "equal": ("xy", "x == y"), "not_equal": ("xy", "x != y"), "less": ("xy", "x < y"),
    "less_equal": ("xy", "x <= y"), "greater": ("xy", "x > y"),
    "greater_equal": ("xy", "x >= y"),
    "logical_and": ("xy", "(x != 0) & (y != 0)"), "logical_or": ("xy", "(x != 0) | (y != 0)"),
    "logical_xor": ("xy", "(x != 0) ^ (y != 0)"),
    "bitwise_and": ("xy", "x & y"), "bitwise_or": ("xy", "x | y"), "bitwise_xor": ("xy", "x ^ y"),
    "where": ("cxy", "tl.where(c != 0, x, y)"),
    "clip": ("xlh", "_clip_high(tl.where((x > l) | (x != x), x, l), h)"),
    "scaled_add": ("xy", "x * ALPHA + y * BETA"),
    "power_int": ("xy", "_int_power(x, y)"),
    "round_bf16": ("x", "_round_bf16(x)"),
}
# The scalar attrs an expression may use, by attr name, and the constexpr each becomes. Kernel
# source names constants only from this table: a key from anywhere else (a graph loaded from
# a file) is refused, never pasted into source.
CONSTANTS = {"alpha": "ALPHA", "beta": "BETA"}
_BOOL_RESULT = {"isnan", "isinf", "isfinite", "logical_not", "cast_to_bool", "equal", "signbit",
                "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
                "logical_or", "logical_xor"}
_INTEGER_IDENTITY = {"floor", "ceil", "round", "trunc"}  # integers pass through unchanged

_HELPERS = '''
@jit
def _clip_high(m, h):
    return tl.where((m < h) | (m != m), m, h)


@jit
def _signbit_float(x):
    # The sign bit itself, read through an integer view (libdevice's signbit returned nonzero
    # for positive float64 values on an H200 through Triton 3.6). Widening float16 keeps it.
    if x.dtype == tl.float64:
        bits = x.to(tl.int64, bitcast=True)
    else:
        bits = x.to(tl.float32).to(tl.int32, bitcast=True)
    return bits < 0


@jit
def _floor_divide_float(x, y):
    # Python's floor division, as NumPy and PyTorch compute it (the Array API standard allows
    # it): x - fmod(x, y) divided by y, one less where fmod's sign is not y's, so that
    # -1.5 // inf is -1 and inf // 2 is NaN; a zero quotient keeps the sign of x / y.
    mod = libdevice.fmod(x, y)
    div = (x - mod) / y
    div = tl.where((mod != 0) & ((y < 0) != (mod < 0)), div - 1.0, div)
    low = libdevice.floor(div)
    low = tl.where(div - low > 0.5, low + 1.0, low)
    low = tl.where(div == 0, libdevice.copysign(div, x / y), low)
    return tl.where(y == 0, x / y, low)


@jit
def _int_power(x, y):
    # Exponentiation by squaring; negative exponents give 0 (NumPy raises; rill checks).
    result = tl.full(x.shape, 1, x.dtype)
    base = x
    e = y
    for _ in range(64):
        result = tl.where((e & 1) != 0, result * base, result)
        base = base * base
        e = e >> 1
    return result


@jit
def _shift_left(x, y):
    # Shifting by the width or more gives 0, as NumPy (Triton's << would be undefined there).
    w: tl.constexpr = x.dtype.primitive_bitwidth
    return tl.where(y < w, x << tl.minimum(y, w - 1), 0).to(x.dtype)


@jit
def _shift_right(x, y):
    # Past the width: the sign fill (0 or -1), as NumPy's arithmetic shift.
    w: tl.constexpr = x.dtype.primitive_bitwidth
    return tl.where(y < w, x >> tl.minimum(y, w - 1), tl.where(x < 0, -1, 0)).to(x.dtype)


@jit
def _round_bf16(x):
    # float32 -> nearest bfloat16 (ties to even), kept in float32 storage; NaN stays NaN.
    bits = x.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, rounded.to(tl.float32, bitcast=True))
'''


def _kernel_source(name: str, inputs: str, expression: str, attrs: tuple[str, ...]) -> str:
    dims = ", ".join(f"D{d}" for d in range(1, MAX_DIMS))
    params = ["out_ptr"] + [f"{v}_ptr" for v in inputs] + ["n", dims]
    params += [", ".join(f"{v}_s{d}" for d in range(MAX_DIMS)) for v in inputs]
    params += [f"{a}: tl.constexpr" for a in attrs]
    params += [f"{v.upper()}_FLAT: tl.constexpr" for v in inputs] + ["BLOCK: tl.constexpr"]
    all_flat = " and ".join(f"{v.upper()}_FLAT" for v in inputs)
    lines = [
        "@jit",
        f"def {name}_kernel({', '.join(params)}):",
        "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
        "    mask = offs < n",
        f"    if not ({all_flat}):",
        "        rest = offs",
    ]
    for d in range(MAX_DIMS - 1, 0, -1):
        lines += [f"        i{d} = rest % D{d}", f"        rest = rest // D{d}"]
    lines.append("        i0 = rest")
    for v in inputs:
        index = " + ".join(f"i{d} * {v}_s{d}" for d in range(MAX_DIMS))
        lines += [f"    if {v.upper()}_FLAT:", f"        {v}_at = offs",
                  "    else:", f"        {v}_at = {index}",
                  f"    {v} = tl.load({v}_ptr + {v}_at, mask=mask)",
                  f"    if {v}.dtype == tl.float16:", f"        {v} = {v}.to(tl.float32)"]
    lines += [f"    result = {expression}",
              "    tl.store(out_ptr + offs, result.to(out_ptr.dtype.element_ty), mask=mask)"]
    return "\n".join(lines) + "\n"


_COMPILED: dict = {}


def _kernel(name: str, attrs: tuple[str, ...]):
    key = (name, attrs)
    found = _COMPILED.get(key)
    if found is None:
        assert set(attrs) <= set(CONSTANTS.values()), attrs  # rill's own names only
        inputs, expression = EXPRESSIONS[name]
        source = ("import triton.language as tl\n" + _HELPERS + "\n\n" +
                  _kernel_source(name, inputs, expression, attrs))
        # Triton reads a kernel's source through `inspect`, which finds it in linecache.
        filename = f"<rill generated elementwise kernel {name}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        scope = {"libdevice": libdevice, "jit": jit, "__name__": __name__}  # real Triton reads it
        exec(compile(source, filename, "exec"), scope)
        found = _COMPILED[key] = scope[f"{name}_kernel"]
    return found


def _layout(shape, buffers):
    """Collapse the output shape and each input's strides (0 where broadcast) to the fewest
    dims: size-1 dims dropped, neighbours merged where every input lets them."""
    rank = len(shape)
    per_input = []
    for b in buffers:
        s = strides(b)
        lead = rank - b.ndim
        per_input.append([0] * lead + [0 if b.shape[i] == 1 else s[i] for i in range(b.ndim)])
    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in buffers]
    for i, d in enumerate(shape):
        if d == 1:
            continue
        if dims and all(m[-1] == s[i] * d for m, s in zip(merged, per_input)):
            dims[-1] *= d
            for m, s in zip(merged, per_input):
                m[-1] = s[i]
        else:
            dims.append(d)
            for m, s in zip(merged, per_input):
                m.append(s[i])
    return dims, merged


def _is_flat(dims, input_strides) -> bool:
    expected = 1
    for d, s in zip(reversed(dims), reversed(input_strides)):
        if s != expected:
            return False
        expected *= d
    return True


def launch(name: str, buffers, out_shape, out_dtype, **attrs):
    """Run EXPRESSIONS[name] over broadcast `buffers` into a new contiguous buffer."""
    refuse_complex(name, *buffers)
    out_dtype = np.dtype(out_dtype)
    out = empty(out_shape, out_dtype)
    n = out.size
    if n == 0:
        return out
    # Booleans travel as bytes (0/1): Triton's 1-bit pointers are not byte arrays everywhere.
    buffers = [b.view(np.uint8) if b.dtype == np.bool_ else b for b in buffers]
    out_view = out.view(np.uint8) if out_dtype == np.bool_ else out
    dims, merged = _layout(tuple(out_shape), buffers)
    if len(dims) > MAX_DIMS:
        raise NotImplementedError(f"{len(dims)} dims that cannot be merged (at most {MAX_DIMS})")
    pad = MAX_DIMS - len(dims)
    sizes = [1] * pad + dims
    args = [pointer(out_view)] + [pointer(b) for b in buffers] + [n] + sizes[1:]
    flags = {}
    for b, s, v in zip(buffers, merged, EXPRESSIONS[name][0]):
        args += [0] * pad + s
        flags[f"{v.upper()}_FLAT"] = _is_flat(dims, s)
    block = block_for(n)
    _kernel(name, tuple(sorted(attrs)))[(cdiv(n, block),)](*args, **attrs, **flags, BLOCK=block)
    return out


def refuse_complex(op: str, *buffers) -> None:
    """Complex numbers have no gpu kernels: a DeviceError naming the op."""
    if any(b.dtype.kind == "c" for b in buffers):
        raise DeviceError("complex tensors are CPU-only in rill; move them with .to('cpu')",
                          op=op)


def _broadcast_shape(*buffers):
    return np.broadcast_shapes(*(b.shape for b in buffers))


def _result_dtype(*buffers):
    return np.result_type(*buffers)


def _elementwise(name, bool_result=False):
    def kernel(*buffers, **attrs):
        if name in _INTEGER_IDENTITY and buffers[0].dtype.kind in "iub":
            return launch("copy", buffers, buffers[0].shape, buffers[0].dtype)
        dtype = np.bool_ if bool_result else _result_dtype(*buffers)
        return launch(name, buffers, _broadcast_shape(*buffers), dtype, **_constants(name, attrs))
    kernel.__name__ = name
    return kernel


def _constants(name: str, attrs: dict) -> dict:
    """attrs as the kernel's constexpr arguments: names from CONSTANTS, values plain numbers."""
    out = {}
    for key, value in attrs.items():
        if key not in CONSTANTS:
            raise ArgumentError(f"the gpu kernel takes no attribute {key!r}", op=name)
        if type(value) not in (int, float) or not math.isfinite(value):
            raise ArgumentError(f"attribute {key} must be a finite number, got {value!r}",
                                op=name)
        out[CONSTANTS[key]] = value
    return out


def _floor_divide(x, y):
    kind = _result_dtype(x, y).kind
    return _elementwise("floor_divide_int" if kind in "iu" else "floor_divide")(x, y)


def _power(x, y):
    kind = _result_dtype(x, y).kind
    return _elementwise("power_int" if kind in "iu" else "power")(x, y)


def _signbit(x):
    return _elementwise("signbit" if x.dtype.kind == "f" else "signbit_int", True)(x)


def _bitwise_invert(x):
    return _elementwise("logical_not" if x.dtype == np.bool_ else "bitwise_invert")(x)


def _nextafter(x, y):
    if x.dtype == np.float16:  # the kernel computes float16 in float32: the wrong neighbour
        raise DeviceError("nextafter of float16 has no gpu kernel; cast to float32, or run it "
                          "on the CPU", op="nextafter")
    return _elementwise("nextafter")(x, y)


def _unsupported(name):
    def kernel(*buffers, **attrs):
        refuse_complex(name, *buffers)
        raise DeviceError("no gpu kernel for this op", op=name)
    return kernel


def _gelu(x, approximate):
    return _elementwise("gelu_tanh" if approximate == "tanh" else "gelu_exact")(x)


def _where(condition, x, y):
    return launch("where", (condition, x, y), _broadcast_shape(condition, x, y),
                  _result_dtype(x, y))


def _cast(x, dtype):
    # bfloat16 results are rounded afterwards, as every op's (the backend's round_to_bfloat16).
    storage = dtype.storage
    return launch("cast_to_bool" if storage == np.bool_ else "cast", (x,), x.shape, storage)


def contiguous(x):
    """x itself when C-contiguous, else a contiguous copy made on the device."""
    if x.flags.c_contiguous:
        return x
    return launch("copy", (x,), x.shape, x.dtype)


def round_to_bfloat16(x):
    """float32 values rounded to the nearest bfloat16, in float32 storage (the CPU rule)."""
    return launch("round_bf16", (x,), x.shape, np.float32)


_NAMES = [name for name in EXPRESSIONS
          if name not in ("copy", "cast", "cast_to_bool", "floor_divide_int", "gelu_exact",
                          "gelu_tanh", "power_int", "round_bf16", "where", "signbit_int",
                          "imag_of_real")]
KERNELS = {name: _elementwise(name, name in _BOOL_RESULT) for name in _NAMES}
KERNELS.update({"floor_divide": _floor_divide, "power": _power, "gelu": _gelu,
                "where": _where, "cast": _cast, "signbit": _signbit,
                "bitwise_invert": _bitwise_invert, "nextafter": _nextafter})
# conj and real reach a kernel for complex inputs only, which live on the CPU; imag of a real
# tensor is its zeros (the op keeps a gradient edge, so it is not skipped like real's).
KERNELS.update({name: _unsupported(name) for name in ("conj", "real")})
KERNELS["imag"] = _elementwise("imag_of_real")

register_kernels("gpu", KERNELS)

# The gpu backend rounds bfloat16 results with this kernel (lib/gpu.py never imports the
# kernels' modules: they import rill.ops, which sits above it).
_gpu_backend.GpuBackend.bfloat16_rounding = staticmethod(round_to_bfloat16)
