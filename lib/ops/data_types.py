"""The Array API's data-type functions: astype, can_cast, isdtype, result_type, iinfo, finfo.

Every answer comes from lib/dtypes.py: its list of dtypes (`ALL`), each dtype's kind
('b' bool, 'i' signed, 'u' unsigned, 'f' real floating, 'c' complex floating) and its one
promotion table, so a dtype added there is covered here with no change.

Where rill goes beyond the standard (documented, as the standard asks of extensions):
float16 and bfloat16 belong to the kind 'real floating'; `can_cast` follows rill's promotion
table, which also promotes across kinds (int16 -> float32 is allowed, float32 -> int64 is
not), where the standard leaves mixed kinds unspecified.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentError, DTypeError, Error, reports_as
from ..tensor import Tensor
from ..eager.context import detached_value
from .arguments import as_bool, describe

# The standard's kind names, as sets of rill's one-letter kinds.
KINDS = {
    "bool": "b",
    "signed integer": "i",
    "unsigned integer": "u",
    "integral": "iu",
    "real floating": "f",
    "complex floating": "c",
    "numeric": "iufc",
}


def _dtype_of(value, op: str, what: str = "dtype") -> dt.DType:
    """A rill dtype from a dtype (or anything rill.dtype accepts) or a tensor's dtype."""
    if isinstance(value, Tensor):
        return value.dtype
    if isinstance(value, dt.DType):
        return value
    if value is None or isinstance(value, (bool, int, float, complex)):
        raise DTypeError(f"{what} must be a dtype or a tensor, got {describe(value)}", op=op)
    return dt.as_dtype(value, op)


# ---- kinds ---------------------------------------------------------------------------------


def _kind_letters(kind, op: str) -> str:
    if kind not in KINDS:
        raise ArgumentError(f"unknown dtype kind {describe(kind)}; expected a dtype or one of "
                            f"{', '.join(map(repr, KINDS))}", op=op)
    return KINDS[kind]


def _matches(d: dt.DType, kind, op: str) -> bool:
    if isinstance(kind, str):
        return d.kind in _kind_letters(kind, op)
    if isinstance(kind, tuple):
        return any(_matches(d, k, op) for k in kind)
    return d is _dtype_of(kind, op, "kind")


def isdtype(dtype, kind) -> bool:
    """Whether `dtype` is of `kind`: a dtype (equality), a kind name ('bool', 'signed
    integer', 'unsigned integer', 'integral', 'real floating', 'complex floating',
    'numeric') or a tuple of these (any of them). float16 and bfloat16 are 'real floating'.

    >>> isdtype(rill.int8, ("integral", rill.float32))
    True
    """
    if not isinstance(dtype, dt.DType):
        raise DTypeError(f"dtype must be a rill dtype, got {describe(dtype)}", op="isdtype")
    if isinstance(kind, tuple) and any(isinstance(k, tuple) for k in kind):
        raise ArgumentError("kind may be a tuple of dtypes and kind names, not of tuples",
                            op="isdtype")
    return _matches(dtype, kind, "isdtype")


def dtypes_of_kind(kind, op: str) -> dict:
    """{name: dtype} of every rill dtype of `kind` (None: all), in dtypes.ALL's order."""
    if kind is None:
        return {d.name: d for d in dt.ALL}
    if isinstance(kind, str):
        letters = _kind_letters(kind, op)
    elif isinstance(kind, tuple) and all(isinstance(k, str) for k in kind):
        letters = "".join(_kind_letters(k, op) for k in kind)
    else:
        raise ArgumentError(f"kind must be None, a kind name or a tuple of kind names, got "
                            f"{describe(kind)}", op=op)
    return {d.name: d for d in dt.ALL if d.kind in letters}


# ---- promotion -----------------------------------------------------------------------------


def _promote(a: dt.DType, b: dt.DType):
    """promote_types(a, b), or None where the table has no common type."""
    try:
        return dt.promote_types(a, b)
    except (Error, KeyError):
        return None


def can_cast(from_, to, /) -> bool:
    """Whether `from_` (a dtype or a tensor's) converts to `to` by rill's promotion rules:
    True when promoting the two gives `to` (int8 -> int16, uint8 -> int16, float32 ->
    float64, bool -> anything, int16 -> float32), False when it loses a kind or range
    (float32 -> int64, int16 -> int8, int8 -> uint8)."""
    a = _dtype_of(from_, "can_cast", "from_")
    b = _dtype_of(to, "can_cast", "to")
    if isinstance(to, Tensor):
        raise DTypeError(f"to must be a dtype, got {describe(to)}", op="can_cast")
    return _promote(a, b) is b


def result_type(*arrays_and_dtypes) -> dt.DType:
    """The dtype an op on these operands gives: tensors and dtypes promote by the table;
    Python scalars (bool, int, float, complex) are weak, as in every op (an int8 tensor and
    the scalar 1 give int8; an int tensor and 0.5 give the default float). At least one
    tensor or dtype must be given.

    >>> result_type(rill.int8, rill.uint8, 1)
    rill.int16
    """
    strong, kinds = [], []
    for i, v in enumerate(arrays_and_dtypes):
        kind = None if isinstance(v, (Tensor, dt.DType)) else dt.scalar_kind(v)
        if kind is not None:
            kinds.append(kind)
        else:
            strong.append(_dtype_of(v, "result_type", f"arrays_and_dtypes[{i}]"))
    if not strong:
        raise ArgumentError("needs at least one tensor or dtype (Python scalars alone have no "
                            "dtype to join)", op="result_type")
    try:
        return dt.result_type(strong, kinds)
    except Error as e:  # a pair the table refuses (uint64 with a signed type)
        e.op = "result_type"
        raise


# ---- astype --------------------------------------------------------------------------------


def fresh(x: Tensor) -> Tensor:
    """A new tensor with x's values (what `copy=True` asks for). Buffers are never written,
    so sharing x's buffer is a copy; keeping the tape (a cast to its own dtype) keeps the
    gradient flowing to x."""
    if x.requires_grad:
        from .elementwise import cast
        return cast(x, x.dtype)
    return detached_value(x)


@reports_as("astype")
def astype(x, dtype, /, *, copy: bool = True, device=None) -> Tensor:
    """x converted to `dtype` (and moved to `device` when given), whatever the promotion
    rules say (floats to ints truncate toward zero; bools give 0 and 1; anything to bool is
    `!= 0`). A complex tensor converts to complex or bool only: which part a real dtype
    should keep is for the caller to say (rill.real, rill.imag), as the standard asks. With
    copy=False and nothing to change, x itself is returned; otherwise a new tensor.

    >>> astype(rill.tensor([1.7, -1.7]), rill.int32)
    tensor([ 1, -1], dtype=int32)
    """
    from .arguments import as_dtype, as_tensor
    from .creation import to_device
    from .elementwise import cast
    x = as_tensor(x, "x", "astype")
    target = as_dtype(dtype, "astype")
    copy = as_bool(copy, "copy", "astype")
    if x.dtype.kind == "c" and target.kind in "iuf":
        # The standard refuses it: which part to keep is the caller's choice to spell out.
        raise DTypeError(f"casting complex {x.dtype} to {target} would drop a part; cast "
                         f"rill.real(x) or rill.imag(x) instead", op="astype")
    out = x if target is x.dtype else cast(x, target)
    if device is not None:
        out = to_device(out, device)
    if copy and out is x:
        out = fresh(x)
    return out


# ---- machine limits ------------------------------------------------------------------------


class iinfo_object:
    """Limits of an integer dtype: bits, min, max (Python ints) and the rill dtype."""

    __slots__ = ("bits", "min", "max", "dtype")

    def __init__(self, d: dt.DType):
        info = np.iinfo(d.storage)
        self.bits, self.min, self.max, self.dtype = d.bits, int(info.min), int(info.max), d

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


class finfo_object:
    """Limits of a floating dtype (a complex dtype's component): bits, eps, max, min,
    smallest_normal (Python floats; `tiny` is NumPy's name for smallest_normal) and the real
    rill dtype they describe."""

    __slots__ = ("bits", "eps", "max", "min", "smallest_normal", "dtype")

    def __init__(self, d: dt.DType, bits, eps, max, min, smallest_normal):  # noqa: A002
        self.bits, self.eps, self.max, self.min = int(bits), float(eps), float(max), float(min)
        self.smallest_normal, self.dtype = float(smallest_normal), d

    @property
    def tiny(self) -> float:
        return self.smallest_normal

    @property
    def resolution(self) -> float:
        """10 ** -(decimal digits of precision), as NumPy's finfo."""
        return 10.0 ** math.floor(math.log10(self.eps))

    def __repr__(self) -> str:
        return (f"finfo(eps={self.eps}, max={self.max}, min={self.min}, "
                f"smallest_normal={self.smallest_normal}, dtype={self.dtype})")


def _component(d: dt.DType) -> dt.DType:
    """The real dtype of a complex dtype's parts (itself for a real dtype)."""
    if d.kind != "c":
        return d
    part = dt.from_numpy(np.empty(0, d.storage).real.dtype)
    if part is None:  # pragma: no cover - every complex storage has a real rill dtype
        raise DTypeError(f"{d} has no real component dtype", op="finfo")
    return part


def iinfo(type, /) -> iinfo_object:  # noqa: A002 - the standard's name
    """bits, min, max of an integer dtype (or of a tensor's dtype).

    >>> iinfo(rill.int8).max
    127
    """
    d = _dtype_of(type, "iinfo", "type")
    if d.kind not in "iu":
        raise DTypeError(f"iinfo is for integer dtypes, got {d}; use rill.finfo for floating "
                         "ones", op="iinfo")
    return iinfo_object(d)


def finfo(type, /) -> finfo_object:  # noqa: A002 - the standard's name
    """bits, eps, max, min, smallest_normal of a floating dtype, or of a complex dtype's
    real and imaginary parts (its `.dtype` is then the real dtype).

    >>> finfo(rill.float32).eps == 2.0 ** -23
    True
    """
    d = _dtype_of(type, "finfo", "type")
    if d.kind not in "fc":
        raise DTypeError(f"finfo is for floating dtypes, got {d}; use rill.iinfo for integer "
                         "ones", op="finfo")
    d = _component(d)
    if d is dt.bfloat16:  # no NumPy dtype: 8 exponent bits and 7 stored mantissa bits
        largest = (2 - 2.0 ** -7) * 2.0 ** 127
        return finfo_object(d, 16, 2.0 ** -7, largest, -largest, 2.0 ** -126)
    info = np.finfo(d.storage)
    return finfo_object(d, info.bits, info.eps, info.max, info.min, info.smallest_normal)
