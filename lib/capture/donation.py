"""In-place results: an elementwise node writes into an input buffer that no one else sees.

A captured step makes many results of the same shape as an input that dies at the node: a
gradient scaled by the learning rate, a ReLU mask applied, a parameter's update. Written into
that input's buffer (`np.add(a, b, out=a)`, element by element: the same bits), the result
needs no new buffer, and the pass stays in the cache lines it reads.

Whether anyone else can see the buffer is decided when the node runs, by CPython's reference
count, as NumPy decides which temporaries of `a + b + c` it may reuse: the program's local
variable is the only holder (plus the variable, for a parameter's own buffer) exactly when
the count says so. A snapshot (`detach()`), a NumPy view (`p.numpy()`), a graph input, a
constant, an alias another node returned, a tape's saved value: each holds a reference, and
the node then allocates as before. The buffer must also own its memory (no view of another
array), be writable and C-ordered, as must the node's other inputs (a ufunc's fresh result
follows its inputs' memory order; the buffer's order must be that one, see DESIGN.md).

Statically (`donor`), the node is a CPU ufunc node (kernels/numpy/fused.py:_ufunc_of) whose
result is at least MIN_BYTES (below, NumPy's cached small allocations cost less than `out=`)
and the input dies at the node with the result's shape and dtype. An input `read` from a
parameter-like variable (kind "value") qualifies only when the result is assigned back to
that variable with no read or assign of it in between: then holders of the variable's
Tensor see the new value either way, and holders of the old buffer are counted. (As with
PyTorch's in-place optimizer steps, a parameter updated by two threads at once may then be
read mid-update by one of them.)
"""
from __future__ import annotations

import sys

import numpy as np

from ..dtypes import bfloat16
from .ir import GRAPH_OPS


def _references_seen_by(buffer) -> int:
    return sys.getrefcount(buffer)


def _references_of_one_local() -> int:
    """The count `exclusive` sees for an array that one local variable of its caller holds:
    measured through a call of the same shape, since what the count includes (the caller's
    variable, the callee's parameter, getrefcount's own argument) differs across CPython
    versions."""
    a = np.empty(1)
    return _references_seen_by(a)


ONE_LOCAL = _references_of_one_local()


def donor(graph, position: int, last_use: dict):
    """(input index, references expected when only the program holds it) for the node at
    `position` of graph.nodes, or None."""
    from rill.kernels.numpy.fused import _ufunc_of
    from .passes.memory import MIN_BYTES
    node = graph.nodes[position]
    if node.op in GRAPH_OPS or node.device is None or node.device.kind != "cpu" or \
            len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    if out.dtype is bfloat16 or out.shape == () or _nbytes(out) < MIN_BYTES or \
            _ufunc_of(node) is None:
        return None
    variable_donor = None
    for j, v in enumerate(node.inputs):
        if (v.shape, v.dtype) != (out.shape, out.dtype) or last_use.get(v) != position or \
                v in graph.outputs:
            continue
        producer = v.node
        if producer.op in ("input", "constant"):
            continue  # held by the caller's arguments, or by the graph
        if producer.op != "read":
            return j, ONE_LOCAL
        if variable_donor is None and _assigned_back(graph, position, producer):
            variable_donor = j
    return None if variable_donor is None else (variable_donor, ONE_LOCAL + 1)


def _assigned_back(graph, position: int, read) -> bool:
    """Whether the node's result is assigned to the variable `read` read (kind "value"), with
    no read or assign of that variable between the node and that assign."""
    var = read.attrs.get("var")
    if graph.variables[var].kind != "value":
        return False  # a .grad's old Tensor may be held by the user: its buffer stays
    result = graph.nodes[position].outputs[0]
    for node in graph.nodes[position + 1:]:
        if node.op in ("read", "assign") and node.attrs.get("var") == var:
            return node.op == "assign" and node.inputs[0] is result
    return False


def _nbytes(v) -> int:
    n = np.dtype(v.dtype.storage).itemsize
    for s in v.shape:
        n *= s
    return n


def exclusive(buffer, references: int, *others) -> bool:
    """Whether the program may write into `buffer`: an array owning its memory that nothing
    but the expected holders reference (`references`: ONE_LOCAL, or ONE_LOCAL + 1 with the
    variable), writable and C-ordered, and the node's other inputs C-ordered. The generated
    code calls it as exclusive(t3, E, t4), t3 one of its local variables."""
    return (type(buffer) is np.ndarray and sys.getrefcount(buffer) == references and
            buffer.base is None and buffer.flags.writeable and buffer.flags.c_contiguous and
            all(o.flags.c_contiguous for o in others if type(o) is np.ndarray))
