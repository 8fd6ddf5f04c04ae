"""ONNX export of the fused LSTM cell (lib/ops/lstm_cell.py): the same formula in plain ONNX
ops, so a captured nn.LSTM exports as before the cell was fused (the layer, lstm_sequence, is
an ONNX Loop of this cell: lib/onnx/export_control.py). A row of the exporter's table
(lib/onnx/export_ops.py: fn(b, node, ins) -> one ONNX name per output)."""
from __future__ import annotations


def export_lstm_cell(b, node, ins):
    """gates = x_proj + h @ w_hh^T (+ b_hh); c' = s(f) c + s(i) tanh(g); h' = s(o) tanh(c').
    The residual outputs (acts, tanh_c') serve rill's backward only: None."""
    w_t = b.op("Transpose", [ins[3]], perm=[1, 0])
    h_new, c_new = cell(b, ins[0], ins[1], ins[2], w_t, ins[4] if len(ins) > 4 else None,
                        node.inputs[2].shape[1])
    return [h_new, c_new, None, None]


def cell(b, x_proj, h, c, w_t, bias, hidden):
    """(h', c') of one step, as ONNX ops (w_t: w_hh transposed)."""
    gates = b.op("Add", [x_proj, b.op("MatMul", [h, w_t])])
    if bias is not None:
        gates = b.op("Add", [gates, bias])
    i, f, g, o = b.split(gates, [hidden] * 4, axis=1)
    c_new = b.op("Add", [b.op("Mul", [b.op("Sigmoid", [f]), c]),
                         b.op("Mul", [b.op("Sigmoid", [i]), b.op("Tanh", [g])])])
    h_new = b.op("Mul", [b.op("Sigmoid", [o]), b.op("Tanh", [c_new])])
    return h_new, c_new
