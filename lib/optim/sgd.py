"""SGD: stochastic gradient descent with momentum, Nesterov momentum and weight decay."""
from __future__ import annotations

from ..errors import ArgumentError
from ..ops.creation import zeros_like
from ..ops.elementwise import scaled_add, where
from ..ops.rows import add_rows_
from ..ops.sparse_rows import SparseRows
from ..ops.methods import assign
from .optimizer import Optimizer, add_scaled, scale, step_count


class SGD(Optimizer):
    """Stochastic gradient descent, with PyTorch's update rule and defaults.

    Per step, with g the gradient (negated if `maximize`):
    g += weight_decay * p; with momentum, buf = momentum * buf + (1 - dampening) * g
    (buf = g at the first step) and g = g + momentum * buf if `nesterov` else buf;
    then p -= lr * g.

    A sparse gradient (`SparseRows`, from an embedding lookup) updates only the rows it
    touches when there is no momentum and no weight decay. With either, every row moves
    anyway, so the gradient is made dense: the result is PyTorch's for sparse gradients.

    >>> import rill
    >>> w = rill.nn.Parameter(rill.tensor([1.0, -2.0]))
    >>> opt = rill.optim.SGD([w], lr=0.1, momentum=0.9)
    >>> for _ in range(2):
    ...     opt.zero_grad()
    ...     (w * w).sum().backward()
    ...     opt.step()
    >>> w
    Parameter containing:
    tensor([ 0.46, -0.92], requires_grad=True)
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False,
                 fused: bool | None = None):
        # foreach and fused pick among torch's implementations: ignored (see rill.optim.optimizer)
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def check_group(self, group):
        super().check_group(group)
        self._require(group, "momentum", lambda v: v >= 0, ">= 0")
        self._require(group, "weight_decay", lambda v: v >= 0, ">= 0")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ArgumentError("Nesterov momentum needs momentum > 0 and dampening 0, got "
                                f"momentum={group['momentum']}, dampening={group['dampening']}",
                                op=self._name)

    tensor_hypers = ("lr", "momentum")

    def update_group(self, group):
        weight_decay, nesterov, maximize = group["weight_decay"], group["nesterov"], \
            group["maximize"]
        keep = 1.0 - group["dampening"]
        with_momentum = group["momentum"] != 0
        self._guard(group, "['momentum'] != 0", lambda: group["momentum"] != 0, "momentum")
        hypers = self._hypers(group, "lr", "momentum")
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            lr, momentum = hypers(p.device)
            if isinstance(g, SparseRows):
                if not with_momentum and weight_decay == 0:
                    # Linear in g, so repeated indices need no coalescing: index_add sums them.
                    add_rows_(p, g.indices, scale(g.rows, lr if maximize else -lr))
                    continue
                g = g.to_dense()
            if maximize:
                g = -g
            if weight_decay != 0:
                g = scaled_add(g, p, 1.0, weight_decay)
            if with_momentum:
                # The buffer starts at zero, so the first step makes it g exactly (torch's
                # rule) with the same ops as every later step, as a captured step needs;
                # with dampening, a step count tells the first step apart.
                state = self._state(p, lambda: {"momentum_buffer": zeros_like(p), **(
                    {"step": step_count(device=p.device)} if keep != 1.0 else {})})
                buf = state["momentum_buffer"]
                if keep == 1.0:
                    assign(buf, add_scaled(buf, g, momentum, 1.0))
                else:
                    state["step"] += 1
                    assign(buf, where(state["step"] == 1, g, add_scaled(buf, g, momentum, keep)))
                g = add_scaled(g, buf, 1.0, momentum) if nesterov else buf
            assign(p, add_scaled(p, g, 1.0, -lr))  # one op, one buffer per parameter (eagerly)
