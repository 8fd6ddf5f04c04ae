"""rill.cond and rill.switch: choose a branch by a value that exists only when the graph runs.

Eagerly the predicate is read and the chosen branch runs as Python. Inside a capture every
branch is traced into a subgraph and one `switch` node runs the chosen one each call.
"""
from __future__ import annotations

import operator

from ..eager.bind import bind
from ..eager.context import current, is_grad_enabled
from ..errors import ArgumentError, IndexingError, ShapeError
from ..tensor import Tensor
from .structure import check_same, tensor_leaves
from .subtrace import Spec, trace_body
from ..ops.elementwise import not_equal, where
from ..ops.shape import reshape
from ..tree import flatten
from ..ops.methods import assign


def cond(pred, true_fn, false_fn, *operands):
    """true_fn(*operands) if pred else false_fn(*operands), as one graph node when captured.

    Both branches must return the same structure with the same shapes and dtypes (checked
    when captured; eagerly only the branch taken runs). Gradients flow through the branch
    taken.

    >>> import rill
    >>> x = rill.tensor(3.0)
    >>> rill.cond(x > 0, lambda v: v * 2, lambda v: -v, x)
    tensor(6.)
    """
    if not (callable(true_fn) and callable(false_fn)):
        raise ArgumentError(f"true_fn and false_fn must be functions, got "
                            f"{type(true_fn).__name__} and {type(false_fn).__name__}", op="cond")
    if isinstance(pred, Tensor):
        if pred.size != 1:
            raise ShapeError(f"the predicate must have one element, got shape {pred.shape}",
                             op="cond")
        if current().interpreter.capturing:
            from ..ops.elementwise import cast, not_equal
            from ..ops.shape import reshape
            from ..dtypes import int64
            p = reshape(pred, ()) if pred.shape != () else pred
            index = cast(p if p.dtype.kind == "b" else not_equal(p, 0), int64)
            return _captured(index, (false_fn, true_fn), operands, "cond")
        if getattr(pred._data, "host_refusal", None) is not None:
            return _each_member_chooses(pred, true_fn, false_fn, operands)
    elif not isinstance(pred, (bool, int, float)):
        raise ArgumentError(f"the predicate must be a tensor or a bool, got "
                            f"{type(pred).__name__}", op="cond")
    return (true_fn if bool(pred) else false_fn)(*operands)


def _each_member_chooses(pred, true_fn, false_fn, operands):
    """A predicate that differs between the members of a vmap batch: both branches run on
    the whole batch and each member takes its own branch's results (as jax.vmap does)."""
    p = reshape(pred, ())
    p = p if p.dtype.kind == "b" else not_equal(p, 0)
    if_true, if_false = true_fn(*operands), false_fn(*operands)
    check_same(if_true, if_false, "cond", "true_fn's result", "false_fn's result")
    taken, rebuild = flatten(if_true)
    return rebuild([where(p, t, o) for t, o in zip(taken, flatten(if_false)[0])])


def switch(index, branches, *operands):
    """branches[index](*operands), as one graph node when captured.

    >>> import rill
    >>> fns = [lambda v: v + 1, lambda v: v * 10, lambda v: -v]
    >>> rill.switch(rill.tensor(1), fns, rill.tensor(2.0))
    tensor(20.)
    """
    branches = tuple(branches) if isinstance(branches, (list, tuple)) else ()
    if not branches or not all(callable(b) for b in branches):
        raise ArgumentError("switch needs a non-empty sequence of functions", op="switch")
    if isinstance(index, Tensor):
        if index.shape != () or index.dtype.kind not in "iu":
            raise ArgumentError(f"the branch index must be a 0-d integer tensor, got "
                                f"{index.dtype}{list(index.shape)}", op="switch")
        if current().interpreter.capturing:
            return _captured(index, branches, operands, "switch")
        k = int(index)
    else:
        try:
            k = operator.index(index)
        except TypeError:
            raise ArgumentError(f"the branch index must be an integer, got "
                                f"{type(index).__name__}", op="switch") from None
    if not 0 <= k < len(branches):
        raise IndexingError(f"branch index {k} is out of range for {len(branches)} branches",
                            op="switch")
    return branches[k](*operands)


def _captured(index, branches, operands, op: str):
    leaves, rebuild = tensor_leaves(operands, op, "operands")
    specs = rebuild([Spec.of(x) for x in leaves])
    # Traced in grad mode when differentiating: a loop inside a branch then saves what its
    # own gradient needs (the branch's gradient recomputes the branch, loop included).
    grad = is_grad_enabled()
    bodies = []
    for k, fn in enumerate(branches):
        bodies.append(trace_body(lambda ops, fn=fn: fn(*ops), [specs], f"branch{k}", grad=grad))
    first = bodies[0].rebuild(bodies[0].results)
    names = ("false_fn", "true_fn") if op == "cond" else \
        tuple(f"branches[{k}]" for k in range(len(branches)))
    for k, body in enumerate(bodies[1:], 1):
        check_same(first, body.rebuild(body.results), op, f"{names[0]}'s result",
                   f"{names[k]}'s result")
    captured, updated = align(bodies, len(leaves))
    state = tuple(next(i for i, c in enumerate(captured) if c is u) for u in updated)
    outs = bind(_switch_p(), index, *leaves, *captured,
                branches=tuple(b.graph for b in bodies), state=state, n_operands=len(leaves))
    n = len(bodies[0].results)
    for t, new in zip(updated, outs[n:]):
        assign(t, new)
    return bodies[0].rebuild(list(outs[:n]))


def align(bodies, n_explicit: int):
    """Give every branch the same inputs [explicit..., union of captured...] and the same
    state outputs [results..., union of updated...]: a branch that does not use a captured
    tensor gets an unused input; one that does not change a state passes it through."""
    captured = union(b.captured for b in bodies)
    updated = union(b.updated for b in bodies)
    for body in bodies:
        graph = body.graph
        by_id = widen(graph, body.captured, captured, n_explicit)
        n_results = len(graph.outputs) - len(body.updated)
        finals = {id(u): v for u, v in zip(body.updated, graph.outputs[n_results:])}
        graph.outputs = graph.outputs[:n_results] + [finals.get(id(u), by_id[id(u)])
                                                     for u in updated]
        body.captured, body.updated = list(captured), list(updated)
    return captured, updated


def union(lists) -> list:
    """The tensors of several lists, each once (by identity), in order of first appearance."""
    found: list = []
    for items in lists:
        found += [t for t in items if all(t is not f for f in found)]
    return found


def widen(graph, own: list, captured: list, n_explicit: int) -> dict:
    """Renumber graph's inputs to [explicit..., captured...], adding an unused input for
    each captured tensor it did not use. Returns {id(tensor): its input Value}."""
    inputs = graph.inputs
    by_id = {id(c): inputs[n_explicit + i] for i, c in enumerate(own)}
    for c in captured:
        if id(c) not in by_id:
            node = graph.add("input", (), {"index": -1}, ((c.shape, c.dtype),), c.device)
            graph.nodes.insert(0, graph.nodes.pop())
            by_id[id(c)] = node.outputs[0]
    for i, c in enumerate(captured):
        by_id[id(c)].node.attrs["index"] = n_explicit + i
    return by_id


def _switch_p():
    from .primitives import switch_p
    return switch_p
