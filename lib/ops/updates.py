"""Fused optimizer updates: one kernel reads a parameter, its gradient and its slots once and
writes the new values, where the same update as separate ops costs ~10 passes.

adam_update(p, g, m, v, step_size, bias_correction2_sqrt) -> (p', m', v'), with attrs
beta1, beta2, eps, weight_decay (added to g: Adam's L2 form) and decay (p scaled by it
first: AdamW's decoupled form, 1 - lr * weight_decay). step_size = lr / (1 - beta1^t) and
bias_correction2_sqrt = sqrt(1 - beta2^t) are 0-d tensors, so that a captured step keeps
counting t. The arithmetic is the one Adam's separate ops do, in the same order:
    m' = lerp(m, g, 1 - beta1);  v' = beta2 v + (1 - beta2) g g
    p' = p - m' / (sqrt(v') / bias_correction2_sqrt + eps) * step_size
Not differentiable (an optimizer step is not on the tape).
"""
from __future__ import annotations

from ..eager.bind import bind
from ..errors import ShapeError
from . import attrs as A
from .arguments import as_float
from .primitive import primitive


def _adam_infer(p, g, m, v, step_size, bias_correction2_sqrt, *, beta1, beta2, eps,
                weight_decay, decay):
    for t, what in ((g, "gradient"), (m, "exp_avg"), (v, "exp_avg_sq")):
        if tuple(t.shape) != tuple(p.shape) or t.dtype is not p.dtype:
            raise ShapeError(f"{what} is {t.dtype}{list(t.shape)}, the parameter "
                             f"{p.dtype}{list(p.shape)}")
    for t in (step_size, bias_correction2_sqrt):
        if t.ndim or t.dtype is not p.dtype:
            raise ShapeError(f"step sizes must be 0-d {p.dtype}, got {t.dtype}{list(t.shape)}")
    return [(p.shape, p.dtype)] * 3


adam_update_p = primitive("adam_update", _adam_infer, multiple_results=True,
                          attrs=dict(beta1=A.FLOAT, beta2=A.FLOAT, eps=A.FLOAT,
                                     weight_decay=A.FLOAT, decay=A.FLOAT), cache_rule="compiled")

_OP = "adam_update"


def adam_update(p, g, m, v, step_size, bias_correction2_sqrt, *, beta1, beta2, eps,
                weight_decay=0.0, decay=1.0):
    return bind(adam_update_p, p, g, m, v, step_size, bias_correction2_sqrt,
                beta1=as_float(beta1, "beta1", _OP), beta2=as_float(beta2, "beta2", _OP),
                eps=as_float(eps, "eps", _OP),
                weight_decay=as_float(weight_decay, "weight_decay", _OP),
                decay=as_float(decay, "decay", _OP))
