"""ONNX training operators (domain ai.onnx.preview.training) -> rill ops: the optimizer
updates Adagrad, Momentum and Adam, written from their pseudo code in the specification.
Inputs are the learning rate R and step count T (scalars), then the tensors to optimize,
their gradients and the optimizer's state tensors, one group after another; each update
applies to every tensor independently. Rows keyed "ai.onnx.preview.training.<op>"."""
from __future__ import annotations

from .import_ops import TABLE, rill

DOMAIN = "ai.onnx.preview.training"


def _groups(ins, count):
    """R, T and `count` equal groups of tensors (X, G, state...)."""
    r_, t, rest = ins[0], ins[1], list(ins[2:])
    n = len(rest) // count
    return r_, t, [rest[i * n:(i + 1) * n] for i in range(count)]


def _adagrad(run, node, ins, a):
    r = rill()
    rate, t, (xs, gs, hs) = _groups(ins, 3)
    rate = rate / (t.astype(rate.dtype) * a.get("decay_factor", 0.0) + 1)
    eps, norm = a.get("epsilon", 0.0), a.get("norm_coefficient", 0.0)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        g = x * norm + g
        h = h + g * g
        new_x.append(x - rate * g / (r.sqrt(h) + eps))
        new_h.append(h)
    return new_x + new_h


def _momentum(run, node, ins, a):
    r = rill()
    rate, t, (xs, gs, vs) = _groups(ins, 3)
    alpha, beta = a["alpha"], a["beta"]
    norm = a.get("norm_coefficient", 0.0)
    mode = a.get("mode", "standard")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    beta_now = r.where(t > 0, r.full((), beta, dtype=rate.dtype),
                       r.ones((), dtype=rate.dtype))
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        g = x * norm + g
        v = v * alpha + beta_now * g
        step = v if mode == "standard" else g + v * alpha
        new_x.append(x - rate * step)
        new_v.append(v)
    return new_x + new_v


def _adam(run, node, ins, a):
    r = rill()
    rate, t, (xs, gs, vs, hs) = _groups(ins, 4)
    alpha, beta = a.get("alpha", 0.9), a.get("beta", 0.999)
    eps, norm = a.get("epsilon", 1e-6), a.get("norm_coefficient", 0.0)
    post = a.get("norm_coefficient_post", 0.0)
    steps = t.astype(rate.dtype)
    corrected = rate * r.sqrt(1 - r.power(r.full((), beta, dtype=rate.dtype), steps)) / \
        (1 - r.power(r.full((), alpha, dtype=rate.dtype), steps))
    rate = r.where(t > 0, corrected, rate)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        g = x * norm + g
        v = v * alpha + g * (1 - alpha)
        h = h * beta + g * g * (1 - beta)
        new_x.append((x - rate * v / (r.sqrt(h) + eps)) * (1 - post))
        new_v.append(v)
        new_h.append(h)
    return new_x + new_v + new_h


TABLE[f"{DOMAIN}.Adagrad"] = _adagrad
TABLE[f"{DOMAIN}.Momentum"] = _momentum
TABLE[f"{DOMAIN}.Adam"] = _adam
