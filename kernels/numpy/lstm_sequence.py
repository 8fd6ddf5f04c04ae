"""NumPy kernels of lstm_sequence and lstm_sequence_grad (lib/ops/lstm_sequence.py): the
per-step work is lstm_cell's kernels (kernels/numpy/lstm_cell.py), called in one loop; the
gradient's weight products are one GEMM over all steps after the loop."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels

from .lstm_cell import lstm_cell, lstm_cell_grad


def _order(steps: int, reverse: bool):
    return range(steps - 1, -1, -1) if reverse else range(steps)


def lstm_sequence(proj, h0, c0, w_hh, *bias, reverse):
    steps, n, four_h = proj.shape
    hidden = four_h // 4
    hs = np.empty((steps, n, hidden), proj.dtype)
    cs, tanh_cs = np.empty_like(hs), np.empty_like(hs)
    acts = np.empty_like(proj)
    h, c = h0, c0
    for t in _order(steps, reverse):
        h, c, acts[t], tanh_cs[t] = lstm_cell(proj[t], h, c, w_hh, *bias)
        hs[t], cs[t] = h, c
    return hs, h.copy(), c.copy(), acts, tanh_cs, cs


def lstm_sequence_grad(g_hs, g_ht, g_ct, h0, c0, w_hh, acts, tanh_cs, cs, *, reverse):
    """(d_proj, d_h0, d_c0, d_w_hh, d_b_hh): back through the steps in the reverse of the
    order they ran, one (N, 4H) x (4H, H) product per step for the previous h's gradient;
    then the weight gradient as one product of all steps' gate gradients with the h each
    step read (each h is o * tanh(c), from the residuals, as the forward made it)."""
    steps, hidden = tanh_cs.shape[0], tanh_cs.shape[-1]
    hs = acts[..., 3 * hidden:] * tanh_cs
    order = list(_order(steps, reverse))
    d_proj = np.empty_like(acts)
    g_h, g_c = g_ht, g_ct
    for k in range(steps - 1, -1, -1):  # k-th step run, t its place in the sequence
        t = order[k]
        c_prev = cs[order[k - 1]] if k else c0
        d_gates, g_c = lstm_cell_grad(acts[t], tanh_cs[t], c_prev, g_hs[t] + g_h, g_c)
        d_proj[t] = d_gates
        g_h = d_gates @ w_hh
    # the h each step read: h0 for the first step run, else the step run before it
    h_read = np.empty_like(hs)
    first = order[0]
    h_read[first] = h0
    for k in range(1, steps):
        h_read[order[k]] = hs[order[k - 1]]
    flat_d = d_proj.reshape(-1, d_proj.shape[-1])
    d_w_hh = flat_d.T @ h_read.reshape(-1, hs.shape[-1])
    return d_proj, g_h, g_c, d_w_hh, flat_d.sum(axis=0)


register_kernels("cpu", {"lstm_sequence": lstm_sequence,
                         "lstm_sequence_grad": lstm_sequence_grad})

# The layer with its projection, lstm_layer (lib/ops/lstm_layer.py), where oneDNN runs it; the
# module loads no library until a kernel or `fits` asks for one.
from rill.kernels.onednn import lstm as _onednn_lstm  # noqa: E402,F401
