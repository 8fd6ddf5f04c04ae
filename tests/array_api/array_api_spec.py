"""The Python Array API standard, version 2024.12, as data: every name it puts in the main
namespace and in the `linalg` and `fft` extensions, each function's signature as the standard
writes it (positional-only before `/`, keyword-only after `*`, its defaults), the rule that gives
its result dtype, and the dtype categories it accepts; the standard's type promotion table.

Written from the standard's text for tests/array_api/test_array_api_conformance.py; nothing here imports
rill. A signature is kept as the standard's own parameter-list text and parsed with `ast`, so the
table reads like the specification and `signature(name)` gives an `inspect.Signature`.
"""
from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

VERSION = "2024.12"

# ---------------------------------------------------------------------------------------------
# Data types and the categories the standard names them by.

BOOL = ("bool",)
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTEGER = SIGNED + UNSIGNED
REAL_FLOATING = ("float32", "float64")
COMPLEX_FLOATING = ("complex64", "complex128")
FLOATING = REAL_FLOATING + COMPLEX_FLOATING
REAL_NUMERIC = INTEGER + REAL_FLOATING
NUMERIC = INTEGER + FLOATING
ALL = BOOL + NUMERIC
DTYPES = ALL  # the data types the main namespace must hold

CATEGORIES = {
    "bool": BOOL,
    "integer": INTEGER,
    "integer or bool": INTEGER + BOOL,
    "real floating": REAL_FLOATING,
    "complex floating": COMPLEX_FLOATING,
    "floating": FLOATING,            # the standard's "floating-point": real and complex
    "real numeric": REAL_NUMERIC,
    "numeric": NUMERIC,
    "any": ALL,
}

# The `kind` strings isdtype accepts, and the dtypes each one names.
ISDTYPE_KINDS = {
    "bool": BOOL,
    "signed integer": SIGNED,
    "unsigned integer": UNSIGNED,
    "integral": INTEGER,
    "real floating": REAL_FLOATING,
    "complex floating": COMPLEX_FLOATING,
    "numeric": NUMERIC,
}

CONSTANTS = ("e", "inf", "nan", "newaxis", "pi")

# ---------------------------------------------------------------------------------------------
# Type promotion. The standard fixes promotion only within a kind (bool with bool, integers
# with integers, floating with floating, real floating with complex floating); everything
# across kinds, and uint64 with a signed integer type, is unspecified and absent here.

_SIGNED_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_UNSIGNED_BITS = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
_FLOAT_BITS = {"float32": 32, "float64": 64, "complex64": 32, "complex128": 64}


def _promote(a: str, b: str) -> str | None:
    if a == "bool" or b == "bool":
        return "bool" if a == b else None
    if a in _SIGNED_BITS and b in _SIGNED_BITS:
        return max(a, b, key=_SIGNED_BITS.get)
    if a in _UNSIGNED_BITS and b in _UNSIGNED_BITS:
        return max(a, b, key=_UNSIGNED_BITS.get)
    if a in _UNSIGNED_BITS and b in _SIGNED_BITS:
        a, b = b, a
    if a in _SIGNED_BITS and b in _UNSIGNED_BITS:
        # The smallest signed type that holds both; none holds uint64 (unspecified).
        bits = max(_SIGNED_BITS[a], 2 * _UNSIGNED_BITS[b])
        return None if bits > 64 else f"int{bits}"
    if a in _FLOAT_BITS and b in _FLOAT_BITS:
        bits = max(_FLOAT_BITS[a], _FLOAT_BITS[b])
        if a in COMPLEX_FLOATING or b in COMPLEX_FLOATING:
            return {32: "complex64", 64: "complex128"}[bits]
        return {32: "float32", 64: "float64"}[bits]
    return None  # mixed kinds: unspecified


PROMOTION = {(a, b): r for a in ALL for b in ALL if (r := _promote(a, b)) is not None}


def promote(a: str, b: str) -> str | None:
    """The standard's result dtype for dtypes `a` and `b`; None where it is unspecified."""
    return PROMOTION.get((a, b))


# A Python scalar operand takes the array's dtype when the standard allows the pair:
# bool with a bool array; int with an integer or floating array; float with a floating array;
# complex with a complex array (same dtype) or with a real floating array (2024.12: the complex
# type of that precision). Other pairs (an int array with a float scalar, ...) are unspecified.
def scalar_result(array_dtype: str, scalar) -> str | None:
    if isinstance(scalar, bool):
        return array_dtype if array_dtype == "bool" else None
    if isinstance(scalar, int):
        return array_dtype if array_dtype in INTEGER + FLOATING else None
    if isinstance(scalar, float):
        return array_dtype if array_dtype in FLOATING else None
    if isinstance(scalar, complex):
        if array_dtype in COMPLEX_FLOATING:
            return array_dtype
        return {"float32": "complex64", "float64": "complex128"}.get(array_dtype)
    return None


# ---------------------------------------------------------------------------------------------
# Result dtype rules.

SAME = "same as input"                 # the first array argument's dtype
PROMOTED = "promoted"                  # the promotion of the array arguments
RESULT_BOOL = "bool"
DEFAULT_INT = "default int"            # the default integer dtype
INDEX = "index dtype"                  # the default array index dtype
REAL_OF_COMPLEX = "real of complex"    # complex64 -> float32, complex128 -> float64, else same
SUM_RULE = "sum rule"                  # signed -> default int, unsigned -> default uint, else same
CREATION = "creation"                  # `dtype=` or the default of the fill value's kind
GIVEN = "given dtype"                  # the dtype argument itself (astype)
TUPLE = "tuple"                        # a tuple or named tuple of arrays, with its own rules
OTHER = "other"                        # not an array of one rule (a dtype, a bool, an object)

_REAL_OF = {"complex64": "float32", "complex128": "float64"}


def real_of(dtype: str) -> str:
    return _REAL_OF.get(dtype, dtype)


def sum_dtype(dtype: str, default_int: str = "int64") -> str:
    """sum/prod/cumulative_*: a signed integer input gives the default integer dtype, an
    unsigned one the unsigned type of the default integer's width; floating stays."""
    if dtype in SIGNED:
        return default_int
    if dtype in UNSIGNED:
        return "u" + default_int
    return dtype


# ---------------------------------------------------------------------------------------------
# The function table.

@dataclass(frozen=True)
class Function:
    name: str
    params: str            # the parameter list as the standard writes it
    result: str            # one of the rules above
    accepts: str           # a key of CATEGORIES: the dtypes the first array argument may have
    family: str            # unary, binary, reduction, creation, ... (how a test calls it)
    module: str = ""       # "", "linalg" or "fft"

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}" if self.module else self.name

    @property
    def signature(self) -> inspect.Signature:
        return _signature(self.params)


def _signature(params: str) -> inspect.Signature:
    tree = ast.parse(f"def f({params}): pass")
    args = tree.body[0].args
    out = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for i, (a, d) in enumerate(zip(positional, defaults)):
        kind = (inspect.Parameter.POSITIONAL_ONLY if i < len(args.posonlyargs)
                else inspect.Parameter.POSITIONAL_OR_KEYWORD)
        out.append(inspect.Parameter(a.arg, kind, default=_default(d)))
    if args.vararg:
        out.append(inspect.Parameter(args.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append(inspect.Parameter(a.arg, inspect.Parameter.KEYWORD_ONLY, default=_default(d)))
    return inspect.Signature(out)


def _default(node):
    return inspect.Parameter.empty if node is None else ast.literal_eval(node)


def _table(family, result, accepts, names, params, module=""):
    return [Function(n, params, result, accepts, family, module) for n in names.split()]


UNARY, BINARY = "x, /", "x1, x2, /"

ELEMENTWISE = (
    # Unary functions and the dtypes the standard says their input should have.
    _table("unary", REAL_OF_COMPLEX, "numeric", "abs", UNARY)
    + _table("unary", SAME, "floating",
             "acos acosh asin asinh atan atanh cos cosh exp expm1 log log1p log2 log10 "
             "reciprocal sin sinh sqrt tan tanh", UNARY)
    + _table("unary", SAME, "integer or bool", "bitwise_invert", UNARY)
    + _table("unary", SAME, "real numeric", "ceil floor trunc", UNARY)
    + _table("unary", SAME, "numeric", "conj negative positive round sign square", UNARY)
    + _table("unary", REAL_OF_COMPLEX, "complex floating", "imag", UNARY)
    + _table("unary", REAL_OF_COMPLEX, "numeric", "real", UNARY)
    + _table("unary", RESULT_BOOL, "numeric", "isfinite isinf isnan", UNARY)
    + _table("unary", RESULT_BOOL, "bool", "logical_not", UNARY)
    + _table("unary", RESULT_BOOL, "real floating", "signbit", UNARY)
    + [Function("clip", "x, /, min=None, max=None", SAME, "real numeric", "clip")]
    # Binary functions (2024.12: either operand may be a Python scalar, not both).
    + _table("binary", PROMOTED, "numeric", "add multiply pow subtract", BINARY)
    + _table("binary", PROMOTED, "floating", "divide", BINARY)
    + _table("binary", PROMOTED, "real floating", "atan2 copysign hypot logaddexp nextafter",
             BINARY)
    + _table("binary", PROMOTED, "integer or bool", "bitwise_and bitwise_or bitwise_xor", BINARY)
    + _table("binary", PROMOTED, "integer", "bitwise_left_shift bitwise_right_shift", BINARY)
    + _table("binary", PROMOTED, "real numeric", "floor_divide maximum minimum remainder",
             BINARY)
    + _table("binary", RESULT_BOOL, "any", "equal not_equal", BINARY)
    + _table("binary", RESULT_BOOL, "real numeric", "greater greater_equal less less_equal",
             BINARY)
    + _table("binary", RESULT_BOOL, "bool", "logical_and logical_or logical_xor", BINARY)
)

STATISTICAL = [
    Function("cumulative_prod", "x, /, *, axis=None, dtype=None, include_initial=False",
             SUM_RULE, "numeric", "cumulative"),
    Function("cumulative_sum", "x, /, *, axis=None, dtype=None, include_initial=False",
             SUM_RULE, "numeric", "cumulative"),
    Function("max", "x, /, *, axis=None, keepdims=False", SAME, "real numeric", "reduction"),
    Function("mean", "x, /, *, axis=None, keepdims=False", SAME, "floating", "reduction"),
    Function("min", "x, /, *, axis=None, keepdims=False", SAME, "real numeric", "reduction"),
    Function("prod", "x, /, *, axis=None, dtype=None, keepdims=False", SUM_RULE, "numeric",
             "reduction"),
    Function("std", "x, /, *, axis=None, correction=0.0, keepdims=False", SAME,
             "real floating", "reduction"),
    Function("sum", "x, /, *, axis=None, dtype=None, keepdims=False", SUM_RULE, "numeric",
             "reduction"),
    Function("var", "x, /, *, axis=None, correction=0.0, keepdims=False", SAME,
             "real floating", "reduction"),
    # utility functions
    Function("all", "x, /, *, axis=None, keepdims=False", RESULT_BOOL, "any", "reduction"),
    Function("any", "x, /, *, axis=None, keepdims=False", RESULT_BOOL, "any", "reduction"),
    Function("diff", "x, /, *, axis=-1, n=1, prepend=None, append=None", SAME, "numeric",
             "other"),
    # searching functions that reduce
    Function("argmax", "x, /, *, axis=None, keepdims=False", INDEX, "real numeric",
             "reduction"),
    Function("argmin", "x, /, *, axis=None, keepdims=False", INDEX, "real numeric",
             "reduction"),
    Function("count_nonzero", "x, /, *, axis=None, keepdims=False", INDEX, "any",
             "reduction"),
]

CREATION_FUNCTIONS = [
    Function("arange", "start, /, stop=None, step=1, *, dtype=None, device=None", CREATION,
             "real numeric", "creation"),
    Function("asarray", "obj, /, *, dtype=None, device=None, copy=None", CREATION, "any",
             "creation"),
    Function("empty", "shape, *, dtype=None, device=None", CREATION, "any", "creation"),
    Function("empty_like", "x, /, *, dtype=None, device=None", SAME, "any", "like"),
    Function("eye", "n_rows, n_cols=None, /, *, k=0, dtype=None, device=None", CREATION,
             "any", "creation"),
    Function("from_dlpack", "x, /, *, device=None, copy=None", SAME, "any", "other"),
    Function("full", "shape, fill_value, *, dtype=None, device=None", CREATION, "any",
             "creation"),
    Function("full_like", "x, /, fill_value, *, dtype=None, device=None", SAME, "any", "like"),
    Function("linspace", "start, stop, /, num, *, dtype=None, device=None, endpoint=True",
             CREATION, "floating", "creation"),
    Function("meshgrid", "*arrays, indexing='xy'", TUPLE, "numeric", "other"),
    Function("ones", "shape, *, dtype=None, device=None", CREATION, "any", "creation"),
    Function("ones_like", "x, /, *, dtype=None, device=None", SAME, "any", "like"),
    Function("tril", "x, /, *, k=0", SAME, "any", "other"),
    Function("triu", "x, /, *, k=0", SAME, "any", "other"),
    Function("zeros", "shape, *, dtype=None, device=None", CREATION, "any", "creation"),
    Function("zeros_like", "x, /, *, dtype=None, device=None", SAME, "any", "like"),
]

DATA_TYPE_FUNCTIONS = [
    Function("astype", "x, dtype, /, *, copy=True, device=None", GIVEN, "any", "dtype"),
    Function("can_cast", "from_, to, /", OTHER, "any", "dtype"),
    Function("finfo", "type, /", OTHER, "floating", "dtype"),
    Function("iinfo", "type, /", OTHER, "integer", "dtype"),
    Function("isdtype", "dtype, kind", OTHER, "any", "dtype"),
    Function("result_type", "*arrays_and_dtypes", OTHER, "any", "dtype"),
]

INDEXING_FUNCTIONS = [
    Function("take", "x, indices, /, *, axis=None", SAME, "any", "other"),
    Function("take_along_axis", "x, indices, /, *, axis=-1", SAME, "any", "other"),
]

LINEAR_ALGEBRA = [
    Function("matmul", BINARY, PROMOTED, "numeric", "other"),
    Function("matrix_transpose", UNARY, SAME, "any", "other"),
    Function("tensordot", "x1, x2, /, *, axes=2", PROMOTED, "numeric", "other"),
    Function("vecdot", "x1, x2, /, *, axis=-1", PROMOTED, "numeric", "other"),
]

MANIPULATION = [
    Function("broadcast_arrays", "*arrays", TUPLE, "any", "other"),
    Function("broadcast_to", "x, /, shape", SAME, "any", "other"),
    Function("concat", "arrays, /, *, axis=0", PROMOTED, "any", "other"),
    Function("expand_dims", "x, /, *, axis=0", SAME, "any", "other"),
    Function("flip", "x, /, *, axis=None", SAME, "any", "other"),
    Function("moveaxis", "x, source, destination, /", SAME, "any", "other"),
    Function("permute_dims", "x, /, axes", SAME, "any", "other"),
    Function("repeat", "x, repeats, /, *, axis=None", SAME, "any", "other"),
    Function("reshape", "x, /, shape, *, copy=None", SAME, "any", "other"),
    Function("roll", "x, /, shift, *, axis=None", SAME, "any", "other"),
    Function("squeeze", "x, /, axis", SAME, "any", "other"),
    Function("stack", "arrays, /, *, axis=0", PROMOTED, "any", "other"),
    Function("tile", "x, repetitions, /", SAME, "any", "other"),
    Function("unstack", "x, /, *, axis=0", TUPLE, "any", "other"),
]

SEARCHING = [
    Function("nonzero", UNARY, TUPLE, "any", "other"),
    Function("searchsorted", "x1, x2, /, *, side='left', sorter=None", INDEX, "real numeric",
             "other"),
    Function("where", "condition, x1, x2, /", PROMOTED, "any", "other"),
]

SETS = _table("other", TUPLE, "any",
              "unique_all unique_counts unique_inverse unique_values", UNARY)

SORTING = [
    Function("argsort", "x, /, *, axis=-1, descending=False, stable=True", INDEX,
             "real numeric", "other"),
    Function("sort", "x, /, *, axis=-1, descending=False, stable=True", SAME, "real numeric",
             "other"),
]

INSPECTION = [Function("__array_namespace_info__", "", OTHER, "any", "other")]

LINALG = [
    Function("cholesky", "x, /, *, upper=False", SAME, "floating", "linalg", "linalg"),
    Function("cross", "x1, x2, /, *, axis=-1", PROMOTED, "numeric", "linalg", "linalg"),
    Function("det", UNARY, SAME, "floating", "linalg", "linalg"),
    Function("diagonal", "x, /, *, offset=0", SAME, "any", "linalg", "linalg"),
    Function("eigh", UNARY, TUPLE, "floating", "linalg", "linalg"),
    Function("eigvalsh", UNARY, REAL_OF_COMPLEX, "floating", "linalg", "linalg"),
    Function("inv", UNARY, SAME, "floating", "linalg", "linalg"),
    Function("matmul", BINARY, PROMOTED, "numeric", "linalg", "linalg"),
    Function("matrix_norm", "x, /, *, keepdims=False, ord='fro'", REAL_OF_COMPLEX, "floating",
             "linalg", "linalg"),
    Function("matrix_power", "x, n, /", SAME, "floating", "linalg", "linalg"),
    Function("matrix_rank", "x, /, *, rtol=None", DEFAULT_INT, "floating", "linalg", "linalg"),
    Function("matrix_transpose", UNARY, SAME, "any", "linalg", "linalg"),
    Function("outer", BINARY, PROMOTED, "numeric", "linalg", "linalg"),
    Function("pinv", "x, /, *, rtol=None", SAME, "floating", "linalg", "linalg"),
    Function("qr", "x, /, *, mode='reduced'", TUPLE, "floating", "linalg", "linalg"),
    Function("slogdet", UNARY, TUPLE, "floating", "linalg", "linalg"),
    Function("solve", BINARY, PROMOTED, "floating", "linalg", "linalg"),
    Function("svd", "x, /, *, full_matrices=True", TUPLE, "floating", "linalg", "linalg"),
    Function("svdvals", UNARY, REAL_OF_COMPLEX, "floating", "linalg", "linalg"),
    Function("tensordot", "x1, x2, /, *, axes=2", PROMOTED, "numeric", "linalg", "linalg"),
    Function("trace", "x, /, *, offset=0, dtype=None", SUM_RULE, "numeric", "linalg",
             "linalg"),
    Function("vecdot", "x1, x2, /, *, axis=-1", PROMOTED, "numeric", "linalg", "linalg"),
    Function("vector_norm", "x, /, *, axis=None, keepdims=False, ord=2", REAL_OF_COMPLEX,
             "floating", "linalg", "linalg"),
]

# fft: complex transforms keep the precision (a real input is unspecified); rfft* take real
# input and give the complex type of its precision; irfft*/hfft give the real type.
COMPLEX_OF_REAL = "complex of real"
FFT = (
    _table("fft", SAME, "complex floating", "fft ifft",
           "x, /, *, n=None, axis=-1, norm='backward'", "fft")
    + _table("fft", SAME, "complex floating", "fftn ifftn",
             "x, /, *, s=None, axes=None, norm='backward'", "fft")
    + _table("fft", COMPLEX_OF_REAL, "real floating", "rfft ihfft",
             "x, /, *, n=None, axis=-1, norm='backward'", "fft")
    + _table("fft", COMPLEX_OF_REAL, "real floating", "rfftn",
             "x, /, *, s=None, axes=None, norm='backward'", "fft")
    + _table("fft", REAL_OF_COMPLEX, "complex floating", "irfft hfft",
             "x, /, *, n=None, axis=-1, norm='backward'", "fft")
    + _table("fft", REAL_OF_COMPLEX, "complex floating", "irfftn",
             "x, /, *, s=None, axes=None, norm='backward'", "fft")
    + _table("freq", CREATION, "real floating", "fftfreq rfftfreq",
             "n, /, *, d=1.0, dtype=None, device=None", "fft")
    + _table("shift", SAME, "any", "fftshift ifftshift", "x, /, *, axes=None", "fft")
)

MAIN = (ELEMENTWISE + STATISTICAL + CREATION_FUNCTIONS + DATA_TYPE_FUNCTIONS
        + INDEXING_FUNCTIONS + LINEAR_ALGEBRA + MANIPULATION + SEARCHING + SETS + SORTING
        + INSPECTION)
FUNCTIONS = MAIN + LINALG + FFT
BY_NAME = {f.qualname: f for f in FUNCTIONS}

# Methods and attributes of the array object.
ARRAY_ATTRIBUTES = ("dtype", "device", "mT", "ndim", "shape", "size", "T")
ARRAY_METHODS = {
    "__array_namespace__": "self, /, *, api_version=None",
    "__dlpack__": "self, /, *, stream=None, max_version=None, dl_device=None, copy=None",
    "__dlpack_device__": "self, /",
    "to_device": "self, device, /, *, stream=None",
}
# Operators: the dunder, the elementwise function it means, whether it has an in-place form.
OPERATORS = [
    ("__add__", "add", "__iadd__"), ("__sub__", "subtract", "__isub__"),
    ("__mul__", "multiply", "__imul__"), ("__truediv__", "divide", "__itruediv__"),
    ("__floordiv__", "floor_divide", "__ifloordiv__"), ("__mod__", "remainder", "__imod__"),
    ("__pow__", "pow", "__ipow__"), ("__matmul__", "matmul", "__imatmul__"),
    ("__and__", "bitwise_and", "__iand__"), ("__or__", "bitwise_or", "__ior__"),
    ("__xor__", "bitwise_xor", "__ixor__"), ("__lshift__", "bitwise_left_shift", "__ilshift__"),
    ("__rshift__", "bitwise_right_shift", "__irshift__"),
    ("__eq__", "equal", None), ("__ne__", "not_equal", None), ("__lt__", "less", None),
    ("__le__", "less_equal", None), ("__gt__", "greater", None),
    ("__ge__", "greater_equal", None),
]
UNARY_OPERATORS = [("__abs__", "abs"), ("__neg__", "negative"), ("__pos__", "positive"),
                   ("__invert__", "bitwise_invert")]


def signature(qualname: str) -> inspect.Signature:
    return BY_NAME[qualname].signature


def accepted(function: Function) -> tuple[str, ...]:
    return CATEGORIES[function.accepts]
