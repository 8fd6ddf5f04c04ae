"""In-place results: an elementwise node writes into an input buffer that no one else sees.

A captured step makes many results of the same shape as an intermediate that dies at the
node: a scaled gradient added to its parameter, a ReLU mask applied, a chain of activations.
Written into that intermediate's buffer (`np.add(a, b, out=a)`, element by element: the same
bits), the result needs no new buffer, and the pass stays in the cache lines it reads.

Whether anyone else can see the buffer is decided when the node runs, by CPython's reference
count, as NumPy decides which temporaries of `a + b + c` it may reuse: the program's local
variable is the only holder exactly when the count says so. An alias another node returned,
a NumPy view, a tape's saved value: each holds a reference, and the node then allocates as
before. The buffer must also own its memory (no view of another array), be writable and
C-ordered, as must the node's other inputs (a ufunc's fresh result follows its inputs'
memory order; the buffer's order must be that one, see DESIGN.md).

Statically (`donor`), the node is a CPU ufunc node (kernels/numpy/fused.py:_ufunc_of) whose
result is at least MIN_BYTES (below, NumPy's cached small allocations cost less than `out=`)
and the input, made by another node of the graph, dies at the node with the result's shape
and dtype. Graph inputs, constants and variables' buffers (`read`) are never donated: they
belong to the caller, the graph and the model, and a parameter written in place would stay
changed if a later node of the step failed.

The expected count is measured once, through a call of the same shape as the generated
code's `exclusive(t3, ...)`, with tracing off (a tracer that reads frames' locals adds
references); a self-check that a fresh array passes and a shared one does not turns
donation off where the interpreter counts otherwise.
"""
from __future__ import annotations

import sys

import numpy as np

from ..dtypes import bfloat16
from .ir import GRAPH_OPS


def _references_seen_by(buffer) -> int:
    return sys.getrefcount(buffer)


def _references_of_one_local() -> int:
    """The count `exclusive` sees for an array that one local variable of its caller holds,
    measured through a call of the same shape: what the count includes (the caller's
    variable, the callee's parameter, getrefcount's argument) differs across versions."""
    a = np.empty(1)
    return _references_seen_by(a)


def _calibrated() -> int | None:
    trace, profile = sys.gettrace(), sys.getprofile()
    sys.settrace(None)
    sys.setprofile(None)
    try:
        one = _references_of_one_local()

        def fresh():
            a = np.empty(1)
            return exclusive(a, one)

        def shared():
            a = np.empty(1)
            b = a  # noqa: F841 - a second holder
            return exclusive(a, one)
        return one if fresh() and not shared() else None
    finally:
        sys.settrace(trace)
        sys.setprofile(profile)


def donor(graph, position: int, last_use: dict) -> int | None:
    """The index of the input of the node at `position` of graph.nodes whose buffer it may
    write its result into, if the count allows when it runs; or None."""
    from rill.kernels.numpy.fused import _nbytes, _ufunc_of
    from .passes.memory import MIN_BYTES
    node = graph.nodes[position]
    if ONE_LOCAL is None or node.op in GRAPH_OPS or node.device is None or \
            node.device.kind != "cpu" or len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    if out.dtype is bfloat16 or out.shape == () or _nbytes(out) < MIN_BYTES or \
            _ufunc_of(node) is None:
        return None
    for j, v in enumerate(node.inputs):
        if (v.shape, v.dtype) == (out.shape, out.dtype) and last_use.get(v) == position and \
                v not in graph.outputs and v.node.op not in GRAPH_OPS:
            return j
    return None


def exclusive(buffer, references: int, *others) -> bool:
    """Whether the program may write into `buffer`: an array owning its memory that nothing
    but one local variable of the caller references (`references`: ONE_LOCAL), writable and
    C-ordered, and the node's other inputs C-ordered. The generated code calls it as
    exclusive(t3, E, t4), t3 one of its local variables."""
    return (type(buffer) is np.ndarray and sys.getrefcount(buffer) == references and
            buffer.base is None and buffer.flags.writeable and buffer.flags.c_contiguous and
            all(o.flags.c_contiguous for o in others if type(o) is np.ndarray))


ONE_LOCAL = _calibrated()  # None: this interpreter counts otherwise, and nothing is donated


# ---- rows of a variable, updated in its own buffer ---------------------------------------------
#
# An optimizer's update of a table's rows is index_add(read(v), rows, idx) assigned back to v.
# Run as written, it copies the table every step (a 1 GiB embedding to change 32 rows). When
# the step's only use of the table after the update is that assign, the rows can be added in
# the variable's buffer, if at that moment nothing but the variable and the program's local
# hold it (a view, a tensor saved for backward, a second read still alive: each adds a
# reference, and the node copies as before). What the step reads from the table it reads
# before (the nodes reading it all come earlier), so the graph's meaning is unchanged.

def row_update(graph, position: int, last_use: dict) -> bool:
    """Whether the node at `position` is an index_add of a variable's value whose result only
    that variable's assign takes, with no read of the variable after it."""
    node = graph.nodes[position]
    if ONE_LOCAL is None or node.op != "index_add" or node.device is None or \
            node.device.kind != "cpu" or node.outputs[0].dtype is bfloat16:
        return False
    table, out = node.inputs[0], node.outputs[0]
    if table.node.op != "read" or last_use.get(table) != position or out in graph.outputs:
        return False
    var = table.node.attrs.get("var")
    users = [n for n in graph.nodes[position + 1:] if out in n.inputs]
    if len(users) != 1 or users[0].op != "assign" or users[0].attrs.get("var") != var:
        return False
    return not any(n.op == "read" and n.attrs.get("var") == var
                   for n in graph.nodes[position + 1:])
