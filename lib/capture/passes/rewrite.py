"""What every pass shares: copying a graph node by node while replacing or removing values.

Passes never mutate their input graph: the graph as traced is kept (`Variant.traced`) and
shown to users, and a pass that fails halfway must not leave it half rewritten. So each pass
walks the old graph in order and builds a new one with a `Rewrite`:

    rw = Rewrite(graph)
    for node in graph.nodes:
        if <node is redundant>:
            rw.replace(node, [rw.get(v) for v in ...])  # its outputs are these new values
        elif <node is dead>:
            pass                                         # nothing refers to it any more
        else:
            rw.copy(node)
    return rw.finish()

`get` maps an old value to the new value standing for it, so rewrites compose along the walk:
a node sees its inputs as already rewritten (a fold feeds the next fold, reshape chains
collapse in one walk). Control edges (`after`) of a replaced node are redirected to the
nodes that now produce its values (and to what the replaced node itself waited for), so an
ordering the old graph guaranteed still holds. The list of Variables is shared, not
copied: variables are state outside the graph, the same for both.

A graph output must not become an alias the traced function did not return: when a
captured call runs through `evaluate` (with gradients), an output that is an `input` or
`read` value comes back as the caller's own tensor or parameter object, and two outputs that
are one value come back as one object; an in-place change of "the result" would then change
the argument, the parameter, or the other result. `may_replace` says whether a rewrite is
free of that.
"""
from __future__ import annotations

from ...ops.primitive import PRIMITIVES
from ..ir import GRAPH_OPS, Graph, Node, Value

def effect(node: Node) -> str | None:
    """The primitive's declared effect ("random", "check") or None (see ops/primitive.py);
    a node holding subgraphs has the effects of the nodes inside them ("check" first)."""
    prim = PRIMITIVES.get(node.op)
    found = prim.effect if prim is not None else None
    for sub in node.subgraphs.values():
        for inner in sub.nodes:
            e = effect(inner)
            if e == "check":
                return e
            found = found or e
    return found


def is_random(node: Node) -> bool:
    """A draw changes its generator: two draws are never the same value, nor a constant.
    Any node whose attrs hold a `generator` counts too."""
    return effect(node) == "random" or "generator" in node.attrs


def is_pure_primitive(node: Node) -> bool:
    """A primitive whose outputs depend on its inputs and attrs alone: safe to merge or fold."""
    return (node.op not in GRAPH_OPS and not is_random(node) and not node.after
            and not node.subgraphs)


def same_spec(a: Value, b: Value) -> bool:
    """One value may stand for another only if nothing downstream can tell them apart."""
    return a.shape == b.shape and a.dtype is b.dtype and a.device is b.device


def constant_of(v: Value):
    """The host array of a `constant` value (None for any other value)."""
    return v.node.attrs["value"] if v.node.op == "constant" else None


class Rewrite:
    """A new graph built from an old one, node by node, in the old order."""

    def __init__(self, graph: Graph):
        self.old = graph
        self.graph = Graph(variables=graph.variables, name=graph.name)
        self.graph.placed = graph.placed
        self.values: dict = {}  # old Value -> new Value
        self.nodes: dict = {}   # old Node -> new nodes an `after` edge to it now means
        self.returned = set(graph.outputs)  # old values the graph returns
        self.taken: set = set()             # new values standing for some of them so far

    def get(self, v: Value) -> Value:
        try:
            return self.values[v]
        except KeyError:
            raise AssertionError(f"pass bug: {v} was removed but is still used") from None

    def after(self, node: Node) -> list:
        """The new nodes that stand for node.after (old nodes)."""
        found: dict = {}
        for a in node.after:
            if a not in self.nodes:
                raise AssertionError(f"pass bug: {a} was removed but {node} is ordered after it")
            found.update(dict.fromkeys(self.nodes[a]))
        return list(found)

    def add(self, op, inputs, attrs, outputs, device, source=None, after=()) -> Node:
        """Append a new node; `outputs` are (shape, dtype, device) specs, `inputs` new values."""
        node = Node(op, inputs, attrs, device, source, after)
        for shape, dtype, dev in outputs:
            node.add_output(shape, dtype, dev)
        self.graph.nodes.append(node)
        return node

    def copy(self, node: Node, inputs=None, attrs=None) -> Node:
        """Append a copy of an old node (inputs mapped, or the new values given)."""
        new = self.add(node.op, [self.get(v) for v in node.inputs] if inputs is None else inputs,
                       node.attrs if attrs is None else attrs,
                       [(v.shape, v.dtype, v.device) for v in node.outputs], node.device,
                       node.source, self.after(node))
        new.constraint = self.constraint(node)
        self._map(node, new.outputs)
        self.nodes[node] = (new,)
        return new

    def constraint(self, node: Node):
        """node's device constraint for the new graph: a colocation follows its value to the
        value standing for it (dropped with the value)."""
        c = node.constraint
        if c is None or c.colocate is None:
            return c
        from ..ir import Constraint
        colocate = self.values.get(c.colocate)
        if colocate is None and c.device is None:
            return None
        return Constraint(c.device, c.any_index, colocate)

    def may_replace(self, node: Node, values) -> bool:
        """False if standing these values for node's outputs would alias a returned value
        with an argument, a variable, or another returned value."""
        for old, new in zip(node.outputs, values):
            if old in self.returned and (new in self.taken or new.node.op in ("input", "read")):
                return False
        return True

    def replace(self, node: Node, values) -> None:
        """The old node is gone; its outputs are these new values (specs must match)."""
        values = list(values)
        if len(values) != len(node.outputs):
            raise AssertionError(f"pass bug: {node} has {len(node.outputs)} outputs")
        for old, new in zip(node.outputs, values):
            if not same_spec(old, new):
                raise AssertionError(f"pass bug: {new} cannot stand for {old}")
        self._map(node, values)
        producers = dict.fromkeys(v.node for v in values)
        producers.update(dict.fromkeys(self.after(node)))
        self.nodes[node] = tuple(producers)

    def _map(self, node: Node, values) -> None:
        for old, new in zip(node.outputs, values):
            self.values[old] = new
            if old in self.returned:
                self.taken.add(new)

    def finish(self) -> Graph:
        self.graph.outputs = [self.get(v) for v in self.old.outputs]
        return self.graph
