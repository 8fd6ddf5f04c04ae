"""A graph's vector-Jacobian product, by recomputing its forward on the tape.

Nodes that hold a subgraph and have no gradient rule of their own (a fused group of
elementwise ops, capture/passes/fuse.py; control flow's scans and branches, lib/control)
differentiate their subgraph this way: run it eagerly on taped copies of the primals, then
walk the tape back from the cotangents.
"""
from __future__ import annotations

from ..eager.context import enable_grad, is_grad_enabled
from ..ops.sparse_rows import SparseRows
from ..eager.context import detached_value
from ..autodiff.backward import gradients
from ..ops.creation import zeros_like


def graph_vjp(graph, primals, cts: dict, wrt: list):
    """Gradients of graph's outputs (cotangents by output position) with respect to
    primals[wrt], recomputing the graph's forward; zeros where there is no dependence.
    Under create_graph (grad enabled while a backward runs) the recomputation and its
    gradient are taped from the primals and cotangents themselves, so that a second
    derivative sees them: detached, it would silently be zero."""
    higher = is_grad_enabled() and (any(p.requires_grad for p in primals)
                                    or any(c.requires_grad for c in cts.values()))
    with enable_grad():
        # taped: a copy per position (one tensor may feed two inputs; each gets its part)
        proxies = [(p * 1 if higher and p.requires_grad else detached_value(p).requires_grad_())
                   if i in wrt else detached_value(p) for i, p in enumerate(primals)]
        from .evaluate import evaluate
        outs = evaluate(graph, proxies)
        roots = [(outs[i], c) for i, c in cts.items() if outs[i].requires_grad]
        return tuple(gradients_or_zeros(roots, [proxies[i] for i in wrt], create_graph=higher))


def gradients_or_zeros(roots, targets, create_graph: bool = False,
                       retain_graph: bool | None = None) -> list:
    """Dense gradients of the (root, cotangent) pairs for each target; zeros where none. The
    tape is kept (`retain_graph`) when a second derivative will walk it (create_graph) unless
    told otherwise (rill.func.vjp's vjp_fn may be called again)."""
    retain = create_graph if retain_graph is None else retain_graph
    found = gradients([r for r, _ in roots], [c for _, c in roots], targets=targets,
                      create_graph=create_graph, retain_graph=retain) if roots else {}
    grads = []
    for t in targets:
        entry = found.get(id(t))
        grad = zeros_like(t) if entry is None else entry[1]
        grads.append(grad.to_dense() if isinstance(grad, SparseRows) else grad)
    return grads
