"""Gradients of control flow.

cond/switch: the gradient is a switch on the same index whose branches are the gradients of
the branches (each recomputes its branch's forward: only the taken branch runs).

Loops: a body that will be differentiated is traced once *jointly* — its forward and, in
the same subgraph, the gradient of its outputs with respect to its carry, its x slice and
the captured tensors that require grad, given cotangents as extra inputs. `split` cuts that
graph in two: the forward part (nothing there depends on a cotangent) becomes the loop's
body, and every forward value the gradient part needs becomes a *residual*: an extra output
of the body, stacked per iteration by the loop; the gradient part becomes the body of the
reversed loop that the loop's vjp runs, reading the residuals of iteration t from the
stacks. Slices of xs and loop-invariant captured tensors are passed to it instead of being
stacked, and what is computed from loop-invariant values alone (a transposed weight) is
recomputed there. Gradients of captured tensors are summed over iterations
in the reversed loop's carry.

The vjp rules are written with rill.scan / rill.while_loop / rill.switch, so a loop's
gradient inside a capture is again one node holding a subgraph, and eagerly (a captured
function called with gradients) it runs as Python.
"""
from __future__ import annotations

from ..capture.graph_vjp import gradients_or_zeros, graph_vjp
from ..capture.ir import Graph
from ..capture.passes.rewrite import is_random
from ..eager.context import is_grad_enabled
from ..errors import GradientError
from ..tensor import Tensor
from ..eager.bind import bind
from ..ops.linalg import linear_weight_grad_p, matmul
from ..ops.reduce import sum as sum_
from ..ops.shape import reshape, transpose
from ..ops.creation import zeros, zeros_like
from ..capture.evaluate import evaluate
from ..tree import flatten


# ---- the joint trace ------------------------------------------------------------------------

class Joint:
    """What the joint trace of a loop body found; filled in by `after`, read by `split`."""

    def __init__(self, n_carry: int, x_grad: list, inputs_require_grad: bool):
        self.n_carry = n_carry
        self.x_grad = x_grad                   # per x leaf: differentiate with respect to it
        self.inputs_require_grad = inputs_require_grad
        self.differentiable = False
        self.carried: list = []    # carry positions whose cotangent flows through the loop
        self.x_targets: list = []  # x positions with a gradient
        self.k_targets: list = []  # captured positions with a gradient
        self.ct_outputs: list = []  # the primal outputs that take a cotangent, in ct order

    def after(self, sub, proxies, outs):
        """Inside the trace: add cotangent inputs and the gradient; return the gradients."""
        from .subtrace import Spec
        captured_grad = [i for i, c in enumerate(sub.captured)
                         if c.requires_grad and c.dtype.is_inexact
                         and all(u is not c for u in sub.updated)]
        if not (self.inputs_require_grad or captured_grad):
            return []
        self.differentiable = True
        carry = flatten(proxies[0], is_leaf=_is_tensor)[0]
        xs = flatten(proxies[1], is_leaf=_is_tensor)[0] if len(proxies) > 1 else []
        nc = self.n_carry
        # Primal outputs in the body's output order: carry', state', y.
        primal = outs[:nc] + list(sub.updated) + outs[nc:]
        self.ct_outputs = [i for i, t in enumerate(primal) if t.dtype.is_inexact]
        cts = [sub.argument(Spec(primal[i].shape, primal[i].dtype, primal[i].device), late=True)
               for i in self.ct_outputs]
        self.carried = [i for i in range(nc) if carry[i].dtype.is_inexact]
        self.x_targets = [i for i, x in enumerate(xs) if self.x_grad[i] and x.dtype.is_inexact]
        self.k_targets = captured_grad
        targets = [carry[i] for i in self.carried] + [xs[i] for i in self.x_targets] + \
            [sub.captured[i] for i in self.k_targets]
        roots = [(primal[i], ct) for i, ct in zip(self.ct_outputs, cts)
                 if primal[i].requires_grad]
        return gradients_or_zeros(roots, targets)


def _is_tensor(o):
    return isinstance(o, Tensor)


def split(graph: Graph, n_carry: int, n_x: int, n_captured: int, state: list, n_y: int,
          n_grads: int):
    """Cut a joint body (inputs [carry, x, captured, cotangents]; outputs [carry', y, grads,
    state']) into (forward, backward, number of residuals).

    forward:  [carry, x, captured] -> [carry', state', y, residuals]
    backward: [residuals, x, captured, cotangents] -> grads
    """
    inputs = graph.inputs
    first_ct = n_carry + n_x + n_captured
    late = set(inputs[first_ct:])
    sliced = inputs[n_carry:n_carry + n_x]
    captured = inputs[n_carry + n_x:first_ct]
    invariant = [v for i, v in enumerate(captured) if i not in state]
    tangent: set = set()
    for node in graph.nodes:
        if (node.op == "input" and node.outputs[0] in late) or \
                any(v.node in tangent for v in node.inputs):
            tangent.add(node)
    outs = graph.outputs
    results, grads = outs[:n_carry + n_y], outs[n_carry + n_y:n_carry + n_y + n_grads]
    state_out = outs[n_carry + n_y + n_grads:]
    needed: dict = {}
    for node in graph.nodes:
        if node in tangent:
            needed.update((v, None) for v in node.inputs if v.node not in tangent)
    needed.update((v, None) for v in grads if v.node not in tangent)
    # Loop-invariant values (made from constants and invariant captured tensors alone) are
    # recomputed in the backward body rather than stacked once per iteration.
    fixed = set(invariant)
    recomputable: set = set()
    for node in graph.nodes:
        if node.op == "input":
            if node.outputs[0] in fixed:
                recomputable.add(node)
        elif node not in tangent and not is_random(node) and not node.subgraphs and \
                all(v.node in recomputable for v in node.inputs):
            recomputable.add(node)
    residuals, remat = _rematerialize(
        graph, [v for v in needed if v not in set(sliced) and v.node not in recomputable],
        set(sliced), recomputable, tangent)
    recompute: set = set(remat)
    stack = [v.node for v in needed if v.node in recomputable]
    stack += [u.node for n in remat for u in n.inputs if u.node in recomputable]
    while stack:
        node = stack.pop()
        if node not in recompute and node.op != "input":
            recompute.add(node)
            stack += [v.node for v in node.inputs]

    forward = Graph(name="body")
    mapping: dict = {}
    _copy([n for n in graph.nodes if n not in tangent], forward, mapping)
    forward.outputs = [mapping[v] for v in results[:n_carry] + state_out + results[n_carry:]
                       + residuals]

    backward = Graph(name="backward")
    mapping = {}
    for v in residuals + sliced + captured + inputs[first_ct:]:
        node = backward.add("input", (), {"index": len(mapping)}, ((v.shape, v.dtype),),
                            v.device)
        mapping[v] = node.outputs[0]
    _copy([n for n in graph.nodes if n in recompute or (n in tangent and n.op != "input")],
          backward, mapping)
    backward.outputs = [mapping[v] for v in grads]
    return forward, backward, len(residuals)


# Arithmetic cheap enough to redo in the backward body rather than save per iteration.
CHEAP = frozenset({"add", "subtract", "multiply", "neg", "cast"})


def _rematerialize(graph, candidates, sliced, recomputable, tangent):
    """(residuals to stack, nodes the backward body recomputes instead): a candidate made
    by cheap arithmetic from values that are stacked or available anyway (1 - s, 1 - t * t
    in gate gradients, where s and t are saved) costs less to recompute than to store and
    load once per iteration. Decided in graph order, so chains build on earlier choices."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    available = set(sliced)
    kept, remat = [], set()

    def chain(v, depth, found):
        """Nodes recomputing v from available values (None if v is out of reach)."""
        if v in available or v.node in recomputable or v.node.op == "constant":
            if v.node.op == "constant":
                found.add(v.node)
            return found
        node = v.node
        if depth > 3 or node.op not in CHEAP or node in tangent:
            return None
        found.add(node)
        for u in node.inputs:
            if chain(u, depth + 1, found) is None:
                return None
        return found

    for v in sorted(candidates, key=lambda v: order[v.node]):
        nodes = chain(v, 0, set()) if v.node.op in CHEAP else None
        if nodes is None:
            kept.append(v)
        else:
            remat |= nodes
        available.add(v)
    return kept, remat


def hoist_sums(backward: Graph, n_carried: int, n_xt: int, n_res: int, n_x: int):
    """Take per-iteration sums of captured tensors' gradients out of the reversed scan.

    A weight's gradient in a loop body is typically a sum over rows — linear_weight_grad
    (dy, x), matmul(x.T, dy), a bias's sum(dy, axis=0) — accumulated in the reversed loop's
    carry: a thin product and an add into the whole gradient at every step. The sum over
    iterations of a sum over rows is one sum over the rows of the stacked operands: one
    wide product after the loop. The operands come from stacks that exist anyway (the
    residuals, xs, the x gradients the loop stacks) or become extra stacked outputs.
    Returns (backward with outputs [carried, x grads, accumulated k grads, extra], plan):
    per captured target None (accumulated in the loop) or (kind, sources), a source being
    ("res", i), ("x", i) or ("y", j) — j indexing the loop's stacked outputs."""
    outs = backward.outputs
    inputs = {v: i for i, v in enumerate(backward.inputs)}
    x_grads = outs[n_carried:n_carried + n_xt]
    accumulated, extra, plan = [], [], []
    for g in outs[n_carried + n_xt:]:
        found = _row_sum(g)
        sources = []
        for v in (found[1] if found else ()):
            i = inputs.get(v)
            if i is not None:
                sources.append(("res", i) if i < n_res else ("x", i - n_res)
                               if i < n_res + n_x else None)
            elif v in x_grads:
                sources.append(("y", x_grads.index(v)))
            else:
                if v not in extra:
                    extra.append(v)
                sources.append(("y", n_xt + extra.index(v)))
        if found is None or None in sources:
            accumulated.append(g)
            plan.append(None)
        else:
            plan.append((found[0], tuple(sources)))
    backward.outputs = list(outs[:n_carried + n_xt]) + accumulated + extra
    return backward, tuple(plan)


def _row_sum(v):
    """(kind, operands) if v is a sum over the rows of per-iteration operands, else None."""
    node = v.node
    while node.op == "reshape" and node.inputs[0].shape == v.shape:
        node = node.inputs[0].node
    if node.op == "linear_weight_grad":
        return "linear_weight_grad", node.inputs
    if node.op == "sum" and len(node.inputs[0].shape) == 2 and node.attrs.get("axis") in (0, (0,)) \
            and not node.attrs.get("keepdims"):
        return "sum", node.inputs
    if node.op == "matmul" and all(len(i.shape) == 2 for i in node.inputs):
        t = node.inputs[0].node
        if t.op == "transpose" and tuple(t.attrs.get("axes", ())) == (1, 0):
            return "matmul_t", [t.inputs[0], node.inputs[1]]
    return None


def _sum_over_stacks(kind: str, stacks):
    """What `_row_sum` found, computed once on stacked (T, rows, ...) operands."""
    rows = [reshape(s, (-1,) + tuple(s.shape[2:])) for s in stacks]
    if kind == "linear_weight_grad":
        return bind(linear_weight_grad_p, *rows)
    if kind == "sum":
        return sum_(rows[0], axis=0)
    return matmul(transpose(rows[0]), rows[1])


def _copy(nodes, graph: Graph, mapping: dict) -> None:
    for node in nodes:
        new = graph.add(node.op, [mapping[v] for v in node.inputs], node.attrs,
                        [(v.shape, v.dtype) for v in node.outputs], node.device, node.source)
        mapping.update(zip(node.outputs, new.outputs))


# ---- vjp rules ------------------------------------------------------------------------------

def _refuse_higher_order(op: str) -> None:
    if is_grad_enabled():
        refused = GradientError(f"higher-order gradients through {op} are not supported yet "
                                "(create_graph=True, or grad of grad, across a loop or "
                                "branch)", op=op)
        refused.higher_order = True  # autodiff/grad.py tells this refusal from other errors
        raise refused


def _check_traced_targets(inputs, positions, op: str) -> None:
    for i, t in enumerate(inputs):
        if t.requires_grad and i not in positions:
            raise GradientError(f"input {i} of this {op} did not require grad when the "
                                "enclosing function was captured, so its gradient was not "
                                "traced; capture again (e.g. call the function anew)", op=op)


def _zeros_if_none(g, like):
    return g if g is not None else zeros(*like.shape, dtype=like.dtype, device=like.device)


def scan_vjp(g, out, *inputs, body, length, reverse, n_carry, n_x, state, n_y, backward,
             grad_of):
    from .loops import scan
    _refuse_higher_order("scan")
    if backward is None:
        raise GradientError("this scan was traced without gradients (grad mode was off)",
                            op="scan")
    carried, x_targets, k_targets, ct_outputs, plan = grad_of
    ns = len(state)
    consts = list(inputs[n_carry + n_x:])
    xs = list(inputs[n_carry:n_carry + n_x])
    positions = set(carried) | {n_carry + i for i in x_targets} | \
        {n_carry + n_x + i for i in k_targets}
    _check_traced_targets(inputs, positions, "scan")
    residuals = list(out[n_carry + ns + n_y:])
    primal_out = list(out[:n_carry + ns + n_y])
    g = [_zeros_if_none(gi, o) for gi, o in zip(g, primal_out)]
    ct_carry_out = [i for i in ct_outputs if i < n_carry + ns]
    ct_y_out = [i for i in ct_outputs if i >= n_carry + ns]
    summed = [k for k, p in zip(k_targets, plan) if p is None]  # accumulated in the loop
    n_carried, n_xt, n_summed = len(carried), len(x_targets), len(summed)

    def step(carry, x):
        cts, sums = carry
        res_t, x_t, g_y_t = x
        # The cotangents of the primal outputs of this iteration, in ct order.
        ct_by_out = {i: c for i, c in zip(carried, cts)}
        ct_in = [ct_by_out[i] if i in ct_by_out else zeros_like(g[i]) for i in ct_carry_out]
        ct_in += list(g_y_t)
        grads = _evaluate(backward, list(res_t) + list(x_t) + consts + ct_in)
        new_cts = grads[:n_carried]
        g_k = grads[n_carried + n_xt:n_carried + n_xt + n_summed]
        stacked = grads[n_carried:n_carried + n_xt] + grads[n_carried + n_xt + n_summed:]
        return (new_cts, [a + b for a, b in zip(sums, g_k)]), stacked

    init = ([g[i] for i in carried], [zeros_like(consts[i]) for i in summed])
    seq = (residuals, xs, [g[i] for i in ct_y_out])
    (ct_init, ct_summed), ys = scan(step, init, seq, reverse=not reverse, length=length)
    stacks = {"res": residuals, "x": xs, "y": ys}
    result = [None] * len(inputs)
    for i, c in zip(carried, ct_init):
        result[i] = c
    for i, c in zip(x_targets, ys):
        result[n_carry + i] = c
    sums = iter(ct_summed)
    for i, p in zip(k_targets, plan):
        result[n_carry + n_x + i] = next(sums) if p is None else \
            _sum_over_stacks(p[0], [stacks[kind][j] for kind, j in p[1]])
    return result


def while_vjp(g, out, *inputs, cond, body, n_carry, state, max_iterations, backward, grad_of):
    from .loops import while_loop
    _refuse_higher_order("while_loop")
    if backward is None:
        raise GradientError("a captured while_loop is differentiable only with "
                            "max_iterations= (the stacks of saved values need a bound) and "
                            "when traced in grad mode", op="while_loop")
    carried, _, k_targets, ct_outputs, _ = grad_of
    ns = len(state)
    consts = list(inputs[n_carry:])
    positions = set(carried) | {n_carry + i for i in k_targets}
    _check_traced_targets(inputs, positions, "while_loop")
    trips = out[n_carry + ns]
    residuals = list(out[n_carry + ns + 1:])
    primal_out = list(out[:n_carry + ns])
    g = [_zeros_if_none(gi, o) for gi, o in zip(g, primal_out)]
    n_carried = len(carried)

    def body_fn(carry):
        i, cts, sums = carry
        i = i - 1
        ct_by_out = {p: c for p, c in zip(carried, cts)}
        ct_in = [ct_by_out[p] if p in ct_by_out else zeros_like(g[p]) for p in ct_outputs]
        grads = _evaluate(backward, [r[i] for r in residuals] + consts + ct_in)
        return i, grads[:n_carried], [a + b for a, b in zip(sums, grads[n_carried:])]

    init = (trips, [g[i] for i in carried], [zeros_like(consts[i]) for i in k_targets])
    _, ct_init, ct_consts = while_loop(lambda c: c[0] > 0, body_fn, init,
                                       max_iterations=max_iterations)
    result = [None] * len(inputs)
    for i, c in zip(carried, ct_init):
        result[i] = c
    for i, c in zip(k_targets, ct_consts):
        result[n_carry + i] = c
    return result


def switch_vjp(g, out, index, *rest, branches, state, n_operands):
    from .cond import switch
    _refuse_higher_order("cond")
    wrt = [i for i, t in enumerate(rest) if t.requires_grad]
    specs = [o for o in branches[0].outputs]
    floats = [i for i, v in enumerate(specs) if v.dtype.is_inexact]
    cts = [g[i] if g[i] is not None else _zeros_spec(specs[i], index.device) for i in floats]
    n = len(rest)

    def gradient_of(graph):
        return lambda *args: graph_vjp(graph, args[:n], dict(zip(floats, args[n:])), wrt)

    grads = switch(index, [gradient_of(b) for b in branches], *rest, *cts)
    grads = grads if isinstance(grads, (tuple, list)) else (grads,)
    result = [None] * (1 + n)
    for i, c in zip(wrt, grads):
        result[1 + i] = c
    return result


def _zeros_spec(v, device):
    return zeros(*v.shape, dtype=v.dtype, device=device)


def _evaluate(graph, inputs):
    return evaluate(graph, inputs)
