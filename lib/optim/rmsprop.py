"""RMSprop: gradients scaled by a running average of their squares."""
from __future__ import annotations

from ..ops.elementwise import sqrt
from ..ops.methods import assign
from .optimizer import Optimizer, lerp, scale


class RMSprop(Optimizer):
    """RMSprop (Hinton), with PyTorch's update rule and defaults.

    Per step, with g the gradient (negated if `maximize`, plus weight_decay * p):
    s = alpha * s + (1 - alpha) * g^2; avg = sqrt(s) + eps, or, if `centered`,
    sqrt(s - a^2) + eps with a = lerp(a, g, 1 - alpha) the average gradient; then
    p -= lr * g / avg, or with momentum buf = momentum * buf + g / avg and p -= lr * buf.

    >>> import rill
    >>> w = rill.nn.Parameter(rill.tensor([1.0, -2.0]))
    >>> opt = rill.optim.RMSprop([w], lr=0.01, alpha=0.75)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w
    Parameter containing:
    tensor([ 0.98, -1.98], requires_grad=True)
    """

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False,
                 capturable: bool = False, foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False):
        # capturable and foreach pick among torch's implementations: ignored (see
        # rill.optim.optimizer)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered,
                                      capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def check_group(self, group):
        super().check_group(group)
        for key in ("alpha", "eps", "weight_decay", "momentum"):
            self._require(group, key, lambda v: v >= 0, ">= 0")

    tensor_hypers = ("lr", "momentum")

    def update_group(self, group):
        alpha, eps = group["alpha"], group["eps"]
        weight_decay, centered = group["weight_decay"], group["centered"]
        with_momentum = group["momentum"] > 0
        self._guard(group, "['momentum'] > 0", lambda: group["momentum"] > 0, "momentum")
        hypers = self._hypers(group, "lr", "momentum")
        for p, g, state in self._dense_updates(group, "square_avg"):
            lr, momentum = hypers(p.device)
            if weight_decay != 0:
                g = g + p * weight_decay
            square_avg = state["square_avg"]
            assign(square_avg, square_avg * alpha + g * (1.0 - alpha) * g)
            if centered:
                grad_avg = self._zero_slot(state, "grad_avg", p)
                assign(grad_avg, lerp(grad_avg, g, 1.0 - alpha))
                avg = sqrt(square_avg - grad_avg * grad_avg) + eps
            else:
                avg = sqrt(square_avg) + eps
            if with_momentum:
                buf = self._zero_slot(state, "momentum_buffer", p)
                assign(buf, scale(buf, momentum) + g / avg)
                assign(p, p - scale(buf, lr))
            else:
                assign(p, p - scale(g / avg, lr))


RMSProp = RMSprop
