"""rill.onnx.load: an ONNX model as a rill captured function.

The model becomes an `ONNXModule` (a rill.nn.Module) whose floating-point initializers are
Parameters and whose forward runs each ONNX node as rill ops; `load` returns it captured, so
calling it records a graph of rill primitives with the weights as graph state. Gradients
flow to the parameters (`f.module.parameters()`) and an optimizer fine-tunes them.

rill graphs have static shapes, so the inputs that give shapes (Reshape's shape, Slice's
starts, ...) must be known when the graph is traced: initializers, Constant nodes, Shape
of a tensor, or arithmetic on those. Those nodes run eagerly during the trace
(`outside_capture`) and their results enter the graph as constants. When such a value
comes from the model's inputs, the returned function reads them at each call and
specializes its trace on them, or runs the model eagerly (specialize.py).
"""
from __future__ import annotations

import functools
import os
import re

from ..errors import Error
from .errors import ONNXError, in_file, in_node, require_onnx, short
from .limits import Limits, Meter, check_model, metered, subgraphs
from .specialize import InputValues, tracing_sources, values_now
from .tensors import check_text, decode, read_model
from .trainable import choose
from ..nn.parameter import Parameter
from ..capture import guards


def load(path, constants=None, capture=True, limits=None, trainable=None):
    """Read the ONNX model at `path` (or a ModelProto) as a rill captured function; its
    `module` attribute is the ONNXModule holding the initializers as Parameters. Raises
    ONNXError naming every op type it cannot translate.

    Inputs that give a shape, axes, a count, pads or scales need no option: the function
    reads their values at each call, its trace specialized on them and guarded (other
    values trace again; `f.specialized` names them), or, for ops whose output shapes
    depend on data (NonZero, Unique, Compress, NonMaxSuppression) and for values computed
    from weights or large inputs, runs the model eagerly (`f.runs_eagerly` says why).

    `constants` ({input name: array}) fixes graph inputs to values, as initializers would;
    the function then takes the other inputs (and a saved graph needs no guard).

    `capture=False` returns the ONNXModule itself, run eagerly node by node.

    `trainable` says which floating-point initializers become Parameters (the others are
    buffers, 0-d ones constants): None, the default, those the file marks as weights (rill's
    export metadata, torch's graph signature, else the inputs of MatMul, Gemm, Conv,
    normalization, Gather, ... that hold weights, and biases added to their outputs; never
    a scalar constant); True every one; False none; a collection of ONNX names; or a
    function taking a name and returning a bool. BatchNormalization's running statistics
    stay buffers and trace-time values (Resize's scales) constants whatever is asked.

    `limits` (a `rill.onnx.Limits`) bounds what the file may ask for: elements of any one
    tensor (`max_elements`, by default a float32 tensor the size of the machine's memory)
    and of all of them (`max_total_elements`, 64 times that), unrolled loop trips
    (`max_loop_trips`, 100_000, nested loops multiplied), nodes run with function bodies
    inlined (`max_nodes`, 1_000_000) and nesting (`max_depth`, 32). Each is checked before
    the work or the allocation; past one, an `ONNXBudgetError` names it. Any malformed
    file raises an ONNXError naming the file and, where there is one, the node.

    >>> import rill.onnx
    >>> try:
    ...     rill.onnx.load("missing.onnx")
    ... except rill.onnx.ONNXError as e:
    ...     print(e.file)
    missing.onnx
    """
    onnx = require_onnx()
    from .specialize import ONNXFunction
    if limits is None:
        limits = Limits()
    elif not isinstance(limits, Limits):
        raise ONNXError(f"limits must be a rill.onnx.Limits, got {type(limits).__name__}",
                        op="load")
    if isinstance(path, onnx.ModelProto):
        model, source, folder = path, f"ModelProto {short(path.graph.name)}", None
    elif isinstance(path, (str, os.PathLike)):
        source = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(source))
        try:
            model = read_model(source)
        except ONNXError as e:
            raise in_file(e, source) from None
    else:
        raise ONNXError(f"expects the path of an .onnx file or a ModelProto, got "
                        f"{type(path).__name__}", op="load")
    module = ONNXModule(model, constants, limits=limits, source=source, folder=folder,
                        trainable=trainable)
    if not capture:
        return module
    # The graph's name is the file's to choose: only its identifier characters are kept.
    name = re.sub(r"\W", "_", model.graph.name)[:64] or "onnx_model"
    return ONNXFunction(module, name=name)


def _is_float(data_type: int) -> bool:
    from onnx import TensorProto as T
    return data_type in (T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16)


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
    model's local functions it calls (check_model has bounded their nesting)."""
    found = set() if found is None else found
    functions = functions or {}
    for node in graph.node:
        key = (node.domain, node.op_type)
        if key not in found:
            found.add(key)
            if key in functions:
                _op_types(functions[key], found, functions)
        for sub in subgraphs(node):
            _op_types(sub, found, functions)
    return found


def trace_time_inputs(graph) -> set:
    """Names of the values a graph (or its subgraphs) feeds to inputs that must be known
    when it is traced: those of import_ops.TRACE_TIME_INPUTS (scales, regions)."""
    from .import_ops import TRACE_TIME_INPUTS
    found = set()
    for node in graph.node:
        for i in TRACE_TIME_INPUTS.get(node.op_type, ()):
            if i < len(node.input) and node.input[i]:
                found.add(node.input[i])
        for sub in subgraphs(node):
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
    """An ONNX graph run with rill ops. `initializer_names` maps each Parameter's (and
    buffer's) name in the module to its ONNX name; inputs are taken in the order of the
    graph's inputs. The weights live only in the module's parameter and buffer registries,
    never as attributes, so an initializer named `forward` or `training` changes nothing of
    the module but its own entry."""

    def __init__(self, model, constants=None, limits=None, source=None, folder=None,
                 trainable=None):
        super().__init__()
        self.limits = limits or Limits()
        self.source = source or f"ModelProto {short(model.graph.name)}"
        self.folder = folder
        try:
            self._read(model, constants, trainable)
        except ONNXError as e:
            raise in_file(e, self.source) from None
        except Exception as e:  # noqa: BLE001 - a case the checks missed: still the file's
            raise in_file(ONNXError(f"cannot read the model: {type(e).__name__}: {e}",
                                    op="load"), self.source) from e

    def _read(self, model, constants, trainable=None):
        import numpy as np
        from .import_function import has_body
        from .import_ops import TABLE
        check_text(model)
        self.opset = _model_opset(model)
        self.opsets = _model_opsets(model)
        self.functions = {(f.domain, f.name): f for f in model.functions}
        check_model(model, self.functions, lambda d, op: _translated(d, op, TABLE),
                    self.limits)
        missing = sorted(f"{d + '.' if d not in ('', 'ai.onnx') else ''}{op}"
                         for d, op in _op_types(model.graph, functions=self.functions)
                         if not (_translated(d, op, TABLE) or
                                 has_body(_domain(d), op, self.opsets, self.functions)))
        if missing:
            shown = ", ".join(short(m, 60).strip("'") for m in missing[:20])
            more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
            raise ONNXError(f"the model uses ONNX ops rill does not translate: "
                            f"{shown}{more}", op="load")
        self._graph = model.graph
        self.initializer_names: dict = {}
        self._constants: dict = {}  # ONNX name -> NumPy array (integer, bool initializers)
        self.input_names: list = []
        self.output_names: list = []
        from .export import BUFFERS_KEY, CONSTANTS_KEY
        fixed = trace_time_inputs(model.graph) | _named_by(model, CONSTANTS_KEY)
        statistics = running_statistics(model.graph) | _named_by(model, BUFFERS_KEY)
        floats = {init.name: tuple(init.dims) for init in model.graph.initializer
                  if _is_float(init.data_type)}
        weights = choose(trainable, model, floats, fixed, statistics)
        meter = Meter(self.limits)
        arrays = ((init.name, decode(init, "initializer", meter, self.folder))
                  for init in model.graph.initializer)  # one decoded at a time
        self._register(arrays, weights, statistics, fixed)
        self._loaded_elements = meter.total  # a run's total starts from the weights'
        names = {i.name for i in model.graph.input}
        for name, value in (constants or {}).items():
            if name not in names:
                raise ONNXError(f"constants names {name!r}, which is not an input of the "
                                f"model (its inputs: {', '.join(sorted(names))})", op="load")
            self._constants[name] = np.asarray(value)
        fed = set(self._constants) | set(self.initializer_names.values())
        self.input_names = [i.name for i in model.graph.input if i.name not in fed]
        self.output_names = [o.name for o in model.graph.output]

    def _register(self, arrays, weights, statistics, fixed):
        """Float initializers named in `weights` become Parameters, the other float ones
        buffers (running statistics, tensors the model holds but does not learn) except
        scalars and trace-time values, which stay constants with the integer ones; each
        registered under a name no attribute of the module has."""
        import numpy as np
        from .dtypes import as_rill, is_bfloat16
        taken = set(dir(type(self))) | set(self.__dict__)
        for name, array in arrays:
            floating = array.dtype.kind == "f" or is_bfloat16(array)
            held = floating and name not in weights and \
                (name in statistics or (array.ndim > 0 and name not in fixed))
            if name in weights or held:
                attr = _attr_name(name, taken)
                value = as_rill(np.array(array))
                if held:  # state, not weights: fine-tuning leaves it be
                    self.register_buffer(attr, value)
                else:
                    self.register_parameter(attr, Parameter(value))
                self.initializer_names[attr] = name
            else:
                self._constants[name] = np.array(array)

    def weight(self, attr):
        """The Parameter or buffer registered as `attr`."""
        found = self._parameters.get(attr)
        return found if found is not None else self._buffers[attr]

    def forward(self, *inputs):
        try:
            return self._run(inputs)
        except ONNXError as e:
            raise in_file(e, self.source) from None

    def _run(self, inputs):
        if len(inputs) != len(self.input_names):
            raise ONNXError(f"the model takes {len(self.input_names)} inputs "
                            f"({', '.join(self.input_names)}), got {len(inputs)}", op="load")
        from .dtypes import as_rill as as_tensor  # bfloat16 arrays too
        meter = Meter(self.limits)
        meter.total = self._loaded_elements
        run = Runner(self.opset, opsets=self.opsets, functions=self.functions, meter=meter,
                     folder=self.folder)
        with metered(run.meter, eager=True):
            for name, array in self._constants.items():
                run.set(name, as_tensor(array), static=True)
        for attr, name in self.initializer_names.items():
            run.set(name, self.weight(attr))
        fixed = self._specialized_values()
        for name, x in zip(self.input_names, inputs):
            x = as_tensor(x)
            if fixed is not None and name in fixed.arrays:  # known: its trace is guarded on it
                with metered(run.meter, eager=True):
                    run.set(name, as_tensor(fixed.arrays[name]).astype(x.dtype), static=True)
            else:
                run.set(name, x)
        with tracing_sources((n, run.get(n)) for n in self.input_names):
            run.graph(self._graph)
        outs = []
        for name in self.output_names:
            if not run.has(name):
                raise ONNXError(f"the graph's output {short(name)} is not produced by any "
                                "node, initializer or input", op="load")
            outs.append(run.get(name))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _specialized_values(self):
        """The values of the inputs the call in progress is specialized on (ONNXFunction),
        guarded when a capture traces: a later call with other values traces again."""
        fixed = values_now(self)
        if fixed is not None and fixed.arrays:
            names = tuple(fixed.arrays)
            guards.guard(f"what the ONNX model's input{'s' if len(names) > 1 else ''} "
                         f"{', '.join(names)} held",
                         lambda: (values_now(self) or InputValues({})).only(names))
        return fixed


def _attr_name(name: str, taken: set) -> str:
    """An identifier for `name` that is not in `taken` (which it joins): ONNX names may be
    anything, module entries are dotless identifiers that must not shadow an attribute."""
    base = re.sub(r"\W", "_", name)[:100]
    if not base or base[0].isdigit() or base[0] == "_":
        base = "w_" + base
    attr, k = base, 1
    while attr in taken:
        attr, k = f"{base}_{k}", k + 1
    taken.add(attr)
    return attr


@functools.lru_cache(maxsize=4096)
def _schema(op_type: str, version: int, domain: str):
    from onnx import defs
    try:
        return defs.get_schema(op_type, version, domain)
    except Exception:  # noqa: BLE001 - no such op (a local function), or a version past int
        return None


def _check_against_schema(node, version: int) -> None:
    """The node's input count and attributes against its op's schema at the model's opset,
    so that a damaged node is named for what it lacks, not for the IndexError it causes."""
    from onnx import AttributeProto
    schema = _schema(node.op_type, version, _domain(node.domain))
    if schema is None:
        return
    from onnx.defs import OpSchema
    given = len(node.input)
    if not schema.min_input <= given <= schema.max_input:
        most = "" if schema.max_input == schema.min_input else \
            " or more" if schema.max_input > 10 ** 6 else f" to {schema.max_input}"
        raise ONNXError(f"takes {schema.min_input}{most} inputs, got {given}",
                        op=node.op_type)
    for i, (name, formal) in enumerate(zip(node.input, schema.inputs)):
        if not name and formal.option == OpSchema.FormalParameterOption.Single:
            raise ONNXError(f"its input #{i} ({formal.name}) is required, but the node "
                            "leaves it out", op=node.op_type)
    if not schema.min_output <= len(node.output) <= schema.max_output:
        raise ONNXError(f"has {len(node.output)} outputs; its schema allows "
                        f"{schema.min_output} to {schema.max_output}", op=node.op_type)
    attrs = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        found = attrs.get(name)
        if found is None:
            if spec.required:
                raise ONNXError(f"lacks its required attribute {name!r}", op=node.op_type)
        elif found.type != int(spec.type) and found.type != AttributeProto.UNDEFINED:
            expected = AttributeProto.AttributeType.Name(int(spec.type))
            raise ONNXError(f"attribute {name!r} must be of type {expected}, got "
                            f"{_attribute_type(found.type)}", op=node.op_type)


def _attribute_type(number: int) -> str:
    from onnx import AttributeProto
    try:
        return AttributeProto.AttributeType.Name(number)
    except ValueError:
        return f"number {number}"


class Runner:
    """Runs ONNX nodes on rill tensors. A value is static when it follows from constants
    alone; static nodes run eagerly even during a trace, so shapes are known. Every node,
    loop trip and tensor is charged to `meter` (limits.Meter), shared by the child scopes
    of subgraphs and function bodies, whose nesting it bounds too."""

    def __init__(self, opset: int, parent: "Runner | None" = None, opsets=None,
                 functions=None, meter=None, folder=None):
        self.opset = opset
        self.parent = parent
        self.opsets = dict(opsets or {"": opset})  # {domain: version}, for function bodies
        self.functions = functions or {}  # the model's local functions by (domain, name)
        self.values: dict = {}
        self.static: set = set()
        self.meter = meter if meter is not None else \
            (parent.meter if parent is not None else Meter(Limits()))
        self.folder = folder if parent is None else parent.folder  # for external data
        self.depth = 0 if parent is None else parent.depth + 1
        self.meter.depth(self.depth)

    def set(self, name, value, static: bool = False):
        self.values[name] = value
        if static:
            self.static.add(name)
        else:
            self.static.discard(name)

    def has(self, name) -> bool:
        scope = self
        while scope is not None:
            if name in scope.values:
                return True
            scope = scope.parent
        return False

    def get(self, name):
        scope = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        raise ONNXError(f"input {short(name)} is not produced by any earlier node, "
                        "initializer or graph input", op="load")

    def is_static(self, name) -> bool:
        scope = self
        while scope is not None:
            if name in scope.values:
                return name in scope.static
            scope = scope.parent
        return False

    def child(self) -> "Runner":
        return Runner(self.opset, self, self.opsets, self.functions)

    def eagerly(self):
        """A context running rill ops now, charged to the meter (values known at trace time,
        even inside a capture)."""
        return metered(self.meter, eager=True)

    def graph(self, graph):
        for index, node in enumerate(graph.node):
            try:
                self.meter.node()
                self._node(node)
            except ONNXError as e:
                raise in_node(e, node, index) from None
            except Exception as e:  # noqa: BLE001 - any failure of a node names the node
                said = f"{e.op}: {e.message}" if isinstance(e, Error) and e.op else \
                    getattr(e, "message", None) or str(e)
                error = ONNXError(f"{type(e).__name__}: {said}", op=node.op_type[:40])
                raise in_node(error, node, index) from e

    def _node(self, node):
        from onnx import helper
        from .import_function import run_function
        from .import_ops import ALWAYS_STATIC, CONTROL_FLOW, NEVER_STATIC, TABLE
        translate = TABLE.get(_row_name(node.domain, node.op_type), run_function)
        _check_against_schema(node, self.opsets.get(_domain(node.domain), 1))
        ins = [self.get(n) if n else None for n in node.input]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        static = node.op_type not in NEVER_STATIC and \
            all(self.is_static(n) for n in node.input if n)
        # A control-flow body may read traced values of this graph: its nodes decide for
        # themselves whether they run at trace time.
        with metered(self.meter, eager=static and node.op_type not in CONTROL_FLOW):
            outs = translate(self, node, ins, attrs)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        flags = getattr(outs, "static", None) or [static] * len(outs)
        for name, value, flag in zip(node.output, outs, flags):
            if name and value is not None:
                self.set(name, value, flag or node.op_type in ALWAYS_STATIC)
