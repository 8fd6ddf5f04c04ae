"""Attribute types: what each primitive's static attributes may hold.

Every primitive declares `attrs={name: type}` (ops/primitive.py). `bind` checks the attrs it
is given against that declaration before the shape/dtype rule runs, and a loader checks a
saved graph's attrs against the same declarations, so there is one schema, not two.

Each type has `check(value) -> str | None`: None when the value is acceptable, else a short
phrase ("expected float, got str"). The types are strict about Python types, because attrs
are the canonical form that the public functions (ops/arguments.py) produce from what users
write: lists, NumPy scalars and tensors are converted there, never here.

- ints are `int` (never bool), within int64 unless a type says otherwise;
- floats are `int` or `float` (never bool), nan and inf allowed unless `finite`;
- sequences are tuples (hashable, so attrs can key caches and graph passes can compare them).
"""
from __future__ import annotations

import math

import numpy as np
from ..dtypes import DType
from ..devices import Device
from ..random import Generator

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


def show_int(v: int) -> str:
    """An int as a message shows it: 2**70 rather than 22 digits (and never the 4300-digit
    conversion error Python raises for the longest ints)."""
    size = abs(v)
    if size >= 2**32 and size & (size - 1) == 0:
        return f"{'-' if v < 0 else ''}2**{size.bit_length() - 1}"
    if size >= 10**20:
        return f"{'-' if v < 0 else ''}~2**{size.bit_length() - 1}"
    return str(v)


def show(value, depth: int = 0) -> str:
    """A short description of any value, for 'got ...' (never raises, never runs a repr
    that is not Python's own)."""
    try:
        if value is None or value is True or value is False:
            return repr(value)
        if type(value) is int:
            return show_int(value)
        if type(value) in (float, str):
            text = repr(value)
            return text if len(text) <= 40 else text[:37] + "..."
        if type(value) in (tuple, list) and depth < 2 and len(value) <= 8:
            items = ", ".join(show(v, depth + 1) for v in value)
            if type(value) is list:
                return f"[{items}]"
            return f"({items}{',' if len(value) == 1 else ''})"
    except Exception:  # noqa: BLE001 - a message must not fail because of its value
        pass
    return _type_name(value)


def _type_name(value) -> str:
    try:
        return type(value).__name__
    except Exception:  # noqa: BLE001
        return "object"


class AttrType:
    """One kind of attribute value. `problems` lists (relative path, why) pairs; `check` says
    the first. Leaf types override `check` for speed: bind calls it on every op.

    `cache_key` says whether a value that passed `check` can key a cache of shape/dtype rule
    results (eager/rule_cache.py): "value" when two equal values always mean the same (an int,
    never a bool, so 1 and True cannot meet), "typed" when they must be told apart by type
    too (a float attr takes 1 and 1.0, which are equal in Python and may give different
    dtypes), None when no such key is known (a graph)."""

    name = "value"
    cache_key = None

    def problems(self, value, path: str = "") -> list:
        why = self.check(value)
        return [] if why is None else [(path, why)]

    def check(self, value) -> str | None:
        for path, why in self.problems(value):
            return f"{path}: {why}" if path else why
        return None

    def wrong_type(self, value) -> str:
        return f"expected {self.name}, got {_type_name(value)}"

    def __repr__(self) -> str:
        return self.name


class Int(AttrType):
    """An int (not bool) in [low, high]; int64 bounds by default."""

    cache_key = "value"

    def __init__(self, low: int = INT64_MIN, high: int = INT64_MAX):
        self.low, self.high = low, high
        if (low, high) == (INT64_MIN, INT64_MAX):
            self.name = "int"
        elif high == INT64_MAX:
            self.name = f"int >= {low}"
        else:
            self.name = f"int in [{show_int(low)}, {show_int(high)}]"

    def check(self, value):
        if type(value) is int and self.low <= value <= self.high:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            return self.wrong_type(value)
        if self.low <= value <= self.high:
            return None
        hi = "2**63)" if self.high == INT64_MAX else f"{show_int(self.high)}]"
        return f"expected int in [{show_int(self.low)}, {hi}, got {show_int(value)}"


class Float(AttrType):
    """A real number: a float, or an int a float can hold (never bool); finite only when
    `finite`. Ints stay ints where exactness matters (arange's bounds)."""

    cache_key = "typed"

    def __init__(self, finite: bool = False):
        self.finite = finite
        self.name = "finite float" if finite else "float"

    def check(self, value):
        if type(value) is float and (not self.finite or math.isfinite(value)):
            return None
        if isinstance(value, bool) or not isinstance(value, (float, int)):
            return self.wrong_type(value)
        if isinstance(value, int):
            return None if abs(value) < 2**1024 else \
                f"expected {self.name}, got {show_int(value)}"
        if not self.finite or math.isfinite(value):
            return None
        return f"expected a finite float, got {show(float(value))}"


class Bool(AttrType):
    name = "bool"
    cache_key = "value"

    def check(self, value):
        return None if value is True or value is False else self.wrong_type(value)


class Str(AttrType):
    name = "str"
    cache_key = "value"

    def check(self, value):
        return None if isinstance(value, str) else self.wrong_type(value)


class Choice(AttrType):
    """One of a few strings (a mode, a reduction)."""

    cache_key = "value"

    def __init__(self, *options: str):
        self.options = options
        self.name = "one of " + ", ".join(map(repr, options))

    def check(self, value):
        if isinstance(value, str) and value in self.options:
            return None
        return f"expected {self.name}, got {show(value)}"


class Letters(AttrType):
    """A string of ASCII letters, possibly empty (einsum subscripts)."""

    name = "a string of ASCII letters"
    cache_key = "value"

    def check(self, value):
        if isinstance(value, str) and value.isascii() and (value.isalpha() or value == ""):
            return None
        return f"expected {self.name}, got {show(value)}"


class Scalar(AttrType):
    """A fill value: bool, int (int64 or uint64 range) or float."""

    name = "bool, int or float"
    cache_key = "typed"

    def check(self, value):
        if isinstance(value, (bool, float)):
            return None
        if isinstance(value, int):
            return None if INT64_MIN <= value < 2**64 else \
                f"expected an int in [-2**63, 2**64), got {show_int(value)}"
        return self.wrong_type(value)


class Instance(AttrType):
    """An instance of a class (DType, Device, Graph, Generator, ndarray), imported lazily so
    that this module depends on nothing else in rill. `cache_key="value"` for classes whose
    instances are one per meaning (dtypes, devices), compared by identity."""

    def __init__(self, name: str, find, cache_key: str | None = None):
        self.name, self._find, self._cls = name, find, None
        self.cache_key = cache_key

    def check(self, value):
        if self._cls is None:
            self._cls = self._find()
        return None if isinstance(value, self._cls) else self.wrong_type(value)

    def set_class(self, cls: type) -> None:
        """For a class a higher layer defines (capture's Graph): it registers itself here."""
        self._cls = cls


class Optional(AttrType):
    """None, or a value of `inner`."""

    def __init__(self, inner: AttrType):
        self.inner = inner
        self.name = f"None or {inner.name}"
        self.cache_key = inner.cache_key  # None is told apart from any value of inner

    def problems(self, value, path=""):
        return [] if value is None else self.inner.problems(value, path)

    def check(self, value):
        return None if value is None else self.inner.check(value)


class OneOf(AttrType):
    """A value of any of `options` (tried in order)."""

    def __init__(self, *options: AttrType):
        self.options = options
        self.name = " or ".join(o.name for o in options)

    def check(self, value):
        for o in self.options:
            if o.check(value) is None:
                return None
        return self.wrong_type(value)


class TupleOf(AttrType):
    """A tuple of `item` values, of `length` items if given, at least `min_length`."""

    def __init__(self, item: AttrType, length: int | None = None, min_length: int = 0):
        self.item, self.length, self.min_length = item, length, min_length
        self.name = f"tuple of {item.name}" + (f" (length {length})" if length else "")
        # a tuple is one key: its items must need no type beside them
        self.cache_key = "value" if item.cache_key == "value" else None

    def problems(self, value, path=""):
        if not isinstance(value, tuple):
            return [(path, self.wrong_type(value))]
        if self.length is not None and len(value) != self.length:
            return [(path, f"expected {self.length} items, got {len(value)}")]
        if len(value) < self.min_length:
            return [(path, f"expected at least {self.min_length} items, got {len(value)}")]
        found = []
        for i, v in enumerate(value):
            found += self.item.problems(v, f"{path}[{i}]")
        return found

    def check(self, value):
        # a shape, a permutation, a split's sizes: bind checks one on many ops, so a tuple
        # whose items all pass is judged without building lists (a doubt takes the full path)
        if type(value) is tuple and len(value) >= self.min_length and \
                (self.length is None or len(value) == self.length):
            item = self.item.check
            for v in value:
                if item(v) is not None:
                    break
            else:
                return None
        return AttrType.check(self, value)


class Tuple(AttrType):
    """A tuple of fixed length whose items have the given types, in order."""

    def __init__(self, *items: AttrType):
        self.items = items
        self.name = "(" + ", ".join(t.name for t in items) + ")"
        self.cache_key = "value" if all(t.cache_key == "value" for t in items) else None

    def problems(self, value, path=""):
        if not isinstance(value, tuple):
            return [(path, self.wrong_type(value))]
        if len(value) != len(self.items):
            return [(path, f"expected {len(self.items)} items, got {len(value)}")]
        found = []
        for i, (t, v) in enumerate(zip(self.items, value)):
            found += t.problems(v, f"{path}[{i}]")
        return found


class Axes(AttrType):
    """The axes of a reduction: None (all), an int, or a tuple of ints."""

    name = "None, an int or a tuple of ints"
    cache_key = "value"

    def problems(self, value, path=""):
        if value is None or (type(value) is int and INT64_MIN <= value <= INT64_MAX):
            return []
        if isinstance(value, tuple):
            return TupleOf(INT).problems(value, path)
        if isinstance(value, int) and not isinstance(value, bool):
            return INT.problems(value, path)
        return [(path, self.wrong_type(value))]

    def check(self, value):
        if value is None or (type(value) is int and INT64_MIN <= value <= INT64_MAX):
            return None  # the common cases, without building a list
        if type(value) is tuple and all(type(v) is int and INT64_MIN <= v <= INT64_MAX
                                        for v in value):
            return None  # (normalized axes: what most reductions pass)
        return AttrType.check(self, value)


def _plain_int(v) -> bool:
    return v is None or (type(v) is int and INT64_MIN <= v <= INT64_MAX)


class IndexKey(AttrType):
    """The static part of an index (ops/indexing.py:parse_key): a tuple of ('new',), ('...',),
    ('array',), ('int', i) and ('slice', start, stop, step) entries, step never 0."""

    name = "an index key"
    # Its entries are tags, ints (never bools) and None: equal keys index alike
    cache_key = "value"
    _BOUND = Optional(Int())
    _STEP = Optional(OneOf(Int(INT64_MIN, -1), Int(1)))

    def check(self, value):
        # x[i], x[a:b], x[..., None]: every indexing op passes here, so plain entries are
        # judged without building a list of problems (any doubt takes the full path).
        if type(value) is tuple:
            for k in value:
                if type(k) is not tuple or not k:
                    break
                tag = k[0]
                if tag == "slice" and len(k) == 4:
                    if _plain_int(k[1]) and _plain_int(k[2]) and _plain_int(k[3]) and k[3] != 0:
                        continue
                elif tag == "int" and len(k) == 2:
                    if type(k[1]) is int and INT64_MIN <= k[1] <= INT64_MAX:
                        continue
                elif len(k) == 1 and tag in ("new", "...", "array"):
                    continue
                break
            else:
                return None
        return AttrType.check(self, value)

    def problems(self, value, path=""):
        if not isinstance(value, tuple):
            return [(path, self.wrong_type(value))]
        found = []
        for i, k in enumerate(value):
            where = f"{path}[{i}]"
            if not isinstance(k, tuple) or not k or not isinstance(k[0], str):
                found.append((where, f"expected an index entry, got {show(k)}"))
            elif k in (("new",), ("...",), ("array",)):
                pass
            elif k[0] == "int" and len(k) == 2:
                found += INT.problems(k[1], where + "[1]")
            elif k[0] == "slice" and len(k) == 4:
                found += self._BOUND.problems(k[1], where + "[1]")
                found += self._BOUND.problems(k[2], where + "[2]")
                if k[3] == 0:
                    found.append((where + "[3]", "a slice step must not be zero"))
                else:
                    found += self._STEP.problems(k[3], where + "[3]")
            else:
                found.append((where, f"expected an index entry, got {show(k[0])}"))
        return found


# ---- the vocabulary ------------------------------------------------------------------------


def _dtype_class():
    return DType


def _device_class():
    return Device


def _generator_class():
    return Generator


def _error_names():
    from .. import errors
    return tuple(sorted(n for n, c in vars(errors).items()
                        if isinstance(c, type) and issubclass(c, errors.Error)))


INT = Int()
NonNegInt = Int(0)
PosInt = Int(1)
FLOAT = Float()
BOOL = Bool()
STR = Str()
AXIS = INT                      # one axis; its range is the shape rule's to check
AXES = Axes()
SHAPE = TupleOf(NonNegInt)
PAIR = TupleOf(INT, length=2)   # (height, width) of a window, a stride, a dilation
DTypeAttr = Instance("a rill dtype", _dtype_class, cache_key="value")
DeviceAttr = Instance("a rill device", _device_class, cache_key="value")
# capture/ir.py sets Graph as the class when it loads; before that no value is a graph
Subgraph = Instance("a graph", lambda: ())
# (a Generator compares by identity: one generator keys one entry, and rules never read it)
GeneratorAttr = Instance("a rill.Generator", _generator_class, cache_key="value")
NDArray = Instance("a NumPy array", lambda: np.ndarray)
ErrorName = Choice(*_error_names())
INDEX_KEY = IndexKey()


def attr_problems(prim, attrs: dict) -> list[tuple[str, str]]:
    """[(path, why)] for every unknown, missing or wrongly typed attr of `prim` in `attrs`;
    [] when all is well. `path` is the attr's name, with an index for a nested item
    ("padding[1]"). Never raises, whatever the values: loaders call it on file data."""
    declared = getattr(prim, "attrs", None)
    if declared is None:  # a primitive that declares no schema: nothing to check against
        return []
    try:
        items = [(k, v) for k, v in attrs.items()]
    except Exception:  # noqa: BLE001
        return [("", f"expected a dict of attributes, got {_type_name(attrs)}")]
    found = []
    for key, value in items:
        kind = declared.get(key) if isinstance(key, str) else None
        if kind is None:
            found.append((key if isinstance(key, str) else show(key), "unknown attribute"))
            continue
        try:
            found += kind.problems(value, key)
        except Exception:  # noqa: BLE001 - an object whose __eq__ or __len__ raises
            found.append((key, f"expected {kind.name}, got {_type_name(value)}"))
    given = {key for key, _ in items if isinstance(key, str)}
    required = getattr(prim, "required_attrs", declared)
    found += [(key, "missing") for key in declared if key in required and key not in given]
    return found
