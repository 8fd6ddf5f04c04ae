"""Training-mode batch normalization as a fused primitive, forward and back (cpu and gpu).

Over each channel c (axis 1) of an input (N, C, ...), with count = N * prod(spatial):
    mean = sum(x) / count,  var = sum((x - mean)^2) / count  (biased),  rstd = 1/sqrt(var + eps)
    y = (x - mean) * rstd * w + b
    batch_norm(x, w, b; eps) -> (y; mean, var)
mean and var are residual outputs: kept for the gradient, and read by nn.functional.batch_norm
to update the running statistics; they carry no gradient of their own.

The gradient, with xhat = (x - mean) * rstd and sums over a channel's values:
    db = sum(g),  dw = sum(g * xhat),  dx = w * rstd * (g - db / count - xhat * dw / count)
    batch_norm_grad(g, x, w, mean, var; eps) -> (dx, dw, db)

Composed of rill ops a training batch norm is ~10 nodes forward and ~25 back, each a whole
pass over the activations (the CNN bench's conv net spent ~5 ms of a 19 ms captured step in
them); fused, the forward is two sweeps over x and the backward two over x and g (kernels:
kernels/numpy and kernels/triton, batch_norm.py). Other dtypes (and a gradient that must
itself be differentiated) run the composite, written here in rill ops.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..eager.bind import bind
from ..eager.context import current
from ..errors import DTypeError, ShapeError
from . import attrs as A
from . import batching
from . import promotion
from .primitive import primitive

# The dtypes the NumPy kernels take; others (float16, bfloat16, complex) run the composite,
# whose per-op rounding the kernels would not reproduce.
FUSED_DTYPES = (dt.float32, dt.float64)


def _channels(x, *per_channel):
    if x.ndim < 2:
        raise ShapeError(f"expects (N, C, ...), got {x.shape}")
    c = x.shape[1]
    for t in per_channel:
        if tuple(t.shape) != (c,):
            raise ShapeError(f"per-channel tensors must have shape ({c},), got {t.shape}")
    return c


def _infer(x, w, b, *, eps):
    c = _channels(x, w, b)
    if x.dtype not in FUSED_DTYPES:
        raise DTypeError(f"takes float32 or float64, got {x.dtype} (other dtypes run the "
                         "composite: rill.nn.functional.batch_norm chooses)")
    if x.size // max(c, 1) <= 1:
        raise ShapeError(f"training batch_norm needs more than one value per channel, got "
                         f"input {x.shape}")
    stats = ((c,), x.dtype)
    return [(tuple(x.shape), x.dtype), stats, stats]  # y; mean, var


def _grad_infer(g, x, w, mean, var, *, eps):
    _channels(x, w, mean, var)
    if tuple(g.shape) != tuple(x.shape):
        raise ShapeError(f"gradient {g.shape} does not match the input {x.shape}")
    return [(tuple(x.shape), x.dtype), (tuple(w.shape), w.dtype), (tuple(w.shape), w.dtype)]


def _vjp(g, out, x, w, b, eps):
    (g_y,) = g
    if g_y is None:
        return None, None, None
    if current().grad_enabled:  # create_graph: a gradient that can itself be differentiated
        dx, dw, db = composite_grad(g_y, x, w, eps)
    else:
        _, mean, var = out
        dx, dw, db = bind(batch_norm_grad_p, g_y, x, w, mean, var, eps=eps)
    return (dx if x.requires_grad else None, dw if w.requires_grad else None,
            db if b.requires_grad else None)


def _per_channel(x):
    """(axes summed per channel, shape that broadcasts a (C,) tensor against x)."""
    return (0,) + tuple(range(2, x.ndim)), (1, x.shape[1]) + (1,) * (x.ndim - 2)


def composite(x, w, b, eps):
    """(y, mean, var) in rill ops: any device and dtype, differentiable."""
    from .elementwise import rsqrt, square
    from .reduce import mean as mean_
    from .shape import reshape
    axes, shape = _per_channel(x)
    mu = mean_(x, axis=axes, keepdims=True)
    centered = x - mu
    var = mean_(square(centered), axis=axes, keepdims=True)
    y = centered * rsqrt(var + eps)
    if w is not None:
        y = y * reshape(w, shape)
    if b is not None:
        y = y + reshape(b, shape)
    c = x.shape[1]
    return y, reshape(mu, (c,)), reshape(var, (c,))


def composite_grad(g, x, w, eps):
    """batch_norm_grad in rill ops (differentiable in g, x and w: for create_graph)."""
    from .elementwise import rsqrt, square
    from .reduce import mean as mean_, sum as sum_
    from .shape import reshape
    axes, shape = _per_channel(x)
    mu = mean_(x, axis=axes, keepdims=True)
    centered = x - mu
    rstd = rsqrt(mean_(square(centered), axis=axes, keepdims=True) + eps)
    xhat = centered * rstd
    db = sum_(g, axis=axes)
    dw = sum_(g * xhat, axis=axes)
    mean_g = mean_(g, axis=axes, keepdims=True)
    mean_gx = mean_(g * xhat, axis=axes, keepdims=True)
    dx = reshape(w, shape) * rstd * (g - mean_g - xhat * mean_gx)
    return dx, dw, db


batch_norm_p = primitive("batch_norm_train", _infer, _vjp, normalize=promotion.common_float,
                         multiple_results=True, save_output=True, residuals=lambda **_: 2,
                         attrs=dict(eps=A.FLOAT), batch=batching.batch_norm_rule)
batch_norm_grad_p = primitive("batch_norm_grad", _grad_infer, None,
                              normalize=promotion.common_float, multiple_results=True,
                              attrs=dict(eps=A.FLOAT), batch=batching.batch_norm_grad_rule,
                              cache_rule="compiled")


def batch_norm_train(x, w, b, eps: float):
    """(y, mean, var) of a training batch norm over channel axis 1 (w, b: (C,) or None): the
    fused primitive where it has kernels (cpu and gpu, float32/float64), else the composite."""
    c = x.shape[1] if x.ndim >= 2 else None
    fused = x.device.kind in ("cpu", "gpu") and x.dtype in FUSED_DTYPES and x.ndim >= 2 and all(
        t is None or (t.device == x.device and t.dtype is x.dtype) for t in (w, b))
    if not fused:
        return composite(x, w, b, eps)
    from .creation import ones, zeros
    w = ones(c, dtype=x.dtype, device=x.device) if w is None else w
    b = zeros(c, dtype=x.dtype, device=x.device) if b is None else b
    y, mean, var = bind(batch_norm_p, x, w, b, eps=eps)
    return y, mean, var
