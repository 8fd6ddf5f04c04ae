"""A captured graph as the GraphDef TensorBoard's graph plugin draws.

TensorBoard reads TensorFlow's GraphDef: a list of NodeDefs, each with a unique name, an op,
its inputs by name ("producer", "producer:1" for a second output, "^producer" for an edge
that carries no value), a device, and attrs. Names with "/" form the groups the plugin
collapses and expands. The mapping from rill's IR (lib/capture/ir.py):

- an `input` node is `x0`, `x1`, ... (as `print(graph)` names them); a return value is an
  `output` node `out0`, `out1`, ... taking it;
- each variable is a `variable` node named after it (`0.weight`); its `read`s and `assign`
  take it as input and are named `0.weight/read`, `0.weight/assign`, so TensorBoard groups a
  variable with its uses, as TensorFlow's own graphs do;
- any other node is named after its op, made unique TensorFlow's way (`linear`, `linear_1`);
- a node's `after` list becomes control inputs (`^name`); a `recv` takes its `send` the same
  way, so transfers between devices show as edges between the devices' nodes;
- control-flow bodies are drawn inside their node's group (`switch/branches[0]/...`), each
  with its own inputs and outputs: which outer value feeds which body input is the op's
  business, so no edge is guessed;
- attrs: `_output_shapes` (what the plugin labels edges with), `dtype` (and `_output_types`
  when there are several outputs), the user's line as `_source`, and the node's own attrs
  (numbers, strings, dtypes, small constants as tensors, anything else as text).
"""
from __future__ import annotations

import numpy as np

from . import messages
from . import protobuf as pb
from ..dtypes import DType

_SMALL_CONSTANT = 16  # constants up to this many elements are stored whole


def graph_def(graph) -> bytes:
    """The serialized GraphDef of a rill capture Graph."""
    names = _Names()
    nodes: list = []
    _add_graph(graph, "", names, {}, nodes)
    versions = pb.uint(1, 27)  # VersionDef.producer: any recent GraphDef version
    return b"".join(pb.message(1, n) for n in nodes) + pb.message(4, versions)


class _Names:
    """TensorFlow's unique names: the first `op` is `op`, then `op_1`, `op_2`, ..."""

    def __init__(self):
        self.used: set = set()

    def __call__(self, base: str) -> str:
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name


def _add_graph(graph, prefix: str, names: _Names, produced: dict, out: list) -> None:
    """Append graph's NodeDefs to `out`, names under `prefix`; `produced` maps each Value
    to the input string that refers to it."""
    node_names: dict = {}
    variable_names = []
    for var in graph.variables:
        name = names(prefix + var.name)
        variable_names.append(name)
        attrs = {"_output_shapes": _shapes_attr([var.shape]), "dtype": _type_attr(var.dtype),
                 "kind": _attr(var.kind)}
        out.append(_node_def(name, "variable", [], var.device, attrs))
    sends = {}
    for node in graph.nodes:
        inputs = [produced[v] for v in node.inputs]
        attrs = dict(node.attrs)
        if node.op == "input":
            name = names(f"{prefix}x{attrs.pop('index')}")
        elif node.op in ("read", "assign"):
            var = attrs.pop("var")
            name = names(f"{variable_names[var]}/{node.op}")
            inputs.insert(0, variable_names[var])
        else:
            name = names(prefix + node.op)
        node_names[node] = name
        inputs += [f"^{node_names[a]}" for a in node.after]
        if node.op == "send":
            sends[attrs.get("key")] = name
        elif node.op == "recv" and attrs.get("key") in sends:
            inputs.append(f"^{sends[attrs['key']]}")
        for value in node.outputs:
            produced[value] = name if value.index == 0 else f"{name}:{value.index}"
        subgraphs = node.subgraphs
        hidden = {key.split("[")[0] for key in subgraphs}
        out.append(_node_def(name, node.op, inputs, node.device,
                             _node_attrs(node, attrs, hidden)))
        for sub_name, sub in subgraphs.items():
            _add_graph(sub, f"{name}/{sub_name}/", names, produced, out)
    for i, value in enumerate(graph.outputs):
        attrs = {"_output_shapes": _shapes_attr([value.shape]), "dtype": _type_attr(value.dtype)}
        out.append(_node_def(names(f"{prefix}out{i}"), "output", [produced[value]],
                             value.device, attrs))


def _node_def(name: str, op: str, inputs, device, attrs: dict) -> bytes:
    """NodeDef: name 1, op 2, input 3 (repeated), device 4, attr 5 (map<string, AttrValue>)."""
    out = pb.blob(1, name) + pb.blob(2, op) + b"".join(pb.blob(3, i, keep=True) for i in inputs)
    out += pb.blob(4, "" if device is None else str(device))
    for key, value in attrs.items():
        if value is not None:
            out += pb.message(5, pb.blob(1, key) + pb.message(2, value))
    return out


def _node_attrs(node, attrs: dict, hidden: set) -> dict:
    found = {"_output_shapes": _shapes_attr([v.shape for v in node.outputs])}
    if node.outputs:
        found["dtype"] = _type_attr(node.outputs[0].dtype)
    if len(node.outputs) > 1:
        types = [messages.DATA_TYPES.get(v.dtype.name, 0) for v in node.outputs]
        found["_output_types"] = pb.message(1, pb.packed_varints(6, types))
    if node.source:
        found["_source"] = _attr(str(node.source))
    for key, value in attrs.items():
        if key not in hidden and key != "device":
            found[key] = _attr(value)
    return found


# ---- AttrValue: list 1, s 2, i 3, f 4, b 5, type 6, shape 7, tensor 8 ----------------------

def _shapes_attr(shapes) -> bytes:
    """A list of TensorShapeProtos (ListValue.shape, field 7)."""
    return pb.message(1, b"".join(pb.message(7, messages.shape_proto(s)) for s in shapes))


def _type_attr(dtype) -> bytes | None:
    code = messages.DATA_TYPES.get(getattr(dtype, "name", ""))
    return None if code is None else pb.uint(6, code, keep=True)


def _attr(value) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return pb.uint(5, bool(value), keep=True)
    if isinstance(value, (int, np.integer)) and -2**63 <= value < 2**63:
        return pb.uint(3, int(value), keep=True)
    if isinstance(value, (float, np.floating)):
        return pb.float32(4, float(value), keep=True)
    if isinstance(value, str):
        return pb.blob(2, value, keep=True)
    if isinstance(value, DType):
        return _type_attr(value) or pb.blob(2, str(value), keep=True)
    if isinstance(value, np.ndarray):
        if value.size <= _SMALL_CONSTANT and value.dtype.name in messages.DATA_TYPES:
            return pb.message(8, messages.tensor_proto(value))
        return pb.blob(2, f"<{value.dtype}{list(value.shape)}>", keep=True)
    if isinstance(value, (tuple, list)) and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        return pb.message(1, pb.packed_varints(3, value))
    text = str(value)
    return pb.blob(2, text if len(text) <= 200 else text[:197] + "...", keep=True)
