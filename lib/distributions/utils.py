"""Helpers shared by the distributions: parameters as broadcast tensors, probs <-> logits."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentError, ShapeError
from ..ops import elementwise as E
from ..ops.arguments import describe
from ..ops.creation import tensor
from ..ops.shape import broadcast_to
from ..tensor import Tensor
from ..ops.activation import softmax
from ..ops.reduce import sum as total


def as_parameter(value, what: str, op: str, dtype=None, device=None):
    """A float tensor for a parameter given as a tensor or a Python number."""
    if isinstance(value, Tensor):
        if not value.dtype.is_floating:
            value = E.cast(value, dtype or dt.default_float)
        return value
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float, np.number, list,
                                                                 tuple, np.ndarray)):
        raise ArgumentError(f"{what} must be a tensor or a number, got {describe(value)}", op=op)
    return tensor(value, dtype=dtype or dt.default_float, device=device)


def broadcast_all(values: dict, op: str):
    """The named parameters as float tensors of one dtype and one broadcast shape."""
    tensors = [v for v in values.values() if isinstance(v, Tensor) and v.dtype.is_floating]
    dtype = tensors[0].dtype if tensors else None
    device = tensors[0].device if tensors else None
    out = {k: as_parameter(v, k, op, dtype, device) for k, v in values.items()}
    try:
        shape = np.broadcast_shapes(*(v.shape for v in out.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {v.shape}" for k, v in out.items())
        raise ShapeError(f"parameter shapes do not broadcast: {shapes}", op=op) from None
    return [v if v.shape == shape else broadcast_to(v, shape) for v in out.values()]


def clamp_probs(probs):
    eps = dt.finfo(probs.dtype).eps
    return E.clip(probs, eps, 1 - eps)


def probs_to_logits(probs, is_binary: bool = False):
    """Logits of probabilities (clamped away from 0 and 1 so the logs stay finite)."""
    clamped = clamp_probs(probs)
    return E.log(clamped) - E.log1p(-clamped) if is_binary else E.log(clamped)


def logits_to_probs(logits, is_binary: bool = False):
    return E.sigmoid(logits) if is_binary else softmax(logits, axis=-1)


def xlogy(x, y):
    """x * log(y), and 0 where x == 0 (whatever y); both branches kept finite for autodiff."""
    zero = x == 0
    return E.where(zero, 0.0, x * E.log(E.where(zero, 1.0, y)))


def sum_rightmost(value, n: int):
    return total(value, axis=tuple(range(-n, 0))) if n > 0 else value
