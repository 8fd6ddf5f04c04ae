"""Fused optimizer update CPU kernels (see rill.ops.updates), in the parameter's dtype."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _adam_update(p, g, m, v, step_size, bias_correction2_sqrt, beta1, beta2, eps,
                 weight_decay, decay):
    t = p.dtype.type
    if decay != 1.0:
        p = p * t(decay)
    if weight_decay != 0.0:
        g = g + p * t(weight_decay)
    keep = 1.0 - beta1
    # lerp in the form that is exact at its ends (rill.optim.optimizer.lerp)
    m = m + (g - m) * t(keep) if keep < 0.5 else g - (g - m) * t(beta1)
    v = v * t(beta2) + g * t(1.0 - beta2) * g
    p = p - m / (np.sqrt(v) / bias_correction2_sqrt + t(eps)) * step_size
    return p, m, v


register_kernels("cpu", {"adam_update": _adam_update})
