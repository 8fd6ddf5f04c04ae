"""The capture interpreter: `bind` under a Tracer appends a node and returns a graph value.

A graph value is an ordinary Tensor whose buffer is a `Value` of the graph being built, so
user code, modules, optimizers and the tape run unchanged. Tensors from outside the trace
that reach an op become graph state, by reference:
- a constant made during the trace (a lifted Python scalar, `rill.tensor(...)`) is baked in;
- any other tensor (a parameter, a buffer, an optimizer slot, a captured global) becomes a
  Variable: a `read` node at its first use, and, if the trace changed it in place, one
  `assign` of its final value, ordered after the reads. Its `.grad` is a variable of its own.
When the trace ends, every tensor the trace changed gets its own buffer and grad back; the
graph's assigns make the same changes each time it runs.
"""
from __future__ import annotations

import math

from ..errors import user_location, user_stacklevel, CaptureError
from ..tensor import Tensor, new_tensor
from ..devices import requested
from ..ops.promotion import KNOWN_CONSTANTS
from .ir import GRAPH_OPS, Constraint, Graph, Value
from ..ops.sparse_rows import SparseRows


_SAVED_SLOTS = ("_data", "_version", "requires_grad", "_node", "_index")


class Tracer:
    capturing = True
    reruns_python = False

    def __init__(self, name: str = "graph", names: dict | None = None):
        self.graph = Graph(name=name)
        self.own: set = set()           # nodes of this graph (to tell its values from others)
        self.names = names or {}        # id(tensor) -> a readable variable name
        self.vars: dict = {}            # (id(owner), kind) -> variable index
        self.reads: dict = {}           # variable index -> its read node
        self.saved: dict = {}           # id(owner) -> (owner, slots before the trace)
        self.constants: dict = {}       # id(tensor) -> (tensor, its constant Value)
        self.made_here: dict = {}       # id(tensor) -> tensor made by rill.tensor() in the trace
        self.grads: dict = {}           # id(owner) -> [owner, grad before the trace]
        self.grad_guards: list = []     # (owner, grad was None) that the trace relied on
        self.cleared: list = []         # owners whose .grad the function set to None
        self.changed_at: dict = {}      # id(owner) -> the user's line that last changed it
        self.arguments: dict = {}       # id(traced input) -> (name, has history): grad args

    # ---- the interpreter -------------------------------------------------------------------

    def apply(self, prim, args, attrs, avals, device):
        inputs = [self.value_of(a) for a in args]
        specs = avals if prim.multiple_results else (avals,)
        node = self._add(prim.name, inputs, attrs, specs, device)
        outs = tuple(new_tensor(v, v.dtype, device) for v in node.outputs)
        return outs if prim.multiple_results else outs[0]

    def _add(self, op, inputs, attrs, specs, device, after=()):
        # Graph ops sit where their argument or variable is; the constraint comes first, as
        # a colocation may read a variable (a node before this one).
        constraint = self._constraint() if op not in GRAPH_OPS else None
        node = self.graph.add(op, inputs, attrs, specs, device, user_location(), after)
        node.constraint = constraint
        self.own.add(node)
        return node

    def _constraint(self):
        """The device scope and colocation in force, as the node's placement constraint
        (None when there is none: the common case, one tuple lookup)."""
        scope, colocate = requested()
        if scope is None and colocate is None:
            return None
        return Constraint(scope.device if scope else None, bool(scope and scope.any_index),
                          self.value_of(colocate.colocate) if colocate else None)

    def value_of(self, t: Tensor) -> Value:
        """The graph value standing for tensor t at this point of the trace."""
        data = t._data
        if type(data) is Value and data.node in self.own:
            return data
        key = id(t)
        hit = self.constants.get(key)
        if hit is not None:
            return hit[1]
        if KNOWN_CONSTANTS.get(key) is t or key in self.made_here:
            host = t.device.backend.to_host(data)
            v = self._add("constant", (), {"value": host}, ((t.shape, t.dtype),),
                          t.device).outputs[0]
            self.constants[key] = (t, v)
            return v
        return self.outside(t)

    def outside(self, t: Tensor) -> Value:
        """A tensor that is neither this graph's value nor a constant: graph state."""
        if type(t._data) is Value:
            from .escape import error
            raise error(t._data)
        if t.requires_grad and t._node is not None:
            raise CaptureError(
                "the captured function reads a tensor computed outside it that carries autodiff "
                "history (it requires grad and is not a leaf). Its gradient would have to flow "
                "through code that ran outside the graph, and every call would read this same "
                "tensor. Either pass it as an argument and call backward outside the captured "
                "function (the call is then differentiated through, into the code that made "
                "it), or "
                "compute it inside the captured function from tensors without history",
                op="capture")
        return self.read(t, "value")

    def read(self, owner: Tensor, kind: str) -> Value:
        index = self._variable(owner, kind)
        node = self.reads.get(index)
        if node is None:
            var = self.graph.variables[index]
            node = self.reads[index] = self._add("read", (), {"var": index},
                                                 ((var.shape, var.dtype),), var.device)
        return node.outputs[0]

    def _variable(self, owner: Tensor, kind: str) -> int:
        key = (id(owner), kind)
        index = self.vars.get(key)
        if index is None:
            from .ir import Variable
            index = self.vars[key] = len(self.graph.variables)
            target = owner if kind == "value" else owner.grad
            name = self.names.get(id(owner)) or f"v{index}"
            self.graph.variables.append(Variable(owner, kind, name, target.shape, target.dtype,
                                                 target.device))
            self.saved.setdefault(id(owner), (owner, None))
        return index

    def note_constant(self, t: Tensor) -> None:
        """rill.tensor() ran during the trace: t is part of the program, not state."""
        self.made_here[id(t)] = t

    # ---- state -----------------------------------------------------------------------------

    def before_update(self, t: Tensor) -> None:
        """update_in_place is about to give t a graph value: remember what to put back."""
        self.changed_at[id(t)] = user_location()
        if type(t._data) is Value and t._data.node in self.own and id(t) not in self.saved:
            return  # made during the trace: its new value is just the next SSA value
        owner, slots = self.saved.get(id(t), (t, None))
        if slots is None:
            if type(t._data) is Value and t._data.node not in self.own:
                self.value_of(t)  # raises: a value of another graph
            self._variable(t, "value")
            self.saved[id(t)] = (t, tuple(getattr(t, s) for s in _SAVED_SLOTS))

    def set_grad(self, owner: Tensor, grad) -> None:
        """owner.grad = grad, seen by the trace (zero_grad, backward)."""
        if id(owner) in self.arguments:
            raise self._argument_reached(owner)
        if id(owner) not in self.grads:
            self.grads[id(owner)] = [owner, owner.grad]
        self.changed_at[(id(owner), "grad")] = user_location()
        owner.grad = grad

    def current_grad(self, owner: Tensor):
        """owner.grad as the trace sees it, for backward to accumulate into."""
        if id(owner) in self.arguments:
            raise self._argument_reached(owner)
        if id(owner) in self.grads:
            return owner.grad
        self.grads[id(owner)] = [owner, owner.grad]
        if owner.grad is None:
            self.grad_guards.append((owner, True))
            return None
        self.grad_guards.append((owner, False))
        grad = owner.grad
        return new_tensor(self.read(owner, "grad"), grad.dtype, grad.device)

    def _argument_reached(self, traced: Tensor) -> CaptureError:
        """backward inside the trace reached a tensor argument that requires grad: the
        graph stands for it with an input, a leaf, so neither the argument's .grad nor the
        code that computed it (its history) would ever get a gradient."""
        name, taped = self.arguments[id(traced)]
        if taped:
            return CaptureError(
                f"argument {name} carries autodiff history (it was computed outside the "
                "captured function from tensors that require grad) and backward inside the "
                "function reaches it. A graph cannot send gradients back into code that ran "
                "outside it: what computed it (a policy's log-probabilities, say) would never "
                f"get a gradient. Compute {name} inside the captured function from tensors "
                "without history (pass those, e.g. the observations and actions, as "
                "arguments), or run this function eagerly, without capture",
                op="backward")
        return CaptureError(
            f"argument {name} requires grad and backward inside the captured function reaches "
            "it: the graph would set the .grad of a stand-in made for the trace, never of the "
            "tensor you pass on each call. Read the tensor from outside instead (a global, a "
            "closure variable or an attribute, as parameters are): the graph then accumulates "
            "its .grad as eager code does",
            op="backward")

    # ---- ending ----------------------------------------------------------------------------

    def finish(self) -> None:
        """Add the assigns of the final values, then give every tensor its own state back."""
        graph = self.graph
        final: list = []
        for owner, slots in list(self.saved.values()):
            if slots is not None and owner._data is not slots[0]:
                final.append((self.vars[(id(owner), "value")], owner))
        for owner, before in list(self.grads.values()):
            grad = owner.grad
            if grad is before:
                continue
            if isinstance(grad, SparseRows) and owner.device.task is not None:
                # Another task's table: the step used its rows there; a dense .grad of it
                # would cost table-sized work on its ps every step. Not kept (None after).
                self.cleared.append(owner)
                continue
            if isinstance(grad, SparseRows):
                # A .grad kept past the step is a graph variable, of the table's shape.
                _say_dense_grad_kept(owner, self.changed_at.get((id(owner), "grad")))
                grad = grad.to_dense()
            if grad is None:  # zero_grad() and no new gradient (a frozen parameter)
                self.cleared.append(owner)
                continue
            index = self._variable(owner, "grad")
            final.append((index, grad))
        for index, tensor in final:
            var = graph.variables[index]
            where = self.changed_at.get(id(var.owner) if var.kind == "value" else
                                        (id(var.owner), "grad"))
            value = self.value_of(tensor)
            read = self.reads.get(index)
            if read is not None and value is read.outputs[0]:
                continue
            if (tuple(value.shape), value.dtype) != (var.shape, var.dtype):
                raise CaptureError(f"{var.name} changes from {var.dtype}{list(var.shape)} to "
                                   f"{value.dtype}{list(value.shape)}", op="capture")
            node = self._add("assign", (value,), {"var": index}, (), var.device,
                             after=(read,) if read is not None else ())
            node.source = where or node.source
        self.restore()

    def restore(self) -> None:
        for owner, slots in self.saved.values():
            if slots is not None:
                for name, value in zip(_SAVED_SLOTS, slots):
                    setattr(owner, name, value)
        for owner, before in self.grads.values():
            owner.grad = before


# A sparse gradient kept past a captured step is stored dense, once per call: above this size
# that costs more than the step's own sparse update, and the user is told how to avoid it.
DENSE_GRAD_WARN_BYTES = 16 << 20


def _say_dense_grad_kept(owner, where) -> None:
    nbytes = owner.dtype.itemsize * math.prod(owner.shape)
    if nbytes < DENSE_GRAD_WARN_BYTES:
        return
    import warnings
    from .function import CaptureWarning
    set_at = f" (set at {where})" if where else ""
    warnings.warn(f"the sparse gradient of a {list(owner.shape)} table ({nbytes >> 20} MiB) is "
                  f"kept as its .grad after the captured step{set_at}, so every call writes "
                  "it dense, the whole table. Call the optimizer's zero_grad() at the end of "
                  "the step (after step()) instead of at its start, and the table's update "
                  "stays its looked-up rows", CaptureWarning, stacklevel=user_stacklevel())
