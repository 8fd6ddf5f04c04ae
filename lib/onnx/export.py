"""rill.onnx.export: a function or Module, captured on example arguments, as an ONNX model."""
from __future__ import annotations

import re
import warnings

from .builder import Builder
from .emit import alternative_value, emit_graph, uniform, value_info
from .errors import ONNXError, require_onnx
from ..nn.parameter import Parameter


# Model metadata naming the initializers that were buffers (not Parameters) or constants in
# rill.
BUFFERS_KEY = "rill.buffers"
CONSTANTS_KEY = "rill.constants"

def export(f_or_module, example_args, path, opset: int = 17, dynamic_batch: bool = False,
           input_names=None, output_names=None):
    """Capture `f_or_module` on `example_args` (a tensor or a tuple of them; other arguments
    are baked in) and write it to `path` as an ONNX model of the given opset, checked with
    onnx.checker. Parameters and buffers become initializers. With `dynamic_batch=True`,
    axis 0 of every input is a symbolic "batch" dimension (the function is traced a second
    time at batch size B + 1 to see which shapes follow it). Returns the ModelProto.

    Raises ONNXError naming the op and the line that recorded it when a step has no ONNX
    mapping.
    """
    onnx = require_onnx()
    from onnx import helper
    from ..capture.function import CapturedFunction, capture
    from ..eager.context import no_grad
    if not 13 <= int(opset) <= 23:
        raise ONNXError(f"opset {opset} is not supported; choose 13 to 23", op="export")
    args = tuple(example_args) if isinstance(example_args, (tuple, list)) else (example_args,)
    fn = f_or_module if isinstance(f_or_module, CapturedFunction) else capture(f_or_module)
    with no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the second trace's "traced again" note
        graph = fn.graph_for(*args)
        alternative = fn.graph_for(*_grown(args)) if dynamic_batch else None

    b = Builder(int(opset))
    inputs = graph.inputs
    names_in = _names(input_names, len(inputs), "input", "input_names")
    names_out = _names(output_names, len(graph.outputs), "output", "output_names")
    if alternative is not None:
        if not inputs:
            raise ONNXError("dynamic_batch needs at least one tensor argument", op="export")
        _pair(b, graph, alternative)
        batch = inputs[0].shape[0]
        b.batch_value = batch
        b.batch_size = _batch_size(b, names_in[0], batch)
    else:
        b.batch_value = None
    b.variable_names = {}
    initializers = []
    used = set()
    buffers = []  # state that is not a Parameter (running statistics, counters)
    for variable in graph.variables:
        name = _unique(re.sub(r"[^0-9A-Za-z_.]", "_", variable.name) or "var", used)
        b.variable_names[id(variable)] = name
        initializers.append(_initializer(variable, name))
        if variable.kind == "value" and not isinstance(variable.owner, Parameter):
            buffers.append(name)
    outs = emit_graph(b, graph, names_in)

    final = []
    for name, v, out_name in zip(outs, graph.outputs, names_out):
        b.nodes.append(helper.make_node("Identity", [name], [out_name], name=b.fresh("n_out")))
        final.append(value_info(b, out_name, v, alternative_value(b, v)))
    graph_inputs = [value_info(b, n, v, alternative_value(b, v)) for n, v in zip(names_in, inputs)]
    proto = helper.make_graph(b.prelude + b.nodes, fn.name or "rill_graph", graph_inputs, final,
                              initializer=initializers + b.initializers)
    opset_id = helper.make_opsetid("", int(opset))
    model = helper.make_model(proto, opset_imports=[opset_id], producer_name="rill")
    model.ir_version = helper.find_min_ir_version_for([opset_id])
    # So that rill.onnx.load makes buffers buffers again and constants constants, not
    # trainable weights (ONNX itself has only initializers).
    helper.set_model_props(model, {BUFFERS_KEY: ",".join(buffers),
                                   CONSTANTS_KEY: ",".join(i.name for i in b.initializers)})
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return model


def _grown(args):
    """The arguments with one more row on axis 0 of every tensor (its first row repeated)."""
    from ..ops.shape import concat
    from ..tensor import Tensor
    out = []
    for a in args:
        if isinstance(a, Tensor):
            if a.ndim == 0:
                raise ONNXError("dynamic_batch: a 0-d tensor argument has no batch axis",
                                op="export")
            a = concat([a, a[:1]], axis=0)
        out.append(a)
    return tuple(out)


def _pair(b, graph, other):
    """Record for each node its twin traced at batch size B + 1; refuse a graph whose
    structure, or whose attrs other than shapes ONNX can compute, change with the batch."""
    import numpy as np
    if [n.op for n in graph.nodes] != [n.op for n in other.nodes]:
        raise ONNXError("dynamic_batch: the captured graph changes with the batch size (a "
                        "Python branch on a shape?); export with a fixed batch", op="export")
    for node, twin in zip(graph.nodes, other.nodes):
        b.alternatives[node] = twin
        for key, sub in node.subgraphs.items():
            _pair(b, sub, twin.subgraphs[key])
        if node.op in ("reshape", "broadcast_to", "full", "empty"):
            continue
        if node.op == "constant" and uniform(node.attrs["value"]) and \
                uniform(twin.attrs["value"]) and \
                np.asarray(node.attrs["value"]).reshape(-1)[0] == \
                np.asarray(twin.attrs["value"]).reshape(-1)[0]:
            continue
        for key, value in node.attrs.items():
            if key in {k.split("[")[0] for k in node.subgraphs}:
                continue
            same = (np.array_equal(value, twin.attrs[key]) and np.shape(value) ==
                    np.shape(twin.attrs[key])) if key == "value" else value == twin.attrs[key]
            if not same:
                where = f" at {node.source}" if node.source else ""
                raise ONNXError(f"dynamic_batch: {node.op}{where} bakes the batch size into "
                                f"its {key}; export with a fixed batch", op=node.op)


def _batch_size(b, input_name, batch):
    """A callable giving (B, name of an int64[1] holding the batch size at run time)."""
    found = []

    def get():
        if not found:
            from onnx import helper
            shape, size = b.fresh("shape"), b.fresh("batch")
            b.prelude.append(helper.make_node("Shape", [input_name], [shape],
                                              name=b.fresh("n_Shape")))
            b.prelude.append(helper.make_node("Gather", [shape, b.ints([0])], [size], axis=0,
                                              name=b.fresh("n_Gather")))
            found.append(size)
        return batch, found[0]
    return get


def _initializer(variable, name):
    import numpy as np
    from onnx import numpy_helper
    from .dtypes import onnx_type
    tensor = variable.owner if variable.kind == "value" else variable.owner.grad
    if tensor is None:
        raise ONNXError(f"{variable.name}.grad is None", op="export")
    onnx_type(variable.dtype)  # refuses bfloat16
    return numpy_helper.from_array(np.ascontiguousarray(tensor.numpy()), name)


def _names(given, n, prefix, what):
    if given is None:
        return [f"{prefix}_{i}" for i in range(n)] if n != 1 else [prefix]
    given = list(given)
    if len(given) != n or len(set(given)) != n or not all(isinstance(g, str) for g in given):
        raise ONNXError(f"{what} must be {n} distinct strings, got {given!r}", op="export")
    return given


def _unique(name, used):
    base, k = name, 1
    while name in used:
        name, k = f"{base}_{k}", k + 1
    used.add(name)
    return name
