"""Reverse-mode autodiff over the tape.

`gradients` walks the nodes behind the roots in reverse topological order, calls each
primitive's vjp rule (rill ops, so with create_graph the walk is itself taped), and sums
cotangents per tensor. `backward` accumulates the results into the `.grad` of leaves.
"""
from __future__ import annotations

from ..eager import context
from ..eager.context import detached_value
from ..eager.interpreter import CHECK_KERNELS
from ..errors import GradientError, ShapeError
from ..ops.creation import ones_like, tensor, zeros, zeros_like
from ..ops.elementwise import cast, conj, real
from ..ops.primitive import COMPLEX_RULES
from ..ops.sparse_rows import SparseRows
from ..tensor import Tensor


def not_differentiable(t: Tensor, op: str) -> GradientError:
    if t._origin is not None:
        return GradientError(f"the tensor comes from {t._origin}, which has no gradient (its "
                             "output is an integer, a bool or piecewise constant)", op=op)
    return GradientError("the tensor does not require grad (no input of the computation "
                         "required grad, or it ran under no_grad)", op=op)


def taped_leaves(roots, own) -> list:
    """The grad-requiring leaves behind `roots` other than those in `own`: the tensors an
    enclosing tape records that a functional transform's function read (a closure over model
    parameters, over x with x.requires_grad). Its derivative must be taped too, or it would
    be a constant to that tape (autodiff/grad.py)."""
    own = {id(t) for t in own}
    found, seen, stack = {}, set(), [r._node for r in roots if r._node is not None]
    while stack:
        node = stack.pop()
        if node in seen or node.inputs is None:
            continue
        seen.add(node)
        for i in node.inputs:
            if not i.requires_grad:
                continue
            if i._node is None:
                if id(i) not in own:
                    found[id(i)] = i
            elif i._node not in seen:
                stack.append(i._node)
    return list(found.values())


def _toposort(roots, targets, positions=frozenset()):
    """Nodes behind `roots`, parents first; with `targets` (ids, and the tape positions
    (node, index) of the non-leaf ones), only nodes that lead to one."""
    order = _nodes_behind(roots)
    if targets is None:
        return order
    useful = {}
    for node in order:  # parents first: each input's node is judged before its consumers
        useful[node] = any(id(i) in targets or (i._node is not None and (
            useful.get(i._node, False) or (i._node, i._index) in positions))
            for i in node.inputs if i.requires_grad)
    return [n for n in order if useful[n]]


def _nodes_behind(roots):
    """Every node behind `roots` that a gradient flows through, parents first."""
    order, seen = [], set()
    for root in roots:
        if root._node is None or root._node in seen:
            continue
        stack = [(root._node, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if node in seen:
                continue
            if node.inputs is None:
                raise GradientError("the tape behind this tensor was freed by an earlier "
                                    "backward(); pass retain_graph=True to that call",
                                    op="backward")
            seen.add(node)
            stack.append((node, True))
            for i in node.inputs:
                parent = i._node
                if parent is not None and parent not in seen and i.requires_grad:
                    stack.append((parent, False))
    return order


# Complex gradients follow PyTorch's convention; which rules are written in it already, and
# why the others are conjugated around, is said where the set lives (ops/primitive.py).


def call_vjp(prim, g, out, inputs, attrs):
    """prim's vjp, conjugated around for complex data unless its rule is in COMPLEX_RULES.

    The one place every reverse pass (eager backward, capture, control-flow vjps) calls a
    rule through, so complex support is a property of the walk, not of each rule."""
    if prim.composite is not None and context.current().grad_enabled:
        return composite_vjp(prim.composite, g, inputs, attrs)  # create_graph: see Primitive
    if prim.name in COMPLEX_RULES or not _has_complex(g, inputs) or \
            prim.name.startswith("custom_vjp["):
        return prim.vjp(g, out, *inputs, **attrs)
    conj_g = tuple(conj(c) for c in g) if isinstance(g, tuple) else conj(g)
    cts = prim.vjp(conj_g, out, *inputs, **attrs)
    return tuple(None if c is None else conj(c) for c in cts)


def composite_vjp(composite, g, inputs, attrs):
    """The cotangents of `inputs` from `composite(*inputs, **attrs)` (a fused op again in
    other ops), differentiated with the tape kept: they then depend on the inputs and on g,
    for a further derivative. Per input, a copy stands for it (one tensor may be two inputs,
    and each gets its own part)."""
    proxies = [x * 1 if x.requires_grad else detached_value(x) for x in inputs]
    outs = composite(*proxies, **attrs)
    roots = [(o, c) for o, c in zip(outs, g if isinstance(g, tuple) else (g,))
             if c is not None and o.requires_grad]
    wanted = [p for p, x in zip(proxies, inputs) if x.requires_grad]
    found = gradients([o for o, _ in roots], [c for _, c in roots], targets=wanted,
                      create_graph=True, retain_graph=True) if roots and wanted else {}
    return tuple((found[id(p)][1] if id(p) in found else zeros_like(p))
                 if x.requires_grad else None for p, x in zip(proxies, inputs))


def _has_complex(g, inputs) -> bool:
    for t in inputs:
        if getattr(t, "dtype", None) is not None and t.dtype.kind == "c":
            return True
    for c in (g if isinstance(g, tuple) else (g,)):
        if c is not None and c.dtype.kind == "c":
            return True
    return False


def fit_cotangent(ct, dtype):
    """A cotangent in its input's dtype; the real part for a real input (the imaginary
    direction is not one the input can move in)."""
    if ct.dtype.kind == "c" and dtype.kind != "c":
        ct = real(ct)
    return ct if ct.dtype is dtype else cast(ct, dtype)


def add_cotangents(a, b):
    if a is None:
        return b
    if isinstance(a, SparseRows) or isinstance(b, SparseRows):
        if isinstance(a, SparseRows) and isinstance(b, SparseRows):
            return a + b
        return (a.to_dense() if isinstance(a, SparseRows) else a) + \
            (b.to_dense() if isinstance(b, SparseRows) else b)
    return a + b


def _zeros_for(node, index):
    shape, dtype, device = node.out_specs[index]
    return zeros(*shape, dtype=dtype, device=device)


class _Cotangents:
    """The walk's sums: `collected` ({id: [tensor, cotangent]} for the wanted tensors) and
    `pending` (node -> its outputs' cotangents so far); `held` keeps the tensor that reached
    a node which saved (weakly) its outputs alive until the node runs (the consumers that
    held them may be released first)."""

    def __init__(self, targets):
        self.target_ids = None if targets is None else {id(t) for t in targets}
        # A non-leaf target may reach the tape through a second handle on its value (a view
        # op reads a snapshot of a taped base: ops/views.py:source), so it is found by its
        # tape position too; by identity alone its gradient would silently be missing.
        self.positions = {} if targets is None else \
            {(t._node, t._index): t for t in targets if t._node is not None}
        self.collected: dict[int, list] = {}
        self.pending: dict = {}
        self.held: dict = {}

    def collect(self, t, ct):
        entry = self.collected.get(id(t))
        if entry is None:
            self.collected[id(t)] = [t, ct]
        else:
            entry[1] = add_cotangents(entry[1], ct)

    def push(self, t, ct):
        node = t._node
        slot = self.pending.get(node)
        if slot is None:
            slot = self.pending[node] = [None] * _n_outputs(node)
            if node.outputs is not None:
                self.held[node] = t
        slot[t._index] = add_cotangents(slot[t._index], ct)

    def route(self, t, ct):
        """A cotangent for t: kept if t is wanted, passed on to t's node if it has one."""
        target_ids = self.target_ids
        wanted = target_ids is None if t._node is None else t._retains_grad
        if wanted or (target_ids is not None and id(t) in target_ids):
            self.collect(t, ct)
        elif self.positions and t._node is not None:
            target = self.positions.get((t._node, t._index))
            if target is not None:
                self.collect(target, ct)
        if t._node is not None:
            self.push(t, ct)


def gradients(roots, cotangents, targets=None, *, create_graph=False, retain_graph=False,
              reducers=None):
    """{id(tensor): (tensor, cotangent)} for the leaves behind roots, or for `targets`.
    `reducers` (backward() passes GRAD_REDUCERS): told of each hooked leaf's final
    cotangent as soon as the walk has it."""
    sums = _Cotangents(targets)
    target_ids, positions = sums.target_ids, sums.positions
    collected, pending, held = sums.collected, sums.pending, sums.held
    collect, route = sums.collect, sums.route
    for root, ct in zip(roots, cotangents):
        route(root, ct)

    order = _toposort(roots, target_ids, positions)
    # Leaves someone waits on (a distributed strategy reducing gradients during backward):
    # how many uses each has left in the walk; at 0 its cotangent is final.
    uses = _uses_of_hooked_leaves(order, reducers) if reducers else None
    with (context.enable_grad() if create_graph else context.no_grad()):
        for node in reversed(order):
            cts = pending.pop(node, None)
            if cts is None:
                if uses:
                    _count_down(node, uses, collected, reducers)
                continue
            inputs, prim = node.inputs, node.prim
            for inp, version in zip(inputs, node.versions):
                if inp._version != version:
                    raise _changed_in_place(prim, "input")
            g = _node_cotangent(node, cts)
            saved = node.saved_outputs()
            if saved is None and node.outputs is not None and not prim.multiple_results:
                # Its one output is gone: a write without recording (no_grad, .data,
                # detach()) replaced it, and only the node's weak reference held the old
                # value (a recorded write keeps it as its own input). (An output of a
                # multi-result op may also be gone because nobody kept it.)
                raise _changed_in_place(prim, "output")
            in_cts = call_vjp(prim, g, saved, inputs, node.attrs)
            held.pop(node, None)
            for inp, ct in zip(inputs, in_cts):
                if ct is None or not inp.requires_grad:
                    continue
                if ct.dtype is not inp.dtype or CHECK_KERNELS:
                    ct = _fitted(prim, ct, inp)
                parent = inp._node
                if target_ids is not None:
                    route(inp, ct)
                elif parent is None:  # a leaf: route's answer without targets, inline
                    collect(inp, ct)
                else:  # route and push, inline: most cotangents take this way
                    if inp._retains_grad:
                        collect(inp, ct)
                    slot = pending.get(parent)
                    if slot is None:
                        slot = pending[parent] = [None] * _n_outputs(parent)
                        if parent.outputs is not None:
                            held[parent] = inp
                    index = inp._index
                    slot[index] = add_cotangents(slot[index], ct)
            if uses:
                _count_down(node, uses, collected, reducers)
            if not retain_graph:
                node.release()
    return collected


def _node_cotangent(node, cts):
    """The g a node's rule takes: its one cotangent, or a tuple with zeros for the outputs
    nobody differentiated; dense."""
    if node.prim.multiple_results:
        return tuple(_zeros_for(node, i) if c is None else
                     c.to_dense() if isinstance(c, SparseRows) else c for i, c in enumerate(cts))
    g = cts[0]
    return g.to_dense() if isinstance(g, SparseRows) else g


def _fitted(prim, ct, inp):
    """ct in inp's dtype (and, with RILL_CHECK_KERNELS, checked against its shape)."""
    if ct.dtype is not inp.dtype:
        ct = fit_cotangent(ct, inp.dtype) if not isinstance(ct, SparseRows) else \
            SparseRows(ct.indices, fit_cotangent(ct.rows, inp.dtype), ct.shape)
    if CHECK_KERNELS and tuple(ct.shape) != inp.shape:
        raise AssertionError(f"vjp of {prim.name} gave a cotangent of shape {ct.shape} for "
                             f"an input of shape {inp.shape}")
    return ct


def _changed_in_place(prim, which: str) -> GradientError:
    if which == "input":
        return GradientError(f"an input of {prim.name} was changed in place after it was "
                             "used; its gradient would be wrong. Use an out-of-place op there",
                             op="backward")
    return GradientError(f"an output of {prim.name}, which its gradient reads, was changed in "
                         "place after it was used (under no_grad, or through .data or "
                         "detach()); its gradient would be wrong. Change a clone() instead",
                         op="backward")


# Strategies that average .grad over the processes of a job (distributed/allreduce.py), as
# id(leaf) -> reducer. backward() (not rill.grad, which returns gradients rather than
# accumulating them) calls reducer.begin() before its walk, reducer.ready(leaf, cotangent)
# as soon as the walk has a hooked leaf's final cotangent (the exchange starts while the walk
# goes on), and reducer.finish(found) after the walk for each reducer with a leaf in `found`
# ({id: [leaf, cotangent]}), which may replace the cotangents before they are added to .grad.
GRAD_REDUCERS: dict = {}


def _uses_of_hooked_leaves(order, reducers) -> dict:
    uses: dict = {}
    for node in order:
        for inp in node.inputs:
            if inp._node is None and id(inp) in reducers:
                uses[id(inp)] = uses.get(id(inp), 0) + 1
    return uses


def _count_down(node, uses, collected, reducers) -> None:
    """node has routed its cotangents: a hooked leaf it was the last user of is final."""
    for inp in node.inputs:
        key = id(inp)
        if key in uses:
            uses[key] -= 1
            if uses[key] == 0:
                del uses[key]
                entry = collected.get(key)
                if entry is not None:
                    reducers[key].ready(inp, entry[1])


def _distinct(reducers) -> list:
    """Each reducer once, in the order they were registered (the same on every rank)."""
    return list({id(r): r for r in (reducers or {}).values()}.values())


def _n_outputs(node) -> int:
    return len(node.out_specs) if node.prim.multiple_results else 1


def _root_cotangent(root: Tensor, grad):
    if grad is None:
        if root.size != 1:
            raise GradientError(f"backward() of a tensor of shape {root.shape} needs a grad "
                                "argument (the cotangent); only one-element tensors get an "
                                "implicit 1", op="backward")
        return ones_like(root)
    grad = grad if isinstance(grad, Tensor) else tensor(grad, dtype=root.dtype,
                                                        device=root.device)
    if grad.shape != root.shape:
        raise ShapeError(f"grad of shape {grad.shape} given for a tensor of shape {root.shape}",
                         op="backward")
    return grad


def backward(roots, grads=None, *, retain_graph=False, create_graph=False) -> None:
    """Accumulate the gradients of `roots` into the `.grad` of every leaf behind them."""
    grads = grads or [None] * len(roots)
    for root in roots:
        if not root.requires_grad:
            raise not_differentiable(root, "backward")
    cts = [_root_cotangent(r, g) for r, g in zip(roots, grads)]
    reducers = dict(GRAD_REDUCERS) if GRAD_REDUCERS else None
    for reducer in _distinct(reducers):
        reducer.begin()
    found = gradients(roots, cts, create_graph=create_graph,
                      retain_graph=retain_graph or create_graph, reducers=reducers)
    for reducer in _distinct({k: r for k, r in (reducers or {}).items() if k in found}):
        reducer.finish(found)
    interpreter = context.current().interpreter
    for t, ct in found.values():
        if not create_graph and isinstance(ct, Tensor):
            ct = detached_value(ct)
        if interpreter.capturing:  # the graph reads and writes .grad as a variable
            if isinstance(ct, SparseRows) and t.device.task is None and \
                    t.device.kind != "cpu":
                # A gather's gradient keeps its rows in a graph as it does eagerly: its
                # shapes are the batch's, and optimizers coalesce it to those shapes
                # (ops/rows.py). Off the CPU, where that kernel is missing, it is the dense
                # tensor it stands for. A .grad kept past the step is stored dense (tracer).
                ct = ct.to_dense()
            old = interpreter.current_grad(t)
            interpreter.set_grad(t, ct if old is None else add_cotangents(old, ct))
        else:
            t.grad = ct if t.grad is None else add_cotangents(t.grad, ct)


def _tensor_backward(self, grad=None, retain_graph: bool = False,
                     create_graph: bool = False) -> None:
    """Accumulate d(self)/d(leaf) into `.grad` of every leaf that requires grad.

    `grad` is the cotangent; it may be omitted only for a one-element tensor.
    The tape is freed afterwards unless `retain_graph`; `create_graph` records the
    backward pass itself so that gradients can be differentiated again.
    """
    backward([self], None if grad is None else [grad], retain_graph=retain_graph,
             create_graph=create_graph)


_tensor_backward.__name__ = _tensor_backward.__qualname__ = "backward"
Tensor.backward = _tensor_backward  # the method is the reverse walk's: installed where it lives
