"""softmax and log_softmax: fused primitives, since each is one pass over the data with a
gradient rule that needs only the output (no exp/sum intermediates kept for the tape)."""
from __future__ import annotations

from ..eager.bind import bind
from . import attrs as A
from . import promotion
from .arguments import as_axis, as_choice, as_float, as_int
from .primitive import primitive
from .rules import normalize_axis


def _infer(x, *, axis):
    normalize_axis(axis, max(x.ndim, 1))  # a 0-d tensor is its own one-element row
    return x.shape, x.dtype


def _row_axis(x, axis):
    return axis if x.ndim else None


def _softmax_vjp(g, y, x, axis):
    from .reduce import sum as sum_
    gy = g * y
    return (gy - y * sum_(gy, axis=_row_axis(y, axis), keepdims=True),)


def _log_softmax_vjp(g, y, x, axis):
    from .elementwise import exp
    from .reduce import sum as sum_
    return (g - exp(y) * sum_(g, axis=_row_axis(y, axis), keepdims=True),)


softmax_p = primitive("softmax", _infer, _softmax_vjp, normalize=promotion.floating,
                      save_output=True, attrs={"axis": A.AXIS})
log_softmax_p = primitive("log_softmax", _infer, _log_softmax_vjp,
                          normalize=promotion.floating, save_output=True, attrs={"axis": A.AXIS})


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
    from ..errors import ArgumentError, DTypeError, ShapeError
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
                                    normalize=promotion.lift, attrs=_XENT)
# d loss / d logits_i = a_i (softmax_i - (1 - eps) onehot(t_i) - eps / C), 0 if ignored.
softmax_cross_entropy_grad_p = primitive("softmax_cross_entropy_grad", _xent_grad_infer,
                                         _xent_grad_vjp, normalize=promotion.lift, attrs=_XENT)


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
