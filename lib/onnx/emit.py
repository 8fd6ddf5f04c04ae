"""Walking a rill graph into ONNX nodes: graph ops, the primitive table, control flow."""
from __future__ import annotations

import numpy as np

from .dtypes import onnx_type
from .errors import ONNXError, at


def emit_graph(b, graph, input_names) -> list:
    """Append graph's nodes to builder `b`, its inputs named `input_names`; the names of its
    outputs."""
    from .export_control import CONTROL
    from .export_ops import TABLE
    env: dict = {}
    for node in graph.nodes:
        ins = [_lookup(env, v, node) for v in node.inputs]
        if node.op == "input":
            outs = [input_names[node.attrs["index"]]]
        elif node.op == "constant":
            outs = [_constant(b, node)]
        elif node.op == "read":
            outs = [b.root.variable_names[id(graph.variables[node.attrs["var"]])]]
        elif node.op in CONTROL:
            outs = CONTROL[node.op](b, node, ins)
        elif node.op in TABLE:
            try:
                outs = TABLE[node.op](b, node, ins)
            except ONNXError as e:
                raise at(e, node.source) from None
        else:
            raise unsupported(node)
        env.update(zip(node.outputs, outs))
    return [_lookup(env, v, None) for v in graph.outputs]


def _constant(b, node):
    value = np.asarray(node.attrs["value"], dtype=node.outputs[0].dtype.storage)
    twin = b.alternative(node)
    if twin is not None and np.shape(twin.attrs["value"]) != value.shape:
        # a filled tensor of the batch's size (zeros folded from `full`): Expand at run time
        shape = b.shape(value.shape, np.shape(twin.attrs["value"]))
        return b.op("Expand", [b.const(value.reshape(-1)[:1].reshape(())), shape])
    return b.const(value)


def uniform(value) -> bool:
    """Whether an array holds one value everywhere (so only its shape can follow a batch)."""
    value = np.asarray(value)
    return value.size > 0 and bool(np.all(value == value.reshape(-1)[0]))


def unsupported(node) -> ONNXError:
    if node.op == "assign":
        why = ("the graph changes a variable (a training-mode update such as batch norm's "
               "running statistics, or an optimizer step); ONNX graphs hold no state: export "
               "the model in eval mode (model.eval())")
    elif node.op in ("send", "recv"):
        why = "partitioned graphs are not exported; export the unplaced function"
    else:
        why = (f"the primitive {node.op!r} has no ONNX mapping; write this step with ops "
               "that have one (docs/ONNX.md lists them), or leave it out of the exported "
               "function")
    where = f" (recorded at {node.source})" if node.source else ""
    return at(ONNXError(f"cannot export {node.op}{where}: {why}", op=node.op), node.source)


def _lookup(env, v, node):
    name = env.get(v)
    if name is None:
        producer = v.node
        where = f" at {producer.source}" if producer.source else ""
        raise at(ONNXError(f"output {v.index} of {producer.op}{where} has no ONNX equivalent "
                           "but is used", op=producer.op), producer.source)
    return name


def value_info(b, name: str, v, alternative=None):
    """A typed ValueInfo; dims that change with the batch size are left symbolic."""
    from onnx import helper
    dims = list(v.shape)
    if alternative is not None:
        batch = b.root.batch_value
        dims = [s if s == t else ("batch" if s == batch else None)
                for s, t in zip(v.shape, alternative.shape)]
    return helper.make_tensor_value_info(name, onnx_type(v.dtype), dims)


def alternative_value(b, v):
    """The value v as traced at batch size B + 1 (None unless the batch is dynamic)."""
    alt = b.alternative(v.node)
    return None if alt is None else alt.outputs[v.index]
