"""rill.onnx.load: an ONNX model as a rill captured function.

The model becomes an `ONNXModule` (a rill.nn.Module) whose floating-point initializers are
Parameters and whose forward runs each ONNX node as rill ops; `load` returns it captured, so
calling it records a graph of rill primitives with the weights as graph state. Gradients
flow to the parameters (`f.module.parameters()`) and an optimizer fine-tunes them.

rill graphs have static shapes, so the inputs that give shapes (Reshape's shape, Slice's
starts, ...) must be known when the graph is traced: initializers, Constant nodes, Shape
of a tensor, or arithmetic on those. Those nodes run eagerly during the trace
(`outside_capture`) and their results enter the graph as constants.
"""
from __future__ import annotations

import re
from contextlib import nullcontext

from .errors import ONNXError, require_onnx


def load(path, constants=None, capture=True):
    """Read the ONNX model at `path` (or a ModelProto) as a rill captured function; its
    `module` attribute is the ONNXModule holding the initializers as Parameters. Raises
    ONNXError naming every op type it cannot translate.

    `constants` ({input name: array}) fixes graph inputs to values, as initializers would:
    for models that take a shape, axes or a count as an input, which a rill graph (static
    shapes) must know when it is traced. The function then takes the other inputs.

    `capture=False` returns the ONNXModule itself, run eagerly node by node: slower, but
    ops whose output shapes depend on data (NonZero, Unique, Compress, NonMaxSuppression)
    and shape inputs computed from data then work."""
    onnx = require_onnx()
    from ..capture.function import capture as capture_fn
    model = path if isinstance(path, onnx.ModelProto) else onnx.load(str(path))
    module = ONNXModule(model, constants)
    if not capture:
        return module
    return capture_fn(module, name=model.graph.name or "onnx_model")


def _model_opset(model) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return 1


def _model_opsets(model) -> dict:
    """{domain: opset version}, the default domain as ""."""
    return {_domain(e.domain): e.version for e in model.opset_import}


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def _translated(domain, op, table) -> bool:
    return _row_name(domain, op) in table


def _row_name(domain, op) -> str:
    """The TABLE key of an op: its name in the default domain, else "domain.name"."""
    return op if _domain(domain) == "" else f"{domain}.{op}"


def _op_types(graph, found=None, functions=None):
    """Every (domain, op type) in a graph and its subgraphs, and in the bodies of the
    model's local functions it calls."""
    from onnx import helper
    found = set() if found is None else found
    functions = functions or {}
    for node in graph.node:
        key = (node.domain, node.op_type)
        if key in found:
            continue
        found.add(key)
        if key in functions:
            _op_types(functions[key], found, functions)
        for attr in node.attribute:
            value = helper.get_attribute_value(attr)
            for sub in (value if isinstance(value, list) else [value]):
                if hasattr(sub, "node"):
                    _op_types(sub, found, functions)
    return found


def trace_time_inputs(graph) -> set:
    """Names of the values a graph (or its subgraphs) feeds to inputs that must be known
    when it is traced: those of import_ops.TRACE_TIME_INPUTS (scales, regions)."""
    from onnx import helper
    from .import_ops import TRACE_TIME_INPUTS
    found = set()
    for node in graph.node:
        for i in TRACE_TIME_INPUTS.get(node.op_type, ()):
            if i < len(node.input) and node.input[i]:
                found.add(node.input[i])
        for attr in node.attribute:
            value = helper.get_attribute_value(attr)
            for sub in (value if isinstance(value, list) else [value]):
                if hasattr(sub, "node"):
                    found |= trace_time_inputs(sub)
    return found


def _named_by(model, key: str) -> set:
    """The initializers a rill export listed under `key` in the model's metadata
    (export.BUFFERS_KEY, export.CONSTANTS_KEY)."""
    for prop in model.metadata_props:
        if prop.key == key:
            return set(filter(None, prop.value.split(",")))
    return set()


def running_statistics(graph) -> set:
    """Names of the values a graph feeds to BatchNormalization's running mean and variance:
    imported as buffers, since a gradient step on a variance could make it negative."""
    return {node.input[i] for node in graph.node if node.op_type == "BatchNormalization"
            for i in (3, 4) if i < len(node.input) and node.input[i]}


from ..nn.module import Module  # noqa: E402  (after the lazy-import note above)


class ONNXModule(Module):
    """An ONNX graph run with rill ops. `initializer_names` maps each Parameter's attribute
    name to its ONNX name; inputs are taken in the order of the graph's inputs."""

    def __init__(self, model, constants=None):
        super().__init__()
        import numpy as np
        from onnx import numpy_helper
        from .. import ops
        from ..nn.parameter import Parameter
        from .import_ops import TABLE
        from .import_function import has_body
        self.opset = _model_opset(model)
        self.opsets = _model_opsets(model)
        self.functions = {(f.domain, f.name): f for f in model.functions}
        missing = sorted(f"{d + '.' if d not in ('', 'ai.onnx') else ''}{op}"
                         for d, op in _op_types(model.graph, functions=self.functions)
                         if not (_translated(d, op, TABLE) or
                                 has_body(_domain(d), op, self.opsets, self.functions)))
        if missing:
            raise ONNXError(f"the model uses ONNX ops rill does not translate: "
                            f"{', '.join(missing)}", op="load")
        self._graph = model.graph
        self.initializer_names: dict = {}
        self._constants: dict = {}  # ONNX name -> NumPy array (integer, bool initializers)
        used: set = set()
        from .export import BUFFERS_KEY, CONSTANTS_KEY
        fixed = trace_time_inputs(model.graph) | _named_by(model, CONSTANTS_KEY)
        statistics = running_statistics(model.graph) | _named_by(model, BUFFERS_KEY)
        for init in model.graph.initializer:
            array = numpy_helper.to_array(init)
            if array.dtype.kind == "f" and init.name not in fixed:
                attr = _attr_name(init.name, used)
                value = ops.creation.tensor(np.array(array))
                if init.name in statistics:  # state, not weights: fine-tuning leaves it be
                    self.register_buffer(attr, value)
                else:
                    setattr(self, attr, Parameter(value))
                self.initializer_names[attr] = init.name
            else:
                self._constants[init.name] = np.array(array)
        names = {i.name for i in model.graph.input}
        for name, value in (constants or {}).items():
            if name not in names:
                raise ONNXError(f"constants names {name!r}, which is not an input of the "
                                f"model (its inputs: {', '.join(sorted(names))})", op="load")
            self._constants[name] = np.asarray(value)
        fed = set(self._constants) | set(self.initializer_names.values())
        self.input_names = [i.name for i in model.graph.input if i.name not in fed]
        self.output_names = [o.name for o in model.graph.output]

    def forward(self, *inputs):
        if len(inputs) != len(self.input_names):
            raise ONNXError(f"the model takes {len(self.input_names)} inputs "
                            f"({', '.join(self.input_names)}), got {len(inputs)}", op="load")
        from ..eager.context import outside_capture
        from ..ops.creation import as_tensor
        run = Runner(self.opset, opsets=self.opsets, functions=self.functions)
        with outside_capture():
            for name, array in self._constants.items():
                run.set(name, as_tensor(array), static=True)
        for attr, name in self.initializer_names.items():
            run.set(name, getattr(self, attr))
        for name, x in zip(self.input_names, inputs):
            run.set(name, as_tensor(x))
        run.graph(self._graph)
        outs = [run.get(name) for name in self.output_names]
        return outs[0] if len(outs) == 1 else tuple(outs)


def _attr_name(name: str, used: set) -> str:
    base = re.sub(r"\W", "_", name)
    if not base or base[0].isdigit():
        base = "w_" + base
    attr, k = base, 1
    while attr in used:
        attr, k = f"{base}_{k}", k + 1
    used.add(attr)
    return attr


class Runner:
    """Runs ONNX nodes on rill tensors. A value is static when it follows from constants
    alone; static nodes run eagerly even during a trace, so shapes are known."""

    def __init__(self, opset: int, parent: "Runner | None" = None, opsets=None,
                 functions=None):
        self.opset = opset
        self.parent = parent
        self.opsets = dict(opsets or {"": opset})  # {domain: version}, for function bodies
        self.functions = functions or {}  # the model's local functions by (domain, name)
        self.values: dict = {}
        self.static: set = set()

    def set(self, name, value, static: bool = False):
        self.values[name] = value
        if static:
            self.static.add(name)
        else:
            self.static.discard(name)

    def get(self, name):
        scope = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        raise ONNXError(f"value {name!r} is used before it is produced", op="load")

    def is_static(self, name) -> bool:
        scope = self
        while scope is not None:
            if name in scope.values:
                return name in scope.static
            scope = scope.parent
        return False

    def child(self) -> "Runner":
        return Runner(self.opset, self, self.opsets, self.functions)

    def graph(self, graph):
        from ..eager.context import outside_capture
        from .import_function import run_function
        from .import_ops import ALWAYS_STATIC, CONTROL_FLOW, NEVER_STATIC, TABLE
        from onnx import helper
        for node in graph.node:
            translate = TABLE.get(_row_name(node.domain, node.op_type), run_function)
            ins = [self.get(n) if n else None for n in node.input]
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            static = node.op_type not in NEVER_STATIC and \
                all(self.is_static(n) for n in node.input if n)
            # A control-flow body may read traced values of this graph: its nodes decide
            # for themselves whether they run at trace time.
            context = outside_capture() if static and node.op_type not in CONTROL_FLOW \
                else nullcontext()
            try:
                with context:
                    outs = translate(self, node, ins, attrs)
            except ONNXError:
                raise
            except Exception as e:  # noqa: BLE001 - say which node failed
                raise ONNXError(f"{node.op_type} node {node.name or node.output[0]!r}: "
                                f"{type(e).__name__}: {e}", op=node.op_type) from e
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            flags = getattr(outs, "static", None) or [static] * len(outs)
            for name, value, flag in zip(node.output, outs, flags):
                if name and value is not None:
                    self.set(name, value, flag or node.op_type in ALWAYS_STATIC)
