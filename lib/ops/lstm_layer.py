"""An LSTM layer together with its input projection as one primitive, run by oneDNN's RNN
primitive (kernels/onednn/lstm.py), PyTorch's CPU kernel for nn.LSTM.

    lstm_layer(x, h0, c0, w_ih, w_hh[, b_ih, b_hh], reverse)
        -> (hs, h_T, c_T; workspace, hs', h_T', c_T')
        x (T, N, C); w_ih (4H, C), w_hh (4H, H), biases (4H,); gates i, f, g, o. Each step
        as lstm_sequence's (lib/ops/lstm_sequence.py) from proj = x @ w_ih.T + b_ih.

The last four are residuals, saved for the gradient only: workspace (bytes, uint8), what
oneDNN's forward leaves for its backward (every step's gates and states, in its own layout),
and copies of the outputs, which that backward reads too (oneDNN 3.2 reads hs and c_T:
tests/kernels/onednn/test_lstm_onednn.py), kept apart from the outputs the caller may drop or reuse.

Why the projection is inside: oneDNN's LSTM takes the layer's input and its weights, not a
projection made before (giving it the projection would cost a (4H, 4H) identity product per
step). Where oneDNN runs the layer (float32 on the CPU, the optional library loaded and
enabled: `fits`), nn.LSTM binds this op; elsewhere it projects with one matmul and runs
lstm_sequence, whose kernels are rill's own.
"""
from __future__ import annotations

from ..eager.bind import bind
from ..errors import DTypeError, KernelError, ShapeError
from . import attrs as A
from . import promotion
from .linalg import linear
from .lstm_sequence import lstm_sequence_composite
from .primitive import primitive
from ..dtypes import float32, uint8


# The bytes of the forward's workspace, which only oneDNN knows: its kernel module
# (kernels/onednn/lstm.py) registers the rule here, so that ops never import kernels.
# rule(steps, n, c, hidden, reverse) -> (bytes, "") or (None, why oneDNN cannot run it).
_workspace_rule = None


def register_workspace_rule(rule) -> None:
    global _workspace_rule
    _workspace_rule = rule


def _workspace_bytes(x, w_hh, reverse):
    if _workspace_rule is None:
        return None, "no oneDNN kernels registered"
    steps, n, c = x.shape
    return _workspace_rule(steps, n, c, w_hh.shape[1], reverse)


def _infer(x, h0, c0, w_ih, w_hh, *biases, reverse):
    want = "x (T, N, C), h0 and c0 (N, H), w_ih (4H, C), w_hh (4H, H), biases (4H,)"
    got = ", ".join(str(t.shape) for t in (x, h0, c0, w_ih, w_hh) + biases)
    if x.ndim != 3 or w_hh.ndim != 2 or len(biases) not in (0, 2):
        raise ShapeError(f"expects {want}; got {got}")
    steps, n, c = x.shape
    hidden = w_hh.shape[1]
    if steps == 0:
        raise ShapeError("an LSTM layer needs at least one step")
    if tuple(w_hh.shape) != (4 * hidden, hidden) or tuple(w_ih.shape) != (4 * hidden, c) or \
            any(tuple(s.shape) != (n, hidden) for s in (h0, c0)) or \
            any(tuple(b.shape) != (4 * hidden,) for b in biases):
        raise ShapeError(f"expects {want}; got {got}")
    for t in (x, h0, c0, w_ih, w_hh) + biases:
        if t.dtype.name != "float32":
            raise DTypeError(f"takes float32 (oneDNN's LSTM), got {t.dtype}; other dtypes "
                             f"run nn.LSTM's lstm_sequence")
    nbytes, why = _workspace_bytes(x, w_hh, reverse)
    if nbytes is None:
        raise KernelError(f"needs oneDNN's LSTM, which is not available here ({why}); "
                          f"install rill[onednn] or capture the model where it is not, to "
                          f"run lstm_sequence")
    seq, state = ((steps, n, hidden), float32), ((n, hidden), float32)
    return [seq, state, state, ((nbytes,), uint8), seq, state, state]


def _vjp(g, out, x, h0, c0, w_ih, w_hh, *biases, reverse):
    from .creation import zeros, zeros_like
    saved = out[3:]  # the residuals are kept; an unused output may be gone
    steps, n, _ = x.shape
    g_hs = zeros((steps, n, w_hh.shape[1]), dtype=x.dtype, device=x.device) if g[0] is None \
        else g[0]
    g_ht, g_ct = (zeros_like(h0) if c is None else c for c in g[1:])
    inputs = (x, h0, c0, w_ih, w_hh) + tuple(biases)
    grads = bind(lstm_layer_grad_p, g_hs, g_ht, g_ct, x, h0, c0, w_ih, w_hh, *biases, *saved,
                 reverse=reverse)
    return tuple(d if t.requires_grad else None for d, t in zip(grads, inputs))


def _grad_infer(g_hs, g_ht, g_ct, x, h0, c0, w_ih, w_hh, *rest, reverse):
    biases, (workspace, hs, h_t, c_t) = rest[:-4], rest[-4:]
    steps, n, hidden = g_hs.shape
    if tuple(x.shape[:2]) != (steps, n) or any(
            tuple(t.shape) != (n, hidden) for t in (g_ht, g_ct, h0, c0, h_t, c_t)) or \
            workspace.ndim != 1 or tuple(hs.shape) != tuple(g_hs.shape):
        raise ShapeError("the gradient's inputs do not match one LSTM layer's shapes")
    return [(tuple(t.shape), t.dtype) for t in (x, h0, c0, w_ih, w_hh) + tuple(biases)]


def composite(x, h0, c0, w_ih, w_hh, b_ih=None, b_hh=None, *, reverse=False):
    """(hs, h_T, c_T) by rill ops: the projection, then per-step lstm_cell composites."""
    return lstm_sequence_composite(linear(x, w_ih, b_ih), h0, c0, w_hh, b_hh,
                                   reverse=reverse)


lstm_layer_p = primitive("lstm_layer", _infer, _vjp, normalize=promotion.lift,
                         multiple_results=True, save_output=True, residuals=lambda **_: 4,
                         attrs={"reverse": A.BOOL}, composite=composite,
                         cpu_only="oneDNN's CPU LSTM: elsewhere nn.LSTM runs lstm_sequence "
                                  "or per-step cells")
lstm_layer_grad_p = primitive("lstm_layer_grad", _grad_infer, None, multiple_results=True,
                              attrs={"reverse": A.BOOL},
                              cpu_only="the gradient of lstm_layer (CPU only)", cache_rule="compiled")


def fits(x, h0, c0, w_ih, w_hh, b_ih=None, b_hh=None) -> bool:
    """Whether lstm_layer runs these: CPU, float32, both biases or none, and oneDNN there,
    enabled, and taking the shapes."""
    biases = tuple(b for b in (b_ih, b_hh) if b is not None)
    tensors = (x, h0, c0, w_ih, w_hh) + biases
    if len(biases) == 1 or x.ndim != 3 or w_hh.ndim != 2 or not all(
            t.device.kind == "cpu" and t.dtype.name == "float32" for t in tensors):
        return False
    return _workspace_bytes(x, w_hh, False)[0] is not None


def lstm_layer(x, h0, c0, w_ih, w_hh, b_ih=None, b_hh=None, *, reverse: bool = False):
    """(hs, h_T, c_T) of one LSTM layer over x (T, N, C), through oneDNN (check `fits`)."""
    biases = () if b_ih is None else (b_ih, b_hh)
    hs, h_t, c_t, *_ = bind(lstm_layer_p, x, h0, c0, w_ih, w_hh, *biases, reverse=reverse)
    return hs, h_t, c_t
