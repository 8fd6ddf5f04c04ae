"""Common-subexpression elimination: compute each distinct value once.

Traced code repeats itself: a module called twice on the same input, the backward pass
recomputing what the forward pass had (`x > 0` of a relu, a broadcast of the same scalar),
constants lifted from the same Python number at every use. Two nodes with the same op, the
same input values, the same device and equal attrs compute the same outputs, so every use of
the later one can take the earlier one's.

"Equal attrs" is strict, because a merge must not change a single bit of any result: floats
compare by their bits (-0.0 is not 0.0, a NaN equals the same NaN), arrays by dtype, shape
and bytes, 1 is not True or 1.0, and objects without a value equality (devices, dtypes,
anything unknown) by identity. Constants merge when their arrays are bit-identical and their
specs equal (bfloat16 and float32 share a storage dtype, so the spec decides).

Never merged: `input` (each is an argument), `read` and `assign` (state: the tracer makes
one read per variable; two would be two points in time), random draws (two draws are two
different samples), nodes with subgraphs, and nodes ordered after different nodes; nor two
nodes that are both returned (the caller gets two tensors, not one object twice: see
Rewrite.may_replace).
"""
from __future__ import annotations

import struct

import numpy as np

from ..ir import Graph
from .rewrite import Rewrite, is_random


def cse(graph: Graph) -> Graph:
    rw = Rewrite(graph)
    seen: dict = {}
    for node in graph.nodes:
        key = _key(node, rw)
        survivor = seen.get(key) if key is not None else None
        if survivor is not None and rw.may_replace(node, survivor.outputs):
            rw.replace(node, survivor.outputs)
            continue
        new = rw.copy(node)
        if key is not None:
            seen.setdefault(key, new)
    return rw.finish()


def _key(node, rw):
    """What makes two nodes the same computation (None: never merge this one)."""
    if node.op in ("input", "read", "assign") or is_random(node) or node.subgraphs:
        return None
    try:
        attrs = freeze(node.attrs)
    except _Unhashable:
        return None
    specs = tuple((v.shape, id(v.dtype), id(v.device)) for v in node.outputs)
    inputs = tuple(id(rw.get(v)) for v in node.inputs)
    after = frozenset(id(a) for a in rw.after(node))
    return node.op, id(node.device), inputs, attrs, specs, after


class _Unhashable(Exception):
    pass


def freeze(x):
    """A hashable key that is equal for two attrs exactly when they mean the same bits."""
    t = type(x)
    if t is float:
        return "float", struct.pack("<d", x)
    if t is complex:
        return "complex", struct.pack("<dd", x.real, x.imag)
    if t in (int, bool, str, bytes) or x is None or x is Ellipsis:
        return t.__name__, x
    if t in (tuple, list):
        return t.__name__, tuple(freeze(i) for i in x)
    if t is dict:
        return "dict", frozenset((freeze(k), freeze(v)) for k, v in x.items())
    if t is slice:
        return "slice", freeze(x.start), freeze(x.stop), freeze(x.step)
    if isinstance(x, np.ndarray):
        if x.dtype.hasobject:
            raise _Unhashable
        return "array", x.dtype.str, x.shape, np.ascontiguousarray(x).tobytes()
    if isinstance(x, np.generic):
        return "scalar", x.dtype.str, x.tobytes()
    # Devices and dtypes are interned; anything else we cannot see into is equal only to
    # itself (the old graph's attrs keep it alive while the pass runs, so ids stay unique).
    return "object", id(x)
