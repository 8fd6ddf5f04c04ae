"""Pooling layers over 1, 2 or 3 spatial axes, as PyTorch's: MaxPool{1,2,3}d,
AvgPool{1,2,3}d, AdaptiveAvgPool{1,2,3}d, AdaptiveMaxPool{1,2}d."""
from __future__ import annotations

from ..ops import pooling as P
from .module import Module


class _MaxPool(Module):
    function = staticmethod(P.max_pool2d)

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return self.function(input, self.kernel_size, self.stride, self.padding,
                             self.dilation, ceil_mode=self.ceil_mode,
                             return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPool):
    """The maximum of each window of (N, C, L), stepping by stride (kernel_size when None)."""

    function = staticmethod(P.max_pool1d)


class MaxPool2d(_MaxPool):
    """The maximum of each kernel_size window, stepping by stride (kernel_size when None).

    >>> import rill
    >>> x = rill.arange(16.0).reshape(1, 1, 4, 4)
    >>> rill.nn.MaxPool2d(2)(x)
    tensor([[[[ 5.,  7.],
              [13., 15.]]]])
    """


class MaxPool3d(_MaxPool):
    """The maximum of each window of (N, C, D, H, W)."""

    function = staticmethod(P.max_pool3d)


class _AvgPool(Module):
    function = staticmethod(P.avg_pool2d)

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        return self.function(input, self.kernel_size, self.stride, self.padding,
                             self.ceil_mode, self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPool):
    """The mean of each window of (N, C, L)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)

    def forward(self, input):
        return P.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)


class AvgPool2d(_AvgPool):
    """The mean of each kernel_size window; padded zeros count in the mean unless
    `count_include_pad=False`; `divisor_override` replaces the window size.

    >>> import rill
    >>> x = rill.arange(16.0).reshape(1, 1, 4, 4)
    >>> rill.nn.AvgPool2d(2)(x)
    tensor([[[[ 2.5,  4.5],
              [10.5, 12.5]]]])
    """


class AvgPool3d(_AvgPool):
    """The mean of each window of (N, C, D, H, W)."""

    function = staticmethod(P.avg_pool3d)


class _Adaptive(Module):
    function = staticmethod(P.adaptive_avg_pool2d)

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return self.function(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_Adaptive):
    """Average pooling of (N, C, L) to a fixed length, whatever the input's length."""

    function = staticmethod(P.adaptive_avg_pool1d)


class AdaptiveAvgPool2d(_Adaptive):
    """Average pooling to a fixed output size (an int, or an (h, w) pair; None keeps that
    axis), whatever the input's size.

    >>> import rill
    >>> rill.nn.AdaptiveAvgPool2d(1)(rill.ones(2, 3, 7, 5)).shape
    (2, 3, 1, 1)
    """


class AdaptiveAvgPool3d(_Adaptive):
    """Average pooling of (N, C, D, H, W) to a fixed output size."""

    function = staticmethod(P.adaptive_avg_pool3d)


class _AdaptiveMax(_Adaptive):
    def __init__(self, output_size, return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        return self.function(input, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMax):
    """Max pooling of (N, C, L) to a fixed length."""

    function = staticmethod(P.adaptive_max_pool1d)


class AdaptiveMaxPool2d(_AdaptiveMax):
    """Max pooling of (N, C, H, W) to a fixed output size."""

    function = staticmethod(P.adaptive_max_pool2d)
