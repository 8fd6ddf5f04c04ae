"""layer_norm: a fused primitive forward and back.

Over rows of D = prod(normalized_shape) trailing values:
    mu = mean(x), rstd = 1 / sqrt(mean((x - mu)^2) + eps), xhat = (x - mu) * rstd
    y  = xhat * w + b
One pass-per-row kernel each way instead of ~10 elementwise and reduction ops; the
backward primitive returns (dx, dw, db):
    a = g * w,  dx = rstd * (a - mean(a) - xhat * mean(a * xhat))
    dw = sum over rows of g * xhat,  db = sum over rows of g
Its own gradient (second order) is written below in rill ops.
"""
from __future__ import annotations

from ..eager.bind import bind
from ..errors import ShapeError
from . import attrs as A
from . import batching
from . import promotion
from .arguments import as_float, as_int
from .primitive import primitive


def _infer(x, w, b, *, eps, axes):
    _check(x, w, b, axes)
    return x.shape, x.dtype


def _check(x, w, b, axes):
    shape = tuple(x.shape[x.ndim - axes:])
    if axes < 1 or axes > x.ndim:
        raise ShapeError(f"normalizes the last {axes} axes of an input {x.shape}")
    for t, what in ((w, "weight"), (b, "bias")):
        if tuple(t.shape) != shape:
            raise ShapeError(f"{what} must have shape {shape}, got {t.shape}")


def _grad_infer(g, x, w, *, eps, axes):
    _check(x, w, w, axes)
    if tuple(g.shape) != tuple(x.shape):
        raise ShapeError(f"gradient {g.shape} does not match the input {x.shape}")
    return [(x.shape, x.dtype), (w.shape, w.dtype), (w.shape, w.dtype)]


def _vjp(g, out, x, w, b, eps, axes):
    return bind(layer_norm_grad_p, g, x, w, eps=eps, axes=axes)


def _rows(t, axes):
    return tuple(range(t.ndim - axes, t.ndim))


def _grad_vjp(cot, out, g, x, w, eps, axes):
    """Second order: the derivative of (dx, dw, db) in g, x and w (derivation in the module
    docstring's notation; c = cotangent of dx, P(v) = rstd * (v - mean(v) - xhat*mean(v*xhat)))."""
    from .elementwise import rsqrt, square
    from .reduce import mean, sum as sum_
    from .creation import zeros_like
    cdx, cdw, cdb = cot  # None where an output's cotangent is zero
    ax = _rows(x, axes)
    lead = tuple(range(x.ndim - axes))
    mu = mean(x, axis=ax, keepdims=True)
    centered = x - mu
    rstd = rsqrt(mean(square(centered), axis=ax, keepdims=True) + eps)
    xhat = centered * rstd

    def project(v):
        return rstd * (v - mean(v, axis=ax, keepdims=True)
                       - xhat * mean(v * xhat, axis=ax, keepdims=True))

    a = g * w
    grad_g = zeros_like(g) if cdb is None else zeros_like(g) + cdb
    grad_x_hat = zeros_like(x)
    grad_w = zeros_like(w)
    grad_x = zeros_like(x)
    if cdw is not None:
        grad_g = grad_g + cdw * xhat
        grad_x_hat = grad_x_hat + cdw * g
    if cdx is not None:
        pc = project(cdx)
        grad_g = grad_g + pc * w
        grad_w = grad_w + sum_(pc * g, axis=lead)
        grad_x_hat = grad_x_hat - rstd * (cdx * mean(a * xhat, axis=ax, keepdims=True)
                                          + a * mean(cdx * xhat, axis=ax, keepdims=True))
        dx = project(a)
        grad_x = grad_x - rstd * xhat * mean(cdx * dx, axis=ax, keepdims=True)
    grad_x = grad_x + project(grad_x_hat)
    return grad_g, grad_x, grad_w


layer_norm_p = primitive("layer_norm", _infer, _vjp, normalize=promotion.common_float,
                         attrs=dict(eps=A.FLOAT, axes=A.INT), batch=batching.layer_norm_rule,
                         cache_rule="compiled")
layer_norm_grad_p = primitive("layer_norm_grad", _grad_infer, _grad_vjp,
                              normalize=promotion.common_float, multiple_results=True,
                              attrs=dict(eps=A.FLOAT, axes=A.INT),
                              batch=batching.layer_norm_grad_rule, cache_rule="compiled")


def layer_norm(x, weight, bias, eps: float, axes: int):
    """The fused primitive: normalize the last `axes` axes, then scale by weight and shift by
    bias (both of the normalized shape). rill.nn.functional.layer_norm is the public form."""
    return bind(layer_norm_p, x, weight, bias, eps=as_float(eps, "eps", "layer_norm"),
                axes=as_int(axes, "axes", "layer_norm"))
