"""Loaders against resource bombs and special files (issue 30, "Hardening, round 2").

A saved graph, a rill.save file, a training checkpoint or a distributed checkpoint's shard
can be a link to /dev/zero (reads forever), a FIFO (an open waits for a writer), longer than
its manifest says, or a small file that asks for far more memory than the machine has. Each
must be refused at load with a rill.CheckpointError naming the file and the fault, quickly
and before anything of that size is allocated; and two schema gaps of saved graphs (an assign
with an output, an `$array` whose dtype disagrees with the state) are refused at load.
"""
from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np
import pytest

import rill
from rill import files, serialization
from rill.distributed.graphs import checkpoint as shards
from rill.train import Checkpoint

from saved_graphs import edit_doc, first, graph_file, nodes_of, reseal

pytestmark = [pytest.mark.timeout(30),
              pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and links")]

GiB = 1 << 30


def _save_step(path):
    """A saved graph with a variable, a constant and an assign."""
    w = rill.ones(3)

    def step(x):
        nonlocal w
        y = x * w + rill.tensor([1.0, 2.0, 3.0])
        with rill.no_grad():
            w += 1.0
        return y
    f = rill.capture(step)
    f(rill.ones(3))
    f.save(path)
    return path


def _manifest(path) -> dict:
    with open(os.path.join(path, "manifest.json")) as f:
        return json.load(f)


def _state_file(path) -> str:
    return os.path.join(path, _manifest(path)["state"]["file"])


def _refused(call, *words):
    with pytest.raises(rill.CheckpointError) as info:
        call()
    for word in words:
        assert word in str(info.value), str(info.value)
    return info.value


def _replace_with(target, make):
    os.unlink(target)
    make(target)


# ---- links to /dev/zero ---------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("part", ["graph", "state", "manifest"])
def test_a_link_to_dev_zero_in_a_saved_graph_is_refused(tmp_path, part):
    path = _save_step(tmp_path / "g")
    target = os.path.join(path, "manifest.json") if part == "manifest" else \
        os.path.join(path, _manifest(path)[part]["file"])
    _replace_with(target, lambda t: os.symlink("/dev/zero", t))
    _refused(lambda: rill.load_graph(path), target, "symbolic link")


def test_a_link_to_a_good_file_in_a_saved_graph_is_refused_too(tmp_path):
    """The format keeps its files side by side: a link there is refused, wherever it leads."""
    path = _save_step(tmp_path / "g")
    state = _state_file(path)
    os.replace(state, tmp_path / "elsewhere.rill")
    os.symlink(tmp_path / "elsewhere.rill", state)
    _refused(lambda: rill.load_graph(path), "symbolic link")


@pytest.mark.timeout(60)
def test_rill_load_of_a_link_to_dev_zero_is_refused(tmp_path):
    os.symlink("/dev/zero", tmp_path / "x.rill")
    _refused(lambda: rill.load(tmp_path / "x.rill"), "character device", "not a regular file")


def test_rill_load_follows_a_link_to_a_regular_file(tmp_path):
    rill.save({"w": rill.arange(3)}, tmp_path / "ckpt-1.rill")
    os.symlink(tmp_path / "ckpt-1.rill", tmp_path / "latest.rill")
    assert rill.load(tmp_path / "latest.rill")["w"].tolist() == [0, 1, 2]


@pytest.mark.timeout(60)
def test_a_training_checkpoint_linked_to_dev_zero_is_refused(tmp_path):
    os.symlink("/dev/zero", tmp_path / "run.rill")
    ckpt = Checkpoint(weights=rill.zeros(2), step=0)
    _refused(lambda: ckpt.restore(tmp_path / "run.rill"), "run.rill", "not a regular file")
    assert ckpt.weights.tolist() == [0.0, 0.0] and ckpt.step == 0


@pytest.mark.timeout(60)
def test_a_distributed_shard_linked_to_dev_zero_is_refused(tmp_path):
    link = str(tmp_path / "shard-ps0.ckpt-8.89abcdef.rill")
    os.symlink("/dev/zero", link)
    _refused(lambda: shards.sha256_of(link), "symbolic link")
    _refused(lambda: shards.read_shard(link, "0" * 64, "ps:0", 8), "symbolic link")


# ---- FIFOs and other things that are not files ------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("part", ["manifest", "graph", "state"])
def test_a_fifo_in_a_saved_graph_is_refused_without_blocking(tmp_path, part):
    path = _save_step(tmp_path / "g")
    target = os.path.join(path, "manifest.json") if part == "manifest" else \
        os.path.join(path, _manifest(path)[part]["file"])
    _replace_with(target, os.mkfifo)
    _refused(lambda: rill.load_graph(path), target, "FIFO")


@pytest.mark.timeout(60)
def test_rill_load_of_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "x.rill")
    _refused(lambda: rill.load(tmp_path / "x.rill"), "FIFO", "not a regular file")


@pytest.mark.timeout(60)
def test_a_fifo_shard_is_refused_without_blocking(tmp_path):
    fifo = str(tmp_path / "shard-ps0.ckpt-8.89abcdef.rill")
    os.mkfifo(fifo)
    _refused(lambda: shards.read_shard(fifo, "0" * 64, "ps:0", 8), "FIFO")


def test_a_directory_is_refused_as_a_file(tmp_path):
    (tmp_path / "d.rill").mkdir()
    _refused(lambda: rill.load(tmp_path / "d.rill"), "a directory")
    path = _save_step(tmp_path / "g")
    _replace_with(os.path.join(path, "manifest.json"), os.mkdir)
    _refused(lambda: rill.load_graph(path), "a directory")


# ---- files longer than their manifest says, or claiming more than the budget ----------------


def test_a_rill_file_longer_than_its_manifest_says_is_refused(tmp_path):
    rill.save({"w": rill.ones(4)}, tmp_path / "x.rill")
    with open(tmp_path / "x.rill", "ab") as f:
        f.write(bytes(64))
    _refused(lambda: rill.load(tmp_path / "x.rill"), "64 unexpected bytes after the data")


def test_a_state_file_longer_than_its_manifest_says_is_refused(tmp_path):
    path = _save_step(tmp_path / "g")
    with open(_state_file(path), "ab") as f:
        f.write(bytes(64))
    reseal(path)  # the checksum agrees: the state's own manifest must catch it
    _refused(lambda: rill.load_graph(path), "unexpected bytes after the data")


def test_a_manifest_over_its_cap_is_refused_before_reading_it(tmp_path):
    path = _save_step(tmp_path / "g")
    manifest = os.path.join(path, "manifest.json")
    with open(manifest, "ab") as f:
        f.write(b" " * (1 << 16))  # still valid JSON: only the size is wrong
    _refused(lambda: rill.load_graph(path), manifest, "a manifest may hold", "64.0 KiB")


def test_a_graph_document_over_its_cap_is_refused_before_reading_it(tmp_path, monkeypatch):
    from rill.capture import serialize
    path = _save_step(tmp_path / "g")
    monkeypatch.setattr(serialize, "MAX_DOCUMENT", 512)  # 256 MiB files make slow tests
    _refused(lambda: rill.load_graph(path), graph_file(path), "a graph document may hold")
    assert serialize.MAX_DOCUMENT <= files.MAX_JSON == 1 << 28


def _header(length: int, text: bytes = b"") -> bytes:
    head = struct.pack("<5sHxQI", b"RILL\x00", 1, length, zlib.crc32(text))
    return head + struct.pack("<I", zlib.crc32(head))


@pytest.mark.timeout(60)
def test_a_header_claiming_a_huge_manifest_is_refused_before_reading_it(tmp_path):
    (tmp_path / "x.rill").write_bytes(_header(1 << 40))
    _refused(lambda: rill.load(tmp_path / "x.rill"), "1.0 TiB", "at most")


def _claiming(path, nbytes: int) -> str:
    """A rill file whose one float32 tensor takes `nbytes`, its data a hole (the file is
    sparse where the file system allows): every CRC right, every byte where it should be."""
    n = nbytes // 4
    crc = f"{zlib.crc32(bytes(1 << 20)):08x}" if nbytes == 1 << 20 else "00000000"
    text = json.dumps({"format": "rill", "version": 1, "tree": {"tensor": 0}, "data_length": nbytes,
                       "tensors": [{"name": "w", "shape": [n], "dtype": "float32", "offset": 0,
                                    "length": nbytes, "crc32": crc}]}).encode()
    head = _header(len(text), text) + text
    with open(path, "wb") as f:
        f.write(head + bytes(-len(head) % 64))
        f.truncate(f.tell() + nbytes)
    return str(path)


def test_a_rill_file_over_the_budget_is_refused_before_allocating(tmp_path):
    file = _claiming(tmp_path / "x.rill", 1 << 20)
    _refused(lambda: rill.load(file, max_bytes=1 << 19), "1.0 MiB", "budget of 512.0 KiB")
    assert rill.load(file, max_bytes=1 << 20).shape == (1 << 18,)  # at the budget: loads


def test_the_environment_sets_the_budget(tmp_path, monkeypatch):
    file = _claiming(tmp_path / "x.rill", 1 << 20)
    monkeypatch.setenv("RILL_LOAD_MAX_BYTES", "512K")
    _refused(lambda: rill.load(file), "RILL_LOAD_MAX_BYTES")
    assert rill.load(file, max_bytes=2 << 20).shape == (1 << 18,)  # the keyword wins


def test_the_budget_defaults_to_the_machines_memory(monkeypatch):
    monkeypatch.delenv("RILL_LOAD_MAX_BYTES", raising=False)
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert files.load_budget(op="load") == memory
    monkeypatch.setenv("RILL_LOAD_MAX_BYTES", "3G")
    assert files.load_budget(op="load") == 3 * GiB
    for bad in ("lots", "-1", "1.5G"):
        monkeypatch.setenv("RILL_LOAD_MAX_BYTES", bad)
        with pytest.raises(rill.ArgumentError, match="RILL_LOAD_MAX_BYTES"):
            files.load_budget(op="load")
    with pytest.raises(rill.ArgumentError, match="max_bytes"):
        files.load_budget(-5, op="load")


def test_a_state_file_over_the_budget_is_refused_before_reading_it(tmp_path):
    path = _save_step(tmp_path / "g")
    size = os.path.getsize(_state_file(path))
    _refused(lambda: rill.load_graph(path, max_bytes=size - 1), _state_file(path), "budget")
    rill.load_graph(path, max_bytes=size + 1024)


# ---- saved graphs that ask for more memory per call than the budget --------------------------


def _full_graph(path, elements: int):
    """The 1.2 KB saved graph of the probe: x -> full(elements) returned beside x + 1."""
    f = rill.capture(lambda x: x + 1.0)
    f(rill.ones(3))
    f.save(path)

    def edit(doc):
        variant = first(doc)
        variant["nodes"].append({
            "op": "full", "inputs": [], "device": "cpu", "after": [], "source": None,
            "attrs": {"shape": {"$tuple": [elements]}, "dtype": {"$dtype": "float32"},
                      "device": {"$device": "cpu"}, "value": 1.0},
            "outputs": [{"shape": [elements], "dtype": "float32"}]})
        variant["outputs"] = [[len(variant["nodes"]) - 1, 0]]
    edit_doc(path, edit)
    assert os.path.getsize(graph_file(path)) < 4096
    return path


def test_a_graph_asking_for_96_gib_per_call_is_refused_at_load(tmp_path, monkeypatch):
    monkeypatch.setenv("RILL_LOAD_MAX_BYTES", "16G")  # the same on any machine
    path = _full_graph(tmp_path / "g", 96 * GiB // 4)
    error = _refused(lambda: rill.load_graph(path), graph_file(path), "96.0 GiB",
                     "this full node", "float32[25769803776]", "budget of 16.0 GiB",
                     "RILL_LOAD_MAX_BYTES")
    full = len(first(json.load(open(graph_file(path))))["nodes"]) - 1
    assert f"variants[0].nodes[{full}]: " in error.message
    loaded = rill.load_graph(path, max_bytes=128 * GiB)  # a trusted file: the fix works
    assert loaded.graph.outputs[0].shape == (96 * GiB // 4,)  # (not called: no allocation)


def test_a_value_made_inside_a_branch_counts(tmp_path, monkeypatch):
    """A tile to a huge shape inside a cond branch, summed there: the switch's own result is
    a scalar, but the branch needs the tile's bytes while it runs."""
    monkeypatch.setenv("RILL_LOAD_MAX_BYTES", "1G")
    f = rill.capture(lambda x: rill.cond(x.sum() > 0, lambda x: rill.tile(x, (2,)).sum(),
                                         lambda x: x.sum(), x))
    f(rill.ones(3))
    f.save(tmp_path / "g")
    rows = 1 << 28  # 2**28 x 3 float32: 3 GiB

    def edit(doc):
        (switch,) = nodes_of(doc, "switch")
        branch = switch["attrs"]["branches"]["$tuple"][1]["$graph"]
        broadcast, flat = branch["nodes"][2], branch["nodes"][3]
        broadcast["attrs"]["shape"] = {"$tuple": [rows, 3]}
        broadcast["outputs"][0]["shape"] = [rows, 3]
        flat["attrs"]["shape"] = {"$tuple": [rows * 3]}
        flat["outputs"][0]["shape"] = [rows * 3]
    edit_doc(tmp_path / "g", edit)
    error = _refused(lambda: rill.load_graph(tmp_path / "g"), "budget of 1.0 GiB",
                     f"float32[{rows * 3}]")
    assert ".attrs.branches.$tuple[1].$graph.nodes[" in error.message


def test_values_that_die_early_are_not_summed(tmp_path):
    """The count follows the values' lives: a chain of four ops over one large value needs
    two or three of them at once (two inside a fused group, plus its result), not one per
    node."""
    f = rill.capture(lambda x: (((x * 2.0) + 1.0) * 3.0 - 4.0).sum())
    x = rill.ones(1 << 16)
    f(x)
    f.save(tmp_path / "g")
    value = 4 << 16
    loaded = rill.load_graph(tmp_path / "g", max_bytes=3 * value + 64)
    assert loaded(x).item() == pytest.approx(float(1 << 16) * 5.0)
    _refused(lambda: rill.load_graph(tmp_path / "g", max_bytes=2 * value - 64), "budget")


def test_variables_over_the_budget_are_refused(tmp_path, monkeypatch):
    path = _save_step(tmp_path / "g")
    with pytest.raises(rill.CheckpointError, match="budget") as info:
        rill.load_graph(path, max_bytes=24)
    assert "variables" in str(info.value)


# ---- schema gaps --------------------------------------------------------------------------------


@pytest.mark.parametrize("op, change, words", [
    ("assign", lambda n: n["outputs"].append({"shape": [3], "dtype": "float32"}),
     "assign takes 1 input(s) and gives 0 output(s), this node has 1 and 1"),
    ("assign", lambda n: n["inputs"].clear(), "this node has 0 and 0"),
    ("read", lambda n: n["inputs"].append([0, 0]), "read takes 0 input(s)"),
    ("constant", lambda n: n["outputs"].append({"shape": [3], "dtype": "float32"}),
     "constant takes 0 input(s) and gives 1 output(s)"),
    ("input", lambda n: n["outputs"].clear(), "input takes 0 input(s) and gives 1"),
])
def test_a_graph_op_with_the_wrong_arity_is_refused_at_load(tmp_path, op, change, words):
    path = _save_step(tmp_path / "g")
    edit_doc(path, lambda doc: change(nodes_of(doc, op)[0]))
    _refused(lambda: rill.load_graph(path), graph_file(path), words)


@pytest.mark.parametrize("declared, words", [
    ("int64", "declares 'int64', but state.rill holds array"),
    ("float64", "as float32"),
    ("float", "declares 'float'"),   # an alias is not the stored array's name
    (7, "dtype: expected string, got int"),
])
def test_an_array_whose_declared_dtype_disagrees_is_refused_at_load(tmp_path, declared, words):
    path = _save_step(tmp_path / "g")

    def edit(doc):
        arrays = [n for n in nodes_of(doc, "constant") if n["outputs"][0]["shape"] == [3]]
        arrays[0]["attrs"]["value"]["dtype"] = declared
    edit_doc(path, edit)
    _refused(lambda: rill.load_graph(path), "attrs.value.dtype", words)


def test_a_saved_graph_round_trips_with_the_hardened_loader(tmp_path):
    path = _save_step(tmp_path / "g")
    doc = json.load(open(graph_file(path)))
    assert {n["attrs"]["value"]["dtype"] for n in nodes_of(doc, "constant")} == {"float32"}
    loaded = rill.load_graph(path)
    x = rill.tensor([1.0, -2.0, 0.5])
    np.testing.assert_allclose(loaded(x).numpy(), [3.0, -2.0, 4.0])  # w saved as 2
    np.testing.assert_allclose(loaded(x).numpy(), [4.0, -4.0, 4.5])  # and assigned 3


def test_errors_stay_rill_errors_for_a_missing_path(tmp_path):
    _refused(lambda: rill.load(tmp_path / "nothing.rill"), "no such file")
    _refused(lambda: rill.load_graph(tmp_path / "nothing"), "no saved graph")
    _refused(lambda: shards.sha256_of(str(tmp_path / "shard-ps0.x.00000000.rill")),
             "no such file")
    assert serialization.load is rill.load
