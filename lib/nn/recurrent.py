"""Recurrent layers: RNNCell, LSTMCell and GRUCell (one step), RNN, LSTM and GRU (whole
sequences, stacked layers, optionally bidirectional; LSTM with an optional projection).

Parameter names, shapes, gate order and initialization are PyTorch's (weight_ih_l0,
weight_hh_l0, bias_ih_l0, bias_hh_l0, weight_hr_l0, ..._reverse; LSTM gates i, f, g, o; GRU
gates r, z, n; all U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))), so state dicts carry over.
"""
from __future__ import annotations

import math

from ..control.loops import scan
from ..eager.context import current
from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor
from ..ops.creation import empty, zeros
from ..ops.lstm_cell import lstm_cell
from ..ops.lstm_layer import fits as lstm_layer_fits, lstm_layer
from ..ops.lstm_sequence import fits as lstm_sequence_fits, lstm_sequence
from ..ops.elementwise import relu, sigmoid, tanh
from ..ops.shape import concat, expand_dims, reshape, split, squeeze, stack, swapaxes
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter
from ..ops.indexing import getitem


_NONLINEARITIES = {"tanh": tanh, "relu": relu}


def rnn_step(x_proj, h, w_hh, b_hh, nonlinearity: str):
    """One Elman RNN step from the input's projection x @ W_ih.T + b_ih; returns h."""
    return _NONLINEARITIES[nonlinearity](x_proj + F.linear(h, w_hh, b_hh))


def lstm_step(x_proj, h, c, w_hh, b_hh, w_hr=None):
    """One LSTM step from the input's projection x @ W_ih.T + b_ih; returns (h, c). With a
    projection w_hr (proj_size, hidden_size), h is projected down after each step."""
    # One fused primitive on CPU (the GEMM and the gates' math in one kernel; ops/lstm_cell.py),
    # the same formula in rill ops elsewhere.
    h, c = lstm_cell(x_proj, h, c, w_hh, b_hh)
    return (h if w_hr is None else F.linear(h, w_hr)), c


def gru_step(x_proj, h, w_hh, b_hh):
    """One GRU step from the input's projection x @ W_ih.T + b_ih; returns h."""
    x_r, x_z, x_n = split(x_proj, x_proj.shape[-1] // 3, axis=-1)
    h_proj = F.linear(h, w_hh, b_hh)
    h_r, h_z, h_n = split(h_proj, h_proj.shape[-1] // 3, axis=-1)
    r = sigmoid(x_r + h_r)
    z = sigmoid(x_z + h_z)
    n = tanh(x_n + r * h_n)
    return n + z * (h - n)  # = (1 - z) * n + z * h, one op fewer


def _check_features(x, expected: int, name: str) -> None:
    if x.ndim == 0 or x.shape[-1] != expected:
        raise ShapeError(f"expects {expected} input features, got shape {x.shape}", op=name)


def _check_cell_input(cell, x, states, names) -> None:
    """A cell takes x (N, F) or (F,), and states shaped like its output, (N, H) or (H,)."""
    name = type(cell).__name__
    if x.ndim not in (1, 2):
        raise ShapeError(f"expects x of shape (N, {cell.input_size}) or ({cell.input_size},), "
                         f"got {x.shape}", op=name)
    _check_features(x, cell.input_size, name)
    expected = tuple(x.shape[:-1]) + (cell.hidden_size,)
    for s, what in zip(states, names):
        if not isinstance(s, Tensor) or tuple(s.shape) != expected:
            got = s.shape if isinstance(s, Tensor) else type(s).__name__
            raise ShapeError(f"expects {what} of shape {expected}, got {got}", op=name)


class _Recurrent(Module):
    """Parameters and initialization shared by the cells and the sequence layers."""

    gates = 1

    proj_size = 0  # an LSTM's projection of h (0: none)

    def _add_weights(self, suffix: str, input_size: int, bias: bool, dtype, device) -> None:
        rows = self.gates * self.hidden_size
        self.register_parameter(f"weight_ih{suffix}", Parameter(
            empty(rows, input_size, dtype=dtype, device=device)))
        self.register_parameter(f"weight_hh{suffix}", Parameter(
            empty(rows, self.proj_size or self.hidden_size, dtype=dtype, device=device)))
        for name in (f"bias_ih{suffix}", f"bias_hh{suffix}"):
            self.register_parameter(name, Parameter(empty(rows, dtype=dtype, device=device))
                                    if bias else None)
        if self.proj_size:
            self.register_parameter(f"weight_hr{suffix}", Parameter(
                empty(self.proj_size, self.hidden_size, dtype=dtype, device=device)))

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.hidden_size) if self.hidden_size else 0.0
        for p in self.parameters():
            init.uniform_(p, -bound, bound)


class _Cell(_Recurrent):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, dtype=None,
                 device=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self._add_weights("", input_size, bias, dtype, device)
        self.reset_parameters()

    def _zeros(self, x):
        return zeros(*x.shape[:-1], self.hidden_size, dtype=x.dtype, device=x.device)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(_Cell):
    """One Elman RNN step: (x, h) -> nonlinearity(x W_ih^T + b_ih + h W_hh^T + b_hh), with
    nonlinearity 'tanh' or 'relu'; x is (N, input_size) or (input_size,), h defaults to
    zeros.

    >>> import rill
    >>> cell = rill.nn.RNNCell(3, 5, nonlinearity="relu")
    >>> cell(rill.ones(2, 3)).shape, cell.weight_hh.shape
    ((2, 5), (5, 5))
    """

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, dtype=dtype, device=device)
        self.nonlinearity = _check_nonlinearity(nonlinearity, "RNNCell")

    def forward(self, input, hx=None):
        h = self._zeros(input) if hx is None else hx
        _check_cell_input(self, input, (h,), ("h",))
        return rnn_step(F.linear(input, self.weight_ih, self.bias_ih), h, self.weight_hh,
                        self.bias_hh, self.nonlinearity)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        return text + (f", nonlinearity={self.nonlinearity!r}"
                       if self.nonlinearity != "tanh" else "")


def _check_nonlinearity(value, op: str) -> str:
    if value not in _NONLINEARITIES:
        raise ArgumentError(f"nonlinearity must be 'tanh' or 'relu', got {value!r}", op=op)
    return value


class LSTMCell(_Cell):
    """One LSTM step: (x, (h, c)) -> (h', c'); x is (N, input_size) or (input_size,),
    and the state defaults to zeros.

    >>> import rill
    >>> cell = rill.nn.LSTMCell(3, 5)
    >>> h, c = cell(rill.ones(2, 3))
    >>> h.shape, c.shape, cell.weight_ih.shape
    ((2, 5), (2, 5), (20, 3))
    """

    gates = 4

    def forward(self, x, hx=None):
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise ArgumentError("expects hx as a pair (h, c)", op="LSTMCell")
        h, c = (self._zeros(x), self._zeros(x)) if hx is None else hx
        _check_cell_input(self, x, (h, c), ("h", "c"))
        return lstm_step(F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh,
                         self.bias_hh)


class GRUCell(_Cell):
    """One GRU step: (x, h) -> h'; x is (N, input_size) or (input_size,), and h
    defaults to zeros.

    >>> import rill
    >>> cell = rill.nn.GRUCell(3, 5)
    >>> cell(rill.ones(2, 3)).shape, cell.weight_hh.shape
    ((2, 5), (15, 5))
    """

    gates = 3

    def forward(self, x, hx=None):
        h = self._zeros(x) if hx is None else hx
        _check_cell_input(self, x, (h,), ("h",))
        return gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh,
                        self.bias_hh)


class _Sequence(_Recurrent):
    """Runs a step function over time, layer after layer, in one or both directions."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, dtype=None, device=None, proj_size: int = 0):
        super().__init__()
        for value, what in ((input_size, "input_size"), (hidden_size, "hidden_size"),
                            (num_layers, "num_layers"), (proj_size, "proj_size")):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ArgumentError(f"{what} must be an int, got {value!r}",
                                    op=type(self).__name__)
        if not 0 <= proj_size < hidden_size or (proj_size and self.gates != 4):
            raise ArgumentError(f"proj_size must be in [0, hidden_size) (LSTM only), got "
                                f"{proj_size}", op=type(self).__name__)
        self.proj_size = proj_size
        if num_layers < 1:
            raise ArgumentError(f"num_layers must be at least 1, got {num_layers}",
                                op=type(self).__name__)
        if not 0.0 <= dropout <= 1.0:
            raise ArgumentError(f"dropout must be in [0, 1], got {dropout}",
                                op=type(self).__name__)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, dropout
        self.bidirectional = bidirectional
        self.directions = 2 if bidirectional else 1
        for layer in range(num_layers):
            for direction in range(self.directions):
                self._add_weights(self._suffix(layer, direction),
                                  input_size if layer == 0 else
                                  (proj_size or hidden_size) * self.directions,
                                  bias, dtype, device)
        self.reset_parameters()

    @staticmethod
    def _suffix(layer: int, direction: int) -> str:
        return f"_l{layer}" + ("_reverse" if direction else "")

    def _weights(self, layer: int, direction: int):
        """(W_ih, b_ih, the weights each step takes: W_hh, b_hh and an LSTM's W_hr)."""
        s = self._suffix(layer, direction)
        step = (getattr(self, f"weight_hh{s}"), getattr(self, f"bias_hh{s}"))
        if self.proj_size:
            step += (getattr(self, f"weight_hr{s}"),)
        return getattr(self, f"weight_ih{s}"), getattr(self, f"bias_ih{s}"), step

    def _state_sizes(self, n_states: int):
        """The last axis of each state: h (projected, for an LSTM with proj_size), then c."""
        return ((self.proj_size or self.hidden_size),) + (self.hidden_size,) * (n_states - 1)

    def _state_shape_check(self, state, batch, name: str, size: int):
        """batch None: an unbatched input, whose states have no batch axis either."""
        expected = (self.num_layers * self.directions,) + ((batch,) if batch is not None else
                                                           ()) + (size,)
        if tuple(state.shape) != expected:
            raise ShapeError(f"expects the initial {name} of shape "
                             f"{expected}, got {state.shape}", op=type(self).__name__)

    def _run(self, x, states):
        """x: (T, N, F); states: tuple of (L*D, N, H) tensors. Returns the last layer's
        output (T, N, D*H) and the final states, stacked as the initial ones."""
        finals = [[] for _ in states]
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self.directions):
                w_ih, b_ih, step_weights = self._weights(layer, direction)
                index = layer * self.directions + direction
                state = tuple(getitem(s, index) for s in states)
                state, hs = self._input_layer(x, w_ih, b_ih, state, step_weights,
                                              reverse=bool(direction))
                outputs.append(hs)
                for final, s in zip(finals, state):
                    final.append(s)
            x = outputs[0] if self.directions == 1 else concat(outputs, axis=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
        return x, tuple(stack(f, axis=0) for f in finals)

    def _input_layer(self, x, w_ih, b_ih, state, step_weights, reverse: bool):
        """(final state, every step's h) of one layer in one direction from its input."""
        # One matmul projects every time step's input; only h @ W_hh is sequential.
        return self._layer(F.linear(x, w_ih, b_ih), state, step_weights, reverse=reverse)

    def _layer(self, proj, state, step_weights, reverse: bool):
        """(final state, every step's h) of one layer in one direction: a step at a time,
        or, captured, one scan node whatever the length (its gradient, a reversed scan)."""
        loop = self._scan if current().interpreter.capturing else self._python_loop
        return loop(proj, state, step_weights, reverse=reverse)

    def _python_loop(self, proj, state, step_weights, reverse: bool):
        steps = proj.shape[0]
        proj = split(proj, 1, axis=0)
        hs = [None] * steps
        for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
            state = self._step(reshape(proj[t], proj[t].shape[1:]), state, *step_weights)
            hs[t] = state[0]
        return state, stack(hs, axis=0)

    def _scan(self, proj, state, step_weights, reverse: bool):
        def step(state, x_t):
            state = self._step(x_t, state, *step_weights)
            return state, state[0]
        return scan(step, state, proj, reverse=reverse)

    def _sequence(self, x, hx, n_states: int):
        """Shared forward: layout handling around `_run`."""
        name = type(self).__name__
        if x.ndim not in (2, 3):
            raise ShapeError(f"{name} expects input of shape (T, N, F), (N, T, F) with "
                             f"batch_first, or unbatched (T, F); got {x.shape}", op=name)
        _check_features(x, self.input_size, name)
        batched = x.ndim == 3
        if not batched:
            x = expand_dims(x, 1)
        elif self.batch_first:
            x = swapaxes(x, 0, 1)
        if x.shape[0] == 0:
            raise ShapeError(f"{name} got an empty sequence", op=name)
        batch = x.shape[1]
        sizes = self._state_sizes(n_states)
        if hx is None:
            states = tuple(zeros(self.num_layers * self.directions, batch, size,
                                 dtype=x.dtype, device=x.device) for size in sizes)
        else:
            states = hx if n_states > 1 else (hx,)
            if (n_states > 1 and not isinstance(hx, (tuple, list))) or len(states) != n_states \
                    or not all(isinstance(s, Tensor) for s in states):
                want = "a tuple (h_0, c_0)" if n_states > 1 else "one tensor h_0"
                raise ArgumentError(f"expects as initial state {want}, got "
                                    f"{type(hx).__name__}", op=name)
            for s, what, size in zip(states, ("h_0", "c_0"), sizes):
                # Checked as given (before an unbatched input gains its batch axis).
                self._state_shape_check(s, batch if batched else None, what, size)
                if s.dtype is not x.dtype or s.device is not x.device:
                    raise DTypeError(f"{what} is {s.dtype} on {s.device}, the input "
                                     f"{x.dtype} on {x.device}", op=name)
            if not batched:
                states = tuple(expand_dims(s, 1) for s in states)
        output, finals = self._run(x, states)
        if not batched:
            output, finals = squeeze(output, 1), tuple(squeeze(s, 1) for s in finals)
        elif self.batch_first:
            output = swapaxes(output, 0, 1)
        return output, finals

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        for name, default in (("nonlinearity", "tanh"), ("bias", True),
                              ("batch_first", False), ("dropout", 0.0),
                              ("bidirectional", False), ("proj_size", 0)):
            if not hasattr(self, name):
                continue
            if getattr(self, name) != default:
                text += f", {name}={getattr(self, name)}"
        return text


class LSTM(_Sequence):
    """A multi-layer LSTM over a sequence, as `torch.nn.LSTM`.

    Input (T, N, input_size), or (N, T, input_size) with `batch_first`, or unbatched
    (T, input_size). `hx` = (h_0, c_0), each (num_layers * directions, N, hidden_size),
    zeros when omitted. Returns (output, (h_n, c_n)); output holds the last layer's h at
    every step (both directions concatenated when bidirectional). `dropout` applies to
    the outputs of every layer but the last, in training mode.

    >>> import rill
    >>> lstm = rill.nn.LSTM(4, 8, num_layers=2, batch_first=True)
    >>> out, (h, c) = lstm(rill.ones(3, 5, 4))
    >>> out.shape, h.shape, c.shape
    ((3, 5, 8), (2, 3, 8), (2, 3, 8))
    """

    gates = 4

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None, dtype=None):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype=dtype, device=device, proj_size=proj_size)

    def _step(self, x_proj, state, w_hh, b_hh, w_hr=None):
        return lstm_step(x_proj, state[0], state[1], w_hh, b_hh, w_hr)

    def _input_layer(self, x, w_ih, b_ih, state, step_weights, reverse: bool):
        """The layer with its projection as one lstm_layer op where oneDNN runs it and a
        gradient will be taken (ops/lstm_layer.py: PyTorch's CPU kernel for training), else
        as the layers below (inference: no workspace to keep; exports to ONNX as a Loop)."""
        inputs = (x, *state, w_ih, *step_weights, b_ih)
        if len(step_weights) == 2 and current().grad_enabled and \
                any(t is not None and t.requires_grad for t in inputs) and \
                lstm_layer_fits(x, *state, w_ih, step_weights[0], b_ih, step_weights[1]):
            hs, h, c = lstm_layer(x, *state, w_ih, step_weights[0], b_ih, step_weights[1],
                                  reverse=reverse)
            return (h, c), hs
        return super()._input_layer(x, w_ih, b_ih, state, step_weights, reverse)

    def _layer(self, proj, state, step_weights, reverse: bool):
        """The whole layer as one lstm_sequence op where it has a kernel (ops/lstm_sequence.py:
        one dispatch, one weight-gradient product), else a step at a time."""
        if len(step_weights) == 2 and lstm_sequence_fits(proj, *state, *step_weights):
            hs, h, c = lstm_sequence(proj, *state, *step_weights, reverse=reverse)
            return (h, c), hs
        return super()._layer(proj, state, step_weights, reverse)

    def forward(self, x, hx=None):
        output, (h, c) = self._sequence(x, hx, 2)
        return output, (h, c)


class GRU(_Sequence):
    """A multi-layer GRU over a sequence, as `torch.nn.GRU`.

    Input and layout as LSTM's; `hx` is h_0 alone. Returns (output, h_n).

    >>> import rill
    >>> gru = rill.nn.GRU(4, 8, bidirectional=True)
    >>> out, h = gru(rill.ones(5, 3, 4))
    >>> out.shape, h.shape
    ((5, 3, 16), (2, 3, 8))
    """

    gates = 3

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device=None, dtype=None):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype=dtype, device=device)

    def _step(self, x_proj, state, w_hh, b_hh):
        return (gru_step(x_proj, state[0], w_hh, b_hh),)

    def forward(self, x, hx=None):
        output, (h,) = self._sequence(x, hx, 1)
        return output, h


class RNN(_Sequence):
    """A multi-layer Elman RNN, h_t = nonlinearity(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)
    with nonlinearity 'tanh' or 'relu', as `torch.nn.RNN`.

    Input and layout as LSTM's; `hx` is h_0 alone, (num_layers * directions, N, hidden_size).
    Returns (output, h_n).

    >>> import rill
    >>> rnn = rill.nn.RNN(4, 8, num_layers=2, nonlinearity="relu", batch_first=True)
    >>> out, h = rnn(rill.ones(3, 5, 4))
    >>> out.shape, h.shape
    ((3, 5, 8), (2, 3, 8))
    """

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device=None, dtype=None):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype=dtype, device=device)
        self.nonlinearity = _check_nonlinearity(nonlinearity, "RNN")

    def _step(self, x_proj, state, w_hh, b_hh):
        return (rnn_step(x_proj, state[0], w_hh, b_hh, self.nonlinearity),)

    def forward(self, input, hx=None):
        output, (h,) = self._sequence(input, hx, 1)
        return output, h
