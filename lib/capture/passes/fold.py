"""Constant folding: run at capture time what would compute the same thing on every call.

Lifted Python numbers become `constant` nodes, and traced code does arithmetic on them (the
backward pass of `x ** 2` computes `2.0 - 1.0` and `2.0 == 0.0`; `backward()` seeds with a
`full`). A pure primitive whose inputs are all constants — or a creation op with no inputs
(full, arange, linspace, eye) — has the same result every time, so it is computed once here
and replaced by `constant` nodes; later passes then see plain constants (x * 1.0 where the
1.0 came out of a fold).

The result must be bit-identical to what the compiled Program would produce, so the node's
own CPU kernel runs, and its result is brought to the value's spec exactly as the executor
does (a NumPy array; bfloat16 rounded). Not folded:
- reads (variables are state: their values change between calls), random draws and nodes
  with control edges or subgraphs (impure or ordered);
- `empty` (its contents are unspecified; baking one garbage array in helps no one);
- nodes on non-CPU devices (their kernels return device buffers; constants are host arrays);
- results larger than FOLD_MAX_ELEMENTS (a broadcast of a scalar is cheap to run but would
  make the graph, and a saved graph file, large);
- a node whose kernel raises, or returns something off its spec: the error belongs to the
  run, where it is reported with the user's line.
"""
from __future__ import annotations

import math

import numpy as np

from ...dtypes import bfloat16, round_to_bfloat16
from ...ops.primitive import PRIMITIVES
from ..ir import Graph
from .rewrite import Rewrite, constant_of, is_pure_primitive

FOLD_MAX_ELEMENTS = 1 << 16
NEVER_FOLD = frozenset({"empty"})


def fold(graph: Graph) -> Graph:
    rw = Rewrite(graph)
    for node in graph.nodes:
        inputs = [rw.get(v) for v in node.inputs]
        results = _evaluate(node, inputs) if _foldable(node, inputs) else None
        if results is None:
            rw.copy(node, inputs)
            continue
        rw.replace(node, [rw.add("constant", (), {"value": r}, [(v.shape, v.dtype, v.device)],
                                 node.device, node.source).outputs[0]
                          for v, r in zip(node.outputs, results)])
    return rw.finish()


def _foldable(node, inputs) -> bool:
    return (is_pure_primitive(node) and node.op in PRIMITIVES and node.op not in NEVER_FOLD
            and _on_cpu(node) and all(v.node.op == "constant" and _on_cpu(v) for v in inputs)
            and all(_on_cpu(v) and math.prod(v.shape) <= FOLD_MAX_ELEMENTS
                    for v in node.outputs)
            and node.primitive.kernels.get("cpu") is not None)


def _on_cpu(x) -> bool:
    return getattr(x.device, "kind", None) == "cpu"


def _evaluate(node, inputs):
    """The node's outputs as host arrays, or None if it should be left to run."""
    try:
        with np.errstate(all="ignore"):
            out = node.primitive.kernels["cpu"](*[constant_of(v) for v in inputs], **node.attrs)
    except Exception:
        return None
    outs = out if node.primitive.multiple_results else (out,)
    if len(outs) != len(node.outputs):
        return None
    results = []
    for v, o in zip(node.outputs, outs):
        o = np.asarray(o)
        if v.dtype is bfloat16:
            o = round_to_bfloat16(o)
        if o.shape != v.shape or o.dtype != v.dtype.storage:
            return None
        if o.base is not None:
            o = o.copy()  # a view would keep its (maybe large) base alive in the graph
        results.append(o)
    return results
