"""Adam and AdamW: adaptive moment estimation, with L2 or decoupled weight decay."""
from __future__ import annotations

from ..dtypes import bfloat16, float32
from ..ops.elementwise import cast, maximum, sqrt
from ..ops.methods import assign
from ..ops.updates import adam_update
from ..tensor import Tensor
from .optimizer import Optimizer, lerp, scale


class Adam(Optimizer):
    """Adam (Kingma & Ba), with PyTorch's update rule and defaults.

    Per step t, with g the gradient (negated if `maximize`, plus weight_decay * p unless
    the decay is decoupled): m = lerp(m, g, 1 - beta1), v = beta2 * v + (1 - beta2) * g^2,
    and p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps); `amsgrad` uses
    the running maximum of v instead of v. With `decoupled_weight_decay` (AdamW) the decay
    is p *= 1 - lr * weight_decay before the step instead.

    A sparse gradient is applied as the dense one it stands for (every row's moments
    decay); rill.optim.SparseAdam is the lazy variant that touches only the looked-up rows.

    >>> import rill
    >>> w = rill.nn.Parameter(rill.tensor([1.0, -2.0]))
    >>> opt = rill.optim.Adam([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> [round(x, 4) for x in w.tolist()]
    [0.9, -1.9]
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False):
        # foreach, capturable and fused pick among torch's implementations: ignored (see
        # rill.optim.optimizer)
        super().__init__(params, dict(lr=lr, betas=tuple(betas) if isinstance(betas, (tuple, list)) else betas, eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def check_group(self, group):
        super().check_group(group)
        self._require(group, "eps", lambda v: v >= 0, ">= 0")
        self._require(group, "weight_decay", lambda v: v >= 0, ">= 0")
        self._check_betas(group)

    tensor_hypers = ("lr", "betas")

    def _tensor_keys(self, group):
        # The fused kernel takes betas as constants: until a group's betas first change, a
        # traced step uses it with betas guarded; after that (or with amsgrad), separate ops
        # read them as tensors, so that a schedule of beta1 does not trace every step.
        keys = super()._tensor_keys(group)
        if "betas" in keys and not group["amsgrad"] and "betas" not in group._changed:
            keys -= {"betas"}
        return keys

    def update_group(self, group):
        eps, weight_decay, amsgrad = group["eps"], group["weight_decay"], group["amsgrad"]
        decoupled = group["decoupled_weight_decay"]
        small = 1.0 - group["betas"][0] < 0.5  # which form of lerp: a branch on beta1
        self._guard(group, "['betas'][0] > 0.5", lambda: group["betas"][0] > 0.5, "betas")
        hypers = self._hypers(group, "lr", "betas")
        corrections: dict = {}  # (step cohort, device, dtype) -> (step_size, sqrt(1 - beta2^t))
        for p, g, state in self._dense_updates(group, "exp_avg", "exp_avg_sq"):
            lr, (beta1, beta2) = hypers(p.device)
            cohort = self._step_cohort(state)
            key = (cohort if cohort is not None else object(), p.device, p.dtype)
            if key not in corrections:  # once for all counts known equal (see Optimizer)
                step = state["step"]
                # The step count is a tensor (see step_count): corrections in float64, then
                # cast.
                corrections[key] = (cast(lr / (1.0 - beta1 ** step), p.dtype),
                                    cast(sqrt(1.0 - beta2 ** step), p.dtype))
            step_size, bias_correction2_sqrt = corrections[key]
            m, v = state["exp_avg"], state["exp_avg_sq"]
            if amsgrad:
                if weight_decay != 0:
                    if decoupled:
                        assign(p, scale(p, 1.0 - lr * weight_decay))
                    else:
                        g = g + p * weight_decay
                assign(m, lerp(m, g, 1.0 - beta1, small=small))
                assign(v, scale(v, beta2) + scale(g, 1.0 - beta2) * g)
                v_max = self._zero_slot(state, "max_exp_avg_sq", p)
                v = assign(v_max, maximum(v_max, v))
                assign(p, p - m / (sqrt(v) / bias_correction2_sqrt + eps) * step_size)
                continue
            l2 = 0.0 if decoupled else weight_decay
            decay = 1.0 - lr * weight_decay if decoupled and weight_decay != 0 else 1.0
            if isinstance(beta1, Tensor) or isinstance(decay, Tensor) and p.dtype is bfloat16:
                # Factors read as tensors, which the fused kernel takes only as constants
                # (for bfloat16 even the decay: the kernel does not round p * decay).
                new_p, new_m, new_v = _adam_ops(p, g, m, v, step_size, bias_correction2_sqrt,
                                                beta1, beta2, eps, l2, decay, small)
            else:  # one kernel for the whole update
                p_in = p
                if isinstance(decay, Tensor):  # a traced AdamW step: lr is a tensor
                    # The kernel's first multiply, apart: rounded to p's dtype, as the
                    # kernel rounds it for float16/32/64.
                    p_in, decay = scale(p, decay), 1.0
                new_p, new_m, new_v = adam_update(
                    p_in, g, m, v, step_size, bias_correction2_sqrt, beta1=beta1, beta2=beta2,
                    eps=eps, weight_decay=l2, decay=decay)
            assign(m, new_m)
            assign(v, new_v)
            assign(p, new_p)


def _adam_ops(p, g, m, v, step_size, bias_correction2_sqrt, beta1, beta2, eps, weight_decay,
              decay, small):
    """adam_update's arithmetic (kernels/numpy/updates.py) as separate ops, so that factors
    (betas, decay) may be tensors: the same bits as the kernel, in its precision too
    (bfloat16 tensors are worked on in their float32 storage and rounded once, at the
    end). The second form of lerp multiplies by beta1, not by 1 - (1 - beta1), as the
    kernel does."""
    dtype = p.dtype
    if dtype is bfloat16:
        p, g, m, v, step_size, bias_correction2_sqrt = (
            cast(t, float32) for t in (p, g, m, v, step_size, bias_correction2_sqrt))
    if isinstance(decay, Tensor) or decay != 1.0:
        p = scale(p, decay)
    if weight_decay != 0.0:
        g = g + p * weight_decay
    m = lerp(m, g, 1.0 - beta1, beta1, small=small)
    v = scale(v, beta2) + scale(g, 1.0 - beta2) * g
    p = p - m / (sqrt(v) / bias_correction2_sqrt + eps) * step_size
    return tuple(cast(t, dtype) if dtype is bfloat16 else t for t in (p, m, v))


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay
    before each Adam step, instead of adding weight_decay * p to the gradient. As PyTorch's
    AdamW, the default weight_decay is 1e-2.

    >>> import rill
    >>> w = rill.nn.Parameter(rill.tensor([1.0, -2.0]))
    >>> opt = rill.optim.AdamW([w], lr=0.1, weight_decay=0.5)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> [round(x, 4) for x in w.tolist()]
    [0.85, -1.8]
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
