"""Convolutions: Conv1d/2d/3d and ConvTranspose1d/2d/3d, with PyTorch's weight layouts,
default initialization (kaiming_uniform(a=sqrt(5)) weights, U(-1/sqrt(fan_in), ..) bias) and
padding modes (zeros, reflect, replicate, circular: the input padded by F.pad first)."""
from __future__ import annotations

from ..errors import ArgumentError
from ..ops.creation import empty
from ..ops import conv as C
from ..ops.padding import pad as _pad
from . import init
from .module import Module
from .parameter import Parameter


def _tuple(value, n: int, what: str) -> tuple:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * n
    if not isinstance(value, (tuple, list)) or len(value) != n or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ArgumentError(f"{what} must be an int or {n} ints, got {value!r}")
    return tuple(value)


class _Conv(Module):
    """Shared by the convolutions: checks, parameters, initialization, repr."""

    spatial = 2
    transposed = False

    _PADDING_MODES = ("zeros", "reflect", "replicate", "circular")

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 groups, bias, dtype, device, output_padding=0, padding_mode="zeros"):
        super().__init__()
        name = type(self).__name__
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ArgumentError(f"in_channels ({in_channels}) and out_channels "
                                f"({out_channels}) must both be divisible by groups ({groups})",
                                op=name)
        n = self.spatial
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.stride = _tuple(stride, n, "stride")
        self.dilation = _tuple(dilation, n, "dilation")
        if isinstance(padding, str):
            if padding not in ("same", "valid") or self.transposed:
                raise ArgumentError(f"padding {padding!r} is not supported by {name}", op=name)
            self.padding = padding
        else:
            self.padding = _tuple(padding, n, "padding")
        self.output_padding = _tuple(output_padding, n, "output_padding")
        if padding_mode not in self._PADDING_MODES or (self.transposed and
                                                        padding_mode != "zeros"):
            allowed = ("zeros",) if self.transposed else self._PADDING_MODES
            raise ArgumentError(f"padding_mode must be one of {allowed}, got {padding_mode!r}",
                                op=name)
        self.padding_mode = padding_mode
        shape = ((in_channels, out_channels // groups) if self.transposed else
                 (out_channels, in_channels // groups)) + self.kernel_size
        self.weight = Parameter(empty(*shape, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.default_layer_init_(self.weight, self.bias)

    def _arg(self, value):
        """Attributes go to the functional ops as ints when the layer is 1-d."""
        return value[0] if self.spatial == 1 and isinstance(value, tuple) else value

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0,) * self.spatial:
            text += f", padding={self.padding!r}"
        if self.output_padding != (0,) * self.spatial:
            text += f", output_padding={self.output_padding}"
        if self.dilation != (1,) * self.spatial:
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.padding_mode != "zeros":
            text += f", padding_mode={self.padding_mode!r}"
        return text

    def _conv_forward(self, x, conv):
        """conv(x, ...) with this layer's settings; a padding mode other than zeros pads x
        with F.pad first (the (before, after) pairs of 'same' included) and convolves
        unpadded."""
        padding = self._arg(self.padding)
        if self.padding_mode != "zeros":
            if self.padding == "valid":
                pairs = ((0, 0),) * self.spatial
            elif self.padding == "same":
                pairs = C._padding("same", self.kernel_size, self.dilation)
            else:
                pairs = tuple((p, p) for p in self.padding)
            flat = tuple(v for pair in reversed(pairs) for v in pair)
            x, padding = _pad(x, flat, mode=self.padding_mode), 0
        return conv(x, self.weight, self.bias, self._arg(self.stride), padding,
                    self._arg(self.dilation), self.groups)


class Conv1d(_Conv):
    """1-d convolution over (N, C_in, L) -> (N, C_out, L_out); weight (C_out, C_in/groups, k).

    >>> import rill
    >>> conv = rill.nn.Conv1d(2, 4, kernel_size=3, padding=1)
    >>> conv.weight.shape, conv(rill.ones(1, 2, 10)).shape
    ((4, 2, 3), (1, 4, 10))
    """

    spatial = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, dtype, device, padding_mode=padding_mode)

    def forward(self, x):
        return self._conv_forward(x, C.conv1d)


class Conv2d(_Conv):
    """2-d convolution over (N, C_in, H, W); weight (C_out, C_in/groups, kh, kw).

    `padding` is an int, a pair, 'valid' (none) or 'same' (output as large as the input).

    >>> import rill
    >>> conv = rill.nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1)
    >>> conv(rill.ones(2, 3, 16, 16)).shape
    (2, 8, 8, 8)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, dtype, device, padding_mode=padding_mode)

    def forward(self, x):
        return self._conv_forward(x, C.conv2d)


class Conv3d(_Conv):
    """3-d convolution over (N, C_in, D, H, W); weight (C_out, C_in/groups, kd, kh, kw).

    >>> import rill
    >>> conv = rill.nn.Conv3d(2, 4, kernel_size=3, padding=1, padding_mode="replicate")
    >>> conv(rill.ones(1, 2, 4, 5, 6)).shape
    (1, 4, 4, 5, 6)
    """

    spatial = 3

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, dtype, device, padding_mode=padding_mode)

    def forward(self, x):
        return self._conv_forward(x, C.conv3d)


class _ConvTranspose(_Conv):
    transposed = True
    function = staticmethod(C.conv_transpose2d)

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, dtype, device, output_padding=output_padding,
                         padding_mode=padding_mode)

    def forward(self, x):
        return self.function(x, self.weight, self.bias, stride=self._arg(self.stride),
                             padding=self._arg(self.padding),
                             output_padding=self._arg(self.output_padding), groups=self.groups,
                             dilation=self._arg(self.dilation))


class ConvTranspose1d(_ConvTranspose):
    """The transpose (gradient) of Conv1d: (N, C_in, L) -> (N, C_out, L'); weight
    (C_in, C_out/groups, k).

    >>> import rill
    >>> rill.nn.ConvTranspose1d(4, 2, kernel_size=4, stride=2, padding=1)(rill.ones(1, 4, 5)).shape
    (1, 2, 10)
    """

    spatial = 1
    function = staticmethod(C.conv_transpose1d)


class ConvTranspose2d(_ConvTranspose):
    """The transpose (gradient) of Conv2d: upsamples (N, C_in, H, W) -> (N, C_out, H', W'),
    H' = (H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
    Weight (C_in, C_out/groups, kh, kw).

    >>> import rill
    >>> up = rill.nn.ConvTranspose2d(8, 3, kernel_size=4, stride=2, padding=1)
    >>> up(rill.ones(1, 8, 5, 5)).shape
    (1, 3, 10, 10)
    """

    function = staticmethod(C.conv_transpose2d)


class ConvTranspose3d(_ConvTranspose):
    """The transpose (gradient) of Conv3d: (N, C_in, D, H, W) -> (N, C_out, D', H', W');
    weight (C_in, C_out/groups, kd, kh, kw).

    >>> import rill
    >>> rill.nn.ConvTranspose3d(4, 2, kernel_size=2, stride=2)(rill.ones(1, 4, 2, 3, 3)).shape
    (1, 2, 4, 6, 6)
    """

    spatial = 3
    function = staticmethod(C.conv_transpose3d)
