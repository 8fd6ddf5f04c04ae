"""dtypes and the one promotion table.

Promotion (`promote_types`) follows a lattice, the same one PyTorch and NumPy 2 use:

    bool < integers < floating < complex
    within a kind the wider type wins; an unsigned type with a signed one widens to a signed
    type that holds both (uint8 + int8 -> int16, uint16 + int16 -> int32, uint32 + int32 ->
    int64); float16 + bfloat16 -> float32; an integer with a float gives that float
    (int64 + float16 -> float16); a float with a complex type gives the complex type whose
    parts hold both (float32 + complex64 -> complex64, float64 + complex64 -> complex128;
    float16/bfloat16 + complex64 -> complex64).

uint64 with a signed integer type has no signed type holding both. The Array API standard
leaves it unspecified; NumPy 2 gives float64 (silently losing integers above 2**53) and
PyTorch barely supports uint64. rill refuses it with a DTypeError that names the cast to
make (`PROMOTION_TABLE` holds None there).

Python scalars are *weak*: they take the tensor's dtype when their kind is not higher than
the tensor's (float32 tensor * 2.0 -> float32, int8 tensor + 1 -> int8, complex64 tensor *
2.0 -> complex64). A scalar of a higher kind gives the default dtype of its kind: int tensor
* 0.5 -> float32, bool tensor + 1 -> int64; a complex scalar with a float tensor gives the
complex type of that float's precision (float64 tensor * 1j -> complex128, float32 or an
integer tensor * 1j -> complex64). Scalars alone: bool, int64, float32, complex64.

bfloat16 has no NumPy dtype. On the CPU it is carried in float32 buffers whose values are
rounded to bfloat16 (round to nearest even) after every kernel, so results equal a true
bfloat16 computation that accumulates in float32.
"""
from __future__ import annotations

import numpy as np
from .errors import DTypeError


class DType:
    """A tensor element type. Compare with `is` or `==`; `str(d)` is its name."""

    __slots__ = ("name", "storage", "kind", "itemsize", "bits")

    def __init__(self, name: str, storage, kind: str, itemsize: int):
        self.name = name
        self.storage = np.dtype(storage)  # the NumPy dtype of CPU buffers
        self.kind = kind                   # 'b' bool, 'i' signed, 'u' unsigned, 'f' float,
        self.itemsize = itemsize           # 'c' complex; bytes per element (both parts)
        self.bits = itemsize * 8

    @property
    def is_floating(self) -> bool:
        return self.kind == "f"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def is_inexact(self) -> bool:
        """Floating or complex: the dtypes that carry gradients."""
        return self.kind in "fc"

    @property
    def is_integer(self) -> bool:
        return self.kind in "iu"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def is_signed(self) -> bool:
        return self.kind in "ifc"

    def __repr__(self) -> str:
        return f"rill.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (as_dtype, (self.name,))


bool_ = DType("bool", np.bool_, "b", 1)
int8 = DType("int8", np.int8, "i", 1)
int16 = DType("int16", np.int16, "i", 2)
int32 = DType("int32", np.int32, "i", 4)
int64 = DType("int64", np.int64, "i", 8)
uint8 = DType("uint8", np.uint8, "u", 1)
uint16 = DType("uint16", np.uint16, "u", 2)
uint32 = DType("uint32", np.uint32, "u", 4)
uint64 = DType("uint64", np.uint64, "u", 8)
float16 = DType("float16", np.float16, "f", 2)
bfloat16 = DType("bfloat16", np.float32, "f", 2)
float32 = DType("float32", np.float32, "f", 4)
float64 = DType("float64", np.float64, "f", 8)
complex64 = DType("complex64", np.complex64, "c", 8)
complex128 = DType("complex128", np.complex128, "c", 16)

ALL = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16,
       float32, float64, complex64, complex128)
FLOATING = (float16, bfloat16, float32, float64)
INTEGER = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
COMPLEX = (complex64, complex128)

default_float = float32   # set_default_dtype changes these two; read them as
default_int = int64
default_complex = complex64  # dtypes.default_float at the time of use, never imported

_BY_NAME = {d.name: d for d in ALL}
_SHORT = {"bool": "b1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
          "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "f16",
          "bfloat16": "bf16", "float32": "f32", "float64": "f64", "complex64": "c64",
          "complex128": "c128"}


def short_name(dtype: DType) -> str:
    """f32, i64, bf16, ... as graph printouts write them."""
    return _SHORT[dtype.name]
_BY_NAME.update({"bool_": bool_, "half": float16, "float": float32, "double": float64,
                 "long": int64, "int": int64, "cfloat": complex64, "cdouble": complex128})
# NumPy dtype -> rill dtype; float32 storage means float32 (bfloat16 is only ever explicit).
_BY_NUMPY = {d.storage: d for d in ALL if d is not bfloat16}


def as_dtype(value, op: str | None = None) -> DType:
    """Accept a rill dtype, a name ('float32'), a NumPy dtype or a Python type; a DTypeError
    naming `op` (the function that was asked for the dtype) for anything else."""
    if isinstance(value, DType):
        return value
    expected = f"expected one of {', '.join(d.name for d in ALL)}"
    if isinstance(value, str):
        if value in _BY_NAME:
            return _BY_NAME[value]
        raise DTypeError(f"unknown dtype {value[:40]!r}; {expected}", op=op)
    if value is bool:
        return bool_
    if value is int:
        return default_int
    if value is float:
        return default_float
    if value is complex:
        return default_complex
    if value is None or isinstance(value, (int, float, complex)):
        # np.dtype(None) would be float64: a dtype left out reads as a missing argument.
        raise DTypeError(f"expected a dtype, got {value!r}", op=op)
    try:
        npd = np.dtype(value)
    except Exception:  # noqa: BLE001 - NumPy raises TypeError or ValueError, by the value
        raise DTypeError(f"cannot interpret {type(value).__name__} as a dtype; {expected}",
                         op=op) from None
    if npd in _BY_NUMPY:
        return _BY_NUMPY[npd]
    raise DTypeError(f"NumPy dtype {npd} has no rill counterpart; {expected}", op=op)


def from_numpy(npd: np.dtype) -> DType | None:
    return _BY_NUMPY.get(npd)


# ---- the promotion table -------------------------------------------------------------------

_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def complex_of(d: DType) -> DType:
    """The complex type whose parts hold float type `d` (complex64 for float32 and below)."""
    return complex128 if d is float64 else complex64


def real_of(d: DType) -> DType:
    """The type of the real and imaginary parts of complex `d` (others: `d` itself)."""
    return {complex64: float32, complex128: float64}.get(d, d)


def _promote_pair(a: DType, b: DType) -> DType | None:
    if a is b:
        return a
    ra, rb = _KIND_RANK[a.kind], _KIND_RANK[b.kind]
    if ra != rb:
        high, low = (a, b) if ra > rb else (b, a)
        if high.is_complex and low.is_floating:  # float64 + complex64 -> complex128
            return high if high.itemsize >= 2 * low.itemsize else complex_of(low)
        return high
    if a.kind in "fc":
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    if a.kind == b.kind:
        return a if a.itemsize > b.itemsize else b
    signed, unsigned = (a, b) if a.kind == "i" else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    # None: uint64 with a signed type (no integer type holds both; see the module text).
    return {1: int16, 2: int32, 4: int64}.get(unsigned.itemsize)


PROMOTION_TABLE: dict[tuple[DType, DType], DType | None] = {
    (a, b): _promote_pair(a, b) for a in ALL for b in ALL
}


def _refuse(a: DType, b: DType):
    signed = a if a.kind == "i" else b
    return DTypeError(f"{a} and {b} have no common dtype: no integer type holds both uint64 "
                      f"and {signed} (the Array API standard leaves it unspecified); cast one "
                      "first, e.g. x.astype(rill.int64) or x.astype(rill.float64)")


def _lookup(a: DType, b: DType) -> DType:
    out = PROMOTION_TABLE[a, b]
    if out is None:
        raise _refuse(a, b)
    return out


def promote_types(a: DType, b: DType) -> DType:
    """The dtype that both `a` and `b` convert to without losing their kind."""
    if type(a) is DType and type(b) is DType:
        return _lookup(a, b)
    return _lookup(as_dtype(a, "promote_types"), as_dtype(b, "promote_types"))


_SCALAR_KINDS = {bool: "b", int: "i", float: "f", complex: "c"}


def scalar_kind(value) -> str | None:
    """'b', 'i', 'f' or 'c' for a weak Python scalar; None for anything else.

    NumPy scalars are strong (they have a dtype), as in NumPy 2.
    """
    return _SCALAR_KINDS.get(type(value))


_DEFAULT_FOR_KIND = {"b": bool_, "i": int64, "f": float32, "c": complex64}


def result_type(dtypes, scalar_kinds=()) -> DType:
    """Promote strong dtypes together, then let weak scalars (by kind) join in."""
    result = None
    for d in dtypes:
        result = d if result is None else _lookup(result, d)
    for kind in scalar_kinds:
        if result is None:
            result = _DEFAULT_FOR_KIND[kind]
        elif _KIND_RANK[kind] > _KIND_RANK[result.kind]:
            # A complex scalar keeps a float tensor's precision: float64 * 1j -> complex128.
            result = complex_of(result) if kind == "c" and result.is_floating else \
                _DEFAULT_FOR_KIND[kind]
    return result


def set_default_dtype(d) -> None:
    """The dtype Python floats and creation ops give when no dtype is said (float32 at
    start; float64 for double precision throughout), and its complex counterpart for
    Python complex numbers. Process-wide, as PyTorch's; a captured function traced under
    another default traces again.

    >>> import rill
    >>> rill.set_default_dtype(rill.float64)
    >>> rill.tensor([1.5]).dtype, rill.zeros(2).dtype, (rill.arange(3) * 0.5).dtype
    (rill.float64, rill.float64, rill.float64)
    >>> rill.set_default_dtype(rill.float32)
    """
    global default_float, default_complex
    d = as_dtype(d, "set_default_dtype")
    if not d.is_floating:
        from .errors import DTypeError
        raise DTypeError(f"the default dtype is a floating type (float32, float64, float16, "
                         f"bfloat16), got {d}", op="set_default_dtype")
    default_float, default_complex = d, complex_of(d)
    _DEFAULT_FOR_KIND["f"], _DEFAULT_FOR_KIND["c"] = default_float, default_complex


def get_default_dtype() -> DType:
    """The dtype Python floats and creation ops give when no dtype is said."""
    return default_float


def to_float(d: DType) -> DType:
    """The floating (or complex) type an op computes in for inputs of dtype `d`."""
    return d if d.kind in "fc" else default_float


def finfo(d: DType):
    """NumPy-style float limits; bfloat16 gets its own numbers; a complex type gives its
    parts' (complex64 -> float32's), as NumPy does."""
    d = real_of(as_dtype(d, "finfo"))
    if not d.is_floating:
        from .errors import DTypeError
        raise DTypeError(f"finfo is for floating or complex dtypes, got {d}; use iinfo for "
                         "integer types", op="finfo")
    if d is bfloat16:
        class _BF16Info:
            bits, eps, max, min, tiny, resolution = 16, 2.0 ** -7, 3.3895313892515355e38, \
                -3.3895313892515355e38, 2.0 ** -126, 0.01
            dtype = "bfloat16"
        return _BF16Info()
    return np.finfo(d.storage)


def round_to_bfloat16(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), kept in float32."""
    a = np.asarray(a, dtype=np.float32)
    bits = a.view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    out = np.asarray(rounded).view(np.float32)
    return np.asarray(np.where(np.isnan(a), a, out))


def to_storage(array: np.ndarray, d: DType) -> np.ndarray:
    """`array` as a buffer of dtype `d` (a cast if needed, bfloat16 rounded)."""
    if d is bfloat16:
        return round_to_bfloat16(array)
    if array.dtype != d.storage:
        with np.errstate(all="ignore"):
            return array.astype(d.storage)
    return array
