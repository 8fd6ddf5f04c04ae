"""rill.while_loop, rill.fori_loop and rill.scan: loops that a capture keeps as loops.

Eagerly they run as Python loops (the tape records every iteration). Inside a capture the
body is traced once into a subgraph and one `while` or `scan` node runs it: the graph's
size does not depend on the trip count, which may depend on data.
"""
from __future__ import annotations

import operator

from ..eager.bind import bind
from ..eager.context import current, is_grad_enabled
from ..errors import ArgumentError, ShapeError
from ..tensor import Tensor
from ..capture.passes.cse import cse
from .autodiff import Joint, hoist_sums, split
from .structure import check_same, tensor_leaves
from .subtrace import Spec, trace_body
from ..ops.creation import arange, as_tensor
from ..ops.methods import assign
from ..ops.shape import reshape, stack
from ..ops.elementwise import not_equal


def while_loop(cond_fn, body_fn, init, max_iterations: int | None = None):
    """Run `carry = body_fn(carry)` while `cond_fn(carry)`, from `init`; return the carry.

    The carry is a tensor or a nested tuple/list/dict of tensors; body_fn must return the
    same structure, shapes and dtypes. `max_iterations` caps the trip count (the loop stops
    there); a captured while_loop is differentiable when it is given.

    >>> import rill
    >>> rill.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 2.0),
    ...                 (rill.tensor(0), rill.tensor(1.0)))
    (tensor(5), tensor(32.))
    """
    _function(cond_fn, "cond_fn", "while_loop")
    _function(body_fn, "body_fn", "while_loop")
    max_iterations = _count(max_iterations, "max_iterations", "while_loop")
    if not current().interpreter.capturing:
        carry, i = init, 0
        while (max_iterations is None or i < max_iterations) and \
                _truth(cond_fn(carry), "while_loop"):
            new = body_fn(carry)
            check_same(carry, new, "while_loop", "the initial carry", "body_fn's result")
            carry, i = new, i + 1
        return carry
    leaves, rebuild = tensor_leaves(init, "while_loop", "init")
    carry_specs = rebuild([Spec(x.shape, x.dtype, x.device, True) for x in leaves])
    test = trace_body(lambda c: _predicate(cond_fn(c)), [carry_specs], "cond")
    if test.updated:
        raise ArgumentError("cond_fn changed a tensor in place; only body_fn may", op="while_loop")
    wants_grad = is_grad_enabled() and max_iterations is not None
    joint = Joint(len(leaves), [], any(x.requires_grad for x in leaves))
    body = trace_body(body_fn, [carry_specs], "body", grad=wants_grad,
                      after=joint.after if wants_grad else None)
    check_same(carry_specs, body.rebuild(body.results), "while_loop", "the initial carry",
               "body_fn's result")
    forward, backward, grad_of = _finish(body, joint, len(leaves), 0, 0)
    captured, updated = _align_loop(test, body, forward, len(leaves))
    state = tuple(next(i for i, c in enumerate(captured) if c is u) for u in updated)
    outs = bind(_prims().while_p, *leaves, *captured, cond=test.graph, body=forward,
                n_carry=len(leaves), state=state, max_iterations=max_iterations,
                backward=backward, grad_of=grad_of)
    return _results(outs, rebuild, len(leaves), updated)


def fori_loop(lower, upper, body_fn, init):
    """`carry = body_fn(i, carry)` for i from lower to upper - 1; return the carry.

    With Python ints for the bounds this is a scan (differentiable when captured); with
    tensor bounds, a while_loop whose trip count is known only when it runs.

    >>> import rill
    >>> rill.fori_loop(0, 4, lambda i, acc: acc + i, rill.tensor(0))
    tensor(6)
    """
    _function(body_fn, "body_fn", "fori_loop")
    if isinstance(lower, Tensor) or isinstance(upper, Tensor):
        low, high = as_tensor(lower), as_tensor(upper)
        for b, name in ((low, "lower"), (high, "upper")):
            if b.shape != () or b.dtype.kind not in "iu":
                raise ArgumentError(f"{name} must be an int or a 0-d integer tensor, got "
                                    f"{b.dtype}{list(b.shape)}", op="fori_loop")
        out = while_loop(lambda c: c[0] < high, lambda c: (c[0] + 1, body_fn(c[0], c[1])),
                         (low, init))
        return out[1]
    low = _count(lower, "lower", "fori_loop", allow_negative=True)
    high = _count(upper, "upper", "fori_loop", allow_negative=True)
    if not current().interpreter.capturing:
        carry = init
        for i in range(low, high):
            new = body_fn(as_tensor(i), carry)
            check_same(carry, new, "fori_loop", "the initial carry", "body_fn's result")
            carry = new
        return carry
    if high <= low:
        return init
    return scan(lambda c, i: (body_fn(i, c), None), init, arange(low, high))[0]


def scan(fn, init, xs, reverse: bool = False, length: int | None = None):
    """Loop fn(carry, x) -> (carry, y) over the leading axis of xs; return (carry, ys).

    xs is a tensor, a nested structure of tensors sharing their leading length, or None
    (then `length` says how many steps). ys stacks each step's y along a new leading axis
    (None if fn returns None for y). With reverse=True the steps run from the last x to the
    first, and ys keeps the order of xs. Differentiable when captured; the body is traced
    once and its gradient runs as a reversed scan over the values it saved.

    >>> import rill
    >>> carry, ys = rill.scan(lambda c, x: (c + x, c * x), rill.tensor(0.0),
    ...                       rill.tensor([1.0, 2.0, 3.0]))
    >>> carry, ys
    (tensor(6.), tensor([0., 2., 9.]))
    """
    _function(fn, "fn", "scan")
    x_leaves, x_rebuild = tensor_leaves(xs, "scan", "xs") if xs is not None else ([], None)
    steps = _length(x_leaves, length)
    if not current().interpreter.capturing:
        return _scan_eagerly(fn, init, xs, x_leaves, x_rebuild, steps, reverse)
    leaves, rebuild = tensor_leaves(init, "scan", "init")
    carry_specs = rebuild([Spec(x.shape, x.dtype, x.device, True) for x in leaves])
    slice_specs = x_rebuild([Spec(x.shape[1:], x.dtype, x.device, x.requires_grad)
                             for x in x_leaves]) if xs is not None else None
    wants_grad = is_grad_enabled()
    joint = Joint(len(leaves), [x.requires_grad for x in x_leaves],
                  any(x.requires_grad for x in leaves + x_leaves))
    body = trace_body(lambda c, x: _pair(fn(c, x)), [carry_specs, slice_specs], "body",
                      grad=wants_grad, after=joint.after if wants_grad else None)
    results, rebuild_results = body.results, body.rebuild
    carry_out, y_out = rebuild_results(results)
    check_same(carry_specs, carry_out, "scan", "the initial carry", "fn's carry")
    n_y = len(results) - len(leaves)
    forward, backward, grad_of = _finish(body, joint, len(leaves), len(x_leaves), n_y,
                                         sliced=True)
    state = tuple(body.state_positions)
    outs = bind(_prims().scan_p, *leaves, *x_leaves, *body.captured, body=forward,
                length=steps, reverse=bool(reverse), n_carry=len(leaves), n_x=len(x_leaves),
                state=state, n_y=n_y, backward=backward, grad_of=grad_of)
    nc, ns = len(leaves), len(state)
    carry = _results(outs, rebuild, nc, body.updated)
    _, y_rebuild = tensor_leaves(y_out, "scan", "y")
    return carry, y_rebuild(list(outs[nc + ns:nc + ns + n_y]))


# ---- helpers -------------------------------------------------------------------------------

def _finish(body, joint, n_carry, n_x, n_y, sliced: bool = False):
    """(forward graph, backward graph or None, grad_of) from a traced body."""
    graph = body.graph
    if not joint.differentiable:
        n_results = n_carry + n_y
        outs = graph.outputs
        graph.outputs = outs[:n_carry] + outs[n_results:] + outs[n_carry:n_results]
        return graph, None, None
    n_grads = len(joint.carried) + len(joint.x_targets) + len(joint.k_targets)
    # Merge repeated computations first (gradient rules recompute forward values, as
    # 1 - z in a GRU), so that each residual is stacked once.
    graph = cse(graph).lint()
    forward, backward, n_res = split(graph, n_carry, n_x, len(body.captured),
                                     body.state_positions, n_y, n_grads)
    plan = (None,) * len(joint.k_targets)
    if sliced:  # a scan: its stacks have one row per iteration, so sums can leave the loop
        backward, plan = hoist_sums(backward, len(joint.carried), len(joint.x_targets), n_res,
                                    n_x)
    return forward, backward, (tuple(joint.carried), tuple(joint.x_targets),
                               tuple(joint.k_targets), tuple(joint.ct_outputs), plan)


def _align_loop(test, body, forward, n_carry):
    """cond and body take the same inputs: [carry, union of what either captured]."""
    from .cond import union, widen
    captured = union([body.captured, test.captured])
    widen(forward, body.captured, captured, n_carry)
    widen(test.graph, test.captured, captured, n_carry)
    return captured, list(body.updated)


def _results(outs, rebuild, n_carry, updated):
    for t, new in zip(updated, outs[n_carry:n_carry + len(updated)]):
        assign(t, new)
    return rebuild(list(outs[:n_carry]))


def _scan_eagerly(fn, init, xs, x_leaves, x_rebuild, steps, reverse):
    if steps == 0:
        raise ShapeError("scan over zero steps runs nothing whose result shapes could be "
                         "known eagerly; capture it, or check for empty input first", op="scan")
    carry, ys = init, [None] * steps
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        x = x_rebuild([leaf[t] for leaf in x_leaves]) if xs is not None else None
        new, ys[t] = _pair(fn(carry, x))
        check_same(carry, new, "scan", "the initial carry", "fn's carry")
        carry = new
    per_step = [tensor_leaves(y, "scan", "y") for y in ys]
    rebuild = per_step[0][1]
    for t, (leaves, _) in enumerate(per_step):
        check_same(per_step[0][1](per_step[0][0]), per_step[t][1](leaves), "scan",
                   "fn's y at step 0", f"fn's y at step {t}")
    columns = zip(*[leaves for leaves, _ in per_step])
    return carry, rebuild([stack(list(c), axis=0) for c in columns])


def _pair(out):
    if not isinstance(out, tuple) or len(out) != 2:
        raise ArgumentError(f"the scanned function must return a pair (carry, y), got "
                            f"{type(out).__name__}", op="scan")
    return out


def _length(x_leaves, length):
    if not x_leaves:
        if length is None:
            raise ArgumentError("scan needs xs or length=", op="scan")
        return _count(length, "length", "scan")
    for x in x_leaves:
        if x.ndim == 0:
            raise ShapeError("every xs leaf needs a leading axis to scan over, got a 0-d "
                             "tensor", op="scan")
    steps = x_leaves[0].shape[0]
    for x in x_leaves[1:]:
        if x.shape[0] != steps:
            raise ShapeError(f"xs leaves have different lengths: {steps} and {x.shape[0]}",
                             op="scan")
    if length is not None and _count(length, "length", "scan") != steps:
        raise ShapeError(f"length={length} but xs has {steps} steps", op="scan")
    return steps


def _function(fn, name: str, op: str) -> None:
    if not callable(fn):
        raise ArgumentError(f"{name} must be a function, got {type(fn).__name__}", op=op)


def _count(n, name: str, op: str, allow_negative: bool = False):
    if n is None and name == "max_iterations":
        return None
    if isinstance(n, bool):
        raise ArgumentError(f"{name} must be an int, got bool", op=op)
    try:
        n = operator.index(n)
    except TypeError:
        raise ArgumentError(f"{name} must be an int, got {type(n).__name__}", op=op) from None
    if n < 0 and not allow_negative:
        raise ArgumentError(f"{name} must be at least 0, got {n}", op=op)
    return n


def _truth(pred, op: str) -> bool:
    if isinstance(pred, Tensor):
        if pred.size != 1:
            raise ShapeError(f"cond_fn must return one element, got shape {pred.shape}", op=op)
        return bool(pred)
    return bool(pred)


def _predicate(pred):
    """cond_fn's result as a 0-d bool tensor."""
    pred = as_tensor(pred)
    if pred.size != 1:
        raise ShapeError(f"cond_fn must return one element, got shape {pred.shape}",
                         op="while_loop")
    pred = reshape(pred, ()) if pred.shape != () else pred
    return pred if pred.dtype.kind == "b" else not_equal(pred, 0)


def _prims():
    from . import primitives
    return primitives
