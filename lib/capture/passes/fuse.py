"""Elementwise fusion: maximal groups of elementwise nodes become one `fused` node.

A captured training step is mostly chains of small elementwise ops around the GEMMs: bias
and activation, their gradients, the optimizer's update formula (Adam is a dozen ops per
parameter). Run one by one, each allocates its result and walks memory once. A `fused` node
holds such a group as its subgraph (`body`, as control flow's nodes hold theirs: printed
nested, saved and loaded the same way) and its kernels are generated from the body:
kernels/numpy/fused.py on the CPU (NumPy calls with out= buffers), kernels/triton/fused.py
on the gpu (one Triton kernel per group, from the elementwise expression table).

A group: nodes whose op is elementwise (kernels/numpy/fused.py:ELEMENTWISE), all with the
same output shape (inputs from outside may broadcast), dtype not bfloat16 or complex, on one
device under one placement constraint, joined by producer -> consumer edges (chains and
diamonds; two groups merge at a node that uses both). A node ordered by a control edge
stays out. Groups must not make a cycle: a node joins only if nothing outside the group lies
on a path from the group to it. Effects keep their order: random draws, checks, reads and
assigns are chained one after the other for that test, so fusion never reorders two draws.

What it must not change: every value the graph returns or passes to a node outside a group
is computed by the same kernels' arithmetic, in the same order and dtype (on the CPU the
NumPy function calls the same ufuncs with out=, and the generated C loop does the same IEEE
operations: equal bit for bit, but for the sign of a NaN made from two NaNs; see DESIGN.md,
also for the gpu tolerance). Fusion runs after autodiff, on the whole step: the backward pass is fused too. A
fused node's own gradient (needed only when a captured call runs through `evaluate` on the
tape) is the gradient of its body.
"""
from __future__ import annotations

import math
import os

from ...ops import attrs as A
from ...ops.primitive import primitive, register_kernels
from ..ir import Graph
from .rewrite import Rewrite, effect
from ...errors import CaptureError

MIN_GROUP = 2  # a "group" of one node is that node
# Fewest elements per value for a node to be fused by the pipeline, per device kind (None:
# not at all). CPU: groups of nodes a generated C loop can run (kernels/native/fused.py:
# one pass instead of one per op; relu's gradient at (32, 16, 32, 32) 520 -> 270 us), where
# a C compiler is at hand; without one, not fused (the NumPy fused function does the
# unfused arithmetic at the unfused speed and costs 1-1.5 us more per group). Below 2^12
# elements a call's checks cost what the pass saves. DESIGN.md, "Fusion and memory
# planning". gpu: each distinct group is a kernel Triton compiles on first call; below 2^10
# elements a step's many small groups (an optimizer's per-parameter scalars) cost more
# compile time than the launches they save.
MIN_ELEMENTS = {"cpu": 1 << 12, "gpu": 1 << 10}
# The pipeline fuses CPU nodes only where a generated C loop runs them (tests of the pass
# itself set this False: every elementwise node, the rest run by the NumPy fused function).
COMPILED_CPU_ONLY = True
if os.environ.get("RILL_FUSE_MIN_ELEMENTS"):  # one size for both (tests, measurements)
    MIN_ELEMENTS = dict.fromkeys(MIN_ELEMENTS, int(os.environ["RILL_FUSE_MIN_ELEMENTS"]))


# ---- the fused primitive -------------------------------------------------------------------

def _fused_infer(*inputs, body):
    want = [(tuple(v.shape), v.dtype) for v in body.inputs]
    got = [(tuple(v.shape), v.dtype) for v in inputs]
    if got != want:
        raise CaptureError(f"a fused node's inputs {got} are not its body's {want}", op="fused")
    return [(tuple(v.shape), v.dtype) for v in body.outputs]


def _fused_vjp(g, out, *inputs, body):
    from ..graph_vjp import graph_vjp
    cts = {i: c for i, c in enumerate(g) if c is not None}
    wrt = [i for i, x in enumerate(inputs) if x.dtype.kind in "fc"]
    grads = iter(graph_vjp(body, list(inputs), cts, wrt) if cts and wrt else ())
    return tuple(next(grads) if i in wrt and cts else None for i in range(len(inputs)))


fused_p = primitive("fused", _fused_infer, _fused_vjp, multiple_results=True,
                    attrs={"body": A.Subgraph})


def _gpu_kernel(*inputs, body):
    from rill.kernels.triton.fused import run_fused  # Triton loads only with a gpu
    return run_fused(*inputs, body=body)


def _register():
    from rill.kernels.numpy.fused import run_fused
    register_kernels("cpu", {"fused": run_fused})
    register_kernels("gpu", {"fused": _gpu_kernel})


_register()


# ---- the pass ------------------------------------------------------------------------------

def fuse(graph: Graph, min_elements: dict | None = None, compiled_cpu: bool = False) -> Graph:
    """The graph with its groups fused; with `min_elements` ({device kind: count}), only
    groups whose values have at least that many elements (None: every group); with
    `compiled_cpu`, only CPU nodes that a generated C loop can run (none without a
    compiler)."""
    groups = _groups(graph, min_elements or {}, compiled_cpu)
    if not groups:
        return graph
    group_of = {n: g for g in groups for n in g}
    users = graph.users()
    rw = Rewrite(graph)
    for unit in _schedule(graph, group_of):
        if isinstance(unit, tuple):
            _emit(rw, unit, graph, users)
        else:
            rw.copy(unit)
    return rw.finish()


def fuse_where_it_pays(graph: Graph) -> Graph:
    """The pipeline's fusion: groups of at least MIN_ELEMENTS elements, on the CPU of ops
    its generated C loops run (see above)."""
    return fuse(graph, MIN_ELEMENTS, compiled_cpu=COMPILED_CPU_ONLY)


def _fusible(node, ordered: set, min_elements: dict, compiled_cpu: bool) -> bool:
    from rill.kernels.native import fused as native_fused
    from rill.kernels.numpy.fused import ELEMENTWISE, fusible_dtype
    if node.op not in ELEMENTWISE or node.after or node in ordered or len(node.outputs) != 1:
        return False
    if node.device is None or node.device.kind not in ("cpu", "gpu"):
        return False
    if node.constraint is not None and node.constraint.colocate is not None:
        return False
    v = node.outputs[0]
    least = min_elements.get(node.device.kind, 0)
    if least is None or math.prod(v.shape) < least:
        return False
    if not all(fusible_dtype(x.dtype) for x in node.inputs + [v]):
        return False
    if node.op == "cast" and node.inputs[0].dtype.storage == v.dtype.storage:
        return False  # may hand back its input
    if node.device.kind == "gpu" and node.op == "nextafter":
        return False  # float16 has no gpu kernel; the group's kernel would not refuse it
    if compiled_cpu and node.device.kind == "cpu":
        return native_fused.available() and native_fused.compiles(node)
    return True


def _place_key(node):
    c = node.constraint
    return (node.device, None if c is None else (c.device, c.any_index))


def _is_effect(node) -> bool:
    return node.op in ("read", "assign", "send", "recv") or bool(node.subgraphs) or \
        effect(node) is not None


def _deps(graph: Graph) -> dict:
    """node -> nodes it must come after: producers, control edges, the previous effect."""
    deps = {}
    previous = None
    for node in graph.nodes:
        d = dict.fromkeys(v.node for v in node.inputs)
        d.update(dict.fromkeys(node.after))
        if _is_effect(node):
            if previous is not None:
                d[previous] = None
            previous = node
        deps[node] = list(d)
    return deps


def _groups(graph: Graph, min_elements: dict, compiled_cpu: bool = False) -> list:
    """Tuples of nodes (in graph order), each a group of at least MIN_GROUP."""
    ordered = {a for n in graph.nodes for a in n.after}
    deps = _deps(graph)
    pos = {n: i for i, n in enumerate(graph.nodes)}
    ancestors: dict = {}  # node -> bit set of the positions of every node it needs
    parent: dict = {}     # group id -> merged into (union-find)
    members: dict = {}    # group root -> [nodes]
    bits: dict = {}       # group root -> bit set of its members
    group_of: dict = {}   # node -> group id

    def root(g):
        while parent[g] != g:
            g = parent[g]
        return g

    def valid(roots, node) -> bool:
        united = (1 << pos[node]) | _or(bits[r] for r in roots)
        for m in [node] + [m for r in roots for m in members[r]]:
            for p in deps[m]:
                if not (united >> pos[p]) & 1 and ancestors[p] & united:
                    return False  # a path leaves the group and comes back
        return True

    for node in graph.nodes:
        ancestors[node] = _or(ancestors[p] | (1 << pos[p]) for p in deps[node])
        if not _fusible(node, ordered, min_elements, compiled_cpu):
            continue
        key, shape = _place_key(node), node.outputs[0].shape
        chosen: list = []
        for v in node.inputs:
            g = group_of.get(v.node)
            if g is None:
                continue
            r = root(g)
            first = members[r][0]
            if r in chosen or first.outputs[0].shape != shape or _place_key(first) != key:
                continue
            if valid(chosen + [r], node):
                chosen.append(r)
        if not chosen:
            g = len(parent)
            parent[g], members[g], bits[g] = g, [node], 1 << pos[node]
            group_of[node] = g
            continue
        r = chosen[0]
        for other in chosen[1:]:
            parent[other] = r
            members[r] += members.pop(other)
            bits[r] |= bits.pop(other)
        members[r].append(node)
        bits[r] |= 1 << pos[node]
        group_of[node] = r
    return [tuple(sorted(m, key=pos.__getitem__)) for m in members.values()
            if len(m) >= MIN_GROUP]


def _or(items) -> int:
    out = 0
    for b in items:
        out |= b
    return out


def _schedule(graph: Graph, group_of: dict) -> list:
    """Nodes and groups (tuples) in an order that respects every dependency: the graph's
    order, a group where its last member was, pulled earlier where a later node needs it."""
    deps = _deps(graph)
    unit = lambda n: group_of.get(n, n)  # noqa: E731

    def needs(u):
        nodes = u if isinstance(u, tuple) else (u,)
        found = dict.fromkeys(unit(p) for n in nodes for p in deps[n])
        found.pop(u, None)
        return list(found)

    done: set = set()
    order: list = []
    for node in graph.nodes:
        u = unit(node)
        if u in done or (isinstance(u, tuple) and node is not u[-1]):
            continue
        stack = [(u, False)]
        while stack:
            x, ready = stack.pop()
            if x in done:
                continue
            if ready:
                done.add(x)
                order.append(x)
                continue
            stack.append((x, True))
            stack += [(d, False) for d in reversed(needs(x)) if d not in done]
    return order


def _emit(rw: Rewrite, group: tuple, graph: Graph, users: dict) -> None:
    """Append the fused node standing for `group`; its outputs take the place of the
    members' values that are used outside the group or returned."""
    inside = set(group)
    returned = set(graph.outputs)
    body = Graph(name="fused")
    mapping: dict = {}
    outer: list = []  # values from outside, in order of first use
    for node in group:
        for v in node.inputs:
            if v.node not in inside and v not in mapping:
                mapping[v] = body.add("input", (), {"index": len(outer)},
                                      ((v.shape, v.dtype),), v.device).outputs[0]
                outer.append(v)
    results: list = []  # values used outside the group (or returned)
    for node in group:
        copy = body.add(node.op, [mapping[v] for v in node.inputs], node.attrs,
                        [(v.shape, v.dtype) for v in node.outputs], node.device, node.source)
        mapping.update(zip(node.outputs, copy.outputs))
        for v in node.outputs:
            if v in returned or any(u not in inside for u in users.get(v, ())):
                results.append(v)
    body.outputs = [mapping[v] for v in results]
    last = group[-1]
    fused = rw.add("fused", [rw.get(v) for v in outer], {"body": body},
                   [(v.shape, v.dtype, v.device) for v in results], last.device, last.source)
    fused.constraint = rw.constraint(last)
    new = dict(zip(results, fused.outputs))
    for node in group:
        for v in node.outputs:
            if v in new:  # values used only inside the group have no stand-in
                rw.values[v] = new[v]
                if v in rw.returned:
                    rw.taken.add(new[v])
        rw.nodes[node] = (fused,)
