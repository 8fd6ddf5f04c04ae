"""Adadelta: steps scaled by running averages of squared gradients and squared steps."""
from __future__ import annotations

from ..ops.elementwise import sqrt
from ..ops.methods import assign
from .optimizer import Optimizer, scale


class Adadelta(Optimizer):
    """Adadelta (Zeiler), with PyTorch's update rule and defaults.

    Per step, with g the gradient (negated if `maximize`, plus weight_decay * p):
    s = rho * s + (1 - rho) * g^2; delta = sqrt(d + eps) / sqrt(s + eps) * g;
    d = rho * d + (1 - rho) * delta^2; p -= lr * delta.

    >>> import rill
    >>> w = rill.nn.Parameter(rill.tensor([1.0, -2.0]))
    >>> opt = rill.optim.Adadelta([w], lr=1000.0, rho=0.0, eps=1e-6)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> [round(x, 4) for x in w.tolist()]
    [0.0, -1.0]
    """

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, foreach: bool | None = None, *,
                 capturable: bool = False, maximize: bool = False, differentiable: bool = False):
        # foreach and capturable pick among torch's implementations: ignored (see
        # rill.optim.optimizer)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      foreach=foreach, capturable=capturable,
                                      maximize=maximize, differentiable=differentiable))

    def check_group(self, group):
        super().check_group(group)
        self._require(group, "rho", lambda v: 0 <= v <= 1, "in [0, 1]")
        self._require(group, "eps", lambda v: v >= 0, ">= 0")
        self._require(group, "weight_decay", lambda v: v >= 0, ">= 0")

    def update_group(self, group):
        rho, eps = group["rho"], group["eps"]
        weight_decay = group["weight_decay"]
        hypers = self._hypers(group, "lr")
        for p, g, state in self._dense_updates(group, "square_avg", "acc_delta"):
            (lr,) = hypers(p.device)
            if weight_decay != 0:
                g = g + p * weight_decay
            square_avg, acc_delta = state["square_avg"], state["acc_delta"]
            assign(square_avg, square_avg * rho + g * (1.0 - rho) * g)
            delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
            assign(acc_delta, acc_delta * rho + delta * (1.0 - rho) * delta)
            assign(p, p - scale(delta, lr))


AdaDelta = Adadelta
