"""A saved graph is checked before it is built (issue 14, findings 4 and 5): checksums, one
schema for every field (with the field's path in the error), and specs that must be what the
graph computes."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import rill
from rill import nn

import saved_graphs
from saved_graphs import edit_doc, first, graph_file, nodes_of


@pytest.fixture
def saved(tmp_path):
    rill.manual_seed(0)
    f = rill.capture(nn.Sequential(nn.Linear(4, 3), nn.LeakyReLU(0.01)))
    x = rill.randn(2, 4)
    want = f(x).numpy()
    f.save(tmp_path / "g")
    return tmp_path / "g", x, want


def _refused(path, match):
    with pytest.raises(rill.CheckpointError, match=match):
        rill.load_graph(path)


# ---- checksums (finding 4) -----------------------------------------------------------------

def test_an_edited_attr_without_a_new_checksum_is_refused(saved):
    path, x, want = saved
    file = graph_file(path)
    text = open(file).read()
    assert '"alpha": 0.01' in text
    with open(file, "w") as f:
        f.write(text.replace('"alpha": 0.01', '"alpha": 0.91'))
    _refused(path, "checksum")


def test_an_edited_state_file_is_refused(saved):
    path, x, want = saved
    state = graph_file(path).replace("graph.", "state.").replace(".json", ".rill")
    data = bytearray(open(state, "rb").read())
    data[len(data) // 2] ^= 1
    open(state, "wb").write(bytes(data))
    _refused(path, "checksum")


def test_state_of_another_save_is_refused(saved, tmp_path):
    path, x, want = saved
    other = rill.capture(nn.Sequential(nn.Linear(4, 3), nn.LeakyReLU(0.01)))
    other(x)
    other.save(tmp_path / "other")
    mine = json.load(open(path / "manifest.json"))
    theirs = json.load(open(tmp_path / "other" / "manifest.json"))
    os.replace(tmp_path / "other" / theirs["state"]["file"], path / mine["state"]["file"])
    _refused(path, "checksum")


def test_unedited_save_loads_and_matches(saved):
    path, x, want = saved
    np.testing.assert_array_equal(rill.load_graph(path)(x).numpy(), want)


# ---- the schema (finding 5) ----------------------------------------------------------------

def _leaky(doc):
    return nodes_of(doc, "leaky_relu")[0]


def _index_of(doc, node):
    return doc["nodes"].index(node)


MUTATIONS = {
    "alpha is a string": (lambda d: _leaky(d)["attrs"].__setitem__("alpha", "0.5"),
                          r"nodes\[4\]\.attrs\.alpha: expected float, got str"),
    "unknown attr": (lambda d: _leaky(d)["attrs"].__setitem__("beta", 1.0),
                     r"nodes\[4\]\.attrs\.beta: unknown"),
    "op is a number": (lambda d: _leaky(d).__setitem__("op", 7),
                       r"nodes\[4\]\.op: expected string, got int"),
    "inputs not pairs": (lambda d: _leaky(d).__setitem__("inputs", [3]),
                         r"nodes\[4\]\.inputs\[0\]: expected a \[node, output\] pair"),
    "input from a later node": (lambda d: _leaky(d).__setitem__("inputs", [[4, 0]]),
                                r"nodes\[4\]\.inputs\[0\]\[0\]: earlier node 4 does not exist"),
    "output index out of range": (lambda d: _leaky(d).__setitem__("inputs", [[3, 1]]),
                                  r"nodes\[4\]\.inputs\[0\]\[1\]"),
    "shape of strings": (lambda d: _leaky(d)["outputs"][0].__setitem__("shape", ["2", 3]),
                         r"nodes\[4\]\.outputs\[0\]\.shape\[0\]: expected int, got str"),
    "65 dimensions": (lambda d: _leaky(d)["outputs"][0].__setitem__("shape", [1] * 65),
                      r"nodes\[4\]\.outputs\[0\]\.shape: 65 dimensions"),
    "absurd size": (lambda d: _leaky(d)["outputs"][0].__setitem__("shape", [2 ** 40, 2 ** 40]),
                    r"more than 2\*\*48 elements"),
    "unknown dtype": (lambda d: _leaky(d)["outputs"][0].__setitem__("dtype", "float128"),
                      r"nodes\[4\]\.outputs\[0\]\.dtype: unknown dtype"),
    "bad device": (lambda d: _leaky(d).__setitem__("device", "tpu:0"),
                   r"nodes\[4\]\.device: expected a device"),
    "wrong output spec": (lambda d: _leaky(d)["outputs"][0].__setitem__("shape", [3, 2]),
                          r"nodes\[4\].*records outputs f32\[3, 2\] but its rule gives "
                          r"f32\[2, 3\]"),
    "wrong output dtype": (lambda d: _leaky(d)["outputs"][0].__setitem__("dtype", "float64"),
                           r"nodes\[4\].*but its rule gives f32"),
    "too many outputs": (lambda d: _leaky(d)["outputs"].append({"shape": [2, 3],
                                                                 "dtype": "float32"}),
                         r"nodes\[4\].*records outputs"),
    "read of a missing variable": (lambda d: nodes_of(d, "read")[0]["attrs"].__setitem__(
        "var", 9), r"nodes\[1\]\.attrs\.var: variable 9 does not exist"),
    "read with the wrong spec": (lambda d: nodes_of(d, "read")[0]["outputs"][0].__setitem__(
        "shape", [4, 3]), r"nodes\[\d\].*linear|read of"),
    "variable spec differs from state": (lambda d: first(d)["variables"][0].__setitem__(
        "shape", [4, 3]), r"variables\[0\]: is float32\[4, 3\] but state.rill holds"),
    "input index twice": (lambda d: first(d)["nodes"].insert(1, dict(first(d)["nodes"][0])),
                          r"input 0 appears twice"),
    "signature numbers too many tensors": (lambda d: first(d)["signature"]["$tuple"][0][
        "$list"].append({"$tensor": 1}), r"signature: numbers 2 tensors; the graph has 1"),
    "unknown top-level field": (lambda d: d.__setitem__("code", "print(1)"),
                                r"code: unknown field"),
    "missing field": (lambda d: first(d).pop("outputs"), r"missing field 'outputs'"),
    "unknown attr encoding": (lambda d: _leaky(d)["attrs"].__setitem__(
        "alpha", {"$pickle": "gASVAA=="}), r"nodes\[4\]\.attrs\.alpha: unknown attribute "
                                           r"encoding"),
    "array that is not stored": (lambda d: _leaky(d)["attrs"].__setitem__(
        "alpha", {"$array": "a99", "dtype": "float32"}), r"no array 'a99'"),
    "source is a list": (lambda d: _leaky(d).__setitem__("source", ["x"]),
                         r"nodes\[4\]\.source: expected string, got list"),
    "deep attr nesting": (lambda d: _leaky(d)["attrs"].__setitem__("alpha", _nested(200)),
                          r"nested deeper than"),
}


def _nested(depth):
    value = 1.0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_bad_field_is_a_checkpoint_error_naming_its_path(saved, name):
    path, x, want = saved
    mutate, match = MUTATIONS[name]
    edit_doc(path, mutate)
    _refused(path, match)


def test_nesting_beyond_the_json_parser_is_a_checkpoint_error(saved):
    path, x, want = saved
    saved_graphs.write_text(path, "[" * 100_000 + "]" * 100_000)
    _refused(path, "nested too deeply|damaged")


def test_a_format_1_directory_is_refused_with_the_fix(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "graph.json").write_text("{}")
    (tmp_path / "old" / "state.rill").write_bytes(b"")
    _refused(tmp_path / "old", "save it again")


def test_manifest_naming_a_file_outside_the_directory_is_refused(saved):
    path, x, want = saved
    manifest = json.load(open(path / "manifest.json"))
    manifest["graph"]["file"] = "../../etc/passwd"
    json.dump(manifest, open(path / "manifest.json", "w"))
    _refused(path, "not a graph file name")


def test_a_loaded_graph_indexes_with_arrays(tmp_path):
    # A key read from the document is a new tuple; array positions are found by equality.
    table = rill.nn.Embedding(6, 3)
    f = rill.capture(lambda ids: table(ids) * 2.0)
    ids = rill.tensor([4, 0, 4])
    expected = f(ids).numpy()
    f.save(tmp_path / "g")
    np.testing.assert_array_equal(rill.load_graph(tmp_path / "g")(ids).numpy(), expected)
