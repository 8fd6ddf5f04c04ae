"""softmax and log_softmax: fused primitives, since each is one pass over the data with a
gradient rule that needs only the output (no exp/sum intermediates kept for the tape)."""
from __future__ import annotations

from ..eager.bind import bind
from . import promotion
from .primitive import primitive
from .rules import normalize_axis


def _infer(x, axis):
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
                      save_output=True)
log_softmax_p = primitive("log_softmax", _infer, _log_softmax_vjp,
                          normalize=promotion.floating, save_output=True)


def softmax(x, axis: int = -1):
    """exp(x) / sum(exp(x)) along `axis`, computed without overflow.

    >>> rill.nn.functional.softmax(rill.tensor([0.0, 0.0]))
    tensor([0.5, 0.5])
    """
    return bind(softmax_p, x, axis=axis)


def log_softmax(x, axis: int = -1):
    """x - logsumexp(x) along `axis`.

    >>> rill.nn.functional.log_softmax(rill.tensor([0.0, 0.0])).exp()
    tensor([0.5, 0.5])
    """
    return bind(log_softmax_p, x, axis=axis)
