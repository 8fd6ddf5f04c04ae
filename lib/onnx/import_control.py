"""ONNX If, Loop and Scan -> rill (rows of import_ops.TABLE).

If with a condition known at trace time runs one branch; otherwise it becomes rill.cond.
Loop and Scan are unrolled (their trip counts must be known when the graph is traced, and
a Loop's condition must not depend on data): rill's graph then holds each trip's ops. Every
trip is charged to the run's meter (limits.Meter), so no count in the file can make the
unrolling run past Limits.max_loop_trips.
"""
from __future__ import annotations

from .errors import ONNXError
from .import_ops import const, known, rill, row
from ..capture.ir import Value


class Outputs(list):
    """A control-flow node's outputs with, per output, whether it is static (its body
    decides: a branch may read traced values of the enclosing graph)."""

    def __init__(self, values, static):
        super().__init__(values)
        self.static = list(static)


def _run_body(run, graph, feeds):
    """Run a subgraph in a child scope; feeds: [(name, tensor, static)]; its outputs and
    whether each is static."""
    scope = run.child()
    for (name, value, static) in feeds:
        scope.set(name, value, static)
    scope.graph(graph)
    names = [o.name for o in graph.output]
    return [scope.get(n) for n in names], [scope.is_static(n) for n in names]


@row("If")
def _if(run, node, ins, a):
    pred = ins[0]
    if run.is_static(node.input[0]):
        branch = a["then_branch"] if bool(known(node, pred, "cond").reshape(-1)[0]) \
            else a["else_branch"]
        return Outputs(*_run_body(run, branch, []))
    pred = pred.reshape(()).astype(rill().bool)
    return list(rill().cond(pred, lambda: tuple(_run_body(run, a["then_branch"], [])[0]),
                            lambda: tuple(_run_body(run, a["else_branch"], [])[0])))


class _DataDependent(Exception):
    pass


def _known_now(value) -> bool:
    """Whether a value's data exists now (eagerly run), though not static."""
    return value is not None and type(value._data) is not Value


@row("Loop")
def _loop(run, node, ins, a):
    try:
        return _unrolled_loop(run, node, ins, a)
    except _DataDependent:
        return _while_loop(run, node, ins, a)


def _unrolled_loop(run, node, ins, a):
    body = a["body"]
    trips = ins[0] if ins and ins[0] is not None else None
    cond = ins[1] if len(ins) > 1 and ins[1] is not None else None
    carried = list(ins[2:])
    carried_static = [run.is_static(n) for n in node.input[2:]]
    limit = None if trips is None else _scalar(node, trips, "trip count", int)
    # Scan outputs need the trips unrolled: possible eagerly, where the values exist.
    unroll = len(node.output) > len(carried) and _known_now(cond)
    if cond is not None and not run.is_static(node.input[1]) and not unroll:
        raise _DataDependent
    going = True if cond is None else _scalar(node, cond, "condition", bool)
    names = _body_inputs(body, 2 + len(carried), "Loop")
    stacks: list = []
    scans_static: list = []
    i = 0
    # Without a condition input, the trip count is the loop's length (an upper bound, as
    # the body's condition still stops it here), checked before the first trip.
    with run.meter.loop("Loop", limit if cond is None else None) as trip:
        while going and (limit is None or i < limit):
            trip()
            feeds = [(names[0], const(i, "int64"), True), (names[1], const(True), True)]
            feeds += list(zip(names[2:], carried, carried_static))
            outs, static = _run_body(run, body, feeds)
            if len(outs) < 1 + len(carried):
                raise ONNXError(f"the Loop body has {len(outs)} outputs; it needs the "
                                f"condition and {len(carried)} carried values", op="Loop")
            if not static[0] and not (unroll and _known_now(outs[0])):
                raise _DataDependent
            going = _scalar(node, outs[0], "condition", bool)
            n = len(carried)
            carried, carried_static = outs[1:1 + n], static[1:1 + n]
            stacks.append(outs[1 + n:])
            scans_static.append(static[1 + n:])
            i += 1
    n_scans = len(node.output) - len(carried)
    if n_scans and not stacks:
        raise ONNXError("Loop with zero trips and scan outputs is not supported", op="Loop")
    from contextlib import nullcontext
    stacked, stacked_static = [], []
    for k in range(n_scans):
        static = all(flags[k] for flags in scans_static)
        with run.eagerly() if static else nullcontext():  # static parts, static stack
            stacked.append(rill().stack([s[k] for s in stacks]))
        stacked_static.append(static)
    return Outputs(carried + stacked, carried_static + stacked_static)


def _while_loop(run, node, ins, a):
    """A Loop whose condition depends on data: rill.while_loop (no scan outputs)."""
    r = rill()
    body = a["body"]
    carried = list(ins[2:])
    if len(node.output) > len(carried):  # the trip count decides the outputs' shapes
        from .specialize import needs_values
        raise needs_values(node, ins[1], "condition (with scan outputs, the stacked "
                           "outputs' length depends on it)")
    limit = None if not ins or ins[0] is None else _scalar(node, ins[0], "trip count", int)
    cond = const(True) if len(ins) < 2 or ins[1] is None else ins[1].reshape(()).astype(r.bool)
    names = _body_inputs(body, 2 + len(carried), "Loop")
    # The trips happen when the graph runs; what is left of the budget caps them there,
    # and a loop still going at the cap fails then rather than stopping early.
    cap = max(run.meter.remaining_trips(), 0)
    capped = limit is None or limit > cap

    def step(c):
        feeds = [(names[0], c[0], False), (names[1], c[1], False)]
        feeds += [(n, v, False) for n, v in zip(names[2:], c[2:])]
        outs, _ = _run_body(run, body, feeds)
        return (c[0] + 1, outs[0].reshape(()).astype(r.bool)) + tuple(outs[1:])

    def going(c):  # past the cap, the check below fails the run
        return r.logical_and(c[1], c[0] < cap) if capped else c[1]

    init = (const(0, "int64"), cond) + tuple(carried)
    final = r.while_loop(going, step, init, max_iterations=limit)
    outs = list(final[2:])
    if capped and outs:
        from ..ops.checks import check
        stopped = r.logical_or(r.logical_not(final[1]), final[0] < cap)
        outs[0] = check(stopped, outs[0], f"the Loop was still running after {cap:,} trips, "
                        "the rest of the budget of unrolled loop trips "
                        "(rill.onnx.Limits.max_loop_trips); if the model is trusted, load "
                        "it with a larger one", error="CaptureError", op="Loop")
    return outs


def _scalar(node, value, what, kind):
    """The one value of a trip count or condition, known at trace time."""
    found = known(node, value, what).reshape(-1)
    if found.size != 1:
        raise ONNXError(f"its {what} must hold one value, got {found.size}", op=node.op_type)
    return kind(found[0])


def _body_inputs(body, needed, op):
    names = [i.name for i in body.input]
    if len(names) < needed:
        raise ONNXError(f"the {op} body declares {len(names)} inputs; it needs {needed}",
                        op=op)
    return names


@row("Scan")
def _scan(run, node, ins, a):
    r = rill()
    body = a["body"]
    n_scan = a["num_scan_inputs"]
    n_state = len(ins) - n_scan
    if run.opset < 9:
        raise ONNXError("Scan before opset 9 is not supported", op="Scan")
    states = list(ins[:n_state])
    state_static = [run.is_static(n) for n in node.input[:n_state]]
    xs = ins[n_state:]
    in_axes = list(a.get("scan_input_axes", [0] * n_scan))
    in_dirs = list(a.get("scan_input_directions", [0] * n_scan))
    if not xs or len(in_axes) < n_scan or len(in_dirs) < n_scan:
        raise ONNXError(f"Scan has {len(xs)} scan inputs for num_scan_inputs={n_scan}, "
                        f"{len(in_axes)} axes and {len(in_dirs)} directions", op="Scan")
    length = xs[0].shape[in_axes[0] % xs[0].ndim]
    names = _body_inputs(body, n_state + n_scan, "Scan")
    ys: list = []
    with run.meter.loop("Scan", length) as trip:
        for t in range(length):
            trip()
            slices = []
            for x, axis, direction in zip(xs, in_axes, in_dirs):
                axis = axis % x.ndim
                step = length - 1 - t if direction else t
                slices.append(r.take(x, r.tensor(step), axis=axis))
            feeds = list(zip(names[:n_state], states, state_static))
            feeds += [(n, s, False) for n, s in zip(names[n_state:], slices)]
            outs, static = _run_body(run, body, feeds)
            states, state_static = outs[:n_state], static[:n_state]
            ys.append(outs[n_state:])
    n_out = len(body.output) - n_state
    out_axes = list(a.get("scan_output_axes", [0] * n_out))
    out_dirs = list(a.get("scan_output_directions", [0] * n_out))
    stacked = []
    for k in range(n_out):
        rows = [y[k] for y in ys]
        if out_dirs[k]:
            rows = rows[::-1]
        stacked.append(r.stack(rows, axis=out_axes[k] % (rows[0].ndim + 1)))
    return Outputs(states + stacked, state_static + [False] * len(stacked))
