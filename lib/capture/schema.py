"""The schema of a saved graph's document, checked field by field before anything is built.

`read_graph(doc, arrays)` turns the parsed JSON of docs/GRAPH_FORMAT.md into a Graph, or raises
a CheckpointError naming the field's path (`nodes[3].attrs.alpha: expected float, got str`).
The file is data from anywhere, so nothing in it is trusted: every field has a type, a range
and a bound on size and nesting; node attrs are checked against the attribute types their
primitive declares (rill.ops.attrs, the same declarations `bind` checks eagerly); a
reference to another node, output or variable must exist and come earlier; and after the
graph is built, `Graph.lint` re-runs every node's shape/dtype rule, so the specs the file
claims must be the specs the graph computes.
"""
from __future__ import annotations

import re
from contextvars import ContextVar

import numpy as np

from .. import dtypes as dt
from ..devices import device as as_device
from ..errors import CheckpointError, Error
from .ir import GRAPH_OPS, Graph, Node
from ..random import Generator
from ..ops.primitive import PRIMITIVES

MAX_DEPTH = 32          # nesting of attrs, structures and subgraphs
MAX_NDIM = 64           # as NumPy
MAX_ELEMENTS = 1 << 48  # a spec's element count: beyond any real tensor, far from overflow
MAX_TEXT = 4096         # names, source lines
_DEVICE = re.compile(r"((ps|worker):[0-9]{1,6}/)?(cpu|gpu)(:[0-9]{1,4})?")
# True while a partition registered by a distributed job's worker is read (its send and
# recv nodes are the exchanges between tasks); a saved graph never holds them.
PARTITION: ContextVar[bool] = ContextVar("rill_partition", default=False)


class Path:
    """Where in the document a check is: prints as `nodes[3].attrs.alpha`."""

    __slots__ = ("text", "depth")

    def __init__(self, text: str = "", depth: int = 0):
        self.text, self.depth = text, depth

    def __truediv__(self, key) -> "Path":
        if self.depth >= MAX_DEPTH:
            fail(self, f"nested deeper than {MAX_DEPTH} levels")
        part = f"[{key}]" if isinstance(key, int) else (f".{key}" if self.text else str(key))
        return Path(self.text + part, self.depth + 1)

    def __str__(self) -> str:
        return self.text or "the document"


def fail(path, why: str):
    raise CheckpointError(f"{path}: {why}", op="load_graph")


def _type_name(value) -> str:
    return "null" if value is None else type(value).__name__


def expect(value, kind, path, what: str | None = None):
    """value, if it is a `kind` (bool is never an int here); else a CheckpointError."""
    ok = isinstance(value, kind) and not (kind in (int, (int, float)) and isinstance(value, bool))
    if not ok:
        fail(path, f"expected {what or getattr(kind, '__name__', 'number')}, "
                   f"got {_type_name(value)}")
    return value


def index(value, path, below: int, what: str) -> int:
    expect(value, int, path, "int")
    if not 0 <= value < below:
        fail(path, f"{what} {value} does not exist (there are {below})")
    return value


def text(value, path) -> str:
    expect(value, str, path, "string")
    if len(value) > MAX_TEXT:
        fail(path, f"longer than {MAX_TEXT} characters")
    return value


def fields(doc, path, required: tuple, optional: tuple = ()) -> dict:
    expect(doc, dict, path, "object")
    missing = [k for k in required if k not in doc]
    if missing:
        fail(path, f"missing field {missing[0]!r}")
    unknown = [k for k in doc if k not in required and k not in optional]
    if unknown:
        fail(path / str(unknown[0]), "unknown field")
    return doc


def shape(value, path) -> tuple:
    expect(value, list, path, "list of ints")
    if len(value) > MAX_NDIM:
        fail(path, f"{len(value)} dimensions; at most {MAX_NDIM}")
    n = 1
    for i, d in enumerate(value):
        expect(d, int, path / i, "int")
        if d < 0:
            fail(path / i, f"negative size {d}")
        n *= d
        if n > MAX_ELEMENTS:
            fail(path, "more than 2**48 elements")
    return tuple(value)


def dtype(value, path):
    expect(value, str, path, "dtype name")
    if value not in dt._BY_NAME:
        fail(path, f"unknown dtype {value[:40]!r}")
    return dt._BY_NAME[value]


# {saved device name: Device} while a load with `device_map=` runs (see serialize.load_graph).
DEVICE_MAP: ContextVar[dict] = ContextVar("rill_device_map", default={})


def device_name(value: str) -> str:
    """The one spelling of a well-formed device name ('gpu' and 'gpu:0' -> 'gpu:0',
    'cpu:0' -> 'cpu'), without asking whether this machine has it."""
    task, slash, value = value.rpartition("/")
    kind, _, index = value.partition(":")
    index = int(index) if index else 0
    local = kind if kind == "cpu" and index == 0 else f"{kind}:{index}"
    return f"{task}/{local}" if slash else local


def device(value, path):
    expect(value, str, path, "device name")
    if not _DEVICE.fullmatch(value):
        fail(path, f"expected a device like 'cpu', 'cpu:1' or 'gpu:0', got {value[:40]!r}")
    mapped = DEVICE_MAP.get().get(device_name(value))
    if mapped is not None:
        return mapped
    try:
        return as_device(value)
    except Error as e:
        fail(path, f"{e.message}; the graph was saved with nodes on {value}: pass "
                   f"device_map={{'{device_name(value)}': 'cpu'}} (or another device) to "
                   "rill.load_graph to run them elsewhere")


def spec(value, path) -> tuple:
    fields(value, path, ("shape", "dtype"))
    return shape(value["shape"], path / "shape"), dtype(value["dtype"], path / "dtype")


# ---- structures (signature, result) --------------------------------------------------------

def structure(desc, path, tensors: list) -> None:
    """Check a signature/result description; tensors[0] counts the tensors it numbers."""
    expect(desc, dict, path, "object")
    if len(desc) == 0:
        fail(path, "empty structure")
    tag = next(iter(desc))
    if tag == "$tensor":
        fields(desc, path, ("$tensor",))
        if desc["$tensor"] != tensors[0] or isinstance(desc["$tensor"], bool):
            fail(path / "$tensor", f"expected tensor number {tensors[0]}")
        tensors[0] += 1
    elif tag == "$sparse":
        fields(desc, path, ("$sparse", "shape"))
        if desc["$sparse"] != tensors[0] or isinstance(desc["$sparse"], bool):
            fail(path / "$sparse", f"expected tensor number {tensors[0]}")
        shape(desc["shape"], path / "shape")
        tensors[0] += 2
    elif tag in ("$tuple", "$list"):
        fields(desc, path, (tag,))
        for i, d in enumerate(expect(desc[tag], list, path / tag, "list")):
            structure(d, path / tag / i, tensors)
    elif tag == "$dict":
        fields(desc, path, ("$dict",))
        for i, pair in enumerate(expect(desc["$dict"], list, path / "$dict", "list")):
            if not isinstance(pair, list) or len(pair) != 2:
                fail(path / "$dict" / i, "expected a [key, value] pair")
            static(pair[0], path / "$dict" / i / 0)
            structure(pair[1], path / "$dict" / i / 1, tensors)
    elif tag == "$static":
        fields(desc, path, ("$static",))
        static(desc["$static"], path / "$static")
    else:
        fail(path, f"unknown structure tag {str(tag)[:40]!r}")


def static(value, path) -> None:
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, float):
        return
    text(value, path)


# ---- attrs ---------------------------------------------------------------------------------

def attr(value, path, arrays: dict, paths: dict):
    """A node attr decoded from its JSON form (see docs/GRAPH_FORMAT.md, attrs)."""
    if value is None or isinstance(value, (bool, str)):
        return text(value, path) if isinstance(value, str) else value
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 64):
            fail(path, "integer out of the 64-bit range")
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, list):
        return [attr(v, path / i, arrays, paths) for i, v in enumerate(value)]
    expect(value, dict, path, "attribute value")
    tag = next(iter(value), None)
    if tag == "$tuple":
        fields(value, path, ("$tuple",))
        items = expect(value["$tuple"], list, path / tag, "list")
        return tuple(attr(v, path / tag / i, arrays, paths) for i, v in enumerate(items))
    if tag == "$dict":
        fields(value, path, ("$dict",))
        out = {}
        for i, pair in enumerate(expect(value["$dict"], list, path / tag, "list")):
            if not isinstance(pair, list) or len(pair) != 2:
                fail(path / tag / i, "expected a [key, value] pair")
            key = attr(pair[0], path / tag / i / 0, arrays, paths)
            if not isinstance(key, (str, int, float, bool, type(None))):
                fail(path / tag / i / 0, "a dict key must be a number, string or null")
            out[key] = attr(pair[1], path / tag / i / 1, arrays, paths)
        return out
    if tag == "$dtype":
        fields(value, path, ("$dtype",))
        return dtype(value["$dtype"], path / tag)
    if tag == "$device":
        fields(value, path, ("$device",))
        return device(value["$device"], path / tag)
    if tag == "$graph":
        fields(value, path, ("$graph",))
        return graph(value["$graph"], path / tag, arrays, paths)
    if tag == "$slice":
        fields(value, path, ("$slice",))
        parts = expect(value["$slice"], list, path / tag, "list")
        if len(parts) != 3:
            fail(path / tag, "expected [start, stop, step]")
        for i, p in enumerate(parts):
            if p is not None:
                expect(p, int, path / tag / i, "int or null")
        return slice(*parts)
    if tag == "$ellipsis":
        fields(value, path, ("$ellipsis",))
        return Ellipsis
    if tag == "$array":
        fields(value, path, ("$array", "dtype"))
        key = text(value["$array"], path / tag)
        if key not in arrays:
            fail(path / tag, f"no array {key[:40]!r} in state.rill")
        stored = arrays[key].dtype.name
        declared = text(value["dtype"], path / "dtype")
        if declared != stored:  # the document and the state must say the same thing
            fail(path / "dtype", f"declares {declared[:40]!r}, but state.rill holds array "
                                 f"{key[:40]!r} as {stored}; the two files disagree: save "
                                 "the graph again")
        return arrays[key]
    if tag == "$generator":
        fields(value, path, ("$generator",))
        return generator(value["$generator"], path / tag)
    fail(path, f"unknown attribute encoding {str(tag)[:40]!r}")


def generator(state, path):
    """A Generator at a saved state: the same bit generator, a state NumPy accepts."""
    g = Generator()
    own = g.get_state()
    fields(state, path, tuple(own))
    if state["bit_generator"] != own["bit_generator"]:
        fail(path / "bit_generator", f"expected {own['bit_generator']!r}")
    try:
        g.set_state(state)
    except Exception as e:  # NumPy checks the state itself; any refusal is a damaged file
        fail(path, f"not a valid generator state ({type(e).__name__}: {e})")
    return g


# (inputs, outputs) of the graph's own ops, as lib/capture/ir.py defines them; a primitive's
# counts are its rule's, checked when the built graph is linted.
ARITY = {"input": (0, 1), "constant": (0, 1), "read": (0, 1), "assign": (1, 0)}


def arity(node: Node, path) -> None:
    """A graph op's inputs and outputs must be as many as the op has (an assign that claims
    an output would fail only when the graph runs)."""
    want = ARITY.get(node.op)
    if want is not None and (len(node.inputs), len(node.outputs)) != want:
        fail(path, f"{node.op} takes {want[0]} input(s) and gives {want[1]} output(s), "
                   f"this node has {len(node.inputs)} and {len(node.outputs)}")


def node_attrs(node: Node, attrs, path, n_variables: int) -> None:
    """The decoded attrs of a node checked against what its op takes."""
    if node.op == "input":
        fields(attrs, path, ("index",))
        expect(attrs["index"], int, path / "index", "int")
        if attrs["index"] < 0:
            fail(path / "index", "negative input index")
    elif node.op == "constant":
        fields(attrs, path, ("value",))
        value = attrs["value"]
        if not isinstance(value, np.ndarray):
            fail(path / "value", "expected a stored array")
    elif node.op in ("read", "assign"):
        fields(attrs, path, ("var",))
        index(attrs["var"], path / "var", n_variables, "variable")
    elif node.op in ("send", "recv"):
        other = "to" if node.op == "send" else "from"
        fields(attrs, path, ("key", other), ("prefix",))
        text(attrs["key"], path / "key")
        from ..devices import Device
        if not isinstance(attrs[other], Device):
            fail(path / other, "expected a device")
        if "prefix" in attrs:  # a prefix pair (only the first `count` rows travel)
            if attrs["prefix"] is not True:
                fail(path / "prefix", "expected true (a prefix pair) or no field")
            if node.op == "send" and len(node.inputs) != 2:
                fail(path / "prefix", f"a prefix send takes (x, count), got "
                                      f"{len(node.inputs)} inputs")
    else:
        from ..ops.attrs import attr_problems
        for where, why in attr_problems(node.primitive, attrs):
            fail(path / where, why)


# ---- graphs --------------------------------------------------------------------------------

NODE_FIELDS = ("op", "inputs", "attrs", "outputs", "device", "after", "source")


def graph(doc, path, arrays: dict, paths: dict, into: Graph | None = None) -> Graph:
    """A Graph from its document (nodes, outputs; name for bodies). `paths` collects each
    node's path, so a later failure (lint) can name where in the file the node is."""
    from .passes import fuse  # noqa: F401 - declares the `fused` primitive a file may hold
    if into is None:
        fields(doc, path, ("name", "nodes", "outputs"))
        g = Graph(name=text(doc["name"], path / "name"))
    else:
        g = into
    nodes = expect(doc["nodes"], list, path / "nodes", "list")
    inputs_seen: set = set()
    for i, entry in enumerate(nodes):
        at = path / "nodes" / i
        fields(entry, at, NODE_FIELDS)
        op = text(entry["op"], at / "op")
        if op in ("send", "recv") and not PARTITION.get():  # saved graphs are never cut
            fail(at / "op", f"{op} nodes are made when a graph is loaded, not stored")
        if op in ("accumulate", "take", "save", "restore", "add_rows"):
            fail(at / "op", f"{op} nodes are made by a task of a distributed job, not stored")
        if op not in GRAPH_OPS and op not in PRIMITIVES:
            fail(at / "op", f"unknown op {op[:40]!r}: this rill does not have it")
        inputs = []
        for j, ref in enumerate(expect(entry["inputs"], list, at / "inputs", "list")):
            inputs.append(_reference(ref, at / "inputs" / j, g.nodes))
        after = [g.nodes[index(a, at / "after" / j, i, "node")]
                 for j, a in enumerate(expect(entry["after"], list, at / "after", "list"))]
        source = entry["source"]
        if source is not None:
            text(source, at / "source")
        attrs_doc = expect(entry["attrs"], dict, at / "attrs", "object")
        attrs = {}
        for key, value in attrs_doc.items():
            attrs[key] = attr(value, at / "attrs" / text(key, at / "attrs"), arrays, paths)
        node = Node(op, inputs, attrs, device(entry["device"], at / "device"), source, after)
        node_attrs(node, attrs, at / "attrs", len(g.variables))
        if op == "input":
            if attrs["index"] in inputs_seen:
                fail(at / "attrs" / "index", f"input {attrs['index']} appears twice")
            inputs_seen.add(attrs["index"])
        for j, out in enumerate(expect(entry["outputs"], list, at / "outputs", "list")):
            node.add_output(*spec(out, at / "outputs" / j))
        arity(node, at)
        g.nodes.append(node)
        paths[node] = str(at)
    if inputs_seen != set(range(len(inputs_seen))):
        fail(path / "nodes", "input indices are not 0, 1, 2, ...")
    g.outputs = [_reference(ref, path / "outputs" / j, g.nodes)
                 for j, ref in enumerate(expect(doc["outputs"], list, path / "outputs", "list"))]
    return g


def _reference(ref, path, nodes: list):
    """[node index, output index] of an earlier node: its Value."""
    if not isinstance(ref, list) or len(ref) != 2:
        fail(path, "expected a [node, output] pair")
    node = nodes[index(ref[0], path / 0, len(nodes), "earlier node")]
    return node.outputs[index(ref[1], path / 1, len(node.outputs), f"output of node {ref[0]}")]
