"""Adagrad: per-coordinate learning rates from the sum of squared gradients."""
from __future__ import annotations

from ..errors import ArgumentError
from ..ops.creation import full_like
from ..ops.elementwise import cast, sqrt, where
from ..ops.rows import add_rows_, per_row
from ..ops.sparse_rows import SparseRows
from ..ops.methods import assign
from .optimizer import Optimizer, step_count


class Adagrad(Optimizer):
    """Adagrad (Duchi et al.), with PyTorch's update rule and defaults.

    Per step t, with g the gradient (negated if `maximize`, plus weight_decay * p):
    sum += g^2 and p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps).

    A sparse gradient (`SparseRows`) updates only the rows it touches, in p and in the sum
    alike (weight decay would touch every row, so it is refused with sparse gradients).

    >>> import rill
    >>> w = rill.nn.Parameter(rill.tensor([1.0, -2.0]))
    >>> opt = rill.optim.Adagrad([w], lr=0.5)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w
    Parameter containing:
    tensor([ 0.5, -1.5], requires_grad=True)
    """

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, fused: bool | None = None):
        # foreach and fused pick among torch's implementations: ignored (see rill.optim.optimizer)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, foreach=foreach, maximize=maximize,
                                      differentiable=differentiable, fused=fused))

    def check_group(self, group):
        super().check_group(group)
        for key in ("lr_decay", "weight_decay", "initial_accumulator_value", "eps"):
            self._require(group, key, lambda v: v >= 0, ">= 0")

    def update_group(self, group):
        lr_decay, eps = group["lr_decay"], group["eps"]
        weight_decay, maximize = group["weight_decay"], group["maximize"]
        hypers = self._hypers(group, "lr")
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            state = self._state(p, lambda: {
                "step": step_count(device=p.device), "sum": full_like(p, group["initial_accumulator_value"])})
            state["step"] += 1
            (lr,) = hypers(p.device)
            total = state["sum"]
            clr = cast(lr / ((state["step"] - 1) * lr_decay + 1), p.dtype)
            if isinstance(g, SparseRows):
                if weight_decay != 0:
                    raise ArgumentError("weight_decay is not compatible with sparse gradients "
                                        "(it would change every row); a parameter of shape "
                                        f"{p.shape} has a SparseRows gradient", op=self._name)
                # Not linear in g: one row per index (padding after them: zero rows, masked).
                indices, rows, valid = g.coalesced()
                rows = -rows if maximize else rows
                squares = rows * rows
                sum_rows = total[(indices,)] + squares
                add_rows_(total, indices, squares)
                add_rows_(p, indices, where(per_row(valid, rows),
                                            rows / (sqrt(sum_rows) + eps) * -clr, 0.0))
                continue
            if maximize:
                g = -g
            if weight_decay != 0:
                g = g + p * weight_decay
            assign(total, total + g * g)
            assign(p, p - g / (sqrt(total) + eps) * clr)


AdaGrad = Adagrad
