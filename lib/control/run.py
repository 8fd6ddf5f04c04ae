"""Kernels of the control-flow primitives: they run their subgraphs' compiled programs.

They call other kernels only, through `Program`, so one definition serves every device kind
whose buffers support `x[t]`, `stack[t] = y` and an `empty` of the same array module.
"""
from __future__ import annotations

import numpy as np

from ..errors import IndexingError
from .pacing import Pacer
from ..capture.executor import program_of


def _module(buffers):
    for b in buffers:
        if type(b).__module__.startswith("cupy"):
            import cupy
            return cupy
    return np


def _stacks(specs, length, xp, zero: bool = False):
    make = xp.zeros if zero else xp.empty
    return [make((length,) + tuple(v.shape), dtype=v.dtype.storage) for v in specs]


def run_switch(index, *operands, branches, **_):
    k = int(index)
    if not 0 <= k < len(branches):
        raise IndexingError(f"branch index {k} is out of range for {len(branches)} branches",
                            op="switch")
    return program_of(branches[k])(list(operands))


def run_scan(*inputs, body, length, reverse, n_carry, n_x, state, **_):
    carry = list(inputs[:n_carry])
    xs = inputs[n_carry:n_carry + n_x]
    consts = list(inputs[n_carry + n_x:])
    step = program_of(body)
    first_y = n_carry + len(state)
    ys = _stacks(body.outputs[first_y:], length, _module(inputs))
    with Pacer(body) as pacer:
        for t in (range(length - 1, -1, -1) if reverse else range(length)):
            outs = step(carry + [x[t] for x in xs] + consts)
            carry = outs[:n_carry]
            for j, p in enumerate(state):
                consts[p] = outs[n_carry + j]
            for stack, y in zip(ys, outs[first_y:]):
                stack[t] = y
            pacer.tick()
    return carry + [consts[p] for p in state] + ys


def run_while(*inputs, cond, body, n_carry, state, max_iterations, backward, **_):
    carry = list(inputs[:n_carry])
    consts = list(inputs[n_carry:])
    test, step = program_of(cond), program_of(body)
    first_res = n_carry + len(state)
    saving = backward is not None
    xp = _module(inputs)
    stacks = _stacks(body.outputs[first_res:], max_iterations, xp, zero=True) if saving else []
    i = 0
    with Pacer(body) as pacer:
        while (max_iterations is None or i < max_iterations) and bool(test(carry + consts)[0]):
            outs = step(carry + consts)
            carry = outs[:n_carry]
            for j, p in enumerate(state):
                consts[p] = outs[n_carry + j]
            for stack, r in zip(stacks, outs[first_res:]):
                stack[i] = r
            i += 1
            pacer.tick()
    result = carry + [consts[p] for p in state]
    if saving:  # the trip count and the stacks, for the reversed loop of the gradient
        result += [xp.asarray(i, dtype=np.int64)] + stacks
    return result
