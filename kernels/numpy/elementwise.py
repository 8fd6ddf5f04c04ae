"""Elementwise CPU kernels."""
from __future__ import annotations

import functools
import math

import numpy as np

from rill import cpu_memory
from rill.dtypes import to_storage
from rill.kernels.native import build as native
from rill.ops.primitive import register_kernels

from . import parallel
from .special import erf, gelu as _gelu_exact, gelu_grad

# The compiled modules (kernels/native) these kernels may load: built ahead of a captured
# step's first call (build.prefetch).
COMPILED = ('elementwise',)


def _ignoring_errors():
    """(NumPy's context variable of its error state, the state ignoring every error), or
    None where this NumPy keeps them otherwise. Setting the variable is what np.errstate's
    __enter__ does after building the state, which costs 0.8 us a call (a third of an exp
    of 16 elements); built once here instead. Private names, hence the fallback."""
    try:
        from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
        return _extobj_contextvar, _make_extobj(all="ignore")
    except Exception:  # noqa: BLE001 - another NumPy: np.errstate below
        return None


_IGNORING = _ignoring_errors()


def quiet(fn):
    """Let inf/nan come out as values, as on a GPU, without NumPy's RuntimeWarnings."""
    if _IGNORING is None:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with np.errstate(all="ignore"):
                return fn(*args, **kwargs)
        return run
    state, ignoring = _IGNORING

    @functools.wraps(fn)
    def run(*args, **kwargs):
        token = state.set(ignoring)
        try:
            return fn(*args, **kwargs)
        finally:
            state.reset(token)
    return run


def in_float32(fn):
    """float16 formulas are evaluated in float32 and rounded once, as GPUs do."""
    @functools.wraps(fn)
    def run(x, **attrs):
        if x.dtype == np.float16:
            return fn(x.astype(np.float32), **attrs).astype(np.float16)
        return fn(x, **attrs)
    return run


def _keep_ints(fn):
    """floor/ceil/round/trunc leave integers as they are (NumPy would make them float64)."""
    return lambda x: x if x.dtype.kind in "iub" else fn(x)


@in_float32
def _sigmoid(x):
    # 1 / (1 + exp(-x)) in one buffer: four passes instead of the eight of a two-sided
    # where-form. Accurate on both sides (exp(-x) large is fine in a reciprocal); only for
    # x below about -88 (float32) does exp overflow to inf and give 0 for a subnormal.
    out = np.negative(x, out=np.empty_like(x))  # an array even for 0-d x
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    out += 1
    return np.reciprocal(out, out=out)


@in_float32
def _softplus(x):
    return np.logaddexp(x.dtype.type(0), x)


@in_float32
def _silu(x):
    return x * _sigmoid(x)


@in_float32
def _elu(x, alpha):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))).astype(x.dtype, copy=False)


@in_float32
def _leaky_relu(x, alpha):
    return np.where(x > 0, x, x * alpha).astype(x.dtype, copy=False)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@in_float32
def _gelu(x, approximate):
    if approximate == "tanh":
        return (0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))).astype(
            x.dtype, copy=False)
    return _gelu_exact(x)


class AgainstRows:
    """np.maximum/np.minimum with a scalar operand taken as a row of that scalar.

    NumPy 2.x runs these ufuncs with a 0-d operand in a loop without SIMD: at 1M float32,
    386 us against 148 with an operand as long as the other (relu, clamp). A large C-ordered
    array is therefore viewed as rows of ROW elements and the scalar as one cached row of
    ROW copies: the same elementwise operation on the same values in the same operand order,
    so the same bits (NaN and -0.0 included), and the same result dtype (the row has the
    scalar's own dtype, and a 0-d array or NumPy scalar does not promote weakly). Python
    numbers, small or non-C-ordered arrays, and `out` buffers that are not C-ordered take
    the ufunc as it is. Callable as the ufunc is, with out=.
    """

    ROW = 8192

    def __init__(self, ufunc):
        self.ufunc = ufunc
        self.__name__ = ufunc.__name__

    def __call__(self, a, b, out=None):
        if isinstance(out, tuple):  # the ufunc's out=(array,) form
            (out,) = out
        big, scalar, first = (a, b, True) if np.ndim(b) == 0 else (b, a, False)
        n = getattr(big, "size", 0)
        if n < 2 * self.ROW or type(big) is not np.ndarray or np.ndim(scalar) != 0 or \
                not isinstance(scalar, (np.ndarray, np.generic)) or \
                not big.flags.c_contiguous or big.dtype.kind not in "biuf" or \
                scalar.dtype.kind not in "biuf" or \
                (out is not None and not (out.flags.c_contiguous and out.shape == big.shape)) \
                or (out is not None and not _same_or_apart(out, big)):
            return self.ufunc(a, b, out=out)
        row = _row_of(scalar, self.ROW)
        if out is None:
            out = np.empty(big.shape, np.result_type(big.dtype, scalar.dtype))
        flat, dest, whole = big.reshape(-1), out.reshape(-1), n - n % self.ROW
        for lo, hi, r in ((0, whole, row), (whole, n, row[:n - whole])):
            if hi > lo:
                part = flat[lo:hi].reshape(-1, len(r))
                self.ufunc(*((part, r) if first else (r, part)),
                           out=dest[lo:hi].reshape(part.shape))
        return out


def _same_or_apart(out, x) -> bool:
    """out is x's own memory (in place, element by element) or shares none of it; a partial
    overlap is left to the ufunc, which copies first."""
    same = out.__array_interface__["data"][0] == x.__array_interface__["data"][0] and \
        out.strides == x.strides
    return same or not np.may_share_memory(out, x)


_ROWS: dict = {}


def _row_of(scalar, length: int):
    key = (np.dtype(scalar.dtype), np.asarray(scalar).tobytes())
    row = _ROWS.get(key)
    if row is None:
        if len(_ROWS) >= 64:
            _ROWS.clear()
        row = _ROWS[key] = np.full(length, scalar, dtype=scalar.dtype)
        row.flags.writeable = False
    return row


_MAXIMUM, _MINIMUM = AgainstRows(np.maximum), AgainstRows(np.minimum)


def _relu(x, out=None):
    """max(x, 0) as np.maximum(x, 0 of x's dtype) computes it; callable with out=. Where a C
    compiler is at hand, arrays large enough to split run one pass over the cores
    (kernels/native/elementwise.c; on OpenMP's team where it runs, parallel.team_threads):
    NumPy's maximum runs on one."""
    if type(x) is np.ndarray and (x.size >= 2 * SCALED_ADD_BLOCK or
                                  parallel.team_threads(x.size) > 1) and \
            (out is None or (type(out) is np.ndarray and out.shape == x.shape and
                             out.dtype == x.dtype and
                             (out is x or not np.may_share_memory(out, x)))):
        result = np.empty(x.shape, x.dtype) if out is None else out
        compiled = native.for_arrays("elementwise", x, result)
        if compiled is not None:
            is_double = x.dtype == np.float64
            _by_blocks(lambda start, stop, threads: compiled.relu(
                x, result, start, stop, is_double, threads), x.size)
            return result
    return _MAXIMUM(x, x.dtype.type(0), out=out)


def _rsqrt(x):
    return (1 / np.sqrt(x)).astype(x.dtype, copy=False)


def _reciprocal(x):
    return (1 / x).astype(x.dtype, copy=False)


def _real(x):
    return np.array(x.real)  # a contiguous copy; np.ascontiguousarray would make 0-d 1-d


def _imag(x):
    return np.array(x.imag) if x.dtype.kind == "c" else np.zeros_like(x)


def _clip(x, lo, hi):
    return _MINIMUM(_MAXIMUM(x, lo), hi)


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _where(condition, x, y):
    """np.where, but branch-free on large inputs: a bitwise select of the raw bits.

    np.where runs ~50x slower than a multiply when the mask is unpredictable (relu's
    gradient, dropout); (x & m) | (y & ~m) with m all-ones where true costs a few passes and
    is exact for every value, NaN and inf included.
    """
    if condition.size < 4096 or x.dtype != y.dtype or x.dtype.itemsize not in _UNSIGNED:
        return np.where(condition, x, y)
    bits = _UNSIGNED[x.dtype.itemsize]
    # 0 -> 0, 1 -> all ones (unsigned wrap): a widening copy of the booleans' bytes, then
    # negated in place (np.negative(..., dtype=bits) casts in a buffered loop: 1.3-1.6x as
    # long at 1M elements)
    mask = np.asarray(condition).view(np.uint8).astype(bits)
    np.negative(mask, out=mask)
    xb, yb = np.asarray(x).view(bits), np.asarray(y).view(bits)
    if yb.ndim == 0 and yb == 0:  # where(c, x, 0): relu's gradient, masking
        # into the mask's own buffer where it has the result's shape (one allocation less)
        out = np.bitwise_and(xb, mask, out=mask if mask.shape == xb.shape else None)
    else:
        out = (xb & mask) | (yb & ~mask)
    return out.view(x.dtype)


# Elements per thread's block of a compiled scaled_add or relu_grad: arrays of two blocks or
# more are split over the cores (below ~1M elements a hand-off costs what the second core
# saves).
SCALED_ADD_BLOCK = 1 << 19


def _by_blocks(run, size):
    """run(start, stop, threads) over [0, size): at once on OpenMP's team where it runs
    (parallel.team_threads), else in SCALED_ADD_BLOCK blocks split over rill's pool."""
    threads = parallel.team_threads(size)
    if threads > 1:
        run(0, size, threads)
        return
    parallel.split(lambda lo, hi: run(lo * SCALED_ADD_BLOCK, min(hi * SCALED_ADD_BLOCK, size),
                                      1),
                   -(-size // SCALED_ADD_BLOCK), size)


def _add(x, y, out=None):
    """x + y as np.add computes it; callable with out=. Two same-shaped float arrays run one C
    pass on OpenMP's team where it runs (parallel.team_threads; a residual block's adds and
    the gradients summed at a fork in the graph): np.add runs on one core."""
    # Every eager add passes here: the small case is tested first and calls np.add without
    # a keyword (out=None costs a ufunc ~70 ns of keyword parsing).
    if out is not None:
        return _np_add(x, y, out=out)
    if type(x) is not _ndarray or x.size < _TEAM_MIN or type(y) is not _ndarray or \
            x.shape != y.shape or x.dtype != y.dtype:
        return _np_add(x, y)
    threads = parallel.team_threads(x.size)
    compiled = native.for_arrays("elementwise", x, y) if threads > 1 else None
    if compiled is None:
        return _np_add(x, y)
    result = np.empty(x.shape, x.dtype)
    compiled.add(x, y, result, 0, x.size, x.dtype == np.float64, threads)
    return result


_np_add, _ndarray = np.add, np.ndarray
_add.ufunc = np.add  # what it computes, bit for bit (kernels/numpy/fused.py: UFUNCS)
_TEAM_MIN = parallel.TEAM_MIN_ELEMENTS  # read once: an eager add of a few elements pays ~0.1 us
_add.ufunc_below = _TEAM_MIN  # below this many elements it is np.add itself (capture/executor)


def _relu_grad(g, x):
    """where(x > 0, g, 0): ReLU's gradient from its input. Where a C compiler is at hand,
    one pass (kernels/native/elementwise.c), else the comparison and the select."""
    if type(g) is np.ndarray and type(x) is np.ndarray and g.shape == x.shape and \
            g.dtype == x.dtype:
        compiled = native.for_arrays("elementwise", g, x)
        if compiled is not None:
            out = np.empty(x.shape, x.dtype)
            is_double = x.dtype == np.float64
            _by_blocks(lambda start, stop, threads: compiled.relu_grad(
                g, x, out, start, stop, is_double, threads), x.size)
            return out
    with np.errstate(invalid="ignore"):
        return _where(np.greater(x, 0), g, g.dtype.type(0))


# Below this many elements the compiled scaled_add's fixed cost (~2.2 us: the pooled buffer,
# the split over threads) exceeds NumPy's two passes (a scalar: 2.2 against 1.2 us; 16,384
# float32 elements, alpha 0.9: 3.4 against 3.8 us).
SCALED_ADD_COMPILED_MIN = 1 << 14


def _scaled_add(x, y, alpha, beta):
    # Where a C compiler is at hand, one pass (kernels/native/elementwise.c: the same
    # operations, the same bits; 401,408 float32 elements 79 -> 54 us).
    if type(x) is np.ndarray and x.size >= SCALED_ADD_COMPILED_MIN and \
            type(y) is np.ndarray and x.shape == y.shape and x.dtype == y.dtype:
        compiled = native.for_arrays("elementwise", x, y)
        if compiled is not None:
            out = cpu_memory.empty_like(x)  # an optimizer's replaced slot, where one is free
            flags = (float(alpha), float(beta), x.dtype == np.float64)

            _by_blocks(lambda start, stop, threads: compiled.scaled_add(
                x, y, out, start, stop, *flags, threads), x.size)
            return out
    # One new buffer: scale into it, then accumulate the other operand in place.
    if alpha == 1.0 and x.shape == y.shape and x.dtype == y.dtype:
        pooled = cpu_memory.empty_like(x) if x.size >= SCALED_ADD_COMPILED_MIN else None
        out = np.multiply(y, np.asarray(beta, dtype=x.dtype), out=pooled)
        out += x
        return out
    return (np.multiply(x, np.asarray(alpha, dtype=x.dtype)) +
            np.multiply(y, np.asarray(beta, dtype=x.dtype)))


KERNELS = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "square": np.square, "relu": _relu,
    "floor": _keep_ints(np.floor), "ceil": _keep_ints(np.ceil), "round": _keep_ints(np.round),
    "trunc": _keep_ints(np.trunc),
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log1p": np.log1p,
    "expm1": np.expm1, "sqrt": np.sqrt, "rsqrt": _rsqrt, "reciprocal": _reciprocal,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sinh": np.sinh,
    "cosh": np.cosh, "arcsin": np.arcsin, "arccos": np.arccos, "arctan": np.arctan,
    "arcsinh": np.arcsinh, "arccosh": np.arccosh, "arctanh": np.arctanh, "log10": np.log10,
    "signbit": np.signbit, "bitwise_invert": np.invert, "conj": np.conjugate, "real": _real,
    "imag": _imag,
    "sigmoid": _sigmoid, "softplus": _softplus, "silu": _silu, "erf": erf,
    "leaky_relu": _leaky_relu, "elu": _elu, "gelu": _gelu, "gelu_grad": gelu_grad,
    "relu_grad": _relu_grad,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "logical_not": np.logical_not,
    "add": _add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.true_divide,
    "floor_divide": np.floor_divide, "remainder": np.remainder, "power": np.power,
    "maximum": _MAXIMUM, "minimum": _MINIMUM, "arctan2": np.arctan2,
    "logaddexp": np.logaddexp, "hypot": np.hypot, "copysign": np.copysign,
    "nextafter": np.nextafter, "bitwise_left_shift": np.left_shift,
    "bitwise_right_shift": np.right_shift,
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less,
    "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "where": _where, "clip": _clip, "scaled_add": _scaled_add,
    "cast": lambda x, dtype: to_storage(x, dtype),
}

# Ops whose domain has holes (log of negatives, division by zero) return inf/nan quietly.
# The rest skip the errstate cost on the hot path (add, multiply: only overflow warns).
_MAY_WARN = {"exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal",
             "tan", "sinh", "cosh", "arcsin", "arccos", "softplus", "elu", "gelu", "sigmoid",
             "silu", "divide", "floor_divide", "remainder", "power", "cast", "arccosh",
             "arctanh", "log10", "logaddexp", "hypot", "neg", "abs", "sign", "square",
             "sin", "cos"}
KERNELS = {name: quiet(fn) if name in _MAY_WARN else fn for name, fn in KERNELS.items()}

register_kernels("cpu", KERNELS)
