"""ONNX RNN, GRU and LSTM -> rill ops (rows of import_ops.TABLE), unrolled over time.

Written from the operator specification: weights W (directions, gates * hidden, input), R
(directions, gates * hidden, hidden), B (directions, 2 * gates * hidden: W's biases then
R's); gate order i, o, f, c for LSTM and z, r, h for GRU; directions forward, reverse or
bidirectional; `layout` 1 puts the batch first. With `sequence_lens`, each batch entry
stops after its own length: later steps output zeros and leave the state unchanged, and
the reverse direction starts from the entry's last valid step.
"""
from __future__ import annotations

from .errors import ONNXError
from .import_ops import rill, row


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


_TAKES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_TAKES_BETA = {"affine", "scaledtanh", "hardsigmoid"}
_DEFAULT_ALPHA = {"leakyrelu": 0.01, "thresholdedrelu": 1.0, "hardsigmoid": 0.2, "elu": 1.0,
                  "affine": 1.0, "scaledtanh": 1.0}
_DEFAULT_BETA = {"hardsigmoid": 0.5, "affine": 0.0, "scaledtanh": 1.0}


def _activation(name, alpha, beta):
    r = rill()
    fns = {
        "sigmoid": r.sigmoid, "tanh": r.tanh, "relu": r.relu,
        "softsign": lambda x: x / (r.abs(x) + 1), "softplus": r.softplus,
        "affine": lambda x: x * alpha + beta,
        "leakyrelu": lambda x: r.where(x < 0, x * alpha, x),
        "thresholdedrelu": lambda x: r.where(x > alpha, x, x * 0),
        "scaledtanh": lambda x: r.tanh(x * beta) * alpha,
        "hardsigmoid": lambda x: r.clip(x * alpha + beta, 0, 1),
        "elu": lambda x: r.where(x < 0, r.expm1(x) * alpha, x),
    }
    if name not in fns:
        raise ONNXError(f"activation {name!r} is not one of {', '.join(sorted(fns))}",
                        op="RNN")
    return fns[name]


def _activations(a, defaults, directions):
    """Per direction, the list of activation functions (alpha/beta consumed in order)."""
    names = [_text(n).lower() for n in a.get("activations", [])] or defaults * directions
    alphas, betas = list(a.get("activation_alpha", [])), list(a.get("activation_beta", []))
    fns = []
    for name in names:
        alpha = alphas.pop(0) if name in _TAKES_ALPHA and alphas else _DEFAULT_ALPHA.get(name)
        beta = betas.pop(0) if name in _TAKES_BETA and betas else _DEFAULT_BETA.get(name)
        fns.append(_activation(name, alpha, beta))
    per = len(defaults)
    return [fns[d * per:(d + 1) * per] for d in range(directions)]


def _reverse_within(r, x, lengths):
    """x (seq, batch, ...) with each batch entry's first lengths[b] steps reversed (the
    rest left in place); its own inverse."""
    steps = x.shape[0]
    if lengths is None:
        return r.flip(x, axis=0)
    k = r.arange(steps).reshape((steps, 1))
    n = lengths.reshape((1, -1)).astype(r.int64)
    index = r.where(k < n, n - 1 - k, k)  # (seq, batch)
    index = index.reshape(index.shape + (1,) * (x.ndim - 2))
    return r.take_along_axis(x, r.broadcast_to(index, x.shape), axis=0)


def _run(kind, x, w, rec, bias, h, c, peep, lengths, fns, a, hidden):
    """One direction over x (seq, batch, input): (Y (seq, batch, hidden), last h, last c)."""
    r = rill()
    clip = a.get("clip")
    gates_x = r.matmul(x, r.permute_dims(w, (1, 0)))  # (seq, batch, gates * hidden)
    if bias is not None:
        half = bias.shape[0] // 2
        wb, rb = bias[:half], bias[half:]
        gates_x = gates_x + wb
    else:
        rb = None
    rt = r.permute_dims(rec, (1, 0))

    def act(fn, v):
        return fn(r.clip(v, -clip, clip) if clip is not None else v)

    def part(v, i):
        return v[..., i * hidden:(i + 1) * hidden]

    ys = []
    for t in range(x.shape[0]):
        gx = gates_x[t]
        if kind == "GRU":
            f, g = fns
            gh = r.matmul(h, rt)
            if rb is not None:
                gh = gh + rb
            z = act(f, part(gx, 0) + part(gh, 0))
            reset = act(f, part(gx, 1) + part(gh, 1))
            if a.get("linear_before_reset", 0):
                cand = act(g, part(gx, 2) + reset * part(gh, 2))
            else:
                inner = r.matmul(reset * h, rt[:, 2 * hidden:])
                if rb is not None:
                    inner = inner + rb[2 * hidden:]
                cand = act(g, part(gx, 2) + inner)
            new_h, new_c = (1 - z) * cand + z * h, None
        elif kind == "LSTM":
            f, g, hh = fns
            gates = gx + r.matmul(h, rt)
            if rb is not None:
                gates = gates + rb
            pi, po, pf = (None, None, None) if peep is None else \
                (peep[:hidden], peep[hidden:2 * hidden], peep[2 * hidden:])
            i_pre, o_pre, f_pre = part(gates, 0), part(gates, 1), part(gates, 2)
            if peep is not None:
                i_pre, f_pre = i_pre + pi * c, f_pre + pf * c
            i_gate = act(f, i_pre)
            f_gate = 1 - i_gate if a.get("input_forget", 0) else act(f, f_pre)
            new_c = f_gate * c + i_gate * act(g, part(gates, 3))
            if peep is not None:
                o_pre = o_pre + po * new_c
            new_h = act(f, o_pre) * act(hh, new_c)
        else:
            (f,) = fns
            pre = gx + r.matmul(h, rt)
            new_h, new_c = act(f, pre + rb if rb is not None else pre), None
        if lengths is not None:  # entries past their length keep their state, output 0
            alive = (lengths.astype(r.int64) > t).reshape((-1, 1))
            new_h = r.where(alive, new_h, h)
            if new_c is not None:
                new_c = r.where(alive, new_c, c)
            ys.append(r.where(alive, new_h, r.zeros_like(new_h)))
        else:
            ys.append(new_h)
        h, c = new_h, new_c
    return r.stack(ys), h, c


_DEFAULTS = {"RNN": ["tanh"], "GRU": ["sigmoid", "tanh"], "LSTM": ["sigmoid", "tanh", "tanh"]}


@row("RNN", "GRU", "LSTM")
def _recurrent(run, node, ins, a):
    r = rill()
    kind = node.op_type
    ins = list(ins) + [None] * (8 - len(ins))
    x, w, rec, bias, lengths, h0 = ins[:6]
    c0 = ins[6] if kind == "LSTM" else None
    peep = ins[7] if kind == "LSTM" else None
    direction = _text(a.get("direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ONNXError(f"direction {direction!r} is not one of forward, reverse, "
                        "bidirectional", op=kind)
    directions = 2 if direction == "bidirectional" else 1
    hidden = a.get("hidden_size", rec.shape[-1])
    batch_first = a.get("layout", 0) == 1
    if batch_first:
        x = r.permute_dims(x, (1, 0, 2))
        h0 = None if h0 is None else r.permute_dims(h0, (1, 0, 2))
        c0 = None if c0 is None else r.permute_dims(c0, (1, 0, 2))
    batch = x.shape[1]
    zeros = r.zeros((directions, batch, hidden), dtype=x.dtype)
    h0 = zeros if h0 is None else h0
    c0 = zeros if c0 is None else c0
    fns = _activations(a, _DEFAULTS[kind], directions)
    run.meter.unroll(f"{kind}'s {x.shape[0]:,} time steps in {directions} direction(s)",
                     x.shape[0] * directions)
    ys, hs, cs = [], [], []
    for d in range(directions):
        backward = direction == "reverse" or d == 1
        seq = _reverse_within(r, x, lengths) if backward else x
        y, h, c = _run(kind, seq, w[d], rec[d], None if bias is None else bias[d], h0[d],
                       c0[d], None if peep is None else peep[d], lengths, fns[d], a, hidden)
        ys.append(_reverse_within(r, y, lengths) if backward else y)
        hs.append(h)
        cs.append(c)
    y = r.stack(ys, axis=1)  # (seq, directions, batch, hidden)
    y_h = r.stack(hs)
    y_c = r.stack(cs) if kind == "LSTM" else None
    if batch_first:
        y = r.permute_dims(y, (2, 0, 1, 3))
        y_h = r.permute_dims(y_h, (1, 0, 2))
        y_c = None if y_c is None else r.permute_dims(y_c, (1, 0, 2))
    return [y, y_h] + ([y_c] if kind == "LSTM" else [])
