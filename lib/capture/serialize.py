"""Saving a captured graph with its state and signature; loading it back with no source.

A saved graph is a directory of two files (docs/GRAPH_FORMAT.md):
  graph.json   format name and version, the signature (argument and result structure), the
               variables (name, kind, spec) and the nodes in order (op, inputs, attrs,
               output specs, device, control predecessors, user's source line);
  state.rill   the variables' values and the large constants, in rill.save's checked format.
No Python code or pickle is stored: ops are primitive names, looked up when loading.
"""
from __future__ import annotations

import json
import os

import numpy as np

from .. import dtypes as dt
from ..devices import Device, device as as_device
from ..errors import CaptureError, CheckpointError
from ..sparse import SparseRows
from ..tensor import Tensor, new_tensor
from .ir import GRAPH_OPS, Graph, Node, Variable

FORMAT = "rill-graph"
VERSION = 1


# ---- argument and result structure ---------------------------------------------------------

def describe(obj, counter: list):
    """obj's nesting in JSON, tensors numbered in order (counter[0] counts them)."""
    if isinstance(obj, Tensor):
        counter[0] += 1
        return {"$tensor": counter[0] - 1}
    if isinstance(obj, SparseRows):
        counter[0] += 2
        return {"$sparse": counter[0] - 2, "shape": list(obj.shape)}
    if isinstance(obj, (tuple, list)):
        return {"$" + ("tuple" if isinstance(obj, tuple) else "list"):
                [describe(v, counter) for v in obj]}
    if isinstance(obj, dict):
        return {"$dict": [[_static(k), describe(v, counter)] for k, v in obj.items()]}
    return {"$static": _static(obj)}


def _static(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    raise CaptureError(f"cannot save a graph whose arguments or results include "
                       f"{type(v).__name__} {v!r}; only tensors, numbers, strings and None",
                       op="save")


def rebuild(desc, values):
    """The structure `desc` describes, with values[i] for tensor i."""
    if "$tensor" in desc:
        return values[desc["$tensor"]]
    if "$sparse" in desc:
        i = desc["$sparse"]
        return SparseRows(values[i], values[i + 1], tuple(desc["shape"]))
    if "$tuple" in desc:
        return tuple(rebuild(d, values) for d in desc["$tuple"])
    if "$list" in desc:
        return [rebuild(d, values) for d in desc["$list"]]
    if "$dict" in desc:
        return {k: rebuild(d, values) for k, d in desc["$dict"]}
    return desc["$static"]


# ---- attrs ---------------------------------------------------------------------------------

def encode_attr(value, arrays: dict, where: str):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, tuple):
        return {"$tuple": [encode_attr(v, arrays, where) for v in value]}
    if isinstance(value, list):
        return [encode_attr(v, arrays, where) for v in value]
    if isinstance(value, dict):
        return {"$dict": [[encode_attr(k, arrays, where), encode_attr(v, arrays, where)]
                          for k, v in value.items()]}
    if isinstance(value, dt.DType):
        return {"$dtype": value.name}
    if isinstance(value, Device):
        return {"$device": str(value)}
    if isinstance(value, Graph):  # a branch or loop body
        return {"$graph": encode_graph(value, arrays)}
    if isinstance(value, slice):
        return {"$slice": [encode_attr(v, arrays, where)
                           for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"$ellipsis": True}
    if isinstance(value, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = value
        return {"$array": key, "dtype": str(value.dtype)}
    if hasattr(value, "get_state"):  # a Generator: saved at its current state
        return {"$generator": value.get_state()}
    raise CaptureError(f"cannot save attribute {where} of type {type(value).__name__}",
                       op="save")


def decode_attr(value, arrays: dict):
    if isinstance(value, list):
        return [decode_attr(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if "$tuple" in value:
        return tuple(decode_attr(v, arrays) for v in value["$tuple"])
    if "$dict" in value:
        return {decode_attr(k, arrays): decode_attr(v, arrays) for k, v in value["$dict"]}
    if "$dtype" in value:
        return dt.as_dtype(value["$dtype"])
    if "$device" in value:
        return as_device(value["$device"])
    if "$graph" in value:
        return decode_graph(value["$graph"], arrays)
    if "$slice" in value:
        return slice(*[decode_attr(v, arrays) for v in value["$slice"]])
    if "$ellipsis" in value:
        return Ellipsis
    if "$array" in value:
        return arrays[value["$array"]]
    if "$generator" in value:
        from ..random import Generator
        g = Generator()
        g.set_state(value["$generator"])
        return g
    raise CaptureError(f"unknown attribute encoding {sorted(value)}", op="load_graph")


# ---- graphs --------------------------------------------------------------------------------

def encode_graph(graph: Graph, arrays: dict) -> dict:
    """{"name", "nodes", "outputs"}: the nodes in order, inputs as [node, output] pairs. A
    branch or loop body (an attr holding a Graph) is encoded the same way, nested."""
    index = {node: i for i, node in enumerate(graph.nodes)}
    nodes = []
    for node in graph.nodes:
        attrs = {}
        for k, v in node.attrs.items():
            if node.op == "constant" and k == "value":
                # Host arrays of bf16 are float32 storage; the spec says which dtype it is.
                v = np.asarray(v)
            attrs[k] = encode_attr(v, arrays, f"{k!r} of {node.op}")
        nodes.append({
            "op": node.op,
            "inputs": [[index[v.node], v.index] for v in node.inputs],
            "attrs": attrs,
            "outputs": [{"shape": list(v.shape), "dtype": v.dtype.name} for v in node.outputs],
            "device": str(node.device),
            "after": [index[a] for a in node.after],
            "source": node.source,
        })
    return {"name": graph.name, "nodes": nodes,
            "outputs": [[index[v.node], v.index] for v in graph.outputs]}


def decode_graph(doc: dict, arrays: dict, graph: Graph | None = None) -> Graph:
    """The Graph `encode_graph` wrote (into `graph`, which may already hold variables)."""
    from ..ops.primitive import PRIMITIVES
    graph = graph if graph is not None else Graph(name=doc["name"])
    for i, entry in enumerate(doc["nodes"]):
        op = entry["op"]
        if op not in GRAPH_OPS and op not in PRIMITIVES:
            raise CheckpointError(f"node {i} of {graph.name} uses op {op!r}, which this rill "
                                  "does not have", op="load_graph")
        node = Node(op, [graph.nodes[n].outputs[k] for n, k in entry["inputs"]],
                    {k: decode_attr(v, arrays) for k, v in entry["attrs"].items()},
                    as_device(entry["device"]), entry.get("source"),
                    [graph.nodes[n] for n in entry["after"]])
        for out in entry["outputs"]:
            node.add_output(tuple(out["shape"]), dt.as_dtype(out["dtype"]))
        graph.nodes.append(node)
    graph.outputs = [graph.nodes[n].outputs[k] for n, k in doc["outputs"]]
    return graph


# ---- saving --------------------------------------------------------------------------------

def save_graph(path, graph: Graph, signature, result, name: str) -> None:
    from ..serialization import save, write_atomically
    os.makedirs(path, exist_ok=True)
    arrays: dict = {}
    body = encode_graph(graph, arrays)
    doc = {
        "format": FORMAT, "version": VERSION, "name": name,
        "signature": signature, "result": result,
        "variables": [{"name": v.name, "kind": v.kind, "shape": list(v.shape),
                       "dtype": v.dtype.name, "device": str(v.device)}
                      for v in graph.variables],
        "nodes": body["nodes"],
        "outputs": body["outputs"],
    }
    state = {"variables": {_key(v): _value_of(v) for v in graph.variables},
             "arrays": {k: new_tensor(a, _dtype_of(a), as_device("cpu"))
                        for k, a in arrays.items()}}
    save(state, os.path.join(path, "state.rill"))  # atomic, as every rill.save
    text = json.dumps(doc, indent=1).encode()
    write_atomically(os.path.join(path, "graph.json"), lambda f: f.write(text), op="save")


def _key(v: Variable) -> str:
    return v.name + (".grad" if v.kind == "grad" else "")


def _value_of(v: Variable) -> Tensor:
    t = v.owner if v.kind == "value" else v.owner.grad
    if t is None:
        from ..ops.creation import zeros
        return zeros(*v.shape, dtype=v.dtype)
    return t.to("cpu") if str(t.device) != "cpu" else t


def _dtype_of(a: np.ndarray):
    return dt.as_dtype(a.dtype.name) if a.dtype.name in dt._BY_NAME else dt.float32


# ---- loading -------------------------------------------------------------------------------

def load_graph(path):
    """A callable that runs the graph saved at `path` by `f.save(path)`.

    It needs none of the model's code: the graph names primitives, the state file holds
    the values. Its arguments must match the saved signature (structure, shapes, dtypes).
    """
    from ..serialization import load
    doc_path = os.path.join(path, "graph.json")
    try:
        with open(doc_path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"no saved graph at {path!r} (graph.json is missing)",
                              op="load_graph") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{doc_path} is damaged: {e}", op="load_graph") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{doc_path} is not a saved rill graph", op="load_graph")
    if doc.get("version") != VERSION:
        raise CheckpointError(f"{doc_path} has format version {doc.get('version')}; this rill "
                              f"reads version {VERSION}", op="load_graph")
    state = load(os.path.join(path, "state.rill"))
    arrays = {k: np.asarray(t.numpy()) for k, t in state["arrays"].items()}
    try:
        graph = Graph(name=doc["name"])
        for spec in doc["variables"]:
            owner = state["variables"][spec["name"] + (".grad" if spec["kind"] == "grad" else "")]
            if spec["kind"] == "grad":  # the graph writes a parameter's .grad: give it one
                holder = new_tensor(owner._data, owner.dtype, owner.device)
                holder.grad = owner
                owner = holder
            graph.variables.append(Variable(owner, spec["kind"], spec["name"],
                                            tuple(spec["shape"]), dt.as_dtype(spec["dtype"]),
                                            as_device(spec["device"])))
        decode_graph(doc, arrays, graph)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise CheckpointError(f"{doc_path} is damaged or inconsistent: {type(e).__name__}: {e}",
                              op="load_graph") from None
    graph.lint()
    return LoadedGraph(graph, doc["signature"], doc["result"])


class LoadedGraph:
    """A saved graph, callable like the function it was captured from."""

    def __init__(self, graph: Graph, signature, result):
        from .executor import Program
        self.graph = graph
        self.signature, self.result = signature, result
        self.program = Program(graph)
        self.name = graph.name

    def __call__(self, *args, **kwargs):
        from ..tree import flatten
        counter = [0]
        given = describe((list(args), kwargs), counter)
        if _shape_of(given) != _shape_of(self.signature):
            raise CaptureError(f"{self.name} was saved for arguments shaped like "
                               f"{_show(self.signature)}, got {_show(given)}", op=self.name)
        tensors = [t for t in flatten((args, kwargs), is_leaf=lambda o: isinstance(o, Tensor))[0]
                   if isinstance(t, Tensor)]
        for i, (t, v) in enumerate(zip(tensors, self.graph.inputs)):
            if (t.shape, t.dtype, t.device) != (v.shape, v.dtype, v.device):
                raise CaptureError(f"tensor argument {i} of {self.name} must be {v.dtype}"
                                   f"{list(v.shape)} on {v.device}, got {t.dtype}"
                                   f"{list(t.shape)} on {t.device}", op=self.name)
        buffers = self.program([t._data for t in tensors])
        outs = [new_tensor(b, v.dtype, v.device) for b, v in zip(buffers, self.graph.outputs)]
        return rebuild(self.result, outs)

    def state_dict(self) -> dict:
        """{name: tensor} of the graph's variables (their current values)."""
        return {_key(v): (v.owner if v.kind == "value" else v.owner.grad)
                for v in self.graph.variables}

    def __repr__(self) -> str:
        return f"<loaded graph {self.name}: {self.graph.count()} nodes, " \
               f"{len(self.graph.variables)} variables>"


def _shape_of(desc):
    """The structure with tensor numbering kept and static values kept (what must match)."""
    return json.dumps(desc, sort_keys=True)


def _show(desc) -> str:
    if "$tensor" in desc:
        return "T"
    if "$tuple" in desc or "$list" in desc:
        items = desc.get("$tuple", desc.get("$list"))
        return "(" + ", ".join(_show(d) for d in items) + ")"
    if "$dict" in desc:
        return "{" + ", ".join(f"{k!r}: {_show(d)}" for k, d in desc["$dict"]) + "}"
    if "$sparse" in desc:
        return "SparseRows"
    return repr(desc["$static"])
