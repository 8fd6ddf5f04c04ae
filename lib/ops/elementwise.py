"""Elementwise primitives: unary math, activations, binary arithmetic, comparisons, where, clip, cast.

Gradient rules are written in rill ops, so they run eagerly, inside captured graphs, and
under create_graph for higher derivatives alike. Binary rules sum the cotangent back to
each input's shape (`sum_to_shape`), which is what broadcasting asks of a gradient.
"""
from __future__ import annotations

import math

from .. import dtypes as dt
from ..ops.primitive import COMPLEX_RULES
from ..eager.bind import bind
from ..errors import DTypeError, ShapeError, reports_as
from . import attrs as A
from . import batching
from . import promotion
from . import reduce as _reduce, shape as _shape  # used at call time (they import this one)
from .arguments import as_choice, as_dtype, as_float
from .primitive import primitive
from .rules import broadcast_shapes, require

# ---- shape/dtype rules ---------------------------------------------------------------------


def _same(x):
    return x.shape, x.dtype


def _same_alpha(x, *, alpha):
    return x.shape, x.dtype


def _same_gelu(x, *, approximate):
    return x.shape, x.dtype


def _same_real(x):
    require(x, "f", "a real floating tensor (the standard leaves it undefined for complex)")
    return x.shape, x.dtype


def _same_real_alpha(x, *, alpha):
    return _same_real(x)


def _same_real_gelu(x, *, approximate):
    return _same_real(x)


def _numeric(x):
    require(x, "iuf", "a real numeric tensor (not bool; complex has no order)")
    return x.shape, x.dtype


def _numeric_or_complex(x):
    require(x, "iufc", "a numeric tensor (not bool)")
    return x.shape, x.dtype


def _to_real(x):
    """abs, real, imag: complex64 -> float32, complex128 -> float64; others keep their dtype."""
    require(x, "iufc", "a numeric tensor (not bool)")
    return x.shape, dt.real_of(x.dtype)


def _integer(x):
    require(x, "biu", "an integer or bool tensor")
    return x.shape, x.dtype


def _real_predicate(x):
    require(x, "biuf", "a real tensor (complex has no sign bit)")
    return x.shape, dt.bool_


def _predicate(x):
    return x.shape, dt.bool_


def _binary_same(x, y):
    if x.shape == y.shape:  # skip the call on the hot path
        return x.shape, x.dtype
    return broadcast_shapes(x.shape, y.shape), x.dtype


def _binary_numeric(x, y):
    require(x, "iufc", "numeric tensors (not bool)")
    return broadcast_shapes(x.shape, y.shape), x.dtype


def _binary_real(x, y):
    require(x, "biuf", "real tensors (complex numbers have no order)")
    return _binary_same(x, y)


def _binary_real_numeric(x, y):
    require(x, "iuf", "real numeric tensors (not bool; complex has no order)")
    return broadcast_shapes(x.shape, y.shape), x.dtype


def _binary_real_float(x, y):
    require(x, "f", "real floating tensors (the standard defines it for real numbers only)")
    return _binary_same(x, y)


def _binary_next(x, y):
    if x.dtype is dt.bfloat16:  # its CPU buffers are float32: the next float32 would round back
        raise DTypeError("nextafter has no bfloat16 kernel; cast to float32 first", op="nextafter")
    return _binary_real_float(x, y)


def _binary_shift(x, y):
    require(x, "iu", "integer tensors")
    return broadcast_shapes(x.shape, y.shape), x.dtype


def _binary_integer(x, y):
    require(x, "biu", "integer or bool tensors")
    return broadcast_shapes(x.shape, y.shape), x.dtype


def _binary_bool(x, y):
    return broadcast_shapes(x.shape, y.shape), dt.bool_


def _binary_order(x, y):
    require(x, "biuf", "real tensors (complex numbers have no order)")
    return broadcast_shapes(x.shape, y.shape), dt.bool_


# ---- gradient helpers ----------------------------------------------------------------------


def sum_to_shape(g, shape):
    """Sum a broadcast cotangent back down to `shape`."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    _sum, reshape = _reduce.sum, _shape.reshape
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                      if s == 1 and g.shape[lead + i] != 1)
    if not axes:
        return reshape(g, shape)
    if not lead:  # the summed axes kept as the 1s of `shape`: no reshape after
        return _sum(g, axis=axes, keepdims=True)
    return reshape(_sum(g, axis=axes), shape)


def _zero(g, out, x, **_):
    return (zeros_like(x),)


# ---- unary primitives ----------------------------------------------------------------------
# name: (normalize, infer, vjp, save_output)

_LN2 = math.log(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_F = promotion.floating


def _gelu_vjp(g, out, x, approximate="none"):
    if approximate == "tanh":
        t = tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
    elif x.device.kind == "cpu" and x.dtype in _FAST_GRAD_DTYPES and g.dtype is x.dtype:
        # one pass (kernels/numpy/special.py) where the composite below is eleven
        return (bind(gelu_grad_p, g, x),)
    else:
        d = 0.5 * (1 + erf(x * _INV_SQRT_2)) + x * exp(-0.5 * x * x) * _INV_SQRT_2PI
    return (g * d,)


def _g_and_x_infer(g, x):
    require(x, "f", "real floating tensors")
    if g.dtype is not x.dtype:
        raise DTypeError(f"expects g and x of one dtype, got {g.dtype} and {x.dtype}")
    if tuple(g.shape) != tuple(x.shape):
        raise ShapeError(f"expects g and x of one shape, got {g.shape} and {x.shape}")
    return x.shape, x.dtype


def _gelu_grad_vjp(h, out, g, x):
    # g gelu'(x) is linear in g; gelu''(x) = phi(x) (2 - x^2), phi the normal density
    return (_gelu_vjp(h, None, x)[0] if g.requires_grad else None,
            h * g * (exp(-0.5 * x * x) * _INV_SQRT_2PI) * (2 - x * x) if x.requires_grad
            else None)


_FAST_GRAD_DTYPES = (dt.float32, dt.float64)
# g * gelu'(x) for exact gelu: a CPU kernel for float32/float64, which gelu's gradient calls.
gelu_grad_p = primitive("gelu_grad", _g_and_x_infer, _gelu_grad_vjp, attrs={},
                        cpu_only="a CPU fast path: other devices run gelu's gradient as a "
                                 "composite in rill ops", batch=batching.same_shapes,
                        cache_rule="compiled")


def _relu_vjp(g, x):
    if x.device.kind == "cpu" and x.dtype in _FAST_GRAD_DTYPES and g.dtype is x.dtype:
        # one pass (kernels/numpy/elementwise.py) where where(x > 0, g, 0) is two primitives
        # and four passes
        return bind(relu_grad_p, g, x)
    return where(x > 0, g, 0)


def _relu_grad_vjp(h, out, g, x):
    # linear in g; piecewise constant in x (0 almost everywhere, as where's rule gives it)
    return (bind(relu_grad_p, h, x) if g.requires_grad else None, None)


# g where x > 0, else 0: ReLU's gradient, a CPU kernel for float32/float64 that relu's rule
# binds.
relu_grad_p = primitive("relu_grad", _g_and_x_infer, _relu_grad_vjp, attrs={},
                        cpu_only="a CPU fast path: other devices run relu's gradient as a "
                                 "composite in rill ops", batch=batching.same_shapes,
                        cache_rule="compiled")


def _silu_vjp(g, out, x):
    s = sigmoid(x)
    return (g * (s * (1 + x * (1 - s))),)


_LN10 = math.log(10.0)


def _abs_vjp(g, out, x):
    # sign(z) = z/|z| for complex z: PyTorch's d|z| convention; sign(x) for real x.
    return (g * sign(x),)


def _sign_vjp(g, out, x):
    if not x.dtype.is_complex:
        return (zeros_like(x),)
    # s = z/|z| moves only along the circle: the part of g across it, divided by |z|.
    s = sign(x)
    across = g - real(g * conj(s)) * s
    size = abs(x)
    return (where(size == 0, 0.0, across / where(size == 0, 1.0, size)),)


def _real_vjp(g, out, x):
    return (cast(g, x.dtype) if x.dtype.is_complex else g,)


def _imag_vjp(g, out, x):
    return (multiply(g, 1j) if x.dtype.is_complex else zeros_like(x),)


def _conj_vjp(g, out, x):
    return (conj(g),)


_UNARY = {
    "neg": (None, _numeric_or_complex, lambda g, out, x: (-g,), False),
    "abs": (None, _to_real, _abs_vjp, False),
    "sign": (None, _numeric_or_complex, _sign_vjp, False),
    "square": (None, _numeric_or_complex, lambda g, out, x: (g * (2 * x),), False),
    "relu": (None, _numeric, lambda g, out, x: (_relu_vjp(g, x),), False),
    "floor": (None, _numeric, _zero, False),
    "ceil": (None, _numeric, _zero, False),
    "round": (None, _numeric_or_complex, _zero, False),
    "trunc": (None, _numeric, _zero, False),
    "exp": (_F, _same, lambda g, out, x: (g * out,), True),
    "exp2": (_F, _same, lambda g, out, x: (g * out * _LN2,), True),
    "log": (_F, _same, lambda g, out, x: (g / x,), False),
    "log2": (_F, _same, lambda g, out, x: (g / (x * _LN2),), False),
    "log10": (_F, _same, lambda g, out, x: (g / (x * _LN10),), False),
    "log1p": (_F, _same, lambda g, out, x: (g / (1 + x),), False),
    "expm1": (_F, _same, lambda g, out, x: (g * (out + 1),), True),
    "sqrt": (_F, _same, lambda g, out, x: (g / (2 * out),), True),
    "rsqrt": (_F, _same, lambda g, out, x: (g * (-0.5 * out / x),), True),
    "reciprocal": (_F, _same, lambda g, out, x: (-g * out * out,), True),
    "sin": (_F, _same, lambda g, out, x: (g * cos(x),), False),
    "cos": (_F, _same, lambda g, out, x: (-g * sin(x),), False),
    "tan": (_F, _same, lambda g, out, x: (g * (1 + out * out),), True),
    "tanh": (_F, _same, lambda g, out, x: (g * (1 - out * out),), True),
    "sinh": (_F, _same, lambda g, out, x: (g * cosh(x),), False),
    "cosh": (_F, _same, lambda g, out, x: (g * sinh(x),), False),
    "arcsin": (_F, _same, lambda g, out, x: (g * rsqrt(1 - x * x),), False),
    "arccos": (_F, _same, lambda g, out, x: (-g * rsqrt(1 - x * x),), False),
    "arctan": (_F, _same, lambda g, out, x: (g / (1 + x * x),), False),
    "arcsinh": (_F, _same, lambda g, out, x: (g * rsqrt(1 + x * x),), False),
    # sqrt(x - 1) * sqrt(x + 1), not sqrt(x*x - 1): the same for real x > 1, and the right
    # branch for complex x.
    "arccosh": (_F, _same, lambda g, out, x: (g / (sqrt(x - 1) * sqrt(x + 1)),), False),
    "arctanh": (_F, _same, lambda g, out, x: (g / (1 - x * x),), False),
    "sigmoid": (_F, _same_real, lambda g, out, x: (g * out * (1 - out),), True),
    "softplus": (_F, _same_real, lambda g, out, x: (g * sigmoid(x),), False),
    "silu": (_F, _same_real, _silu_vjp, False),
    "erf": (_F, _same_real, lambda g, out, x: (g * (_TWO_OVER_SQRT_PI * exp(-x * x)),), False),
    "leaky_relu": (_F, _same_real_alpha,
                   lambda g, out, x, alpha: (where(x > 0, g, g * alpha),), False),
    "elu": (_F, _same_real_alpha,
            lambda g, out, x, alpha: (where(x > 0, g, g * (out + alpha)),), True),
    "gelu": (_F, _same_real_gelu, _gelu_vjp, False),
    "isnan": (None, _predicate, None, False),
    "isinf": (None, _predicate, None, False),
    "isfinite": (None, _predicate, None, False),
    "signbit": (None, _real_predicate, None, False),
    "logical_not": (None, _predicate, None, False),
    "bitwise_invert": (None, _integer, None, False),
    "conj": (None, _numeric_or_complex, _conj_vjp, False),
    "real": (None, _to_real, _real_vjp, False),
    "imag": (None, _to_real, _imag_vjp, False),
}

# Rules that already give PyTorch's complex gradient (conj(dL/dz) convention) themselves:
# backward calls them as they are. Every other rule is a holomorphic derivative, which
# backward conjugates around (lib/autodiff/backward.py:call_vjp).
COMPLEX_RULES.update({"abs", "sign", "conj", "real", "imag", "cast"})

_GELU_MODES = ("none", "tanh")
_UNARY_ATTRS = {"leaky_relu": {"alpha": A.FLOAT}, "elu": {"alpha": A.FLOAT},
                "gelu": {"approximate": A.Choice(*_GELU_MODES)}}

P = {name: primitive(name, infer, vjp, normalize=norm, save_output=save,
                     attrs=_UNARY_ATTRS.get(name, {}), batch=batching.elementwise,
                     cache_rule=False)  # a shape copied: cheaper than any lookup
     for name, (norm, infer, vjp, save) in _UNARY.items()}


def neg(x):
    """-x, elementwise."""
    return bind(P["neg"], x)


def abs(x):  # noqa: A001 - the public name is rill.abs
    """|x|, elementwise; the modulus of a complex x, as a real tensor (complex64 -> float32).

    >>> rill.abs(rill.tensor([3 + 4j]))
    tensor([5.])
    """
    return bind(P["abs"], x)


def sign(x):
    """-1, 0 or 1 by the sign of x (NaN stays NaN); z/|z| for complex z (0 at 0)."""
    return bind(P["sign"], x)


def square(x):
    return bind(P["square"], x)


def relu(x):
    """max(x, 0).

    >>> rill.relu(rill.tensor([-1.0, 2.0]))
    tensor([0., 2.])
    """
    return bind(P["relu"], x)


def floor(x):
    return bind(P["floor"], x)


def ceil(x):
    return bind(P["ceil"], x)


def round(x):  # noqa: A001
    """Round half to even, as NumPy does; complex numbers round each part."""
    return bind(P["round"], x)


def trunc(x):
    return bind(P["trunc"], x)


def exp(x):
    """e**x.  Integer tensors compute in float32.

    >>> rill.exp(rill.tensor([0.0, 1.0]))
    tensor([1.      , 2.718282])
    """
    return bind(P["exp"], x)


def exp2(x):
    return bind(P["exp2"], x)


def log(x):
    """Natural logarithm."""
    return bind(P["log"], x)


def log2(x):
    return bind(P["log2"], x)


def log1p(x):
    """log(1 + x), accurate for small x."""
    return bind(P["log1p"], x)


def expm1(x):
    """exp(x) - 1, accurate for small x."""
    return bind(P["expm1"], x)


def sqrt(x):
    return bind(P["sqrt"], x)


def rsqrt(x):
    """1 / sqrt(x)."""
    return bind(P["rsqrt"], x)


def reciprocal(x):
    return bind(P["reciprocal"], x)


def sin(x):
    return bind(P["sin"], x)


def cos(x):
    return bind(P["cos"], x)


def tan(x):
    return bind(P["tan"], x)


def tanh(x):
    return bind(P["tanh"], x)


def sinh(x):
    return bind(P["sinh"], x)


def cosh(x):
    return bind(P["cosh"], x)


def arcsin(x):
    return bind(P["arcsin"], x)


def arccos(x):
    return bind(P["arccos"], x)


def arctan(x):
    return bind(P["arctan"], x)


def arcsinh(x):
    """The inverse hyperbolic sine."""
    return bind(P["arcsinh"], x)


def arccosh(x):
    """The inverse hyperbolic cosine (NaN below 1 for real x)."""
    return bind(P["arccosh"], x)


def arctanh(x):
    """The inverse hyperbolic tangent (+-inf at +-1, NaN beyond for real x)."""
    return bind(P["arctanh"], x)


def log10(x):
    """Base-10 logarithm."""
    return bind(P["log10"], x)


def signbit(x):
    """True where the sign bit is set: negative numbers, -0.0 and NaNs with the bit set.

    >>> rill.ops.elementwise.signbit(rill.tensor([-0.0, 0.0, -2.0]))
    tensor([ True, False,  True])
    """
    return bind(P["signbit"], x)


def bitwise_invert(x):
    """~x: every bit flipped (logical not for bool)."""
    return bind(P["bitwise_invert"], x)


def _real_numeric(x, op):
    """x as a tensor when it is real (checked numeric, as the op's rule would); None when
    it is complex and needs the op."""
    x = promotion.lift((x,))[0]
    if x.dtype.is_complex:
        return None
    try:
        _numeric_or_complex(x)
    except DTypeError as e:
        e.op = op
        raise
    return x


def conj(x):
    """The complex conjugate a - bj; a real tensor is returned as it is."""
    same = _real_numeric(x, "conj")
    return same if same is not None else bind(P["conj"], x)


def real(x):
    """The real part, as a real tensor (complex64 -> float32); a real tensor as it is.

    >>> rill.ops.elementwise.real(rill.tensor([1 + 2j]))
    tensor([1.])
    """
    same = _real_numeric(x, "real")
    return same if same is not None else bind(P["real"], x)


def imag(x):
    """The imaginary part, as a real tensor (complex64 -> float32); zeros for a real one."""
    return bind(P["imag"], x)


def positive(x):
    """+x: x itself (the standard's positive; numeric dtypes only)."""
    same = _real_numeric(x, "positive")
    return same if same is not None else promotion.lift((x,))[0]


negative = neg
acos, asin, atan = arccos, arcsin, arctan
acosh, asinh, atanh = arccosh, arcsinh, arctanh


def sigmoid(x):
    """1 / (1 + exp(-x)), computed without overflow."""
    return bind(P["sigmoid"], x)


def softplus(x):
    """log(1 + exp(x)), computed without overflow."""
    return bind(P["softplus"], x)


def silu(x):
    """x * sigmoid(x) (also called swish)."""
    return bind(P["silu"], x)


def erf(x):
    """The error function."""
    return bind(P["erf"], x)


def leaky_relu(x, negative_slope: float = 0.01):
    """x for x > 0, negative_slope * x otherwise."""
    return bind(P["leaky_relu"], x,
                alpha=as_float(negative_slope, "negative_slope", "leaky_relu"))


def elu(x, alpha: float = 1.0):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""
    return bind(P["elu"], x, alpha=as_float(alpha, "alpha", "elu"))


def gelu(x, approximate: str = "none"):
    """x * Phi(x); approximate='tanh' uses the tanh formula of the GPT-2 paper."""
    return bind(P["gelu"], x, approximate=as_choice(approximate, "approximate", "gelu",
                                                    _GELU_MODES))


def isnan(x):
    return bind(P["isnan"], x)


def isinf(x):
    return bind(P["isinf"], x)


def isfinite(x):
    return bind(P["isfinite"], x)


def logical_not(x):
    return bind(P["logical_not"], x)


# ---- binary primitives ---------------------------------------------------------------------


# Binary rules compute a cotangent only for an input that requires grad: a constant operand
# (a mask, a count, a learning rate) costs nothing in the backward pass.

def _add_vjp(g, out, x, y):
    return (sum_to_shape(g, x.shape) if x.requires_grad else None,
            sum_to_shape(g, y.shape) if y.requires_grad else None)


def _sub_vjp(g, out, x, y):
    return (sum_to_shape(g, x.shape) if x.requires_grad else None,
            sum_to_shape(-g, y.shape) if y.requires_grad else None)


def _mul_vjp(g, out, x, y):
    return (sum_to_shape(g * y, x.shape) if x.requires_grad else None,
            sum_to_shape(g * x, y.shape) if y.requires_grad else None)


def _div_vjp(g, out, x, y):
    return (sum_to_shape(g / y, x.shape) if x.requires_grad else None,
            sum_to_shape(-g * x / (y * y), y.shape) if y.requires_grad else None)


def _zero2(g, out, x, y):
    return zeros_like(x), zeros_like(y)


def _rem_vjp(g, out, x, y):
    return sum_to_shape(g, x.shape), sum_to_shape(-g * floor_divide(x, y), y.shape)


def _pow_vjp(g, out, x, y):
    gx = gy = None
    if x.requires_grad:
        gx = sum_to_shape(where(y == 0, 0.0, g * y * power(x, y - 1)), x.shape)
    if y.requires_grad:
        gy = sum_to_shape(where(x == 0, 0.0, g * out * log(where(x == 0, 1.0, x))), y.shape)
    return gx, gy


def _extremum_vjp(g, out, x, y, wins):
    # Ties split the gradient evenly, as PyTorch's maximum/minimum do.
    share = where(x == y, 0.5, where(wins(x, y), 1.0, 0.0))
    return sum_to_shape(g * share, x.shape), sum_to_shape(g * (1 - share), y.shape)


def _arctan2_vjp(g, out, y, x):
    d = g / (x * x + y * y)
    return sum_to_shape(d * x, y.shape), sum_to_shape(-d * y, x.shape)


def _logaddexp_vjp(g, out, x, y):
    return (sum_to_shape(g * exp(x - out), x.shape) if x.requires_grad else None,
            sum_to_shape(g * exp(y - out), y.shape) if y.requires_grad else None)


def _hypot_vjp(g, out, x, y):
    d = g / out
    return (sum_to_shape(d * x, x.shape) if x.requires_grad else None,
            sum_to_shape(d * y, y.shape) if y.requires_grad else None)


def _copysign_vjp(g, out, x, y):
    # The result is x or -x: +g where the sign was kept, -g where it flipped.
    flipped = not_equal(signbit(x), signbit(y))
    return (sum_to_shape(where(flipped, -g, g), x.shape) if x.requires_grad else None,
            zeros_like(y) if y.requires_grad else None)


_C, _CF, _L = promotion.common, promotion.common_float, promotion.lift

_BINARY = {
    "add": (_C, _binary_same, _add_vjp, False),
    "subtract": (_C, _binary_numeric, _sub_vjp, False),
    "multiply": (_C, _binary_same, _mul_vjp, False),
    "divide": (_CF, _binary_same, _div_vjp, False),
    "floor_divide": (_C, _binary_real_numeric, _zero2, False),
    "remainder": (_C, _binary_real_numeric, _rem_vjp, False),
    "power": (_C, _binary_numeric, _pow_vjp, True),
    "maximum": (_C, _binary_real, lambda g, o, x, y: _extremum_vjp(g, o, x, y, greater), False),
    "minimum": (_C, _binary_real, lambda g, o, x, y: _extremum_vjp(g, o, x, y, less), False),
    "arctan2": (_CF, _binary_real_float, _arctan2_vjp, False),
    "logaddexp": (_CF, _binary_real_float, _logaddexp_vjp, True),
    "hypot": (_CF, _binary_real_float, _hypot_vjp, True),
    "copysign": (_CF, _binary_real_float, _copysign_vjp, False),
    "nextafter": (_CF, _binary_next, _zero2, False),
    "equal": (_C, _binary_bool, None, False),
    "not_equal": (_C, _binary_bool, None, False),
    "less": (_C, _binary_order, None, False),
    "less_equal": (_C, _binary_order, None, False),
    "greater": (_C, _binary_order, None, False),
    "greater_equal": (_C, _binary_order, None, False),
    "logical_and": (_L, _binary_bool, None, False),
    "logical_or": (_L, _binary_bool, None, False),
    "logical_xor": (_L, _binary_bool, None, False),
    "bitwise_and": (_C, _binary_integer, None, False),
    "bitwise_or": (_C, _binary_integer, None, False),
    "bitwise_xor": (_C, _binary_integer, None, False),
    "bitwise_left_shift": (_C, _binary_shift, None, False),
    "bitwise_right_shift": (_C, _binary_shift, None, False),
}

P.update({name: primitive(name, infer, vjp, normalize=norm, save_output=save, attrs={},
                          batch=batching.elementwise, cache_rule="compiled")
          for name, (norm, infer, vjp, save) in _BINARY.items()})


def add(x, y):
    """x + y with broadcasting and dtype promotion.

    >>> rill.add(rill.tensor([1, 2]), 0.5)
    tensor([1.5, 2.5])
    """
    return bind(P["add"], x, y)


def subtract(x, y):
    return bind(P["subtract"], x, y)


def multiply(x, y):
    return bind(P["multiply"], x, y)


def divide(x, y):
    """True division; integers divide as float32."""
    return bind(P["divide"], x, y)


def floor_divide(x, y):
    """floor(x / y), Python's `//`."""
    return bind(P["floor_divide"], x, y)


def remainder(x, y):
    """x - floor(x / y) * y, Python's `%` (the sign follows y)."""
    return bind(P["remainder"], x, y)


def power(x, y):
    return bind(P["power"], x, y)


def maximum(x, y):
    return bind(P["maximum"], x, y)


def minimum(x, y):
    return bind(P["minimum"], x, y)


def arctan2(y, x):
    """The angle of the point (x, y), in (-pi, pi]."""
    return bind(P["arctan2"], y, x)


def logaddexp(x, y):
    """log(exp(x) + exp(y)) without overflow.

    >>> rill.ops.elementwise.logaddexp(rill.tensor([1000.0]), rill.tensor([1000.0]))
    tensor([1000.6932])
    """
    return bind(P["logaddexp"], x, y)


def hypot(x, y):
    """sqrt(x**2 + y**2) without overflow; +inf if either is infinite (even with a NaN)."""
    return bind(P["hypot"], x, y)


def copysign(x, y):
    """|x| with the sign (bit) of y."""
    return bind(P["copysign"], x, y)


def nextafter(x, y):
    """The next representable float after x toward y."""
    return bind(P["nextafter"], x, y)


def equal(x, y):
    return bind(P["equal"], x, y)


def not_equal(x, y):
    return bind(P["not_equal"], x, y)


def less(x, y):
    return bind(P["less"], x, y)


def less_equal(x, y):
    return bind(P["less_equal"], x, y)


def greater(x, y):
    return bind(P["greater"], x, y)


def greater_equal(x, y):
    return bind(P["greater_equal"], x, y)


def logical_and(x, y):
    return bind(P["logical_and"], x, y)


def logical_or(x, y):
    return bind(P["logical_or"], x, y)


def logical_xor(x, y):
    return bind(P["logical_xor"], x, y)


def bitwise_and(x, y):
    return bind(P["bitwise_and"], x, y)


def bitwise_or(x, y):
    return bind(P["bitwise_or"], x, y)


def bitwise_xor(x, y):
    return bind(P["bitwise_xor"], x, y)


def bitwise_left_shift(x, y):
    """x << y for integers (y >= 0; shifting past the width gives 0)."""
    return bind(P["bitwise_left_shift"], x, y)


def bitwise_right_shift(x, y):
    """x >> y for integers, arithmetic for signed types (y >= 0)."""
    return bind(P["bitwise_right_shift"], x, y)


atan2 = arctan2
pow = power  # noqa: A001 - the standard's name


# ---- where, clip, cast ---------------------------------------------------------------------


def _where_infer(c, x, y):
    require(c, "b", "a bool condition")
    return broadcast_shapes(c.shape, x.shape, y.shape), x.dtype


def _where_vjp(g, out, c, x, y):
    return (None, sum_to_shape(where(c, g, 0.0), x.shape),
            sum_to_shape(where(c, 0.0, g), y.shape))


where_p = primitive("where", _where_infer, _where_vjp, normalize=promotion.bool_then_common,
                    attrs={}, batch=batching.elementwise, cache_rule="compiled")


def where(condition, x, y):
    """x where condition is true, else y (all three broadcast).

    >>> rill.where(rill.tensor([True, False]), 1.0, 2.0)
    tensor([1., 2.])
    """
    return bind(where_p, condition, x, y)


def _clip_infer(x, lo, hi):
    require(x, "iuf", "a numeric tensor")
    return broadcast_shapes(x.shape, lo.shape, hi.shape), x.dtype


def _clip_vjp(g, out, x, lo, hi):
    inside = logical_and(x >= lo, x <= hi)
    return (sum_to_shape(where(inside, g, 0.0), x.shape),
            sum_to_shape(where(x < lo, g, 0.0), lo.shape),
            sum_to_shape(where(x > hi, g, 0.0), hi.shape))


clip_p = primitive("clip", _clip_infer, _clip_vjp, normalize=promotion.common, attrs={},
                   batch=batching.elementwise)


@reports_as("clip")
def clip(x, min=None, max=None):  # noqa: A002 - NumPy's names
    """x limited to [min, max]; either bound may be None (a scalar or a tensor); with
    neither, x itself (the Array API's rule)."""
    if min is None and max is None:
        return x
    if min is None:
        return minimum(x, max)
    if max is None:
        return maximum(x, min)
    return bind(clip_p, x, min, max)


def _cast_infer(x, *, dtype):
    if x.dtype.is_complex and dtype.kind in "iuf":
        raise DTypeError(f"casting {x.dtype} to {dtype} would drop the imaginary part (the "
                         "Array API standard leaves it undefined); take rill.real(x) or "
                         "rill.abs(x) first")
    return x.shape, dtype


def _cast_vjp(g, out, x, dtype):
    if g.dtype.is_complex and not x.dtype.is_complex:  # real -> complex: d/dx takes Re(g)
        return (cast(real(g), x.dtype),)
    return (cast(g, x.dtype),)


cast_p = primitive("cast", _cast_infer, _cast_vjp, attrs={"dtype": A.DTypeAttr},
                   batch=batching.elementwise, cache_rule="compiled")


def cast(x, dtype):
    """x converted to `dtype` (floats to ints truncate toward zero, ints wrap)."""
    return bind(cast_p, x, dtype=as_dtype(dtype, "cast"))


def zeros_like(x, dtype=None):
    from .creation import zeros_like as _zl
    return _zl(x, dtype=dtype)


# ---- scaled_add: the update of every optimizer, in one op -----------------------------------

def _scaled_add_infer(x, y, *, alpha, beta):
    require(x, "f", "floating-point tensors")
    return _binary_same(x, y)


def _scaled_add_vjp(g, out, x, y, alpha, beta):
    return (sum_to_shape(g * alpha, x.shape) if x.requires_grad else None,
            sum_to_shape(g * beta, y.shape) if y.requires_grad else None)


P["scaled_add"] = primitive("scaled_add", _scaled_add_infer, _scaled_add_vjp,
                            normalize=promotion.common_float,
                            attrs={"alpha": A.FLOAT, "beta": A.FLOAT}, batch=batching.elementwise,
                            cache_rule="compiled")


def scaled_add(x, y, alpha: float = 1.0, beta: float = 1.0):
    """alpha * x + beta * y in one op (one pass, one new buffer): SGD's p - lr * g,
    momentum's m * buf + g, weight decay's g + wd * p.

    >>> rill.scaled_add(rill.tensor([1.0, 2.0]), rill.tensor([10.0, 20.0]), 1.0, -0.1)
    tensor([0., 0.])
    """
    return bind(P["scaled_add"], x, y, alpha=as_float(alpha, "alpha", "scaled_add"),
                beta=as_float(beta, "beta", "scaled_add"))
