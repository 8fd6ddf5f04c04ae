"""Activation functions as modules, for use inside Sequential and friends, with PyTorch's
constructor arguments. `inplace=True` gives the input tensor object the result (what it
means for rill's value tensors: rill.nn.functional, the "activations" section).

>>> import rill
>>> from rill import nn
>>> x = rill.tensor([-1.0, 0.0, 2.0])
>>> nn.ReLU()(x), nn.LeakyReLU(0.1)(x)
(tensor([0., 0., 2.]), tensor([-0.1,  0. ,  2. ]))
"""
from __future__ import annotations

from ..errors import ArgumentError, check_number
from ..ops import elementwise as E
from ..ops.creation import full
from . import functional as F
from .module import Module
from .parameter import Parameter


def _flag(value, what: str, op: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentError(f"{what} must be True or False, got {value!r}", op=op)
    return value


class _Elementwise(Module):
    """An activation with no settings but `inplace`: forward calls `function`."""

    function = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = _flag(inplace, "inplace", type(self).__name__)

    def forward(self, input):
        return type(self).function(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Elementwise):
    """max(x, 0)."""

    function = F.relu


class ReLU6(_Elementwise):
    """min(max(x, 0), 6)."""

    function = F.relu6


class SELU(_Elementwise):
    """scale * elu(x, alpha), with the self-normalizing constants (Klambauer et al.)."""

    function = F.selu


class SiLU(_Elementwise):
    """x * sigmoid(x) (also called swish)."""

    function = F.silu


class Mish(_Elementwise):
    """x * tanh(softplus(x))."""

    function = F.mish


class Hardsigmoid(_Elementwise):
    """0 below -3, 1 above 3, x / 6 + 1/2 between."""

    function = F.hardsigmoid


class Hardswish(_Elementwise):
    """x * hardsigmoid(x)."""

    function = F.hardswish


class GELU(Module):
    """x * Phi(x); `approximate='tanh'` uses the tanh approximation."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return E.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}" if self.approximate != "none" else ""


class Tanh(Module):
    def forward(self, x):
        return E.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return E.sigmoid(x)


class Softsign(Module):
    """x / (1 + |x|)."""

    def forward(self, input):
        return F.softsign(input)


class Tanhshrink(Module):
    """x - tanh(x)."""

    def forward(self, input):
        return F.tanhshrink(input)


class LogSigmoid(Module):
    """log(sigmoid(x)), stable for large |x|."""

    def forward(self, input):
        return F.logsigmoid(input)


class LeakyReLU(Module):
    """x where x > 0, negative_slope * x elsewhere."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = check_number(negative_slope, "negative_slope", "LeakyReLU")
        self.inplace = _flag(inplace, "inplace", "LeakyReLU")

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace
                                                          else "")


class ELU(Module):
    """x where x > 0, alpha * (exp(x) - 1) elsewhere."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = check_number(alpha, "alpha", type(self).__name__)
        self.inplace = _flag(inplace, "inplace", type(self).__name__)

    def forward(self, x):
        return F.elu(x, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    """x where x > 0, alpha * (exp(x / alpha) - 1) elsewhere."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(alpha, inplace)
        if alpha == 0:
            raise ArgumentError("alpha must not be 0 (CELU divides by it)", op="CELU")

    def forward(self, x):
        return F.celu(x, self.alpha, self.inplace)


class Hardtanh(Module):
    """x clamped to [min_val, max_val]."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        name = type(self).__name__
        self.min_val = check_number(min_val, "min_val", name)
        self.max_val = check_number(max_val, "max_val", name)
        if self.min_val > self.max_val:
            raise ArgumentError(f"min_val ({min_val}) must not exceed max_val ({max_val})",
                                op=name)
        self.inplace = _flag(inplace, "inplace", name)

    def forward(self, x):
        return F.hardtanh(x, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (
            ", inplace=True" if self.inplace else "")


class Threshold(Module):
    """x where x > threshold, else value."""

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold = check_number(threshold, "threshold", "Threshold")
        self.value = check_number(value, "value", "Threshold")
        self.inplace = _flag(inplace, "inplace", "Threshold")

    def forward(self, x):
        return F.threshold(x, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (
            ", inplace=True" if self.inplace else "")


class PReLU(Module):
    """x where x > 0, weight * x elsewhere, with a learned slope `weight`: one for all
    channels (num_parameters=1) or one per channel (axis 1 of the input), initialized to
    `init`.

    >>> import rill
    >>> prelu = rill.nn.PReLU(3)
    >>> prelu(-rill.ones(2, 3)), list(prelu.state_dict())
    (tensor([[-0.25, -0.25, -0.25],
            [-0.25, -0.25, -0.25]], grad_fn=where), ['weight'])
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = check_number(num_parameters, "num_parameters", "PReLU",
                                           integer=True, low=1)
        self.init = check_number(init, "init", "PReLU")
        self.weight = Parameter(full((num_parameters,), float(init), dtype=dtype,
                                     device=device))

    def reset_parameters(self) -> None:
        from . import init
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class GLU(Module):
    """a * sigmoid(b) for the two halves a, b of the input along `dim`."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = check_number(dim, "dim", "GLU", integer=True)

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softplus(Module):
    """log(1 + exp(beta * x)) / beta; linear where beta * x > threshold (as PyTorch).

    >>> import rill
    >>> [round(v, 4) for v in rill.nn.Softplus(beta=2.0)(rill.tensor([0.0, 30.0])).tolist()]
    [0.3466, 30.0]
    """

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta = check_number(beta, "beta", "Softplus")
        self.threshold = check_number(threshold, "threshold", "Softplus")

    def forward(self, x):
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class _AlongDim(Module):
    """Softmax, LogSoftmax, Softmin: `dim` as PyTorch names it (None: the last axis);
    `axis=` is rill's older spelling of the same."""

    def __init__(self, dim: int | None = None, *, axis: int | None = None):
        super().__init__()
        name = type(self).__name__
        if dim is not None and axis is not None and dim != axis:
            raise ArgumentError(f"give dim or axis, not both (got {dim} and {axis})", op=name)
        dim = axis if dim is None else dim
        self.dim = -1 if dim is None else check_number(dim, "dim", name, integer=True)

    @property
    def axis(self) -> int:
        return self.dim

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_AlongDim):
    """exp(x) / sum(exp(x)) along `dim`."""

    def forward(self, x):
        return F.softmax(x, axis=self.dim)


class LogSoftmax(_AlongDim):
    """log(softmax(x)) along `dim`, computed stably."""

    def forward(self, x):
        return F.log_softmax(x, axis=self.dim)


class Softmin(_AlongDim):
    """softmax(-x) along `dim`."""

    def forward(self, x):
        return F.softmin(x, self.dim)
