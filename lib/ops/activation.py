"""softmax and log_softmax: fused primitives, since each is one pass over the data with a
gradient rule that needs only the output (no exp/sum intermediates kept for the tape)."""
from __future__ import annotations

from .. import dtypes as dt
from ..eager.bind import bind
from . import attrs as A
from . import batching
from . import promotion
from .arguments import as_axis, as_choice, as_float, as_int
from .primitive import primitive
from .rules import normalize_axis
from ..errors import ArgumentError, DTypeError, ShapeError


def _infer(x, *, axis):
    normalize_axis(axis, max(x.ndim, 1))  # a 0-d tensor is its own one-element row
    return x.shape, x.dtype


def _row_axis(x, axis):
    return axis if x.ndim else None


def _softmax_vjp(g, y, x, axis):
    if y.ndim and y.device.kind == "cpu" and y.dtype in _ROW_DTYPES and g.dtype is y.dtype:
        # one pass (kernels/numpy/activation.py) where the composite below is four
        return (bind(softmax_grad_p, g, y, axis=normalize_axis(axis, y.ndim)),)
    return (_softmax_grad_composite(g, y, axis),)


def _softmax_grad_composite(g, y, axis):
    from .reduce import sum as sum_
    gy = g * y
    return gy - y * sum_(gy, axis=_row_axis(y, axis), keepdims=True)


def _softmax_grad_infer(g, y, *, axis):
    if g.dtype is not y.dtype:
        raise DTypeError(f"expects g and y of one dtype, got {g.dtype} and {y.dtype}")
    if tuple(g.shape) != tuple(y.shape):
        raise ShapeError(f"expects g and y of one shape, got {g.shape} and {y.shape}")
    normalize_axis(axis, max(y.ndim, 1))
    return y.shape, y.dtype


def _softmax_grad_vjp(h, out, g, y, axis):
    """out = g y - y s, s = sum(g y): linear in g (its own rule again); in y,
    h (g - s) - g sum(h y)."""
    from .reduce import sum as sum_
    dg = bind(softmax_grad_p, h, y, axis=axis) if g.requires_grad else None
    dy = None
    if y.requires_grad:
        s = sum_(g * y, axis=axis, keepdims=True)
        dy = h * (g - s) - g * sum_(h * y, axis=axis, keepdims=True)
    return dg, dy


def _softmax_grad_batch(prim, size, args, dims, attrs):
    g, y = (batching.batched_front(a, d, size) for a, d in zip(args, dims))
    axis = attrs["axis"]  # a negative axis counts from the end: the batch axis leaves it
    return bind(prim, g, y, axis=axis + 1 if axis >= 0 else axis), 0


def _log_softmax_vjp(g, y, x, axis):
    from .elementwise import exp
    from .reduce import sum as sum_
    return (g - exp(y) * sum_(g, axis=_row_axis(y, axis), keepdims=True),)


softmax_p = primitive("softmax", _infer, _softmax_vjp, normalize=promotion.floating,
                      save_output=True, attrs={"axis": A.AXIS}, batch=batching.along("axis"))
_ROW_DTYPES = (dt.float32, dt.float64)
# softmax's gradient from its output along a (non-negative) axis: a CPU kernel for
# float32/float64, which softmax's gradient calls.
softmax_grad_p = primitive("softmax_grad", _softmax_grad_infer, _softmax_grad_vjp,
                           attrs={"axis": A.AXIS}, batch=_softmax_grad_batch,
                           cpu_only="a CPU fast path: other devices run softmax's gradient "
                                    "as a composite in rill ops")
log_softmax_p = primitive("log_softmax", _infer, _log_softmax_vjp,
                          normalize=promotion.floating, save_output=True, attrs={"axis": A.AXIS},
                          batch=batching.along("axis"))


def softmax(x, axis: int = -1):
    """exp(x) / sum(exp(x)) along `axis`, computed without overflow.

    >>> rill.nn.functional.softmax(rill.tensor([0.0, 0.0]))
    tensor([0.5, 0.5])
    """
    return bind(softmax_p, x, axis=as_axis(axis, "softmax"))


def log_softmax(x, axis: int = -1):
    """x - logsumexp(x) along `axis`.

    >>> rill.nn.functional.log_softmax(rill.tensor([0.0, 0.0])).exp()
    tensor([0.5, 0.5])
    """
    return bind(log_softmax_p, x, axis=as_axis(axis, "log_softmax"))


# ---- softmax cross-entropy over class indices -----------------------------------------------
# One primitive computes the loss with its reduction (none: per row; sum; mean over the rows
# whose target is not ignore_index), and one computes its gradient: a training step's loss
# costs two ops, not a dozen.

_XENT_REDUCTIONS = ("none", "sum", "mean")


def _xent_infer(logits, target, *, ignore_index, label_smoothing, reduction):
    if logits.ndim != 2 or target.ndim != 1 or target.shape[0] != logits.shape[0]:
        raise ShapeError(f"expects logits (N, C) and target (N,), got {logits.shape} and "
                         f"{target.shape}")
    if target.dtype.kind not in "iu":
        raise DTypeError(f"target must hold class indices (integers), got {target.dtype}")
    if reduction not in _XENT_REDUCTIONS:
        raise ArgumentError(f"reduction must be one of {_XENT_REDUCTIONS}, got {reduction!r}")
    return ((logits.shape[0],) if reduction == "none" else ()), logits.dtype


def _xent_vjp(g, out, logits, target, **attrs):
    return bind(softmax_cross_entropy_grad_p, logits, target, g, **attrs), None


def _xent_grad_infer(logits, target, g, *, ignore_index, label_smoothing, reduction):
    _xent_infer(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                reduction=reduction)
    return logits.shape, logits.dtype


def _xent_grad_vjp(h, out, logits, target, g, ignore_index, label_smoothing, reduction):
    """The gradient is a[i] * (softmax_i - const), a = g * valid (/ count for the mean): its
    own derivative in the logits is softmax's Jacobian scaled by a; in g, the unit-g one."""
    from .creation import ones_like
    from .reduce import sum as sum_
    from .shape import expand_dims
    attrs = dict(ignore_index=ignore_index, label_smoothing=label_smoothing,
                 reduction=reduction)
    glogits = gg = None
    if logits.requires_grad:
        valid = target != ignore_index
        a = g * valid
        if reduction == "mean":
            a = a / sum_(valid)
        s = softmax(logits, axis=1)
        glogits = expand_dims(a, 1) * s * (h - sum_(h * s, axis=1, keepdims=True))
    if g.requires_grad:
        unit = bind(softmax_cross_entropy_grad_p, logits, target, ones_like(g), **attrs)
        gg = sum_(h * unit, axis=1) if reduction == "none" else sum_(h * unit)
    return glogits, None, gg


_XENT = dict(ignore_index=A.INT, label_smoothing=A.FLOAT, reduction=A.Choice(*_XENT_REDUCTIONS))
softmax_cross_entropy_p = primitive("softmax_cross_entropy", _xent_infer, _xent_vjp,
                                    normalize=promotion.lift, attrs=_XENT, batch=batching.xent_rule,
                                    cache_rule="compiled")
# d loss / d logits_i = a_i (softmax_i - (1 - eps) onehot(t_i) - eps / C), 0 if ignored.
softmax_cross_entropy_grad_p = primitive("softmax_cross_entropy_grad", _xent_grad_infer,
                                         _xent_grad_vjp, normalize=promotion.lift, attrs=_XENT,
                                         batch=batching.xent_grad_rule, cache_rule="compiled")


def softmax_cross_entropy(logits, target, ignore_index: int = -100,
                          label_smoothing: float = 0.0, reduction: str = "mean"):
    """-log softmax(logits)[target] per row (label-smoothed; 0 where target is
    ignore_index), reduced: 'none', 'sum', or 'mean' over the counted rows. The fused form
    of cross_entropy's common case, forward and back."""
    op = "softmax_cross_entropy"
    return bind(softmax_cross_entropy_p, logits, target,
                ignore_index=as_int(ignore_index, "ignore_index", op),
                label_smoothing=as_float(label_smoothing, "label_smoothing", op),
                reduction=as_choice(reduction, "reduction", op, _XENT_REDUCTIONS))


# ---- composite activations -----------------------------------------------------------------
# Written in elementwise ops (so they differentiate, capture and run on any device), with the
# derivative PyTorch documents at the kinks: the flat side's (0) at a clamp's bounds.
# rill.nn.functional wraps them with PyTorch's `inplace=` argument.

# SELU's constants (Klambauer et al. 2017), to the precision float64 holds.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _float_tensor(x, op):
    from .arguments import as_tensor
    x = as_tensor(x, "input", op)
    if not x.dtype.is_floating:
        raise DTypeError(f"expects a floating tensor, got {x.dtype}; cast it first "
                         "(x.astype(rill.float32))", op=op)
    return x


def selu(x):
    """scale * elu(x, alpha) with the self-normalizing constants SELU_ALPHA, SELU_SCALE."""
    from .elementwise import elu
    return elu(_float_tensor(x, "selu"), SELU_ALPHA) * SELU_SCALE


def celu(x, alpha: float = 1.0):
    """x where x > 0, alpha * (exp(x / alpha) - 1) elsewhere (continuous in x for any alpha)."""
    from .elementwise import elu
    alpha = as_float(alpha, "alpha", "celu")
    if alpha == 0:
        raise ArgumentError("alpha must not be 0 (celu divides by it)", op="celu")
    x = _float_tensor(x, "celu")
    return elu(x / alpha, 1.0) * alpha if alpha != 1.0 else elu(x, 1.0)


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0):
    """x clamped to [min_val, max_val]; the gradient is 0 on and beyond the bounds."""
    from .creation import full_like
    from .elementwise import logical_and, where
    lo, hi = as_float(min_val, "min_val", "hardtanh"), as_float(max_val, "max_val", "hardtanh")
    if lo > hi:
        raise ArgumentError(f"min_val ({lo}) must not exceed max_val ({hi})", op="hardtanh")
    x = _float_tensor(x, "hardtanh")
    # The bounds as x's dtype: where() of two Python floats alone would make float32.
    return where(logical_and(x > lo, x < hi), x, where(x <= lo, full_like(x, lo), hi))


def relu6(x):
    """min(max(x, 0), 6)."""
    return hardtanh(x, 0.0, 6.0)


def hardsigmoid(x):
    """A piecewise-linear sigmoid: 0 below -3, 1 above 3, x / 6 + 1/2 between."""
    from .creation import zeros_like
    from .elementwise import logical_and, where
    x = _float_tensor(x, "hardsigmoid")
    return where(logical_and(x > -3.0, x < 3.0), x / 6.0 + 0.5,
                 where(x <= -3.0, zeros_like(x), 1.0))


def hardswish(x):
    """x * hardsigmoid(x): 0 below -3, x above 3, x (x + 3) / 6 between (MobileNetV3)."""
    from .elementwise import where
    x = _float_tensor(x, "hardswish")
    # The outer branches own the bounds, so the gradient there is 0 and 1, as PyTorch's.
    return where(x <= -3.0, 0.0, where(x < 3.0, x * (x + 3.0) / 6.0, x))


def mish(x):
    """x * tanh(softplus(x)) (Misra 2019)."""
    from .elementwise import softplus, tanh
    x = _float_tensor(x, "mish")
    return x * tanh(softplus(x))


def softsign(x):
    """x / (1 + |x|)."""
    from .elementwise import abs as abs_
    x = _float_tensor(x, "softsign")
    return x / (abs_(x) + 1.0)


def tanhshrink(x):
    """x - tanh(x)."""
    from .elementwise import tanh
    x = _float_tensor(x, "tanhshrink")
    return x - tanh(x)


def logsigmoid(x):
    """log(sigmoid(x)) = -softplus(-x), without overflow for large |x|."""
    from .elementwise import softplus
    return -softplus(-_float_tensor(x, "logsigmoid"))


def threshold(x, threshold: float, value: float):  # noqa: F811 - PyTorch's argument name
    """x where x > threshold, else value."""
    from .elementwise import where
    t, v = as_float(threshold, "threshold", "threshold"), as_float(value, "value", "threshold")
    x = _float_tensor(x, "threshold")
    return where(x > t, x, v)


def prelu(x, weight):
    """x where x > 0, weight * x elsewhere; weight holds one slope, or one per channel
    (axis 1 of x; an input with fewer than 2 axes has one channel, as PyTorch)."""
    from .arguments import as_tensor
    from .elementwise import where
    from .shape import reshape
    x = _float_tensor(x, "prelu")
    weight = as_tensor(weight, "weight", "prelu")
    if weight.ndim > 1:
        raise ShapeError(f"weight must be 1-d (one slope, or one per channel), got "
                         f"{weight.shape}", op="prelu")
    n = weight.size
    if n != 1:
        if x.ndim < 2 or x.shape[1] != n:
            raise ShapeError(f"{n} slopes need {n} channels on axis 1 of the input, got "
                             f"shape {x.shape}", op="prelu")
        weight = reshape(weight, (n,) + (1,) * (x.ndim - 2))
    elif weight.ndim:
        weight = reshape(weight, ())
    return where(x > 0, x, weight * x)


def glu(x, dim: int = -1):
    """a * sigmoid(b), where a and b are the two halves of x along `dim`."""
    from .elementwise import sigmoid
    from .rules import normalize_axis
    from .shape import split
    x = _float_tensor(x, "glu")
    if x.ndim == 0:
        raise ShapeError("glu needs at least one axis to halve", op="glu")
    axis = normalize_axis(as_int(dim, "dim", "glu"), x.ndim)
    n = x.shape[axis]
    if n % 2:
        raise ShapeError(f"glu halves axis {dim}, whose length {n} is odd", op="glu")
    a, b = split(x, [n // 2, n // 2], axis=axis)
    return a * sigmoid(b)


def softmin(x, axis: int = -1):
    """softmax(-x) along `axis`: the smallest entries get the largest weights."""
    return softmax(-_float_tensor(x, "softmin"), axis)
