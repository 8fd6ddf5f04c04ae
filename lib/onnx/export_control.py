"""rill control flow -> ONNX If and Loop.

switch(index, operands..., captured...)  -> If (nested for more than two branches); the
    branches read the node's inputs from the outer scope, as ONNX subgraphs may.
scan(carry..., xs..., captured...)       -> Loop of `length` trips: carried = carry + the
    captured tensors the body changes (`state`); x[t] is a Gather of the outer xs; the ys
    are the loop's scan outputs (reversed afterwards for a reverse scan).
while(carry..., captured...)             -> Loop with the cond graph run once before the
    loop and again at the end of each trip; `max_iterations` is the trip limit.
"""
from __future__ import annotations

import numpy as np

from .builder import INT64_MIN
from .emit import alternative_value, emit_graph, value_info
from .errors import ONNXError, at
from ..ops.lstm_cell_onnx import cell


def _outputs(b, names, values) -> list:
    """Graph outputs under fresh names (an output may be an input or an outer value)."""
    infos = []
    for name, v in zip(names, values):
        fresh = b.op("Identity", [name])
        infos.append(value_info(b, fresh, v, alternative_value(b, v)))
    return infos


def _branch_graph(b, branch, ins, node_outputs, label):
    """An If branch: no inputs (it reads `ins` from the outer scope)."""
    from onnx import helper
    cb = b.child()
    infos = _outputs(cb, emit_graph(cb, branch, ins), node_outputs)
    return helper.make_graph(cb.nodes, b.fresh(label), [], infos)


def _switch(b, node, ins):
    branches = node.attrs["branches"]
    index, operands = ins[0], ins[1:]
    n = len(node.outputs)
    if len(branches) == 1:
        return emit_graph(b, branches[0], operands)

    def build(builder, first):
        if first == len(branches) - 1:
            return emit_graph(builder, branches[first], operands)
        from onnx import helper
        test = builder.op("Equal", [index, builder.const(
            np.asarray(first, node.inputs[0].dtype.storage))])
        then = _branch_graph(builder, branches[first], operands, node.outputs, "branch")
        cb = builder.child()
        rest = build(cb, first + 1)
        infos = _outputs(cb, rest, node.outputs)
        other = helper.make_graph(cb.nodes, builder.fresh("branch"), [], infos)
        outs = builder.op("If", [test], n_out=n, then_branch=then, else_branch=other)
        return outs if isinstance(outs, list) else [outs]

    return build(b, 0)


def _loop_body(b, node, label, carried_values, extra_inputs, emit_body):
    """A Loop body graph: inputs (trip, cond, carried...), outputs from emit_body(child,
    trip, cond, carried names) -> (cond name, [(name, rill value)] outputs)."""
    from onnx import TensorProto, helper
    cb = b.child()
    trip, cond = cb.fresh("trip"), cb.fresh("cond")
    carried = [cb.fresh("carried") for _ in carried_values]
    cond_out, outputs = emit_body(cb, trip, cond, carried)
    inputs = [helper.make_tensor_value_info(trip, TensorProto.INT64, []),
              helper.make_tensor_value_info(cond, TensorProto.BOOL, [])]
    inputs += [value_info(cb, n, v, alternative_value(b, v))
               for n, v in zip(carried, carried_values)]
    cond_name = cb.op("Identity", [cond_out])
    infos = [helper.make_tensor_value_info(cond_name, TensorProto.BOOL, [])]
    infos += _outputs(cb, [n for n, _ in outputs], [v for _, v in outputs])
    return helper.make_graph(cb.nodes, b.fresh(label), inputs, infos)


def _with_state(captured, state, new):
    out = list(captured)
    for p, name in zip(state, new):
        out[p] = name
    return out


def _scan(b, node, ins):
    a = node.attrs
    body, n_carry, n_x, state = a["body"], a["n_carry"], a["n_x"], list(a["state"])
    length, reverse = a["length"], a["reverse"]
    carry, xs, captured = ins[:n_carry], ins[n_carry:n_carry + n_x], ins[n_carry + n_x:]
    carried_values = list(node.inputs[:n_carry]) + \
        [node.inputs[n_carry + n_x + p] for p in state]
    n_state = len(state)

    def emit_body(cb, trip, cond, carried):
        t = trip
        if reverse:
            t = cb.op("Sub", [cb.const(np.asarray(length - 1, np.int64)), trip])
        x_t = [cb.op("Gather", [x, t], axis=0) for x in xs]
        inner = carried[:n_carry] + x_t + _with_state(captured, state, carried[n_carry:])
        outs = emit_graph(cb, body, inner)
        first_y = n_carry + n_state
        pairs = list(zip(outs[:first_y], body.outputs[:first_y]))
        pairs += list(zip(outs[first_y:], body.outputs[first_y:]))
        return cond, pairs

    graph = _loop_body(b, node, "scan_body", carried_values, xs, emit_body)
    outs = b.op("Loop", [b.const(np.asarray(length, np.int64)), ""] + carry +
                [captured[p] for p in state], n_out=len(node.outputs), body=graph)
    outs = outs if isinstance(outs, list) else [outs]
    if reverse:  # Loop stacks in trip order; a reverse scan's row t is trip length-1-t
        first_y = n_carry + n_state
        outs[first_y:] = [b.slice(y, [-1], [INT64_MIN], [0], [-1]) for y in outs[first_y:]]
    return outs


def _while(b, node, ins):
    a = node.attrs
    if a["backward"] is not None:
        raise at(ONNXError("this while loop was traced for gradients; export under "
                           "rill.no_grad() (export does this for you)", op="while"),
                 node.source)
    body, cond_graph, n_carry, state = a["body"], a["cond"], a["n_carry"], list(a["state"])
    carry, captured = ins[:n_carry], ins[n_carry:]
    carried_values = list(node.inputs[:n_carry]) + [node.inputs[n_carry + p] for p in state]
    n_state = len(state)

    def test(builder, names):
        pred = emit_graph(builder, cond_graph, names)[0]
        if cond_graph.outputs[0].dtype.name != "bool":
            pred = builder.op("Cast", [pred], to=9)  # TensorProto.BOOL
        if cond_graph.outputs[0].shape != ():
            pred = builder.op("Reshape", [pred, builder.ints([])])
        return pred

    def emit_body(cb, trip, cond, carried):
        inner_captured = _with_state(captured, state, carried[n_carry:])
        outs = emit_graph(cb, body, carried[:n_carry] + inner_captured)
        new_carry, new_state = outs[:n_carry], outs[n_carry:n_carry + n_state]
        pred = test(cb, new_carry + _with_state(captured, state, new_state))
        pairs = list(zip(new_carry + new_state, body.outputs[:n_carry + n_state]))
        return pred, pairs

    first = test(b, list(carry) + list(captured))
    graph = _loop_body(b, node, "while_body", carried_values, [], emit_body)
    limit = a["max_iterations"]
    trips = "" if limit is None else b.const(np.asarray(limit, np.int64))
    outs = b.op("Loop", [trips, first] + list(carry) + [captured[p] for p in state],
                n_out=len(node.outputs), body=graph)
    return outs if isinstance(outs, list) else [outs]


def _lstm_sequence(b, node, ins):
    """A fused LSTM layer (lib/ops/lstm_sequence.py) as a Loop of its cell over the steps:
    carried h and c, each step's h stacked (in trip order: reversed for a reverse layer).
    Its residual outputs serve rill's backward only: None."""
    steps, _, four_h = node.inputs[0].shape
    reverse = node.attrs["reverse"]
    w_t = b.op("Transpose", [ins[3]], perm=[1, 0])
    bias = ins[4] if len(ins) > 4 else None
    state = [node.inputs[1], node.inputs[2]]

    def emit_body(cb, trip, cond, carried):
        t = cb.op("Sub", [cb.const(np.asarray(steps - 1, np.int64)), trip]) if reverse else trip
        h, c = cell(cb, cb.op("Gather", [ins[0], t], axis=0), carried[0], carried[1], w_t,
                    bias, four_h // 4)
        return cond, [(h, state[0]), (c, state[1]), (cb.op("Identity", [h]), state[0])]

    graph = _loop_body(b, node, "lstm_body", state, [], emit_body)
    h, c, hs = b.op("Loop", [b.const(np.asarray(steps, np.int64)), "", ins[1], ins[2]],
                    n_out=3, body=graph)
    if reverse:
        hs = b.slice(hs, [-1], [INT64_MIN], [0], [-1])
    return [hs, h, c, None, None, None]


CONTROL = {"switch": _switch, "scan": _scan, "while": _while,
           "lstm_sequence": _lstm_sequence}
