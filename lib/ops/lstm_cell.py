"""One LSTM step as a fused primitive: the recurrent GEMM and the four gates' elementwise math in
one kernel, and its gradient's elementwise math in another.

    lstm_cell(x_proj, h, c, w_hh[, b_hh]) -> (h', c'; acts, tanh_c')
        gates = x_proj + h @ w_hh.T + b_hh, split i, f, g, o (PyTorch's order)
        c' = sigmoid(f) * c + sigmoid(i) * tanh(g);  h' = sigmoid(o) * tanh(c')
    x_proj (N, 4H), h (N, K) (K = H, or proj_size), c (N, H), w_hh (4H, K), b_hh (4H,).

`acts` (the four gates after their activations, (N, 4H)) and `tanh_c'` are residual outputs:
saved for the gradient only. The gradient's elementwise part is `lstm_cell_grad`; its products
with w_hh and h stay rill ops (matmul, linear_weight_grad, sum over rows), so that a captured
scan's gradient sums the weight gradients of all steps in one product after the loop
(control/autodiff.py:hoist_sums).

Composed of rill ops, one step is ~15 nodes, each a small NumPy call plus the executor's
per-node cost, run 50 times forward and 50 times back in a sequence; fused, it is one GEMM and
a few whole-array passes. CPU only: other devices (and dtypes the kernel does not take) run
the composite, `lstm_cell_composite`.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..eager.bind import bind
from ..eager.context import current
from ..errors import DTypeError, ShapeError
from . import batching
from . import promotion
from .primitive import primitive

# The float dtypes the NumPy kernels take (bfloat16 storage would need rounding after each
# pass; float16 would lose the composite's per-op rounding): anything else runs the composite.
FUSED_DTYPES = (dt.float32, dt.float64)


def _infer(x_proj, h, c, w_hh, *bias):
    if x_proj.ndim != 2 or h.ndim != 2 or c.ndim != 2 or w_hh.ndim != 2:
        raise ShapeError(f"expects x_proj (N, 4H), h (N, K), c (N, H) and w_hh (4H, K); got "
                         f"{x_proj.shape}, {h.shape}, {c.shape} and {w_hh.shape}")
    n, four_h = x_proj.shape
    hidden = c.shape[1]
    if four_h != 4 * hidden or tuple(c.shape) != (n, hidden) or h.shape[0] != n or \
            tuple(w_hh.shape) != (four_h, h.shape[1]):
        raise ShapeError(f"expects x_proj (N, 4H), h (N, K), c (N, H) and w_hh (4H, K); got "
                         f"{x_proj.shape}, {h.shape}, {c.shape} and {w_hh.shape}")
    if bias and tuple(bias[0].shape) != (four_h,):
        raise ShapeError(f"b_hh must have shape ({four_h},), got {bias[0].shape}")
    for t in (h, c, w_hh) + bias:
        if t.dtype is not x_proj.dtype:
            raise DTypeError(f"expects one float dtype, got {x_proj.dtype} and {t.dtype}")
    if x_proj.dtype not in FUSED_DTYPES:
        raise DTypeError(f"takes float32 or float64, got {x_proj.dtype} (use "
                         "lstm_cell_composite)")
    state = ((n, hidden), x_proj.dtype)
    return [state, state, ((n, four_h), x_proj.dtype), state]  # h', c'; acts, tanh_c'


def _vjp(g, out, x_proj, h, c, w_hh, *bias):
    from ..ops.creation import zeros_like
    from .linalg import linear_weight_grad_p, matmul
    from .reduce import sum as sum_
    g_h, g_c = g
    _, c_new, acts, tanh_c = out
    g_h = zeros_like(c_new) if g_h is None else g_h
    g_c = zeros_like(c_new) if g_c is None else g_c
    if current().grad_enabled:  # create_graph: a gradient that can itself be differentiated
        # The saved acts and tanh_c are residuals, off the tape: recomputed here in rill ops.
        acts, tanh_c = _activations(x_proj, h, c, w_hh, *bias)
        d_gates, d_c = _composite_grad(acts, tanh_c, c, g_h, g_c)
    else:
        d_gates, d_c = bind(lstm_cell_grad_p, acts, tanh_c, c, g_h, g_c)
    grads = [d_gates if x_proj.requires_grad else None,
             matmul(d_gates, w_hh) if h.requires_grad else None,
             d_c if c.requires_grad else None,
             bind(linear_weight_grad_p, d_gates, h) if w_hh.requires_grad else None]
    if bias:
        grads.append(sum_(d_gates, axis=0) if bias[0].requires_grad else None)
    return tuple(grads)


def _grad_infer(acts, tanh_c, c, g_h, g_c):
    n, hidden = c.shape
    if tuple(acts.shape) != (n, 4 * hidden) or any(
            tuple(t.shape) != (n, hidden) for t in (tanh_c, g_h, g_c)):
        raise ShapeError(f"expects acts (N, 4H) and tanh_c, c, g_h, g_c (N, H); got "
                         f"{acts.shape}, {tanh_c.shape}, {c.shape}, {g_h.shape}, {g_c.shape}")
    return [(tuple(acts.shape), acts.dtype), ((n, hidden), c.dtype)]


def _activations(x_proj, h, c, w_hh, *bias):
    """(acts, tanh_c') in rill ops, as the kernel saves them (differentiable)."""
    from .linalg import linear
    from .elementwise import sigmoid, tanh
    from .shape import concat, split
    i, f, g, o = split(x_proj + linear(h, w_hh, *bias), x_proj.shape[-1] // 4, axis=-1)
    i, f, g, o = sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
    return concat([i, f, g, o], axis=-1), tanh(f * c + i * g)


def _composite_grad(acts, tanh_c, c, g_h, g_c):
    """lstm_cell_grad in rill ops (differentiable: for create_graph)."""
    from .shape import concat, split
    i, f, g, o = split(acts, acts.shape[-1] // 4, axis=-1)
    d_c = g_c + g_h * o * (1 - tanh_c * tanh_c)
    d_gates = concat([d_c * g * i * (1 - i), d_c * c * f * (1 - f), d_c * i * (1 - g * g),
                      g_h * tanh_c * o * (1 - o)], axis=-1)
    return d_gates, d_c * f


lstm_cell_p = primitive("lstm_cell", _infer, _vjp, normalize=promotion.lift,
                        multiple_results=True, save_output=True, residuals=lambda **_: 2,
                        attrs={}, cpu_only="a CPU fast path: other devices run the composite "
                                           "(lstm_cell_composite)", batch=batching.folding(3))
lstm_cell_grad_p = primitive("lstm_cell_grad", _grad_infer, None, multiple_results=True,
                             attrs={}, cpu_only="the gradient of lstm_cell (CPU only)")


def lstm_cell_composite(x_proj, h, c, w_hh, b_hh=None):
    """One LSTM step in rill ops: (h', c'), as lstm_cell (any device, dtype and batch shape)."""
    from .linalg import linear
    from .elementwise import sigmoid, tanh
    from .shape import split
    gates = x_proj + linear(h, w_hh, b_hh)
    i, f, g, o = split(gates, gates.shape[-1] // 4, axis=-1)
    c = sigmoid(f) * c + sigmoid(i) * tanh(g)
    return sigmoid(o) * tanh(c), c


def lstm_cell(x_proj, h, c, w_hh, b_hh=None):
    """One LSTM step (h', c') from the input's projection x_proj = x @ W_ih.T + b_ih: the fused
    primitive where it has a kernel (CPU, float32/float64, a batch axis), else the composite."""
    tensors = (x_proj, h, c, w_hh) + (() if b_hh is None else (b_hh,))
    fused = all(getattr(t, "device", None) is not None and t.device.kind == "cpu" and
                t.dtype in FUSED_DTYPES and t.dtype is x_proj.dtype for t in tensors) and \
        x_proj.ndim == 2
    if not fused:
        return lstm_cell_composite(x_proj, h, c, w_hh, b_hh)
    h_new, c_new, _, _ = bind(lstm_cell_p, *tensors)
    return h_new, c_new
