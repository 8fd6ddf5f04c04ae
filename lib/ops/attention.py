"""scaled_dot_product_attention as a fused primitive, forward and back.

Over batches of queries q (..., L, E), keys k (..., S, E) and values v (..., S, Ev) with the
same leading axes, and an optional additive float mask (2-d or more) broadcastable to
(..., L, S):
    s   = q @ k^T * scale + mask        (and s = -inf where is_causal and key j > query i)
    lse = logsumexp(s, axis=-1)         (per row; -inf for a row with no key left)
    out = exp(s - lse) @ v              (a row with no key left gives 0, as PyTorch)
The kernels never build a (..., L, S) mask: causal positions are masked as the scores are
made. The forward also returns lse (kept for the backward only, never differentiated), so
the backward recomputes the probabilities p = exp(s - lse) instead of storing them:
    D  = sum(g * out, axis=-1),  ds = p * (g @ v^T - D)
    dq = ds @ k * scale,  dk = ds^T @ q * scale,  dv = p^T @ g
The mask receives no gradient here: rill.nn.functional.scaled_dot_product_attention takes
its composite path when the mask needs one. Second order (create_graph) differentiates the
same formulas written in rill ops.
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

ATTRS = dict(scale=A.FLOAT, is_causal=A.BOOL)


def lse_dtype(dtype):
    """The row statistics' dtype: float64 for float64 inputs, float32 otherwise (the kernels
    compute float16 and bfloat16 in float32)."""
    return dt.float64 if dtype is dt.float64 else dt.float32


def check_inputs(q, k, v, mask) -> tuple:
    """The leading (batch) axes; a ShapeError or DTypeError naming the shapes otherwise."""
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim or q.shape[-1] != k.shape[-1] or \
            k.shape[-2] != v.shape[-2] or q.shape[:-2] != k.shape[:-2] or \
            q.shape[:-2] != v.shape[:-2]:
        raise ShapeError(f"expects q (..., L, E), k (..., S, E), v (..., S, Ev) with the same "
                         f"leading axes; got {q.shape}, {k.shape}, {v.shape}")
    for t in (q, k, v) + (() if mask is None else (mask,)):
        if t.dtype.kind != "f" or t.dtype is not q.dtype:
            raise DTypeError(f"expects q, k, v (and mask) of one floating dtype; got "
                             f"{q.dtype}, {k.dtype}, {v.dtype}"
                             + ("" if mask is None else f", {mask.dtype}"))
    if mask is not None:
        full = tuple(q.shape[:-1]) + (k.shape[-2],)
        if not 2 <= mask.ndim <= q.ndim or \
                any(m not in (1, f) for m, f in zip(mask.shape[::-1], full[::-1])):
            raise ShapeError(f"mask {mask.shape} does not broadcast to the scores {full} "
                             f"(give it 2 to {q.ndim} axes)")
    return tuple(q.shape[:-2])


def _infer(q, k, v, mask=None, *, scale, is_causal):
    batch = check_inputs(q, k, v, mask)
    length = q.shape[-2]
    return [(batch + (length, v.shape[-1]), q.dtype), (batch + (length,), lse_dtype(q.dtype))]


def _vjp(g, out, q, k, v, mask=None, *, scale, is_causal):
    (g,) = g
    out, lse = out
    extra = () if mask is None else (None,)
    if current().grad_enabled:  # create_graph: a backward that can itself be differentiated
        return composite_grads(g, q, k, v, mask, scale, is_causal) + extra
    return tuple(bind(attention_grad_p, g, q, k, v, out, lse, *(() if mask is None else (mask,)),
                      scale=scale, is_causal=is_causal)) + extra


def _grad_infer(g, q, k, v, out, lse, mask=None, *, scale, is_causal):
    batch = check_inputs(q, k, v, mask)
    length = q.shape[-2]
    if tuple(g.shape) != batch + (length, v.shape[-1]) or tuple(out.shape) != tuple(g.shape) \
            or tuple(lse.shape) != batch + (length,):
        raise ShapeError(f"gradient {g.shape}, output {out.shape} and row statistics "
                         f"{lse.shape} do not match q {q.shape} and v {v.shape}")
    return [(q.shape, q.dtype), (k.shape, k.dtype), (v.shape, v.dtype)]


def composite_grads(g, q, k, v, mask, scale, is_causal):
    """(dq, dk, dv) in rill ops, probabilities recomputed from q and k (differentiable)."""
    from .activation import softmax
    from .linalg import matmul
    from .reduce import sum as sum_
    from .shape import swapaxes
    p = softmax(scores(q, k, mask, scale, is_causal), axis=-1)
    dp = matmul(g, swapaxes(v, -1, -2))
    ds = p * (dp - sum_(dp * p, axis=-1, keepdims=True))
    return (matmul(ds, k) * scale, matmul(swapaxes(ds, -1, -2), q) * scale,
            matmul(swapaxes(p, -1, -2), g))


def scores(q, k, mask, scale, is_causal):
    """q @ k^T * scale + mask, -inf above the diagonal when causal (composite, rill ops)."""
    from .creation import ones
    from .elementwise import where
    from .linalg import matmul
    from .shape import swapaxes, tril
    s = matmul(q, swapaxes(k, -1, -2)) * scale
    if mask is not None:
        s = s + mask
    if is_causal:
        s = where(tril(ones(q.shape[-2], k.shape[-2], dtype=dt.bool_, device=q.device)), s,
                  float("-inf"))
    return s


attention_p = primitive("attention", _infer, _vjp, normalize=promotion.common_float,
                        multiple_results=True, save_output=True, residuals=lambda **_: 1,
                        attrs=ATTRS, batch=batching.leading)
attention_grad_p = primitive("attention_grad", _grad_infer, None, multiple_results=True,
                             attrs=ATTRS, batch=batching.attention_grad_rule)


def attention(q, k, v, mask=None, *, scale: float, is_causal: bool):
    """The fused primitive's output (its row statistics dropped). Inputs as checked above:
    same leading axes, one float dtype, mask additive (2 or more axes, broadcast from
    the right). The public form, with PyTorch's
    arguments, broadcasting, bool masks and dropout, is
    rill.nn.functional.scaled_dot_product_attention."""
    args = (q, k, v) if mask is None else (q, k, v, mask)
    return bind(attention_p, *args, scale=scale, is_causal=is_causal)[0]
