"""A whole LSTM layer over a sequence as one primitive, as cuDNN's and oneDNN's RNNs are.

    lstm_sequence(proj, h0, c0, w_hh[, b_hh], reverse) -> (hs, h_T, c_T; acts, tanh_cs, cs)
        proj (T, N, 4H): every step's input projection x_t @ W_ih.T + b_ih, made by one
        matmul before; each step as lstm_cell (lib/ops/lstm_cell.py), in time order or, with
        reverse, from the last step back. hs (T, N, H) holds each step's h, at its step's
        place; h_T, c_T are the states after the last step run.

acts (T, N, 4H), tanh_cs and cs (T, N, H) are residuals: saved for the gradient only.

Why one primitive: a step per op costs a Python dispatch and a tape node eagerly, an
executor step captured, each time step; and a per-step weight gradient is a thin GEMM per
step. Here the forward is one kernel call, and the gradient (`lstm_sequence_grad`) runs the
sequential part (one (N, 4H) x (4H, H) product per step) in one loop, then the weight
gradient as ONE product over all steps: (4H, T*N) x (T*N, H). Under create_graph the vjp
recomputes the layer as lstm_cell composites and differentiates them (differentiable to any
order). CPU, float32/float64; elsewhere nn.LSTM runs its per-step cells.
"""
from __future__ import annotations

from ..eager.bind import bind
from ..errors import DTypeError, ShapeError
from . import attrs as A
from . import promotion
from .lstm_cell import FUSED_DTYPES
from .primitive import primitive


def _infer(proj, h0, c0, w_hh, *bias, reverse):
    if proj.ndim != 3 or h0.ndim != 2 or c0.ndim != 2 or w_hh.ndim != 2:
        raise ShapeError(f"expects proj (T, N, 4H), h0 and c0 (N, H), w_hh (4H, H); got "
                         f"{proj.shape}, {h0.shape}, {c0.shape} and {w_hh.shape}")
    steps, n, four_h = proj.shape
    hidden = four_h // 4
    if four_h != 4 * hidden or tuple(h0.shape) != (n, hidden) or \
            tuple(c0.shape) != (n, hidden) or tuple(w_hh.shape) != (four_h, hidden):
        raise ShapeError(f"expects proj (T, N, 4H), h0 and c0 (N, H), w_hh (4H, H); got "
                         f"{proj.shape}, {h0.shape}, {c0.shape} and {w_hh.shape}")
    if steps == 0:
        raise ShapeError("an LSTM layer needs at least one step")
    if bias and tuple(bias[0].shape) != (four_h,):
        raise ShapeError(f"b_hh must have shape ({four_h},), got {bias[0].shape}")
    for t in (h0, c0, w_hh) + bias:
        if t.dtype is not proj.dtype:
            raise DTypeError(f"expects one float dtype, got {proj.dtype} and {t.dtype}")
    if proj.dtype not in FUSED_DTYPES:
        raise DTypeError(f"takes float32 or float64, got {proj.dtype}")
    seq, state = ((steps, n, hidden), proj.dtype), ((n, hidden), proj.dtype)
    return [seq, state, state, ((steps, n, four_h), proj.dtype), seq, seq]


def _vjp(g, out, proj, h0, c0, w_hh, *bias, reverse):
    from .creation import zeros_like
    _, _, _, acts, tanh_cs, cs = out  # the residuals are kept; an unused h_T may be gone
    g_hs = zeros_like(tanh_cs) if g[0] is None else g[0]
    g_ht, g_ct = (zeros_like(c0) if c is None else c for c in g[1:])
    grads = bind(lstm_sequence_grad_p, g_hs, g_ht, g_ct, h0, c0, w_hh, acts, tanh_cs, cs,
                 reverse=reverse)
    wanted = (proj, h0, c0, w_hh) + tuple(bias)
    return tuple(d if x.requires_grad else None for d, x in zip(grads, wanted))


def _grad_infer(g_hs, g_ht, g_ct, h0, c0, w_hh, acts, tanh_cs, cs, *, reverse):
    steps, n, hidden = tanh_cs.shape
    if tuple(acts.shape) != (steps, n, 4 * hidden) or any(
            tuple(t.shape) != (steps, n, hidden) for t in (g_hs, tanh_cs, cs)) or any(
            tuple(t.shape) != (n, hidden) for t in (g_ht, g_ct, h0, c0)):
        raise ShapeError("the gradient's inputs do not match one LSTM layer's shapes")
    four_h = (4 * hidden,)
    return [(tuple(acts.shape), acts.dtype), ((n, hidden), h0.dtype), ((n, hidden), c0.dtype),
            (tuple(w_hh.shape), w_hh.dtype), (four_h, w_hh.dtype)]


def lstm_sequence_composite(proj, h0, c0, w_hh, b_hh=None, *, reverse=False):
    """(hs, h_T, c_T) by per-step lstm_cell composites (any device and dtype)."""
    from .lstm_cell import lstm_cell_composite
    from .shape import stack
    steps = proj.shape[0]
    hs = [None] * steps
    h, c = h0, c0
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        h, c = lstm_cell_composite(proj[t], h, c, w_hh, b_hh)
        hs[t] = h
    return stack(hs, axis=0), h, c


lstm_sequence_p = primitive("lstm_sequence", _infer, _vjp, normalize=promotion.lift,
                            multiple_results=True, save_output=True, residuals=lambda **_: 3,
                            attrs={"reverse": A.BOOL}, composite=lstm_sequence_composite,
                            cpu_only="a CPU fast path: elsewhere nn.LSTM runs per-step cells")
lstm_sequence_grad_p = primitive("lstm_sequence_grad", _grad_infer, None,
                                 multiple_results=True, attrs={"reverse": A.BOOL},
                                 cpu_only="the gradient of lstm_sequence (CPU only)")


def fits(proj, h0, c0, w_hh, b_hh=None) -> bool:
    """Whether lstm_sequence has a kernel for these (CPU, float32/float64, one dtype)."""
    tensors = (proj, h0, c0, w_hh) + (() if b_hh is None else (b_hh,))
    return all(t.device.kind == "cpu" and t.dtype in FUSED_DTYPES and t.dtype is proj.dtype
               for t in tensors) and proj.ndim == 3 and h0.shape[-1] == c0.shape[-1] == \
        w_hh.shape[-1]


def lstm_sequence(proj, h0, c0, w_hh, b_hh=None, *, reverse: bool = False):
    """(hs, h_T, c_T) of one LSTM layer: the fused primitive where it has a kernel, else the
    per-step composite."""
    if not fits(proj, h0, c0, w_hh, b_hh):
        return lstm_sequence_composite(proj, h0, c0, w_hh, b_hh, reverse=reverse)
    bias = () if b_hh is None else (b_hh,)
    hs, h_t, c_t, _, _, _ = bind(lstm_sequence_p, proj, h0, c0, w_hh, *bias, reverse=reverse)
    return hs, h_t, c_t
