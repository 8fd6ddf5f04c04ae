"""Fuzzing saved graphs (issue 14): every mutation of a saved graph loads and runs, or fails
with a rill.Error — never another exception, never a hang, never code run from the file.

Mutations are seeded and bounded (this file takes a few seconds): values swapped for values
of other types (payload strings, Unicode identifiers, huge and negative numbers, NaN, deep
nesting, tagged objects), fields deleted and added, nodes duplicated and dropped; then, on
the bytes, bit flips, truncations and junk, with the manifest re-sealed or not.
"""
from __future__ import annotations

import json
import random
import shutil

import pytest

import rill
from rill import nn

import saved_graphs


def _model():
    rill.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.LeakyReLU(0.1), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(8, 3), nn.Softmax(-1))


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    model = _model()
    opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @rill.capture
    def step(x, y):
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        branch = rill.cond(loss > 1.0, lambda v: v * 2.0, lambda v: v - 1.0, out)
        return loss, branch[:, 1:]

    x, y = rill.randn(2, 1, 4, 4), rill.tensor([0, 2])
    step(x, y)
    path = tmp_path_factory.mktemp("fuzz") / "template"
    step.save(path)
    return path, (x, y)


def _payload_values(marker):
    touch = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    italic = "".join(chr(0x1D5BA + ord(c) - 97) if c.isalpha() else c for c in "__import__")
    deep = 1
    for _ in range(80):
        deep = [deep]
    return [
        touch, f"0]; {touch}; [0", f"\n{touch}\n", italic, f"{italic}('os')", "__class__",
        "'", '"', "\\", "\x00", "\ud7ff", "ℌ𝔢𝔩𝔩𝔬", "exec", "${x}", "%s%n",
        None, True, False, 0, -1, 1, 3, 2 ** 31, -(2 ** 63), 2 ** 64, 2 ** 200, 0.5, -0.0,
        float("nan"), float("inf"), 1e308, [], [1, 2], [[0, 0]], [-1, 0], {}, deep,
        {"$tuple": [1, 2]}, {"$dtype": "float32"}, {"$dtype": "complex256"},
        {"$device": "gpu:9999"}, {"$device": "cpu:1"}, {"$slice": [None, None, 0]},
        {"$ellipsis": True}, {"$array": "a0", "dtype": "float32"},
        {"$graph": {"name": "x", "nodes": [], "outputs": []}},
        {"$generator": {"bit_generator": "PCG64", "state": {"state": -1, "inc": "x"},
                        "has_uint32": 0, "uinteger": 0}},
        {"$tensor": 0}, {"$static": touch}, {"__reduce__": touch},
    ]


def _paths(obj, prefix=()):
    """Every (container, key) place in a JSON tree."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield obj, k
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield obj, i
            yield from _paths(v, prefix + (i,))


def _mutate(doc, rng, values):
    places = list(_paths(doc))
    container, key = rng.choice(places)
    kind = rng.random()
    if kind < 0.6:
        container[key] = rng.choice(values)
    elif kind < 0.7:
        del container[key]
    elif kind < 0.8 and isinstance(container, dict):
        container[rng.choice([str(v) for v in values[:16]])] = rng.choice(values)
    elif kind < 0.9 and isinstance(container, list):
        container.insert(rng.randrange(len(container) + 1), rng.choice(container))
    else:
        container[key] = json.loads(json.dumps(rng.choice(places)[0]))  # a copy elsewhere


def _same_json(a: bytes, b: bytes) -> bool:
    try:
        return json.loads(a) == json.loads(b)
    except ValueError:
        return False


def _try(path, args):
    """Load and run; a rill.Error is a fine answer, anything else fails the test."""
    try:
        rill.load_graph(path)(*args)
    except rill.Error:
        return "refused"
    return "ran"


@pytest.mark.timeout(120)
def test_mutated_documents_load_or_fail_with_rill_errors(template, tmp_path):
    path, args = template
    marker = tmp_path / "MARKER"
    values = _payload_values(marker)
    original = saved_graphs.read_doc(path)
    rng = random.Random(14)
    outcomes = {"refused": 0, "ran": 0}
    for i in range(600):
        target = tmp_path / f"m{i}"
        shutil.copytree(path, target)
        doc = json.loads(json.dumps(original))
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            _mutate(doc, rng, values)
        saved_graphs.write_doc(target, doc)
        outcomes[_try(target, args)] += 1
        assert not marker.exists(), f"mutation {i} ran code from the file"
        shutil.rmtree(target)
    assert outcomes["refused"] > 400, outcomes
    print(outcomes)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("reseal", [True, False])
def test_damaged_bytes_load_or_fail_with_rill_errors(template, tmp_path, reseal):
    path, args = template
    rng = random.Random(41)
    outcomes = {"refused": 0, "ran": 0}
    for i in range(120):
        target = tmp_path / f"b{i}"
        shutil.copytree(path, target)
        victim = rng.choice(["graph", "state", "manifest"])
        file = {"graph": saved_graphs.graph_file(target), "manifest": target / "manifest.json",
                "state": saved_graphs.graph_file(target).replace("graph.", "state.")
                .replace(".json", ".rill")}[victim]
        data = bytearray(open(file, "rb").read())
        original = bytes(data)
        how = rng.random()
        if how < 0.5:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif how < 0.8:
            data = data[: rng.randrange(len(data))]
        else:
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        open(file, "wb").write(bytes(data))
        if reseal and victim != "manifest":
            saved_graphs.reseal(target)
        outcome = _try(target, args)
        outcomes[outcome] += 1
        if outcome == "ran" and not reseal:
            # Unsealed, only a change that means nothing may load: whitespace after the
            # manifest's JSON. Any other changed byte breaks a checksum or the JSON.
            assert victim == "manifest" and _same_json(bytes(data), original), (i, victim)
        shutil.rmtree(target)
    print(outcomes)
