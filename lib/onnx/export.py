"""rill.onnx.export: a function or Module, captured on example arguments, as an ONNX model."""
from __future__ import annotations

import re
import warnings

from .builder import Builder
from .emit import alternative_value, emit_graph, uniform, value_info
from .errors import ONNXError, require_onnx
from ..nn.parameter import Parameter
from ..capture.function import CapturedFunction, capture
from ..eager.context import no_grad
from ..errors import Error
from ..tensor import Tensor
from ..ops.indexing import take


# Model metadata naming the initializers that were buffers (not Parameters) or constants in
# rill.
BUFFERS_KEY = "rill.buffers"
CONSTANTS_KEY = "rill.constants"


def export(f_or_module, example_args, path, opset: int = 17, dynamic_batch: bool = False,
           input_names=None, output_names=None):
    """Capture `f_or_module` on `example_args` (a tensor or a tuple of them; other arguments
    are baked in) and write it to `path` as an ONNX model of the given opset, checked with
    onnx.checker. Parameters and buffers become initializers. With `dynamic_batch=True`,
    axis 0 of every input is a symbolic "batch" dimension: the function is traced again at
    batch sizes B + 1 and 2B + 3 to see which shapes follow the batch, and refused (naming
    the op and its line) where a shape is not a * batch + b or anything else changes with
    it. Returns the ModelProto.

    Raises ONNXError naming the op and the line that recorded it when a step has no ONNX
    mapping.
    """
    onnx = require_onnx()
    from onnx import helper
    if not 13 <= int(opset) <= 23:
        raise ONNXError(f"opset {opset} is not supported; choose 13 to 23", op="export")
    args = tuple(example_args) if isinstance(example_args, (tuple, list)) else (example_args,)
    fn = f_or_module if isinstance(f_or_module, CapturedFunction) else capture(f_or_module)
    with no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the other traces' "traced again" notes
        graph = fn.graph_for(*args)
        others = _traces_at_other_batches(fn, args) if dynamic_batch else None

    b = Builder(int(opset))
    inputs = graph.inputs
    names_in = _names(input_names, len(inputs), "input", "input_names")
    names_out = _names(output_names, len(graph.outputs), "output", "output_names")
    if others is not None:
        if not inputs:
            raise ONNXError("dynamic_batch needs at least one tensor argument", op="export")
        batch = inputs[0].shape[0]
        _pair(b, (graph,) + others, (batch,) + _other_batches(batch))
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


def _other_batches(batch: int) -> tuple:
    """The batch sizes traced besides the example's: the next one gives each shape's slope
    in the batch, and one further off checks that the shape stays on that line (B * B or
    B // 2 leave it). ONNX computes every shape that follows the batch as a * batch + b."""
    return batch + 1, 2 * batch + 3


def _traces_at_other_batches(fn, args) -> tuple:
    """fn's graphs at the batch sizes of _other_batches (the example's rows repeated)."""
    tensors = [a for a in args if isinstance(a, Tensor)]
    if not tensors:
        return ()
    if any(a.ndim == 0 for a in tensors):
        raise ONNXError("dynamic_batch: a 0-d tensor argument has no batch axis",
                        op="export")
    graphs = []
    for size in _other_batches(tensors[0].shape[0]):
        try:
            graphs.append(fn.graph_for(*_grown(args, size)))
        except Error as e:
            raise ONNXError(f"dynamic_batch: the function fails when traced at batch size "
                            f"{size} ({type(e).__name__}: {e}); a dynamic batch needs a "
                            "function that runs at any batch size: export with a fixed batch "
                            "(dynamic_batch=False)", op="export") from e
    return tuple(graphs)


def _grown(args, size):
    """The arguments with `size` rows on axis 0 of every tensor (its rows repeated)."""
    import numpy as np
    out = []
    for a in args:
        if isinstance(a, Tensor):
            a = take(a, np.arange(size) % a.shape[0], axis=0)
        out.append(a)
    return tuple(out)


def _pair(b, graphs, batches):
    """Record for each node its twin traced at the next batch size; refuse a graph whose
    structure, or whose attrs other than shapes ONNX can compute, change with the batch,
    or whose shapes do not follow the batch on a line (`graphs` traced at `batches`)."""
    graph, twins, far = graphs
    ops = [[n.op for n in g.nodes] for g in graphs]
    if ops[0] != ops[1] or ops[0] != ops[2]:
        raise ONNXError(f"dynamic_batch: the captured graph changes with the batch size "
                        f"(traced at {', '.join(map(str, batches))}; a Python branch on a "
                        "shape?); export with a fixed batch (dynamic_batch=False)",
                        op="export")
    for node, twin, third in zip(graph.nodes, twins.nodes, far.nodes):
        b.alternatives[node] = twin
        for key, sub in node.subgraphs.items():
            _pair(b, (sub, twin.subgraphs[key], third.subgraphs[key]), batches)
        _check_linear(node, (node, twin, third), batches)
        for other in (twin, third):
            _check_attrs(node, other)


def _check_linear(node, copies, batches):
    """Every output shape of `node` (its copies traced at `batches`) is a * batch + b on
    each axis, which is what the exported graph will compute at run time."""
    for index, value in enumerate(node.outputs):
        shapes = [tuple(c.outputs[index].shape) for c in copies]
        ndims = {len(s) for s in shapes}
        on_line = len(ndims) == 1 and all(
            s2 - s0 == (s1 - s0) * (batches[2] - batches[0])
            for s0, s1, s2 in zip(*shapes))
        if not on_line:
            where = f" at {node.source}" if node.source else ""
            seen = ", ".join(f"{s} at batch {n}" for s, n in zip(shapes, batches))
            raise ONNXError(f"dynamic_batch: {node.op}{where} has shape {seen}: not a * batch "
                            "+ b on every axis, the only shapes an ONNX graph recomputes from "
                            "the batch; export with a fixed batch (dynamic_batch=False), or "
                            "keep every shape linear in the batch (no batch * batch, no "
                            "batch // k)", op=node.op)


def _check_attrs(node, other):
    """Refuse an attr of `node` that differs in its copy at another batch size `other`,
    other than the shapes that _check_linear has checked."""
    import numpy as np
    shaped = node.op in ("reshape", "broadcast_to", "full", "empty")
    if node.op == "constant" and uniform(node.attrs["value"]) and \
            uniform(other.attrs["value"]) and \
            np.asarray(node.attrs["value"]).reshape(-1)[0] == \
            np.asarray(other.attrs["value"]).reshape(-1)[0]:
        return  # a filled tensor of the batch's size
    subgraphs = {k.split("[")[0] for k in node.subgraphs}
    for key, value in node.attrs.items():
        if key in subgraphs or (shaped and key == "shape"):
            continue
        same = (np.array_equal(value, other.attrs[key]) and np.shape(value) ==
                np.shape(other.attrs[key])) if key == "value" else value == other.attrs[key]
        if not same:
            where = f" at {node.source}" if node.source else ""
            raise ONNXError(f"dynamic_batch: {node.op}{where} bakes the batch size into "
                            f"its {key}; export with a fixed batch (dynamic_batch=False)",
                            op=node.op)


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
