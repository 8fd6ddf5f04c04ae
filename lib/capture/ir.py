"""The graph IR: Graph, Node, Value — small enough to read in one sitting.

A Graph is a list of Nodes in topological order. A Node is (op, inputs, attrs, outputs,
device, source location), plus `after`: nodes that must run first although no value flows
from them (the paper's control dependencies; they order reads and writes of one variable).
A node may hold subgraphs (the branches and bodies of control flow): they are attrs whose
value is a Graph (or a tuple of Graphs), so everything that passes attrs on (the executor,
`evaluate`, the tape) hands them to the op unchanged, and `node.subgraphs` finds them for
the passes, printing and saving. A Value is (producer, index, spec), the spec being shape,
dtype and device.

Ops are primitive names, plus four that belong to the graph itself:
  input     the function's i-th tensor argument          attrs: index
  constant  a value fixed at capture time                 attrs: value (a host array)
  read      the current value of a variable               attrs: var (an index into variables)
  assign    a variable takes a new value (no outputs)     attrs: var
  send      hand a value (or, with no input, a go-ahead) to another device   attrs: key, to
  recv      what the matching send handed over (no output for a go-ahead)   attrs: key, from
  accumulate  add a worker's contribution to a ps's accumulator  attrs: name
  take        the mean of the accumulator's contributions    attrs: name
  add_rows    add values into rows of a variable, in place             attrs: var, key
  save        write its inputs (variables' values) to a checkpoint shard  attrs: names
  restore     the values a checkpoint shard holds                        attrs: names
Send and recv exist only in partitioned graphs (lib/capture/passes/partition.py);
save and restore only in the graphs a task of a distributed job checkpoints with
(lib/distributed/graphs/checkpoint.py);
accumulate and take only in the parts a parameter server runs for synchronous replicas
(lib/distributed/graphs/replicas.py).

A node's `constraint` is what the user asked of its device while it was recorded (a device
scope, a colocation); the placement pass (passes/place.py) reads it and sets `device`.
"""
from __future__ import annotations

import html
import itertools
import math

from ..ops.attrs import Subgraph
from ..ops.primitive import PRIMITIVES
from ..errors import CaptureError, Error
from ..dtypes import short_name
from ..eager.context import current

GRAPH_OPS = ("input", "constant", "read", "assign", "send", "recv", "accumulate", "take",
             "save", "restore", "add_rows")


class Value:
    """One result of one node: what an edge of the dataflow graph carries."""

    __slots__ = ("node", "index", "shape", "dtype", "device", "__weakref__")

    def __init__(self, node, index, shape, dtype, device):
        self.node, self.index = node, index
        self.shape, self.dtype, self.device = tuple(shape), dtype, device

    def __repr__(self) -> str:
        return f"<Value {_spec(self)} of {self.node.op}>"

    # What shape rules read of their inputs besides shape, dtype and device.
    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))

    # The buffer protocol of data a tensor holds but cannot show (tensor.py: `graph_value`,
    # `host_refusal`, `describe`): the layers below capture ask these, not the class.
    is_graph_value = True

    def describe(self) -> str:
        """What a tensor holding it shows as its data (repr)."""
        return f"graph value {_spec(self)} from {self.node.op}"

    def host_refusal(self, what: str):
        """The error for Python asking this value's data (`what`: "numpy()", an op's name):
        during its own trace it has none yet; after it, it escaped (escape.py says where)."""
        from .escape import error
        op = what.split(" ")[0].rstrip("()")
        if self._traced_now():
            return CaptureError(
                f"{what} needs the tensor's data, which exists only when the captured graph "
                "runs. For a choice that depends on data use rill.where, rill.cond or "
                "rill.while_loop; to look at a value, return it from the captured function",
                op=op)
        return error(self, op=op)

    def __array__(self, *args, **kwargs):
        # A graph value reached NumPy: code asked for data that exists only when the graph
        # runs: during its own trace (NumPy called on it), or later (it was stored outside).
        from .escape import error
        if self._traced_now():
            raise CaptureError(
                "NumPy was asked for the data of a tensor being traced, which exists only when "
                "the captured graph runs; use rill ops on it (rill.where, rill.cond for "
                "choices), or return it from the captured function to look at it", op="numpy")
        raise error(self, op="numpy")

    def _traced_now(self) -> bool:
        return self.node in getattr(current().interpreter, "own", ())


class Variable:
    """State the graph reads and writes by reference: a tensor's value, or its `.grad`.

    `owner` is the Python Tensor (so that after a call the user's parameters hold the new
    values); `kind` is "value" or "grad"; `name` is for printing and saving.
    """

    __slots__ = ("owner", "kind", "name", "shape", "dtype", "device")

    def __init__(self, owner, kind: str, name: str, shape, dtype, device):
        self.owner, self.kind, self.name = owner, kind, name
        self.shape, self.dtype, self.device = tuple(shape), dtype, device

    def __repr__(self) -> str:
        return f"<Variable {self.name}{'.grad' if self.kind == 'grad' else ''}>"


class Constraint:
    """Where the user asked a node to run: `device` (any device of its kind when `any_index`)
    and/or beside the producer of the value `colocate`."""

    __slots__ = ("device", "any_index", "colocate")

    def __init__(self, device=None, any_index=False, colocate=None):
        self.device, self.any_index, self.colocate = device, any_index, colocate

    def __repr__(self) -> str:
        parts = []
        if self.device is not None:
            parts.append(f"device={self.device.kind if self.any_index else self.device}")
        if self.colocate is not None:
            parts.append(f"colocate_with={self.colocate!r}")
        return f"<Constraint {' '.join(parts)}>"


class Node:
    __slots__ = ("op", "inputs", "attrs", "outputs", "device", "source", "after", "constraint")

    def __init__(self, op: str, inputs, attrs, device, source=None, after=(), constraint=None):
        self.op = op
        self.inputs = list(inputs)
        self.attrs = dict(attrs)
        self.outputs: list[Value] = []
        self.device = device
        self.source = source
        self.after = list(after)
        self.constraint = constraint

    @property
    def subgraphs(self) -> dict:
        """{name: Graph} of the graphs this node holds ("body", "branches[1]", ...)."""
        found = {}
        for key, value in self.attrs.items():
            if isinstance(value, Graph):
                found[key] = value
            elif isinstance(value, tuple) and value and isinstance(value[0], Graph):
                found.update((f"{key}[{i}]", g) for i, g in enumerate(value)
                             if isinstance(g, Graph))
        return found

    def add_output(self, shape, dtype, device=None) -> Value:
        v = Value(self, len(self.outputs), shape, dtype, device or self.device)
        self.outputs.append(v)
        return v

    @property
    def primitive(self):
        return PRIMITIVES[self.op]

    def __repr__(self) -> str:
        return f"<Node {self.op}>"


class Graph:
    """Nodes in topological order; the values it returns; the variables it touches."""

    def __init__(self, nodes=None, outputs=None, variables=None, name: str = "graph"):
        self.nodes: list[Node] = list(nodes or [])
        self.outputs: list[Value] = list(outputs or [])
        self.variables: list[Variable] = list(variables or [])
        self.name = name
        self.placed = False  # set by the placement pass: node devices are final

    # ---- building --------------------------------------------------------------------------

    def add(self, op, inputs=(), attrs=None, out_specs=(), device=None, source=None,
            after=()) -> Node:
        """Append a node with outputs of the given (shape, dtype) specs."""
        node = Node(op, inputs, attrs or {}, device, source, after)
        for shape, dtype in out_specs:
            node.add_output(shape, dtype)
        self.nodes.append(node)
        return node

    @property
    def inputs(self) -> list[Value]:
        """The function's tensor arguments, by position."""
        found = [n for n in self.nodes if n.op == "input"]
        return [n.outputs[0] for n in sorted(found, key=lambda n: n.attrs["index"])]

    def assigns(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "assign"]

    def count(self, op=None) -> int:
        """Number of nodes (of one op), not counting inputs. The nodes of an op include those
        inside fused nodes (passes/fuse.py: a fused node computes its body's nodes)."""
        if op is None:
            return sum(1 for n in self.nodes if n.op != "input")
        return sum(n.attrs["body"].count(op) if n.op == "fused" and op != "fused" else
                   n.op == op for n in self.nodes)

    def users(self) -> dict:
        """{Value: [nodes that take it]}"""
        found: dict = {}
        for n in self.nodes:
            for v in n.inputs:
                found.setdefault(v, []).append(n)
        return found

    def devices(self) -> list:
        """The devices its nodes run on, in order of first appearance."""
        return list(dict.fromkeys(n.device for n in self.nodes))

    def placement_report(self, cost=None):
        """Per device: its nodes, their estimated time, and the bytes it sends and receives
        (a PlacementReport: prints as text, renders with rich). See passes/cost.py."""
        from .report import PlacementReport
        return PlacementReport(self, cost)

    def memory_plan(self):
        """Peak bytes of one call with and without a memory plan, and the buffers it recycles
        (a MemoryPlan; see passes/memory.py). Its `remat` is the rematerialization pass's
        report for a graph captured with a memory_budget (passes/remat.py), else None."""
        from .passes.memory import plan
        found = plan(self)
        found.remat = self.__dict__.get("remat")
        return found

    def run(self, fetches, feeds=None, args=()):
        """Partial execution: see rill.capture.executor.run."""
        from .executor import run
        return run(self, fetches, feeds, args)

    # ---- checking --------------------------------------------------------------------------

    def lint(self) -> "Graph":
        """Raise CaptureError unless the graph is well formed: every input produced earlier by
        a node of this graph, outputs numbered in order with specs, control predecessors
        earlier, each variable's reads ordered before its assign (at most one assign), and
        every node's specs what its op's shape/dtype rule gives for its inputs and attrs (so
        a pass, or a file, that records a wrong spec fails here, not in a kernel). The error's
        `node` is the node at fault."""
        seen: set = set()

        def fail(node, why):
            error = CaptureError(f"graph lint: {format_node(node, names)}: {why}", op="lint")
            error.node = node
            raise error

        names = _Names()
        reads: dict = {}
        assigned: set = set()
        for node in self.nodes:
            for v in node.inputs:
                if v.node not in seen:
                    fail(node, f"input {names[v]} is not produced before it")
            for a in node.after:
                if a not in seen:
                    fail(node, f"ordered after {a.op}, which comes later")
            for i, v in enumerate(node.outputs):
                if v.node is not node or v.index != i:
                    fail(node, "output bookkeeping is wrong")
                if v.dtype is None or any(not isinstance(s, int) or s < 0 for s in v.shape):
                    fail(node, f"output {i} has no valid spec")
            for name, sub in node.subgraphs.items():
                try:
                    sub.lint()
                except CaptureError as e:
                    fail(getattr(e, "node", node), f"in its {name}: {e.message}")
            if node.op not in GRAPH_OPS:
                why = _rule_disagrees(node)
                if why:
                    fail(node, why)
            elif node.op == "send" and any(v.device is not node.device for v in node.inputs):
                fail(node, f"sends a value from another device than its own ({node.device})")
            if node.op in ("read", "assign"):
                var = node.attrs["var"]
                if type(var) is not int or not 0 <= var < len(self.variables):
                    fail(node, f"variable {var!r} does not exist")
                variable = self.variables[var]
                values = node.outputs if node.op == "read" else node.inputs
                if len(values) != 1 or _spec_of(values[0]) != _spec_of(variable):
                    fail(node, f"{node.op} of {variable.name} ({_spec(variable)}) must "
                               f"{'give' if node.op == 'read' else 'take'} one value of its "
                               "spec")
                if var in assigned:
                    fail(node, f"variable {self.variables[var].name} is used after its assign")
                if node.op == "read":
                    reads.setdefault(var, []).append(node)
                else:
                    missing = [r for r in reads.get(var, ()) if r not in node.after]
                    if missing:
                        fail(node, "assign is not ordered after the reads of "
                                   f"{self.variables[var].name}")
                    assigned.add(var)
            seen.add(node)
        for v in self.outputs:
            if v.node not in seen:
                raise CaptureError(f"graph lint: output {names[v]} is not produced", op="lint")
        return self

    # ---- showing ---------------------------------------------------------------------------

    def __str__(self) -> str:
        return "\n".join(self._lines())

    def _lines(self) -> list:
        names = _Names()
        lines = []
        for i, v in enumerate(self.variables):
            lines.append(f"  ${i} : {_spec(v)}  {v.name}{'.grad' if v.kind == 'grad' else ''}")
        if lines:
            lines.insert(0, "variables:")
        lines.append(f"{self.name}({', '.join(names[v] for v in self.inputs)}):")
        shown = [n for n in self.nodes if n.op != "input"]  # the header names the inputs
        body = [format_node(n, names) for n in shown]
        if len(self.devices()) > 1:  # placed over several devices: say where each node runs
            body = [f"{text}  @{n.device}" for n, text in zip(shown, body)]
        width = min(max((len(b) for b in body), default=0), 56)  # long lines stay unpadded
        for node, text in zip(shown, body):
            lines.append("  " + (text.ljust(width) + f"  # {node.source}" if node.source
                                 else text))
            for name, sub in node.subgraphs.items():  # nested blocks, numbered afresh
                sub_lines = sub._lines()
                sub_lines[0] = f"{name}: " + sub_lines[0]
                lines += ["      " + line for line in sub_lines]
        lines.append(f"  return {', '.join(names[v] for v in self.outputs)}")
        return lines

    __repr__ = __str__

    def __rich__(self):
        from rich.syntax import Syntax
        return Syntax(str(self), "python", theme="ansi_dark", word_wrap=False)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"

    def to_dot(self, collapse: bool | None = False) -> str:
        """The graph in Graphviz DOT: nodes labelled with op and spec, dashed control edges.
        A graph over several devices draws a box (cluster) per device, and each send/recv
        pair as a bold red edge labelled with its rendezvous key; control-flow bodies are
        dashed boxes. `collapse=True` draws one box per line of user code (None: only when
        the graph is large). See views.py."""
        from .views import to_dot
        return to_dot(self, collapse)

    def to_svg(self, collapse: bool | None = None) -> str:
        """The graph as SVG, drawn by Graphviz's `dot` (a CaptureError saying how to install
        it when it is missing). Large graphs are collapsed by source line unless
        `collapse=False`."""
        from .views import to_svg
        return to_svg(self, collapse)

    def _repr_svg_(self) -> str | None:
        # Jupyter draws the graph; without Graphviz (None) it falls back to _repr_html_.
        from .views import dot_program, to_svg
        return to_svg(self) if dot_program() is not None else None


Subgraph.set_class(Graph)  # ops/attrs.py: the attr type of branches and bodies


def _spec_of(v) -> tuple:
    return tuple(v.shape), v.dtype, v.device


def _rule_disagrees(node) -> str | None:
    """Why the node's recorded output specs are not what its primitive's infer gives."""
    prim = node.primitive
    devices = {v.device for v in node.inputs}
    if not prim.device_attr and (len(devices) > 1 or devices - {node.device}):
        return f"inputs on {sorted(map(str, devices))} for a node on {node.device}"
    try:
        avals = prim.infer(*node.inputs, **node.attrs)
    except Error as e:
        return f"its shape/dtype rule refuses it: {e.message}"
    except Exception as e:  # a rule handed attrs no caller of bind could pass
        return f"its shape/dtype rule fails: {type(e).__name__}: {e}"
    if not prim.multiple_results:
        avals = [avals]
    want = [(tuple(shape), dtype) for shape, dtype in avals]
    got = [(v.shape, v.dtype) for v in node.outputs]
    if got != want:
        from ..dtypes import short_name
        show = lambda specs: ", ".join(f"{short_name(d)}{list(s)}" for s, d in specs)  # noqa
        return f"records outputs {show(got)} but its rule gives {show(want)}"
    return None


class _Names:
    """%0, %1, ... in order of first appearance (inputs print as %x0, %x1)."""

    def __init__(self):
        self.names: dict = {}
        self.counter = itertools.count()

    def __getitem__(self, v: Value) -> str:
        name = self.names.get(v)
        if name is None:
            if v.node.op == "input":
                name = f"%x{v.node.attrs['index']}"
            else:
                name = f"%{next(self.counter)}"
            self.names[v] = name
        return name


def map_subgraphs(attrs: dict, fn) -> dict:
    """attrs with every Graph (alone or in a tuple) replaced by fn(graph)."""
    out = {}
    for key, value in attrs.items():
        if isinstance(value, Graph):
            value = fn(value)
        elif isinstance(value, tuple) and value and isinstance(value[0], Graph):
            value = tuple(fn(g) for g in value)
        out[key] = value
    return out


def _spec(v) -> str:
    return f"{short_name(v.dtype)}[{','.join(str(s) for s in v.shape)}]"


def _attr_text(key, value) -> str:
    if key == "value" and hasattr(value, "shape"):
        if value.size <= 4:
            return f"value={value.tolist()}"
        return f"value=<{value.dtype}{list(value.shape)}>"
    if hasattr(value, "get_state"):  # a Generator
        return f"{key}={value!r}"
    return f"{key}={value}"


def format_node(node: Node, names: _Names) -> str:
    outs = ", ".join(f"{names[v]} : {_spec(v)}" for v in node.outputs)
    args = [names[v] for v in node.inputs]
    attrs = {k: v for k, v in node.attrs.items() if k not in ("device",)}
    if node.subgraphs:  # printed as blocks below the node; unset options left out
        attrs = {k: v for k, v in attrs.items() if v is not None and
                 k not in {name.split("[")[0] for name in node.subgraphs}}
    if node.op in ("read", "assign"):
        args.insert(0, f"${attrs.pop('var')}")
    if node.op == "input":
        attrs.pop("index")
    args += [_attr_text(k, v) for k, v in attrs.items()]
    if node.after:
        args.append("after=[" + ", ".join(
            names[a.outputs[0]] if a.outputs else a.op for a in node.after) + "]")
    call = f"{node.op}({', '.join(args)})"
    return f"{outs} = {call}" if outs else call
