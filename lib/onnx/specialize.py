"""Inputs that decide shapes, read at run time: the imported function specializes on them.

A rill graph has static shapes, so a value that gives a shape, axes, a count, pads or
scales (Reshape's shape, Slice's starts, TopK's k, Resize's scales, ...) must be known when
the graph is traced. When such a value comes from a graph input, the trace fails at the
node that needs it (`import_ops.known` raises `NeedsValues`, naming the graph inputs the
value was computed from); `ONNXFunction` then decides, per node, and never asks the user:

- **specialize**: the inputs behind it are small and need no gradient: the function reads
  their values at each call, traces with them as constants, and guards the trace on them
  (`rill.capture.guards`: a call with other values traces again, saying which input
  changed; a call with values seen before reuses its trace);
- **run eagerly**: the node's output shape depends on data (NonZero, Unique, Compress,
  NonMaxSuppression), or the value is computed from weights or large inputs: the module
  then runs node by node, as `load(capture=False)` does.

`load(constants=...)` and `load(capture=False)` stay as the user's overrides.
"""
from __future__ import annotations

import contextvars

import numpy as np

from ..capture.function import CapturedFunction
from ..eager.context import current
from ..errors import CaptureError
from ..tensor import Tensor
from .errors import ONNXError

# The ops whose output *shape* depends on their input's values: run eagerly rather than
# retraced on every new input.
DATA_DEPENDENT_SHAPES = {"NonZero", "Unique", "Compress", "NonMaxSuppression"}
# Inputs up to this many elements are specialized on (shapes, axes, counts, scales hold a
# few values per axis); a larger one is data, and its node runs eagerly instead.
MAX_SPECIALIZED_ELEMENTS = 4096

_VALUES: contextvars.ContextVar = contextvars.ContextVar("rill_onnx_values", default=None)
_SOURCES: contextvars.ContextVar = contextvars.ContextVar("rill_onnx_sources", default=None)


class NeedsValues(ONNXError):
    """A value that must be known when the graph is traced is not. `inputs`: the graph
    inputs it was computed from (None when weights or other state take part too); `onnx_op`:
    the op type of the node that needs it."""

    inputs = None
    onnx_op = ""


class InputValues:
    """The values of the specialized inputs at one call: what a trace's guard compares."""

    def __init__(self, arrays: dict):
        self.arrays = arrays  # {name: np.ndarray}, dtype kept (bfloat16 as float32)

    def only(self, names) -> "InputValues":
        return InputValues({n: a for n, a in self.arrays.items() if n in names})

    def __eq__(self, other) -> bool:
        if not isinstance(other, InputValues) or self.arrays.keys() != other.arrays.keys():
            return False
        return all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
                   for a, b in ((self.arrays[n], other.arrays[n]) for n in self.arrays))

    __hash__ = None

    def __repr__(self) -> str:
        def shown(a):
            text = np.array2string(a.reshape(-1)[:8], separator=", ")
            return text[:-1] + ", ...]" if a.size > 8 else text
        return "{" + ", ".join(f"{n}: {shown(a)}" for n, a in self.arrays.items()) + "}"


def values_now(module):
    """The specialized inputs' values of the call in progress (see ONNXFunction)."""
    found = _VALUES.get()
    return None if found is None else found.get(id(module))


class tracing_sources:
    """While a module runs: {graph Node that made an input tensor: the input's ONNX name},
    so that a value missing at trace time can be traced back to the inputs behind it."""

    def __init__(self, named_tensors):
        self.sources = {}
        for name, t in named_tensors:
            data = getattr(t, "_data", None)
            node = getattr(data, "node", None)
            if node is not None:
                self.sources[id(node)] = name

    def __enter__(self):
        self._token = _SOURCES.set(self.sources)

    def __exit__(self, *exc):
        _SOURCES.reset(self._token)


def inputs_behind(value) -> set | None:
    """The graph inputs a traced tensor is computed from; None when something else than
    graph inputs and constants takes part (weights, state, a value from another trace)."""
    sources = _SOURCES.get() or {}
    data = getattr(value, "_data", None)
    start = getattr(data, "node", None)
    if start is None:
        return None
    found, seen, stack = set(), set(), [start]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if id(node) in sources:
            found.add(sources[id(node)])
        elif node.op in ("input", "read"):  # not one of this model's inputs, or a weight
            return None
        else:
            stack.extend(v.node for v in node.inputs)
            stack.extend(v.node for g in node.subgraphs.values() for v in _outer_reads(g))
    return found


def _outer_reads(graph):
    """The values of the enclosing graph a subgraph reads (none when its node lists them)."""
    own = {id(n) for n in graph.nodes}
    return [v for n in graph.nodes for v in n.inputs if id(v.node) not in own]


def needs_values(node, value, what: str) -> NeedsValues:
    error = NeedsValues(f"its {what} must be known when the graph is traced (an initializer, "
                        "a Constant, computed from shapes, or an input of the model called "
                        "outside another capture): rill graphs have static shapes",
                        op=node.op_type)
    error.inputs = inputs_behind(value)
    error.onnx_op = node.op_type
    return error


class ONNXFunction(CapturedFunction):
    """What `rill.onnx.load` returns: the model's ONNXModule captured, which also reads the
    inputs that decide shapes at run time. `specialized` lists the inputs whose values each
    trace is specialized on (and guarded by); `runs_eagerly` says why the module runs node
    by node, or is None."""

    def __init__(self, module, name):
        super().__init__(module, name=name, module=module)
        self.specialized: list = []
        self.runs_eagerly: str | None = None

    def __call__(self, *args, **kwargs):
        if self.runs_eagerly is not None:
            return self.module(*args, **kwargs)
        while True:
            try:
                with self._reading(args):
                    return super().__call__(*args, **kwargs)
            except NeedsValues as e:
                if current().interpreter.capturing or not self._decide(e, args):
                    raise
                if self.runs_eagerly is not None:
                    return self.module(*args, **kwargs)

    def graph_for(self, *args, optimized: bool = True, **kwargs):
        if self.runs_eagerly is not None:
            raise ONNXError(f"{self.name} runs eagerly, with no graph: {self.runs_eagerly}",
                            op="graph_for")
        with self._reading(args):
            return super().graph_for(*args, optimized=optimized, **kwargs)

    def save(self, path, *args, **kwargs) -> None:
        if self.runs_eagerly is not None or self.specialized:
            why = f"it runs eagerly, with no graph ({self.runs_eagerly})" \
                if self.runs_eagerly else ("its graphs are specialized on the values of "
                                           f"{', '.join(self.specialized)}")
            raise ONNXError(f"cannot save {self.name}: {why}. Load the model with "
                            "constants={name: value} for those inputs to save a graph for "
                            "those values", op="save")
        super().save(path, *args, **kwargs)

    def _reading(self, args):
        return _Reading(self, args)

    def _decide(self, error: NeedsValues, args) -> bool:
        """Specialize on the inputs behind `error`, or run eagerly; False when neither
        helps (the error is then the user's)."""
        names = list(self.module.input_names)
        where = error.node or f"a {error.onnx_op} node"
        if error.onnx_op in DATA_DEPENDENT_SHAPES:
            self.runs_eagerly = f"{where}: its output's shape " \
                "depends on its input's values"
            return True
        given = dict(zip(names, args))
        wanted = error.inputs
        if wanted is None or not wanted or not wanted <= set(given) or \
                set(wanted) <= set(self.specialized):
            self.runs_eagerly = f"{where} needs values computed " \
                "from weights or state when the graph is traced"
            return True
        for name in sorted(wanted):
            x = given[name]
            size = int(np.prod(getattr(x, "shape", np.shape(x)), dtype=np.int64))
            if size > MAX_SPECIALIZED_ELEMENTS or getattr(x, "requires_grad", False):
                self.runs_eagerly = f"{where} needs the values of " \
                    f"input {name!r}, which is large or requires grad, when traced"
                return True
        self.specialized += [n for n in names if n in wanted and n not in self.specialized]
        return True


class _Reading:
    """Context of one call: the specialized inputs' values, read from the arguments."""

    def __init__(self, function, args):
        self.function, self.args = function, args

    def __enter__(self):
        module = self.function.module
        if not self.function.specialized or current().interpreter.capturing:
            self._token = None
            return
        given = dict(zip(module.input_names, self.args))
        arrays = {}
        for name in self.function.specialized:
            x = given.get(name)
            if x is None:
                continue
            try:
                arrays[name] = np.array(x.numpy() if isinstance(x, Tensor) else x)
            except CaptureError:
                continue
        table = dict(_VALUES.get() or {})
        table[id(module)] = InputValues(arrays)
        self._token = _VALUES.set(table)

    def __exit__(self, *exc):
        if self._token is not None:
            _VALUES.reset(self._token)
