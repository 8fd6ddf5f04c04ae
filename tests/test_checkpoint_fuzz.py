"""A bounded fuzz of rill.load: valid rill.save files, mutated (bit flips, truncations,
appended junk; manifests rewritten with valid CRCs: wrong field types, deep nesting, huge
shapes, absurd offsets, Unicode, strings of code), must load or raise a `rill.Error`, nothing
else, and never run code (issue 14, finding 6). Seeded: every run tries the same files.
"""
import json
import math
import os
import random
import tempfile
import time
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rill
from rill.serialization import load, save
from rill.sparse import SparseRows
from test_load_hardening import craft

pytestmark = pytest.mark.timeout(60)

WORK = tempfile.mkdtemp(prefix="rill-fuzz-")
MARKER = os.path.join(WORK, "MARKER")
CODE = [f"__import__('os').system('touch {MARKER}')",
        f"exec(\"open('{MARKER}', 'w')\")",
        f"{{{{ open('{MARKER}', 'w') }}}}",
        "cos\nsystem\n(S'touch " + MARKER + "'\ntR.",  # a pickle program, as text
        "os.system", "builtins.eval", "numpy.load"]

HEADER = 24


def good_objects():
    rng = np.random.default_rng(0)
    yield {
        "w": rill.tensor(rng.standard_normal((3, 4)), dtype=rill.float32),
        "mask": rill.tensor([True, False, True]),
        "h": rill.tensor([1.5, -2.0, np.nan], dtype=rill.bfloat16),
        "i8": rill.tensor([-128, 0, 127], dtype=rill.int8),
        "u8": rill.tensor(np.arange(5, dtype=np.uint8)),
        "step": 7, "lr": 0.1, "nan": float("nan"), "big": 2**70,
        "note": ("adam", None, -0.0),
        "\u00fcn\u00efc\u00f8d\u00e9 \U0001f600": ["\u202e", "\x00"],
        3: {"deep": [[[1]]], "empty": rill.zeros(0, 5)},
        "sp": SparseRows(rill.tensor([0, 2]), rill.ones(2, 3), (4, 3)),
    }
    yield rill.arange(6, dtype=rill.float16).reshape(2, 3)
    yield [rill.tensor(True), rill.tensor(5, dtype=rill.int64), {"a": {"b": {"c": ()}}}]


def files():
    """(bytes, manifest) of each good object as rill.save writes it."""
    out = []
    for i, obj in enumerate(good_objects()):
        path = save(obj, os.path.join(WORK, f"good{i}.rill"))
        raw = open(path, "rb").read()
        length = int.from_bytes(raw[8:16], "little")
        out.append((raw, json.loads(raw[HEADER:HEADER + length])))
    return out


GOOD = files()

BAD_VALUES = [None, True, False, 0, 1, -1, 63, 64, 65, 2**31, 2**63 - 1, 2**63, 2**64, -2**63,
              10**30, 0.5, -0.0, 1e308, "", "x", "0", "float32", "bool", "bfloat16", "object",
              "float", "O", "nan", "inf", "\ud800", "\u202e\U0001f600", [], [0], [-1], [1] * 65,
              [2**62, 2**62, 0], [0, 2**63], [True], [1.0], ["1"], [[1]], {}, {"tensor": 0},
              {"tensor": -1}, {"tensor": 10**6}, {"tensor": True}, {"float": "nan"},
              {"float": 1}, {"dict": [["k", 1]]}, {"dict": [[None, 1]]}, {"tuple": 5},
              {"sparse_rows": {}}, {"sparse_rows": {"indices": {"tensor": 0},
                                                    "rows": {"tensor": 0}, "shape": [1]}},
              {"__class__": "os.system"}, {"py/object": "subprocess.Popen"},
              {"__reduce__": ["os.system", ["touch " + MARKER]]}, *CODE,
              *({"float": c} for c in CODE), *({"dict": [[c, c]]} for c in CODE)]

ALLOWED = (type(None), bool, int, float, str)


def check_result(value, depth=0):
    """A load returns only the types of the format's tree."""
    assert depth <= 200
    if isinstance(value, (list, tuple)):
        for v in value:
            check_result(v, depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            assert isinstance(k, (str, int))
            check_result(v, depth + 1)
    elif isinstance(value, SparseRows):
        check_result(value.indices) or check_result(value.rows)
    else:
        assert isinstance(value, ALLOWED + (rill.Tensor,)), type(value)


def attempt(path, what):
    """Load `path`: a rill.Error or a well-typed result; anything else fails the test."""
    try:
        check_result(load(path))
    except rill.Error:
        pass
    except BaseException as e:  # noqa: B902 - the point is to name whatever escaped
        raise AssertionError(f"{what}: load raised {type(e).__name__}: {e}") from e
    assert not os.path.exists(MARKER), f"{what}: code ran"


def positions(node, out, trail=()):
    """Every (container, key, trail) in a JSON value, the containers included."""
    if isinstance(node, dict):
        for k in list(node):
            out.append((node, k, trail + (k,)))
            positions(node[k], out, trail + (k,))
    elif isinstance(node, list):
        for i in range(len(node)):
            out.append((node, i, trail + (i,)))
            positions(node[i], out, trail + (i,))
    return out


def mutate_manifest(manifest, rng, value=None):
    """A copy of the manifest with one random change; returns (manifest, description)."""
    m = json.loads(json.dumps(manifest))
    container, key, trail = rng.choice(positions(m, []))
    kind = rng.choice(["replace", "replace", "replace", "delete", "insert", "swap"])
    if value is not None:
        kind = "replace"
    if kind == "replace":
        container[key] = rng.choice(BAD_VALUES) if value is None else value
    elif kind == "delete":
        del container[key]
    elif kind == "insert":
        extra = rng.choice(BAD_VALUES)
        if isinstance(container, dict):
            container[rng.choice(["tensor", "dict", "extra", "shape", str(key)])] = extra
        else:
            container.insert(key, extra)
    else:  # swap with another position's value
        other, other_key, _ = rng.choice(positions(m, []))
        container[key], other[other_key] = other[other_key], container[key]
    return m, f"{kind} at {trail!r}"


def rewrite_data(raw, manifest, rng):
    """The file with one buffer byte changed and that buffer's CRC fixed in the manifest, so
    the new value reaches the loader (a bool byte of 2, a NaN, ...)."""
    entries = [e for e in manifest["tensors"] if e["length"]]
    if not entries:
        return None
    length = int.from_bytes(raw[8:16], "little")
    start = HEADER + length + (-(HEADER + length) % 64)
    data = bytearray(raw[start:])
    e = rng.choice(entries)
    i = e["offset"] + rng.randrange(e["length"])
    data[i] = rng.randrange(256)
    m = json.loads(json.dumps(manifest))
    for entry in m["tensors"]:
        if entry["offset"] == e["offset"]:
            entry["crc32"] = f"{zlib.crc32(data[e['offset']:e['offset'] + e['length']]):08x}"
    return m, bytes(data)


def data_of(raw):
    length = int.from_bytes(raw[8:16], "little")
    return raw[HEADER + length + (-(HEADER + length) % 64):]


def test_fuzz_mutated_files_raise_only_rill_errors():
    rng = random.Random(20240514)
    path = os.path.join(WORK, "fuzz.rill")
    start = time.monotonic()
    counts = {"loaded": 0, "refused": 0}
    for n in range(2500):
        raw, manifest = rng.choice(GOOD)
        kind = rng.choice(["flip", "truncate", "junk", "manifest", "manifest", "manifest",
                           "data", "deep", "text"])
        what = f"case {n} ({kind})"
        if kind == "flip":
            b = bytearray(raw)
            for _ in range(rng.choice([1, 1, 2, 8])):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            body = bytes(b)
        elif kind == "truncate":
            body = raw[:rng.randrange(len(raw))]
        elif kind == "junk":
            body = raw + bytes(rng.randrange(256) for _ in range(rng.choice([1, 7, 64, 500])))
        elif kind == "data":
            m, data = rewrite_data(raw, manifest, rng) or (manifest, data_of(raw))
            craft(path, m, data)
            body = None
        elif kind == "deep":
            depth = rng.choice([99, 100, 101, 500, 999, 1000, 5000, 200_000])
            opener, closer = rng.choice([("[", "]"), ('{"tuple":[', "]}"),
                                         ('{"dict":[["k",', "]]}")])
            m, what = mutate_manifest(manifest, rng, value="@@DEEP@@")
            text = json.dumps(m).replace('"@@DEEP@@"', opener * depth + "1" + closer * depth)
            craft(path, text, data_of(raw))
            body = None
        elif kind == "text":  # the manifest's text itself edited, then the CRCs fixed
            text = json.dumps(manifest)
            i = rng.randrange(len(text))
            piece = rng.choice(['"', "[", "]", "{", "}", ",", ":", "\\", "\\u", "\\ud800",
                                "NaN", "Infinity", "1e999", "-", "9" * 5000, "\x00", "\u00e9"])
            text = text[:i] + piece + text[i + rng.choice([0, 1, 5]):]
            craft(path, text.encode("utf-8", "surrogatepass"), data_of(raw))
            body = None
        else:
            m, what = mutate_manifest(manifest, rng)
            craft(path, m, data_of(raw))
            body = None
        if body is not None:
            with open(path, "wb") as f:
                f.write(body)
        try:
            check_result(load(path))
            counts["loaded"] += 1
        except rill.Error:
            counts["refused"] += 1
        except BaseException as e:  # noqa: B902
            raise AssertionError(f"{what}: load raised {type(e).__name__}: {e}") from e
        assert not os.path.exists(MARKER), f"{what}: code ran"
    assert time.monotonic() - start < 12
    assert counts["refused"] > 1000 and counts["loaded"] > 10, counts


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.sampled_from(BAD_VALUES)
    | st.lists(st.integers(-1, 2**64) | st.booleans(), max_size=70),  # shapes
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["tensor", "dict", "tuple", "float", "sparse_rows", "shape",
                         "indices", "rows", "x"]) | st.text(max_size=4), inner, max_size=3),
    max_leaves=12)


EVERYWHERE = [(i, trail) for i, (_, m) in enumerate(GOOD) for _, _, trail in positions(m, [])]
# The typed fields: tensor entries' and sparse rows' (the seeded fuzz covers the rest evenly).
FIELDS = [(i, trail) for i, trail in EVERYWHERE
          if trail[-1] in ("shape", "dtype", "offset", "length", "crc32", "requires_grad",
                           "indices", "rows", "sparse_rows", "tensors", "data_length")]
BOUNDED = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow])


def put(value, where):
    """Load a good file whose manifest holds `value` at `where` (CRCs fixed)."""
    which, trail = where
    raw, manifest = GOOD[which]
    m = json.loads(json.dumps(manifest))
    node = m
    for key in trail[:-1]:
        node = node[key]
    node[trail[-1]] = value
    path = os.path.join(WORK, "hypo.rill")
    craft(path, m, data_of(raw))
    attempt(path, f"file {which}, {trail!r} = {value!r}")


@BOUNDED
@given(value=JSON, where=st.sampled_from(FIELDS))
def test_fuzz_any_json_value_in_a_typed_field(value, where):
    put(value, where)


@BOUNDED
@given(value=JSON, where=st.sampled_from(EVERYWHERE))
def test_fuzz_any_json_value_anywhere_in_the_manifest(value, where):
    put(value, where)


def test_the_good_files_load():
    for raw, _ in GOOD:
        path = os.path.join(WORK, "again.rill")
        with open(path, "wb") as f:
            f.write(raw)
        check_result(load(path))
    assert math.isnan(load(os.path.join(WORK, "good0.rill"))["nan"])
