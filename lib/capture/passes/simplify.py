"""Algebraic simplification: remove nodes whose result is one of their inputs, bit for bit.

Traced code is full of identities nobody wrote on purpose: `x * 1.0` and `x / 1.0` from
generic formulas (a scale that happens to be 1, a mean over one element), `.T.T`,
`reshape(reshape(x))` from flatten/unflatten, casts to the dtype a tensor already has,
`-(-x)` from gradients of negations, `where` on a condition a fold made constant.

Only exact rewrites: the simplified graph must return the same bits as the original for
every input, NaN, infinities and signed zeros included. Hence
- x * 1, 1 * x, x / 1 -> x (exact for every x);
- x - 0 -> x for integers, and for floats only when the 0 is +0.0 (x - (+0.0) is x even for
  x = -0.0);
- x + 0, 0 + x -> x for integers, and for floats only when the 0 is -0.0: -0.0 + (+0.0) is
  +0.0, so adding +0.0 is not an identity;
- transpose of transpose -> one transpose (none if the axes cancel); reshape of reshape ->
  one reshape; a reshape to the same shape, a transpose with identity axes, a cast to the
  same dtype, neg(neg(x)) -> x; where(all True, a, b) -> a, where(all False, a, b) -> b;
  check(all True, x) -> x (the dataflow assert of a condition known to hold); a switch (cond)
  on a constant index -> the nodes of the branch it always takes.
The constant must have x's dtype, and the surviving value must have exactly the removed
one's spec (shape, dtype, device): `x * ones(3, 4)` broadcasts x up, and is kept. A returned
value is not simplified into an argument, a variable or another returned value (see
Rewrite.may_replace): `return x * 1.0` must not hand the caller back its own tensor.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph
from .rewrite import Rewrite, constant_of, same_spec


def simplify(graph: Graph) -> Graph:
    rw = Rewrite(graph)
    for node in graph.nodes:
        ins = [rw.get(v) for v in node.inputs]
        if node.op == "switch" and _inline_switch(node, ins, rw):
            continue
        rule = RULES.get(node.op)
        if rule is not None and len(node.outputs) == 1 and not node.after \
                and not node.subgraphs:
            out = node.outputs[0]
            found = rule(node, ins, rw)
            if found is not None and same_spec(found, out) and rw.may_replace(node, [found]):
                rw.replace(node, [found])
                continue
        rw.copy(node, ins)
    return rw.finish()


def _inline_switch(node, ins, rw) -> bool:
    """A switch whose index is a constant in range becomes a copy of that branch's nodes."""
    index = _host(ins[0])
    branches = node.attrs["branches"]
    if index is None or node.after or not 0 <= int(index) < len(branches):
        return False
    branch = branches[int(index)]
    mapping = {v: ins[1 + v.node.attrs["index"]] for v in branch.inputs}
    for inner in branch.nodes:
        if inner.op != "input":
            new = rw.add(inner.op, [mapping[v] for v in inner.inputs], inner.attrs,
                         [(v.shape, v.dtype, v.device) for v in inner.outputs], inner.device,
                         inner.source)
            mapping.update(zip(inner.outputs, new.outputs))
    values = [mapping[v] for v in branch.outputs]
    if not all(same_spec(a, b) for a, b in zip(values, node.outputs)) or \
            not rw.may_replace(node, values):
        return False  # the copied nodes are left for dce
    rw.replace(node, values)
    return True


# ---- facts about constants -----------------------------------------------------------------

def _host(v):
    """A host array with every element of v, if v is a constant (a `full` counts: one element
    stands for all of them); else None."""
    array = constant_of(v)
    if array is None and v.node.op == "full" and not v.node.inputs:
        array = np.full((), v.node.attrs["value"], dtype=v.dtype.storage)
    return array


def _ones(c, x) -> bool:
    a = _host(c)
    return a is not None and c.dtype is x.dtype and bool(np.all(a == 1))


def _zeros(c, x, float_sign: bool) -> bool:
    """c is all zeros of x's dtype; for floats, zeros whose sign bit is `float_sign`."""
    a = _host(c)
    if a is None or c.dtype is not x.dtype or not np.all(a == 0):
        return False
    return x.dtype.kind in "iub" or bool(np.all(np.signbit(a) == float_sign))


def _producer(v, op):
    return v.node if v.node.op == op else None


# ---- the rules: (old node, its inputs as rewritten, rw) -> a value to use instead, or None --

def _multiply(node, ins, rw):
    x, y = ins
    return x if _ones(y, x) else y if _ones(x, y) else None


def _divide(node, ins, rw):
    x, y = ins
    return x if _ones(y, x) else None


def _add(node, ins, rw):
    x, y = ins
    return x if _zeros(y, x, True) else y if _zeros(x, y, True) else None


def _subtract(node, ins, rw):
    x, y = ins
    return x if _zeros(y, x, False) else None


def _neg(node, ins, rw):
    inner = _producer(ins[0], "neg")
    return inner.inputs[0] if inner is not None else None


def _cast(node, ins, rw):
    return ins[0]  # kept only if the dtype is already x's (the spec check)


def _where(node, ins, rw):
    cond = _host(ins[0])
    if cond is None or ins[0].dtype.kind != "b":
        return None
    return ins[1] if np.all(cond) else ins[2] if not np.any(cond) else None


def _check(node, ins, rw):
    ok = _host(ins[0])
    return ins[1] if ok is not None and ins[0].dtype.kind == "b" and np.all(ok) else None


def _transpose(node, ins, rw):
    x, axes = ins[0], tuple(node.attrs["axes"])
    inner = _producer(x, "transpose")
    if inner is not None:
        x, axes = inner.inputs[0], tuple(inner.attrs["axes"][a] for a in axes)
    if axes == tuple(range(len(axes))):
        return x
    return _emit(rw, node, x, {"axes": axes}) if inner is not None else None


def _reshape(node, ins, rw):
    x, out = ins[0], node.outputs[0]
    inner = _producer(x, "reshape")
    if inner is not None:
        x = inner.inputs[0]
    if x.shape == out.shape:
        return x
    return _emit(rw, node, x, {"shape": out.shape}) if inner is not None else None


def _emit(rw, node, x, attrs):
    """One node replacing a chain of two: same op, new input and attrs, the old spec."""
    out = node.outputs[0]
    if x.dtype is not out.dtype or x.device is not out.device:
        return None
    return rw.add(node.op, [x], attrs, [(out.shape, out.dtype, out.device)], node.device,
                  node.source).outputs[0]


RULES = {"multiply": _multiply, "divide": _divide, "add": _add, "subtract": _subtract,
         "neg": _neg, "cast": _cast, "where": _where, "check": _check, "transpose": _transpose,
         "reshape": _reshape}
