"""Running a graph through `bind`, op by op: the graph as ordinary rill code again.

The compiled Program is the fast way to run a graph; this is the general one. Because every
node re-enters `bind`, a stored graph can be traced into another graph, differentiated on
the tape (variables are read by reference, so gradients reach the real parameters), or run
wherever its ops have kernels.
"""
from __future__ import annotations

from ..eager.bind import bind
from ..eager.context import detached_value, no_grad, set_grad
from ..ops.promotion import KNOWN_CONSTANTS
from ..tensor import new_tensor
from ..ops.methods import assign


def evaluate(graph, inputs):
    """The graph's outputs as Tensors, for input Tensors by position."""
    env: dict = {}
    for node in graph.nodes:
        op = node.op
        if op == "input":
            env[node.outputs[0]] = inputs[node.attrs["index"]]
        elif op == "constant":
            v = node.outputs[0]
            t = new_tensor(v.device.backend.from_host(node.attrs["value"], v.device), v.dtype,
                           v.device)
            KNOWN_CONSTANTS[id(t)] = t
            env[v] = t
        elif op == "read":
            var = graph.variables[node.attrs["var"]]
            env[node.outputs[0]] = var.owner if var.kind == "value" else _dense(var.owner.grad)
        elif op == "assign":
            var = graph.variables[node.attrs["var"]]
            value = env[node.inputs[0]]
            if var.kind == "value":
                # State takes the value, not its history, as the compiled program does: a
                # buffer updated beside differentiable results (batch norm's running stats
                # out of a branch) must not become a non-leaf that requires grad.
                with no_grad():
                    assign(var.owner, detached_value(value))
            else:
                set_grad(var.owner, detached_value(value))
        else:
            outs = bind(node.primitive, *[env[v] for v in node.inputs], **node.attrs)
            if not node.primitive.multiple_results:
                outs = (outs,)
            for v, t in zip(node.outputs, outs):
                env[v] = t
    return [env[v] for v in graph.outputs]


def _dense(grad):
    return grad.to_dense() if hasattr(grad, "to_dense") else grad
