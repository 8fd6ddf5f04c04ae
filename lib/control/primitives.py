"""The three control-flow primitives. Each node holds its subgraphs as attrs.

  switch(index, *operands, *captured)        branches: graphs [operands, captured] ->
                                             [results, state]; runs branches[index]
  scan(*carry, *xs, *captured)               body: [carry, x[t], captured] ->
                                             [carry', state', y_t, residuals_t]
  while(*carry, *captured)                   cond: [carry, captured] -> [pred]
                                             body: [carry, captured] -> [carry', state',
                                             residuals]; runs while pred, at most
                                             max_iterations times

`captured` are the tensors the bodies use from outside; `state` lists the positions of those
the bodies change in place, which are carried like the carry and returned after it.
Outputs: switch [results, state]; scan [carry, state, ys (stacked), residual stacks];
while [carry, state] and, when traced for gradients, [trip count, residual stacks]. The
residual outputs are saved for the gradient only (see autodiff.py).
"""
from __future__ import annotations

from ..dtypes import int64
from ..errors import DTypeError, ShapeError
from ..ops import attrs as A
from ..ops.primitive import primitive, register_kernels
from . import autodiff, run


def _spec(v):
    return (tuple(v.shape), v.dtype)


def _state_specs(captured, state):
    return [_spec(captured[p]) for p in state]


def _switch_infer(index, *operands, branches, state, n_operands):
    if index.shape != () or index.dtype.kind not in "iub":
        raise DTypeError(f"the branch index must be a 0-d integer, got {index.dtype}"
                         f"{list(index.shape)}", op="switch")
    return [_spec(v) for v in branches[0].outputs]


def _scan_infer(*inputs, body, length, reverse, n_carry, n_x, state, n_y, backward, grad_of):
    for x in inputs[n_carry:n_carry + n_x]:
        if x.ndim == 0 or x.shape[0] != length:
            raise ShapeError(f"every xs leaf must have leading axis {length}, got {x.shape}",
                             op="scan")
    first_y = n_carry + len(state)
    return [_spec(v) for v in inputs[:n_carry]] + \
        _state_specs(inputs[n_carry + n_x:], state) + \
        [((length,) + tuple(v.shape), v.dtype) for v in body.outputs[first_y:]]


def _while_infer(*inputs, cond, body, n_carry, state, max_iterations, backward, grad_of):
    specs = [_spec(v) for v in inputs[:n_carry]] + _state_specs(inputs[n_carry:], state)
    if backward is not None:
        specs.append(((), int64))
        specs += [((max_iterations,) + tuple(v.shape), v.dtype)
                  for v in body.outputs[n_carry + len(state):]]
    return specs


def _scan_residuals(*, body, n_carry, state, n_y, **_):
    return len(body.outputs) - n_carry - len(state) - n_y


def _while_residuals(*, body, n_carry, state, backward, **_):
    return 0 if backward is None else 1 + len(body.outputs) - n_carry - len(state)


# What a traced loop's gradient needs (loops.py:_finish): the positions of the carried, x
# and captured inputs that take gradients, the outputs that take cotangents, and per
# captured target a plan (None: summed inside the loop; else a sum over stacked rows).
_SOURCE = A.Tuple(A.Choice("res", "x", "y"), A.NonNegInt)
_PLAN = A.Optional(A.Tuple(A.Choice("linear_weight_grad", "sum", "matmul_t"),
                           A.TupleOf(_SOURCE)))
_POSITIONS = A.TupleOf(A.NonNegInt)
_GRAD_OF = A.Optional(A.Tuple(_POSITIONS, _POSITIONS, _POSITIONS, _POSITIONS,
                              A.TupleOf(_PLAN)))
_LOOP = dict(n_carry=A.NonNegInt, state=_POSITIONS, backward=A.Optional(A.Subgraph),
             grad_of=_GRAD_OF)

switch_p = primitive("switch", _switch_infer, autodiff.switch_vjp, multiple_results=True,
                     attrs=dict(branches=A.TupleOf(A.Subgraph, min_length=1), state=_POSITIONS,
                                n_operands=A.NonNegInt))
scan_p = primitive("scan", _scan_infer, autodiff.scan_vjp, multiple_results=True,
                   save_output=True, residuals=_scan_residuals,
                   attrs=dict(_LOOP, body=A.Subgraph, length=A.NonNegInt, reverse=A.BOOL,
                              n_x=A.NonNegInt, n_y=A.NonNegInt))
while_p = primitive("while", _while_infer, autodiff.while_vjp, multiple_results=True,
                    save_output=True, residuals=_while_residuals,
                    attrs=dict(_LOOP, cond=A.Subgraph, body=A.Subgraph,
                               max_iterations=A.Optional(A.NonNegInt)))

# Every device kind: the kernels only run other kernels.
for _kind in ("cpu", "gpu"):
    register_kernels(_kind, {"switch": run.run_switch, "scan": run.run_scan,
                             "while": run.run_while})
