"""The graph's own ops (input, constant, read, assign, send, recv, accumulate, take, save,
restore): one handler each, shared
by the straight-line program and the threaded scheduler (lib/capture/executor.py).

`handler(node, graph)` checks the node's attrs once, when a program is built, and returns
`run(args, inputs) -> outputs` on device buffers. The checks matter for graphs loaded from
disk: an attr is used only as the typed value it must be (an int index, a Variable), never as
text, so nothing a file says can become code.
"""
from __future__ import annotations

from .. import cpu_memory
from ..errors import CaptureError
from ..tensor import new_tensor
from ..devices import Device
from ..ops.indexing import numpy_key


def handler(node, graph):
    """run(args, inputs) -> tuple of output buffers, for a graph op node."""
    make = _HANDLERS.get(node.op)
    if make is None:  # an op a higher layer runs (save/restore: rill.distributed's checkpoints)
        raise CaptureError(f"a {node.op} node runs through {_LATER.get(node.op, 'a module')}, "
                           "which is not imported: import it before running this graph",
                           op=node.op)
    return make(node, graph)


def register_handler(op: str, make) -> None:
    """make(node, graph) -> run(args, inputs) for graph op `op`: how a layer above capture
    (rill.distributed's checkpoints) runs the graph ops it adds."""
    _HANDLERS[op] = make


def _input(node, graph):
    index = node.attrs.get("index")
    if type(index) is not int or index < 0:
        raise CaptureError(f"an input node's index must be an int >= 0, got {index!r}",
                           op="input")
    return lambda args, inputs: (args[index],)


def _constant(node, graph):
    v = node.outputs[0]
    buffer = v.device.backend.from_host(node.attrs["value"], v.device)
    return lambda args, inputs: (buffer,)


def _read(node, graph):
    var = variable_of(node, graph)
    if var.kind == "value":
        return lambda args, inputs: (var.owner._data,)
    return lambda args, inputs: (read_grad(var),)


def _assign(node, graph):
    var = variable_of(node, graph)

    def run(args, inputs):
        assign(var, inputs[0])
        return ()
    return run


def _send(node, graph):
    # A partition runs with `args` that carry the step's transport (lib/capture/partitioned.py).
    key, dest, source = _pair(node, "to")
    if _prefix(node, 2):  # only the rows before the count travel (lib/ops/prefix.py)
        from ..kernels.numpy.prefix import prefix_length

        def run(args, inputs):
            x, count = inputs
            n = prefix_length(count, source, x.shape[0])
            args.transport.send(key, x[:n], source, dest)
            return ()
    elif node.inputs:
        def run(args, inputs):
            args.transport.send(key, inputs[0], source, dest)
            return ()
    else:  # a go-ahead: the node it is ordered after has run
        def run(args, inputs):
            args.transport.send(key, None, source, dest)
            return ()
    return run


def _recv(node, graph):
    key, source, dest = _pair(node, "from")
    if _prefix(node, 0):  # the rows that did not travel are zero, to the static shape
        from ..kernels.numpy.prefix import padded
        shape = node.outputs[0].shape

        def run(args, inputs):
            got = args.transport.recv(key, source, dest)
            if got.shape == shape:
                return (got,)
            return (dest.backend.from_host(padded(dest.backend.to_host(got), shape), dest),)
        return run
    if node.outputs:
        return lambda args, inputs: (args.transport.recv(key, source, dest),)

    def run(args, inputs):
        args.transport.recv(key, source, dest)
        return ()
    return run


def _pair(node, other: str):
    """(key, the other device, this device) of a send ("to") or recv ("from"), checked."""
    key, there = node.attrs.get("key"), node.attrs.get(other)
    if type(key) is not str or not isinstance(there, Device):
        raise CaptureError(f"a {node.op} node needs a str key and a device '{other}', got "
                           f"{key!r} and {there!r}", op=node.op)
    return key, there, node.device


def _prefix(node, inputs: int) -> bool:
    """Whether a send (two inputs: x, count) or recv (one output) is a prefix pair's."""
    flag = node.attrs.get("prefix", False)
    if flag is False:
        return False
    if flag is not True or len(node.inputs) != inputs or \
            (node.op == "recv" and (len(node.outputs) != 1 or not node.outputs[0].shape)):
        raise CaptureError(f"a prefix {node.op} needs prefix=True and "
                           f"{'inputs (x, count)' if inputs else 'one output with rows'}, got "
                           f"prefix={flag!r}, {len(node.inputs)} inputs and "
                           f"{len(node.outputs)} outputs", op=node.op)
    return True


def _accumulate(node, graph):
    # A parameter server's step args carry its accumulators (lib/distributed/graphs/).
    name = _name(node)

    def run(args, inputs):
        args.contribution.add(name, inputs[0])
        return ()
    return run


def _take(node, graph):
    name = _name(node)
    return lambda args, inputs: (args.accumulators.mean(name),)


def _name(node) -> str:
    name = node.attrs.get("name")
    if type(name) is not str:
        raise CaptureError(f"a {node.op} node needs a str name, got {name!r}", op=node.op)
    return name


def _add_rows(node, graph):
    # A parameter server's sparse update (lib/distributed/graphs/replicas.py): the variable's
    # buffer is that task's own, so the rows are added where they are, as index_add would
    # into a copy (the same np.add.at, so the same sums).
    import numpy as np
    var = variable_of(node, graph)
    key = node.attrs.get("key")

    def run(args, inputs):
        owner = var.owner
        buffer = owner._data
        if not buffer.flags.writeable:
            buffer = owner._data = buffer.copy()
        np.add.at(buffer, numpy_key(key, inputs[1:]), inputs[0])
        owner._version += 1
        return ()
    return run


_HANDLERS = {"input": _input, "constant": _constant, "read": _read, "assign": _assign,
             "send": _send, "recv": _recv, "accumulate": _accumulate, "take": _take,
             "add_rows": _add_rows}
# Graph ops whose handlers a layer above registers (register_handler), and which module.
_LATER = {"save": "rill.distributed (its checkpoints)",
          "restore": "rill.distributed (its checkpoints)"}


def variable_of(node, graph):
    """The Variable a read or assign node names, checked to exist."""
    index = node.attrs.get("var")
    if type(index) is not int or not 0 <= index < len(graph.variables):
        raise CaptureError(f"a {node.op} node names variable {index!r}; the graph has "
                           f"{len(graph.variables)}", op=node.op)
    return graph.variables[index]


def read_grad(var):
    grad = var.owner.grad
    if grad is None:
        raise CaptureError(f"the graph reads {var.name}.grad, which is None", op="read")
    if not hasattr(grad, "_data"):
        grad = grad.to_dense()
    return grad._data


def assign(var, buffer) -> None:
    owner = var.owner
    if var.kind == "value":
        replaced, owner._data = owner._data, buffer
        owner._version += 1
        cpu_memory.give(replaced)  # kept for a later result only if nothing else holds it
        del replaced
    else:
        old, owner.grad = owner.grad, new_tensor(buffer, var.dtype, var.device)
        replaced, old = getattr(old, "_data", None), None  # the last call's gradient...
        cpu_memory.give(replaced)  # ... kept for the next one's if nothing else holds it
        del replaced
