"""Pooling over the two spatial axes of (N, C, H, W): MaxPool2d, AvgPool2d,
AdaptiveAvgPool2d."""
from __future__ import annotations

from . import functional as F
from .module import Module


class MaxPool2d(Module):
    """The maximum of each kernel_size window, stepping by stride (kernel_size when None).

    >>> import rill
    >>> x = rill.arange(16.0).reshape(1, 1, 4, 4)
    >>> rill.nn.MaxPool2d(2)(x)
    tensor([[[[ 5.,  7.],
              [13., 15.]]]])
    """

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """The mean of each kernel_size window; padded zeros count in the mean unless
    `count_include_pad=False`.

    >>> import rill
    >>> x = rill.arange(16.0).reshape(1, 1, 4, 4)
    >>> rill.nn.AvgPool2d(2)(x)
    tensor([[[[ 2.5,  4.5],
              [10.5, 12.5]]]])
    """

    def __init__(self, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.count_include_pad = count_include_pad

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding,
                            count_include_pad=self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed output size (an int, or an (h, w) pair), whatever the
    input's size.

    >>> import rill
    >>> rill.nn.AdaptiveAvgPool2d(1)(rill.ones(2, 3, 7, 5)).shape
    (2, 3, 1, 1)
    """

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
