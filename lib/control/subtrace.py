"""Tracing a branch or a loop body into a subgraph of the graph being captured.

A body is a Python function of its explicit inputs (operands, carry, a slice of xs), but it
may also use any tensor in reach: a parameter, a value computed earlier in the enclosing
trace, a value of an enclosing body. Each such tensor becomes an extra input of the
subgraph ("captured"), which the control-flow node then takes as an input in the enclosing
graph — so a body holds no reference to anything outside it, and the enclosing tracer
decides what the tensor is there (a variable read, a constant, one of its own values).

While the body is traced, a captured tensor's buffer is swapped for the subgraph's input
(and it is made a leaf of the tape), so that every op, and a gradient taken inside the
body, sees the body's value; its slots are put back when the trace ends. A captured tensor
the body changes in place is state carried through the loop (or out of the branch): its
final value is an extra output, and the enclosing code assigns it after the node.
"""
from __future__ import annotations

from ..capture.ir import Value
from ..capture.tracer import Tracer, _SAVED_SLOTS
from ..eager.context import enable_grad, no_grad, use_interpreter
from ..errors import CaptureError
from ..tensor import Tensor, new_tensor
from ..tree import flatten


class Spec:
    """What an explicit input of a body looks like (and whether the joint trace of autodiff
    differentiates with respect to it)."""

    __slots__ = ("shape", "dtype", "device", "requires_grad")

    def __init__(self, shape, dtype, device, requires_grad: bool = False):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        self.requires_grad = requires_grad

    @classmethod
    def of(cls, t: Tensor, requires_grad: bool | None = None) -> "Spec":
        return cls(t.shape, t.dtype, t.device,
                   t.requires_grad if requires_grad is None else requires_grad)


class SubTracer(Tracer):
    """Records a body into its own Graph; tensors from outside become its inputs."""

    def __init__(self, name: str):
        super().__init__(name)
        self.groups: dict = {}      # input node -> 0 explicit, 1 captured, 2 late (cotangents)
        self.captured: list = []    # outside tensors, one input each, in order of first use
        self.swapped: dict = {}     # id(tensor) -> (tensor, its slots before the trace)
        self.updated: list = []     # captured tensors the body changed in place

    def argument(self, spec: Spec, late: bool = False) -> Tensor:
        """A fresh explicit input of the body, as the tensor the body's function receives.
        `late` inputs (the cotangents of the joint trace) come after the captured ones."""
        node = self._add("input", (), {"index": -1}, ((spec.shape, spec.dtype),), spec.device)
        self.groups[node] = 2 if late else 0
        t = new_tensor(node.outputs[0], spec.dtype, spec.device)
        t.requires_grad = spec.requires_grad and spec.dtype.is_floating
        return t

    def outside(self, t: Tensor) -> Value:
        node = self._add("input", (), {"index": -1}, ((t.shape, t.dtype),), t.device)
        self.groups[node] = 1
        v = node.outputs[0]
        self.captured.append(t)
        self.swapped[id(t)] = (t, tuple(getattr(t, s) for s in _SAVED_SLOTS))
        t._data, t._node, t._index = v, None, 0  # the body's own leaf from now on
        return v

    def before_update(self, t: Tensor) -> None:
        if type(t._data) is Value and t._data.node in self.own and id(t) not in self.swapped:
            return  # made inside the body: its new value is just the next value
        if id(t) not in self.swapped:
            self.value_of(t)
        if all(u is not t for u in self.updated):
            self.updated.append(t)

    def set_grad(self, owner, grad) -> None:
        raise CaptureError("a loop body or branch may not set .grad (backward() or zero_grad() "
                           "inside rill.cond/while_loop/scan); compute gradients there with "
                           "rill.grad and return them", op="capture")

    def current_grad(self, owner):
        self.set_grad(owner, None)

    def restore(self) -> None:
        for t, slots in self.swapped.values():
            for name, value in zip(_SAVED_SLOTS, slots):
                setattr(t, name, value)
        self.swapped.clear()


def trace_body(fn, args, name: str, *, grad: bool = False, after=None) -> "Body":
    """Trace fn(*args) into a Body. `args` are nested structures whose leaves are Specs (or
    Tensors, standing for their spec): each leaf becomes an explicit input. With `grad`, the
    body runs with grad mode on (inputs whose spec requires grad are differentiable) and
    `after(sub, proxies, results)` runs inside the trace and returns extra output tensors:
    the joint trace of autodiff adds the gradient computation there."""
    from .structure import tensor_leaves
    sub = SubTracer(name)
    try:
        with use_interpreter(sub), (enable_grad() if grad else no_grad()):
            proxies = []
            for arg in args:
                leaves, rebuild = flatten(arg, is_leaf=lambda o: isinstance(o, (Tensor, Spec)))
                proxies.append(rebuild([sub.argument(x if isinstance(x, Spec) else Spec.of(x))
                                        for x in leaves]))
            result = fn(*proxies)
            out_leaves, rebuild_out = tensor_leaves(result, name, "result")
            extra = list(after(sub, proxies, out_leaves)) if after is not None else []
            values = [sub.value_of(t) for t in out_leaves + extra]
            values += [sub.value_of(t) for t in sub.updated]
            out_specs = [Spec.of(t, False) for t in out_leaves]
    finally:
        sub.restore()
    graph = sub.graph
    graph.outputs = values
    order = sorted((n for n in graph.nodes if n.op == "input"), key=lambda n: sub.groups[n])
    for i, node in enumerate(order):  # stable: creation order within each group
        node.attrs["index"] = i
    return Body(graph, sub.captured, sub.updated, out_specs, rebuild_out, len(extra))


class Body:
    """A traced body. Graph inputs: [explicit..., captured..., late...]; outputs: [results...,
    extra..., final values of `updated`...]. `captured` are the outside tensors in input
    order; `results` the specs of the function's result leaves; `rebuild` its structure."""

    def __init__(self, graph, captured, updated, results, rebuild, n_extra):
        self.graph, self.captured, self.updated = graph, captured, updated
        self.results, self.rebuild, self.n_extra = results, rebuild, n_extra

    @property
    def state_positions(self) -> list:
        """Positions in `captured` of the tensors the body changes in place."""
        return [next(i for i, c in enumerate(self.captured) if c is u) for u in self.updated]
