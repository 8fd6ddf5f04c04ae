"""What an imported ONNX model may ask for, and the meter that holds it to that.

An ONNX file is data, but data that says how much work to do: a Loop's trip count, a
function that calls another twice thirty times over, an Expand to 10^12 elements. Every such
count is checked against `Limits` before the work or the allocation happens, and no field of
the file can lift a limit: only the caller can (`rill.onnx.load(path, limits=...)`).

The sizes are checked in two places: every rill op a node runs goes through `Metered`, an
interpreter wrapping the current one that checks the shapes `infer` gave before the op runs
(eagerly or into a traced graph); and the few translations that build arrays with NumPy
(ConstantOfShape, Range, Resize's matrices, ...) call `Meter.elements` first.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, fields

from ..eager.wrapping import WrappingInterpreter
from .errors import ONNXBudgetError, ONNXError
from ..eager.context import current, use_interpreter
from ..eager.interpreter import EAGER


@dataclass(frozen=True)
class Limits:
    """Budgets of one imported model; `rill.onnx.load(path, limits=Limits(...))` sets them.

    - `max_elements`: elements of any one tensor (an initializer, a constant, an op's
      output), checked before it is allocated or recorded; by default a float32 tensor as
      large as the load budget (`rill.files.load_budget`: $RILL_LOAD_MAX_BYTES, else the
      machine's memory), which no run could allocate anyway;
    - `max_total_elements`: elements of all the tensors one run of the model makes,
      initializers included (the work a file can ask for: tensors are freed as a run goes);
      by default 64 times `max_elements`;
    - `max_loop_trips`: unrolled trips of Loop, Scan and the recurrent ops (and the terms
      of ops translated as unrolled sums: pooling windows, LRN, GridSample's taps), summed
      over the model, a loop inside a loop counting the product; also caps the trips of a
      Loop whose condition depends on data, when the graph runs;
    - `max_nodes`: nodes run in one run of the model, every function body inlined and every
      unrolled trip counted;
    - `max_depth`: nesting of subgraphs (If, Loop, Scan bodies) and function calls.

    The defaults import real exported architectures; lower them for files from untrusted
    sources on a small machine.

    >>> import rill.onnx
    >>> rill.onnx.Limits(max_loop_trips=1000).max_loop_trips
    1000
    """

    max_elements: int | None = None
    max_total_elements: int | None = None
    max_loop_trips: int = 100_000
    max_nodes: int = 1_000_000
    max_depth: int = 32

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if (value is not None or f.default is not None) and \
                    (type(value) is not int or value < 1):
                raise ONNXError(f"Limits.{f.name} must be a positive int, got {value!r}",
                                op="load")
        if self.max_elements is None:  # the machine's: see the docstring
            from ..files import load_budget
            object.__setattr__(self, "max_elements", max(1, load_budget(op="load") // 4))
        if self.max_total_elements is None:
            object.__setattr__(self, "max_total_elements", 64 * self.max_elements)


# How many values an input that gives a shape, axes, pads or sizes may hold: those are a few
# per axis, and turning a huge tensor into a Python list would itself be the attack.
MAX_SHAPE_VALUES = 1 << 16


def _raise(what: str, asked, limit: int, name: str, unit: str = ""):
    raise ONNXBudgetError(
        f"{what} asks for {asked:,}{unit}, past the budget of {limit:,} "
        f"(rill.onnx.Limits.{name}); if the model is trusted, load it with "
        f"rill.onnx.load(path, limits=rill.onnx.Limits({name}=...))", op="load")


class Meter:
    """The counts of one run of a model (or of its loading) against its Limits."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.trips = 0
        self.nodes = 0
        self.total = 0
        self.scale = 1  # trips of the for-loops enclosing the body now running

    def elements(self, shape, what: str) -> int:
        """Charge a tensor of `shape` (checked before anything of that size exists)."""
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            raise ONNXError(f"{what} has a negative dimension: {dims[:8]}", op="load")
        n = math.prod(dims)
        if n > self.limits.max_elements:
            _raise(what, n, self.limits.max_elements, "max_elements", " elements")
        self.total += n
        if self.total > self.limits.max_total_elements:
            _raise(f"{what} brings the model's tensors to {self.total:,} elements; it",
                   n, self.limits.max_total_elements, "max_total_elements", " more")
        return n

    def node(self):
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            _raise("running the model", self.nodes, self.limits.max_nodes, "max_nodes",
                   " nodes")

    def depth(self, depth: int):
        if depth > self.limits.max_depth:
            _raise("the nesting of subgraphs and function calls", depth,
                   self.limits.max_depth, "max_depth", " levels")

    def remaining_trips(self) -> int:
        return self.limits.max_loop_trips - self.trips

    @contextmanager
    def loop(self, what: str, count: int | None):
        """A loop of `count` trips (None: until its condition stops it), unrolled inside;
        yields the function that charges one trip. A count is checked before the first
        trip, times the counts of the loops around it, so nested loops fail at once."""
        if count is not None and count * self.scale > self.remaining_trips():
            _raise(what if self.scale == 1 else f"{what}, run {self.scale:,} times,",
                   count * self.scale, self.limits.max_loop_trips, "max_loop_trips",
                   " trips")
        outer = self.scale
        if count is not None:
            self.scale = outer * max(count, 1)
        try:
            yield lambda: self._trip(what)
        finally:
            self.scale = outer

    def unroll(self, what: str, count: int):
        """Charge `count` trips at once: the time steps of a recurrent op, the terms of an
        op translated as an unrolled sum (a pooling window's offsets, LRN's window)."""
        if count * self.scale > self.remaining_trips():
            _raise(what, count * self.scale, self.limits.max_loop_trips, "max_loop_trips",
                   " unrolled steps")
        self.trips += count

    def _trip(self, what: str):
        self.trips += 1
        if self.trips > self.limits.max_loop_trips:
            _raise(f"{what} (with the model's other loops)", self.trips,
                   self.limits.max_loop_trips, "max_loop_trips", " trips")


class Metered(WrappingInterpreter):
    """The current interpreter, with every op's output shapes charged to a Meter first."""

    def __init__(self, inner, meter: Meter):
        super().__init__(inner)
        self.meter = meter

    def apply(self, prim, args, attrs, avals, device):
        for shape, _ in (avals if prim.multiple_results else (avals,)):
            self.meter.elements(shape, f"the output of {prim.name}")
        return self.inner.apply(prim, args, attrs, avals, device)


def meter() -> Meter:
    """The meter of the ONNX node running now, for helpers not handed the Runner (outside an
    import: a fresh one with the default limits)."""
    found = current().interpreter
    return found.meter if isinstance(found, Metered) else Meter(Limits())


def metered(meter: Meter, eager: bool):
    """A context in which rill ops are charged to `meter`; `eager` runs them now even while
    a capture records (values known when the graph is traced)."""
    inner = EAGER if eager else current().interpreter
    if isinstance(inner, Metered):
        inner = inner.inner
    return use_interpreter(Metered(inner, meter))


# ---- what a model asks for before anything runs ------------------------------------------------

def subgraphs(node) -> list:
    """The graphs a node holds in its attributes (If's branches, a Loop's body), read from
    the attribute fields so that a damaged attribute cannot raise here."""
    from onnx import AttributeProto
    found = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            found.append(attr.g)
        elif attr.type == AttributeProto.GRAPHS:
            found.extend(attr.graphs)
    return found


def check_model(model, functions: dict, translated, limits: Limits) -> None:
    """Refuse, before anything runs, a model whose nodes (every call of its local functions
    inlined, each subgraph once) or nesting already pass the limits, and local functions
    that call themselves. `translated(domain, op)`: whether an op has a row of its own (a
    local function of that name is then not called)."""
    sizes: dict = {}  # function key -> (inlined nodes, depth)
    open_calls: list = []

    def graph_cost(nodes, level):
        if level > limits.max_depth:
            _raise("the nesting of subgraphs and function calls", level, limits.max_depth,
                   "max_depth", " levels")
        total, deepest = 0, level
        for node in nodes:
            total += 1
            key = (node.domain, node.op_type)
            if key in functions and not translated(*key):
                n, d = function_cost(key, level)
                total, deepest = total + n, max(deepest, d)
            for sub in subgraphs(node):
                n, d = graph_cost(sub.node, level + 1)
                total, deepest = total + n, max(deepest, d)
            if total > limits.max_nodes:
                _raise("the model, its local functions inlined,", total, limits.max_nodes,
                       "max_nodes", " nodes")
        return total, deepest

    def function_cost(key, level):
        if key in open_calls:
            chain = " -> ".join(k[1] for k in open_calls[open_calls.index(key):] + [key])
            raise ONNXError(f"the local function {key[1]!r} calls itself ({chain}); ONNX "
                            "functions may not recurse", op="load")
        if key not in sizes:
            open_calls.append(key)
            n, d = graph_cost(functions[key].node, 1)
            open_calls.pop()
            sizes[key] = (n, d)
        n, d = sizes[key]
        if level + d > limits.max_depth:
            _raise("the nesting of subgraphs and function calls", level + d,
                   limits.max_depth, "max_depth", " levels")
        return n, level + d

    graph_cost(model.graph.node, 0)
