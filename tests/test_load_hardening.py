"""rill.load on crafted files: files whose checksums are all valid, so that they get past the
CRCs and reach the manifest checks, yet describe something malformed or hostile. Every one
must be refused with `rill.CheckpointError` naming what is wrong (issue 14, finding 6)."""
import json
import struct
import zlib

import numpy as np
import pytest

import rill
from rill import serialization
from rill.serialization import load, save

pytestmark = pytest.mark.timeout(60)


def craft(path, manifest, data: bytes = b"") -> str:
    """Write a file with a valid header, the given manifest (a dict, or JSON text/bytes) and
    data section, every CRC correct: whatever is wrong must be caught by the manifest checks.
    """
    if isinstance(manifest, dict):
        text = json.dumps(manifest).encode()
    else:
        text = manifest.encode() if isinstance(manifest, str) else manifest
    head = struct.pack("<5sHxQI", b"RILL\x00", 1, len(text), zlib.crc32(text))
    head += struct.pack("<I", zlib.crc32(head))
    pad = bytes(-(len(head) + len(text)) % 64)
    with open(path, "wb") as f:
        f.write(head + text + pad + data)
    return str(path)


def entry(data: bytes, shape, dtype="float32", **changes) -> dict:
    """A tensor entry at offset 0 describing `data`, with fields replaced by `changes`."""
    e = {"name": "t", "shape": shape, "dtype": dtype, "offset": 0, "length": len(data),
         "crc32": f"{zlib.crc32(data):08x}", "requires_grad": False}
    e.update(changes)
    return e


def manifest(tree, entries=(), data_length=0, **extra) -> dict:
    m = {"format": "rill", "version": 1, "tree": tree, "tensors": list(entries),
         "data_length": data_length}
    m.update(extra)
    return m


def one_tensor(path, data: bytes, shape, dtype="float32", **changes) -> str:
    return craft(path, manifest({"tensor": 0}, [entry(data, shape, dtype, **changes)],
                                len(data)), data)


def refused(path, *words):
    """load(path) raises CheckpointError (and nothing else) whose message has every word."""
    with pytest.raises(rill.CheckpointError) as info:
        load(path)
    for word in words:
        assert word in str(info.value), str(info.value)
    return info.value


def test_the_crafting_helper_makes_loadable_files(tmp_path):
    data = np.arange(6, dtype="<f4").tobytes()
    t = load(one_tensor(tmp_path / "ok.rill", data, [2, 3]))
    assert t.shape == (2, 3) and t.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert load(craft(tmp_path / "s.rill", manifest({"dict": [["a", [1, {"tuple": []}]]]}))) \
        == {"a": [1, ()]}


# ---- nesting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [101, 990, 5000, 100_000])
def test_deeply_nested_tree_is_refused(tmp_path, depth):
    text = '{"format":"rill","version":1,"tensors":[],"data_length":0,"tree":' + \
        "[" * depth + "]" * depth + "}"
    refused(craft(tmp_path / "deep.rill", text), "nest")


def test_deeply_nested_dicts_and_tuples_are_refused(tmp_path):
    # Built as text: json.dumps itself cannot write 1000 levels.
    opens = "".join('{"dict":[["k",' if i % 2 else '{"tuple":[' for i in range(400))
    closes = "".join("]]}" if i % 2 else "]}" for i in reversed(range(400)))
    text = '{"format":"rill","version":1,"tensors":[],"data_length":0,"tree":' + opens + \
        "1" + closes + "}"
    refused(craft(tmp_path / "deep.rill", text), "nest")


def test_nesting_up_to_the_limit_round_trips(tmp_path):
    obj = 0
    for i in range(serialization.MAX_NESTING):
        obj = {"k": obj} if i % 3 == 0 else ([obj] if i % 3 == 1 else (obj,))
    assert load(save(obj, tmp_path / "deep.rill")) == obj


def test_saving_deeper_than_a_load_accepts_is_refused(tmp_path):
    obj = []
    for _ in range(serialization.MAX_NESTING + 5):
        obj = [obj]
    with pytest.raises(rill.CheckpointError, match="nest"):
        save(obj, tmp_path / "deep.rill")
    assert not (tmp_path / "deep.rill").exists()


# ---- shapes ----------------------------------------------------------------------------------


def test_65_dimensions_are_refused(tmp_path):
    data = np.zeros(1, "<f4").tobytes()
    refused(one_tensor(tmp_path / "d.rill", data, [1] * 65), "tensors[0].shape", "64")


def test_64_dimensions_load(tmp_path):
    data = np.ones(1, "<f4").tobytes()
    assert load(one_tensor(tmp_path / "d.rill", data, [1] * 64)).shape == (1,) * 64


@pytest.mark.parametrize("shape", [[0, 2**62, 2**62], [0, 2**63], [2**40, 2**40, 0],
                                   [0, 2**200], [2**64]])
def test_absurd_shapes_are_refused(tmp_path, shape):
    refused(one_tensor(tmp_path / "a.rill", b"", shape), "tensors[0].shape")


@pytest.mark.parametrize("shape", ["ab", 5, None, [True, 1], [1.0], [-1], {"a": 1}, [[1]],
                                   ["1"]])
def test_wrongly_typed_shapes_are_refused(tmp_path, shape):
    refused(one_tensor(tmp_path / "s.rill", b"", shape), "tensors[0].shape")


@pytest.mark.parametrize("field,value", [
    ("offset", "0"), ("offset", True), ("offset", 1.0), ("offset", -64), ("offset", 2**70),
    ("length", 4.0), ("length", -4), ("crc32", 5), ("crc32", "XYZ"), ("name", 5),
    ("requires_grad", "yes"), ("requires_grad", 1), ("dtype", ["float32"]),
    ("dtype", "object"), ("dtype", "float"), ("dtype", None)])
def test_wrongly_typed_entry_fields_name_the_field(tmp_path, field, value):
    data = np.zeros(1, "<f4").tobytes()
    refused(one_tensor(tmp_path / "f.rill", data, [1], **{field: value}), f"tensors[0].{field}")


def test_entries_that_are_not_objects_are_refused(tmp_path):
    for bad in (["x"], [5], [None], [[1, 2]]):
        refused(craft(tmp_path / "e.rill", manifest(None, bad)), "tensors[0]")


def test_unaligned_offset_is_refused(tmp_path):
    data = np.zeros(1, "<f4").tobytes()
    path = craft(tmp_path / "o.rill",
                 manifest({"tensor": 0}, [entry(data, [1], offset=4)], 8), bytes(4) + data)
    refused(path, "tensors[0].offset")


@pytest.mark.parametrize("field,value", [("data_length", True), ("data_length", "0"),
                                         ("data_length", -1), ("tensors", {}),
                                         ("tensors", None), ("format", 1), ("version", True)])
def test_wrongly_typed_top_level_fields(tmp_path, field, value):
    m = manifest(None)
    m[field] = value
    refused(craft(tmp_path / "m.rill", m), field)


@pytest.mark.parametrize("text", ["[]", "5", '"rill"', "null"])
def test_manifest_that_is_not_an_object(tmp_path, text):
    refused(craft(tmp_path / "m.rill", text), "manifest")


# ---- the tree --------------------------------------------------------------------------------


@pytest.mark.parametrize("tree", [
    {"tensor": True}, {"tensor": 1}, {"tensor": -1}, {"tensor": "0"}, {"tensor": 0, "x": 1},
    {"float": "1e999"}, {"float": 1.0}, {"dict": [["k"]]}, {"dict": [[["k"], 1]]},
    {"dict": [[None, 1]]}, {"dict": {"k": 1}}, {"tuple": {}}, {"what": 1}, {},
    {"sparse_rows": {"indices": {"tensor": 0}, "rows": {"tensor": 0}, "shape": 5}},
    {"sparse_rows": {"indices": {"tensor": 0}, "rows": {"tensor": 0}, "shape": "ab"}},
    {"sparse_rows": {"indices": {"tensor": 0}, "rows": {"tensor": 0}}},
    {"sparse_rows": {"indices": 3, "rows": {"tensor": 0}, "shape": [1]}},
    {"sparse_rows": [1]},
])
def test_malformed_tree_nodes_are_refused(tmp_path, tree):
    data = np.zeros(1, "<f4").tobytes()
    refused(craft(tmp_path / "t.rill", manifest(tree, [entry(data, [1])], 4), data), "tree")


def test_sparse_rows_must_agree_with_their_tensors(tmp_path):
    indices = np.array([0, 7], "<i8").tobytes()
    rows = np.zeros((2, 3), "<f4").tobytes()
    entries = [entry(indices, [2], "int64"), entry(rows, [2, 3], offset=64)]
    body = {"indices": {"tensor": 0}, "rows": {"tensor": 1}}
    for shape, word in [([5, 3], "index"), ([9, 4], "rows"), ([9], "rows")]:
        path = craft(tmp_path / "sp.rill",
                     manifest({"sparse_rows": dict(body, shape=shape)}, entries, 64 + len(rows)),
                     indices + bytes(64 - len(indices)) + rows)
        refused(path, "sparse_rows", word)
    path = craft(tmp_path / "sp.rill",
                 manifest({"sparse_rows": dict(body, shape=[8, 3])}, entries, 64 + len(rows)),
                 indices + bytes(64 - len(indices)) + rows)
    assert load(path).to_dense().shape == (8, 3)


def test_json_constants_outside_the_schema_are_refused(tmp_path):
    for constant in ("NaN", "Infinity", "-Infinity"):
        text = '{"format":"rill","version":1,"tensors":[],"data_length":0,"tree":' + \
            constant + "}"
        refused(craft(tmp_path / "c.rill", text), constant)


def test_duplicate_keys_are_refused(tmp_path):
    text = '{"format":"rill","version":1,"tensors":[],"data_length":0,"tree":1,"tree":2}'
    refused(craft(tmp_path / "k.rill", text), "tree")


def test_unicode_keys_and_values_round_trip(tmp_path):
    obj = {"\u00e9\u6f22\U0001f600": "\u0000\u202e\ud7ff", "k": ["\U0010ffff"]}
    assert load(save(obj, tmp_path / "u.rill")) == obj


def test_lone_surrogates_round_trip(tmp_path):
    # JSON can escape them and Python strings can hold them: a save of one loads back.
    obj = {"\ud800": "\udfff"}
    assert load(save(obj, tmp_path / "u.rill")) == obj


# ---- buffers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("byte", [2, 0x80, 0xFF])
def test_bool_bytes_other_than_0_and_1_are_refused(tmp_path, byte):
    data = bytes([0, 1, byte, 1])
    refused(one_tensor(tmp_path / "b.rill", data, [4], "bool"), "bool", "tensors[0]")


def test_bool_zeros_and_ones_load(tmp_path):
    t = load(one_tensor(tmp_path / "b.rill", bytes([0, 1, 1, 0]), [2, 2], "bool"))
    assert t.dtype is rill.bool_ and t.numpy().tolist() == [[False, True], [True, False]]


# ---- no code -----------------------------------------------------------------------------------


def test_loading_never_runs_code(tmp_path, monkeypatch):
    """The loader has no pickle, eval or import path at all; code in strings stays a string."""
    import ast
    import inspect
    source = inspect.getsource(serialization)
    names = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)}
    for banned in ("pickle", "eval", "exec", "compile", "__import__", "import_module",
                   "literal_eval", "loads_pickle", "getattr", "globals"):
        assert banned not in names, banned
    marker = tmp_path / "MARKER"
    code = f"__import__('os').system('touch {marker}')"
    path = craft(tmp_path / "c.rill", manifest({"dict": [[code, {"float": code}]]}))
    refused(path, "tree")
    path = craft(tmp_path / "c.rill", manifest({"dict": [[code, code]]}))
    assert load(path) == {code: code} and not marker.exists()
