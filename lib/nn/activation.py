"""Activation functions as modules, for use inside Sequential and friends.

>>> import rill
>>> from rill import nn
>>> x = rill.tensor([-1.0, 0.0, 2.0])
>>> nn.ReLU()(x), nn.LeakyReLU(0.1)(x)
(tensor([0., 0., 2.]), tensor([-0.1,  0. ,  2. ]))
"""
from __future__ import annotations

from ..errors import check_number

from ..ops import elementwise as E
from . import functional as F
from .module import Module


class ReLU(Module):
    """max(x, 0)."""

    def forward(self, x):
        return E.relu(x)


class GELU(Module):
    """x * Phi(x); `approximate='tanh'` uses the tanh approximation."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return E.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}" if self.approximate != "none" else ""


class SiLU(Module):
    """x * sigmoid(x) (also called swish)."""

    def forward(self, x):
        return E.silu(x)


class Tanh(Module):
    def forward(self, x):
        return E.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return E.sigmoid(x)


class LeakyReLU(Module):
    """x where x > 0, negative_slope * x elsewhere."""

    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = check_number(negative_slope, "negative_slope", "LeakyReLU")

    def forward(self, x):
        return E.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    """x where x > 0, alpha * (exp(x) - 1) elsewhere."""

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return E.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Softplus(Module):
    """log(1 + exp(beta * x)) / beta; linear where beta * x > threshold (as PyTorch).

    >>> import rill
    >>> [round(v, 4) for v in rill.nn.Softplus(beta=2.0)(rill.tensor([0.0, 30.0])).tolist()]
    [0.3466, 30.0]
    """

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        scaled = x * self.beta if self.beta != 1 else x
        smooth = E.softplus(scaled)
        if self.beta != 1:
            smooth = smooth / self.beta
        return E.where(scaled > self.threshold, x, smooth)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    """exp(x) / sum(exp(x)) along `axis`."""

    def __init__(self, axis: int = -1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return F.softmax(x, axis=self.axis)

    def extra_repr(self) -> str:
        return f"axis={self.axis}"


class LogSoftmax(Module):
    """log(softmax(x)) along `axis`, computed stably."""

    def __init__(self, axis: int = -1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return F.log_softmax(x, axis=self.axis)

    def extra_repr(self) -> str:
        return f"axis={self.axis}"
