"""The tape: what reverse-mode autodiff needs to remember about each recorded op.

A result of a differentiable op with a grad-requiring input points to a Node holding the
primitive, its attrs, its inputs, and (for rules that use it) a weak reference to its output.
Weak, because whoever reaches a node in backward() holds its outputs already; a strong one
would make every node a reference cycle. The input versions catch in-place changes made
after recording, which would silently corrupt the gradient.
"""
from __future__ import annotations

from weakref import ref as _ref

from ..tensor import new_tensor


class Node:
    __slots__ = ("prim", "inputs", "attrs", "outputs", "versions", "out_specs")

    def __repr__(self) -> str:
        return f"<tape node {self.prim.name}>"

    def saved_outputs(self):
        if self.outputs is None:
            return None
        outs = tuple(o() if type(o) is _ref else o for o in self.outputs)
        return outs if self.prim.multiple_results else outs[0]

    def release(self) -> None:
        self.inputs = self.attrs = self.outputs = self.versions = None


def record(prim, inputs, attrs, outputs) -> None:
    """Attach a tape node to `outputs` (called by bind when an input requires grad)."""
    if prim.vjp is None:  # argmax, comparisons, ...
        mark_no_gradient(prim, outputs, prim.name)
        return
    node = Node()
    node.prim = prim
    node.inputs = inputs
    node.attrs = attrs
    node.versions = tuple([a._version for a in inputs]) if len(inputs) != 2 else (
        inputs[0]._version, inputs[1]._version)
    if prim.multiple_results:
        saved_only = prim.residuals(**attrs) if prim.residuals is not None else 0
        differentiable = outputs[:len(outputs) - saved_only]
        # Outputs nobody differentiated get zero cotangents of these specs.
        node.out_specs = tuple((o.shape, o.dtype, o.device) for o in differentiable)
        for i, out in enumerate(differentiable):
            _attach(out, node, i)
        if prim.save_output:
            # Outputs that point back at the node are weak (no cycle); the others, e.g. the
            # indices of sort, are kept strongly since the user may have dropped them: as
            # handles of their own on the same buffer, so that an in-place change of the
            # user's tensor (which rebinds it) cannot reach what the rule will read.
            node.outputs = tuple(_ref(o) if o._node is node else
                                 new_tensor(o._data, o.dtype, o.device) for o in outputs)
        else:
            node.outputs = None
    else:
        if outputs.dtype.kind in "fc":
            outputs.requires_grad = True
            outputs._node = node
        else:
            outputs._origin = prim.name
        node.outputs = (_ref(outputs),) if prim.save_output else None


def mark_no_gradient(prim, outputs, origin: str) -> None:
    """No gradient flows into `outputs`: remember which op cut it, for the error message if
    someone differentiates them later."""
    for out in (outputs if prim.multiple_results else (outputs,)):
        out._origin = origin


def _attach(out, node, index) -> None:
    if out.dtype.kind in "fc":
        out.requires_grad = True
        out._node = node
        out._index = index
    else:
        out._origin = node.prim.name
