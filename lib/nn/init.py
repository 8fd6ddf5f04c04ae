"""Parameter initialization, following PyTorch's `torch.nn.init` formulas.

Every function fills a tensor in place (the Parameter object is kept, so optimizers and
modules that hold it see the new values), draws from `generator` (the default generator
when None), and returns the tensor.

>>> import rill
>>> w = rill.nn.Parameter(rill.empty(256, 128))
>>> _ = rill.nn.init.kaiming_uniform_(w, nonlinearity="relu", generator=rill.Generator(0))
>>> bound = (6 / 128) ** 0.5
>>> bool((w.abs() <= bound).all()), round(float(w.std()) / (2 / 128) ** 0.5, 1)
(True, 1.0)
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentError, ShapeError
from ..eager.context import no_grad
from ..ops.creation import full, tensor
from ..ops.random import normal, uniform
from ..tensor import Tensor
from .module import assign_

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The gain that keeps activations' variance steady through `nonlinearity`.

    >>> round(calculate_gain("relu"), 4), round(calculate_gain("leaky_relu", 0.2) ** 2, 4)
    (1.4142, 1.9231)
    """
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ArgumentError(f"negative_slope must be a number, got {slope!r}",
                                op="calculate_gain")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ArgumentError(f"unknown nonlinearity {nonlinearity!r}; known: "
                        f"{', '.join(_LINEAR + ('tanh', 'relu', 'leaky_relu', 'selu'))}",
                        op="calculate_gain")


def fan_in_and_fan_out(t: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight laid out (out, in, *kernel) as Linear and Conv keep it."""
    if t.ndim < 2:
        raise ShapeError(f"fan in and fan out need a tensor with at least 2 axes, got shape "
                         f"{t.shape}", op="init")
    receptive = 1
    for s in t.shape[2:]:
        receptive *= s
    return t.shape[1] * receptive, t.shape[0] * receptive


def _fan(t: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ArgumentError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}", op="init")
    fan_in, fan_out = fan_in_and_fan_out(t)
    return fan_in if mode == "fan_in" else fan_out


def _fill(t: Tensor, value: Tensor) -> Tensor:
    with no_grad():
        assign_(t, value.to(t.dtype) if value.dtype is not t.dtype else value)
    return t


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with samples from U(a, b)."""
    return _fill(t, uniform(a, b, t.shape, dtype=t.dtype, device=t.device, generator=generator))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with samples from N(mean, std^2)."""
    return _fill(t, normal(mean, std, t.shape, dtype=t.dtype, device=t.device,
                           generator=generator))


def constant_(t: Tensor, value: float) -> Tensor:
    """Fill with `value`."""
    return _fill(t, full(t.shape, value, dtype=t.dtype, device=t.device))


def zeros_(t: Tensor) -> Tensor:
    """Fill with zeros.

    >>> import rill
    >>> rill.nn.init.zeros_(rill.nn.Parameter(rill.ones(2)))
    Parameter containing:
    tensor([0., 0.], requires_grad=True)
    """
    return constant_(t, 0.0)


def ones_(t: Tensor) -> Tensor:
    """Fill with ones."""
    return constant_(t, 1.0)


def xavier_uniform_(t: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = fan_in_and_fan_out(t)
    if fan_in + fan_out == 0:
        return t
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound, generator)


def xavier_normal_(t: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = fan_in_and_fan_out(t)
    if fan_in + fan_out == 0:
        return t
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """He: U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a)."""
    if _fan(t, mode) == 0:
        return t  # an empty tensor: nothing to draw (as PyTorch)
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(t, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """He: N(0, std^2) with std = gain / sqrt(fan), gain = calculate_gain(nonlinearity, a)."""
    if _fan(t, mode) == 0:
        return t  # an empty tensor: nothing to draw (as PyTorch)
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(t, mode))
    return normal_(t, 0.0, std, generator)


def orthogonal_(t: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """A (semi-)orthogonal matrix, of a tensor viewed as (shape[0], rest), scaled by gain.

    rill has no QR op; the QR of a normal draw is taken on the host, which is fine once
    per parameter at initialization.

    >>> import rill
    >>> q = rill.nn.init.orthogonal_(rill.empty(3, 5), generator=rill.Generator(0))
    >>> bool(rill.matmul(q, q.T).numpy().round(5).tolist() == rill.eye(3).tolist())
    True
    """
    if t.ndim < 2:
        raise ShapeError(f"orthogonal_ needs a tensor with at least 2 axes, got shape {t.shape}",
                         op="orthogonal_")
    rows, cols = t.shape[0], t.size // max(t.shape[0], 1)
    flat = normal(0.0, 1.0, (rows, cols), dtype="float64", generator=generator).numpy()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    # Make the decomposition unique (R's diagonal positive), so q is uniformly distributed.
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(t, tensor((gain * q).reshape(t.shape), dtype=t.dtype, device=t.device))


def default_layer_init_(weight: Tensor, bias: Tensor | None, generator=None) -> None:
    """PyTorch's default for Linear and the convolutions: kaiming_uniform(a=sqrt(5)) for the
    weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias."""
    kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
    if bias is not None:
        fan_in, _ = fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
        uniform_(bias, -bound, bound, generator)
