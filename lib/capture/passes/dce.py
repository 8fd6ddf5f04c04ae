"""Dead-code elimination: drop the nodes that nothing observable needs.

Tracing records everything the Python code did, including work whose result is thrown away
(a loss term computed and not returned, gradients of inputs nobody asked for), and the other
passes leave orphans behind (constants a fold consumed, nodes a simplification bypassed).

A node is live if an output of the graph, an `assign` (a side effect on a variable), a
`check` (the dataflow assert: eager code would have raised, used or not), a random draw, or
an `input` (the signature: graph.inputs are found by their nodes) needs it, through its input
values or its `after` edges (a kept node keeps the nodes it is ordered after). Everything else
goes. A draw whose value nobody uses still advances its generator, so every later draw (in
this call and the next ones) depends on it: dropping it would make the captured function
draw other numbers than the same code run eagerly under the same seed.
"""
from __future__ import annotations

from ..ir import Graph
from .rewrite import Rewrite, effect

ROOTS = frozenset({"assign", "input"})  # kept whether or not anything uses them, as are checks


def dce(graph: Graph) -> Graph:
    live: set = set()
    stack = [v.node for v in graph.outputs]
    stack += [n for n in graph.nodes if n.op in ROOTS or effect(n) in ("check", "random")]
    while stack:
        node = stack.pop()
        if node in live:
            continue
        live.add(node)
        stack.extend(v.node for v in node.inputs)
        stack.extend(node.after)
    rw = Rewrite(graph)
    for node in graph.nodes:
        if node in live:
            rw.copy(node)
    return rw.finish()
