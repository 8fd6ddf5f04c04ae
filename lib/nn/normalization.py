"""Normalization layers: BatchNorm1d/2d (batch statistics, running averages for eval),
LayerNorm and RMSNorm (over trailing axes), GroupNorm (over channel groups),
InstanceNorm1d/2d (each sample's channels on their own) and LocalResponseNorm (across
neighbouring channels)."""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import ArgumentError, ShapeError
from ..ops.creation import ones, tensor, zeros
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


def _per_channel_state(module, num_features, eps, momentum, affine, track_running_stats,
                       dtype, device) -> None:
    """The options, the affine weight (ones) and bias (zeros) and the running statistics
    that batch and instance norms share, named as PyTorch names them."""
    module.num_features, module.eps, module.momentum = num_features, eps, momentum
    module.affine, module.track_running_stats = affine, track_running_stats
    if affine:
        module.weight = Parameter(ones(num_features, dtype=dtype, device=device))
        module.bias = Parameter(zeros(num_features, dtype=dtype, device=device))
    else:
        module.register_parameter("weight", None)
        module.register_parameter("bias", None)
    tracked = {"running_mean": zeros, "running_var": ones}
    for name, fill in tracked.items():
        module.register_buffer(name, fill(num_features, dtype=dtype, device=device)
                               if track_running_stats else None)
    module.register_buffer("num_batches_tracked", tensor(0, dtype=dt.int64, device=device)
                           if track_running_stats else None)


class _BatchNorm(Module):
    """Shared by BatchNorm1d and BatchNorm2d; `input_ndims` says which ranks they take."""

    input_ndims: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, dtype=None,
                 device=None):
        super().__init__()
        _per_channel_state(self, num_features, eps, momentum, affine, track_running_stats,
                           dtype, device)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, x):
        name = type(self).__name__
        if x.ndim not in self.input_ndims:
            raise ShapeError(f"{name} expects input with {' or '.join(map(str, self.input_ndims))}"
                             f" axes (N, C, ...), got shape {x.shape}", op=name)
        if x.shape[1] != self.num_features:
            raise ShapeError(f"{name}({self.num_features}) got {x.shape[1]} channels in "
                             f"shape {x.shape}", op=name)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            from ..eager.context import no_grad
            with no_grad():
                self.num_batches_tracked += 1
            if self.momentum is None:
                # Cumulative moving average: every batch so far weighs the same.
                momentum = 1.0 / int(self.num_batches_tracked)
        # Without running statistics, batch statistics are used in eval mode too.
        use_batch = self.training or self.running_mean is None
        return F.batch_norm(x, self.running_mean if self.track_running_stats else None,
                            self.running_var if self.track_running_stats else None,
                            self.weight, self.bias, training=use_batch, momentum=momentum,
                            eps=self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Normalizes each channel of (N, C) or (N, C, L) over the batch (and length).

    Training mode uses the batch's statistics and updates `running_mean` and
    `running_var` (unbiased variance) by `momentum`; eval mode uses the running ones.

    >>> import rill
    >>> bn = rill.nn.BatchNorm1d(3)
    >>> y = bn(rill.randn(64, 3) * 5 + 2)
    >>> bool((y.mean(axis=0).abs() < 1e-4).all()), list(bn.state_dict())
    (True, ['weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked'])
    """

    input_ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Normalizes each channel of (N, C, H, W) over the batch and both spatial axes.

    >>> import rill
    >>> bn = rill.nn.BatchNorm2d(4).eval()
    >>> bn(rill.ones(2, 4, 3, 3)).shape
    (2, 4, 3, 3)
    """

    input_ndims = (4,)


class LayerNorm(Module):
    """Normalizes over the trailing `normalized_shape` axes of each sample, then scales
    by `weight` and shifts by `bias` (both of that shape) when `elementwise_affine`.

    >>> import rill
    >>> ln = rill.nn.LayerNorm(4)
    >>> y = ln(rill.tensor([[1.0, 2.0, 3.0, 4.0]]))
    >>> round(float(y.mean()), 6), round(float(y.var(correction=0)), 3)
    (0.0, 1.0)
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, dtype=None, device=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else \
            tuple(normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(shape, dtype=dtype, device=device))
            self.register_parameter(
                "bias", Parameter(zeros(shape, dtype=dtype, device=device)) if bias else None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    """Splits the C channels of (N, C, ...) into num_groups groups and normalizes each
    group of each sample; per-channel `weight` and `bias` when `affine`.

    >>> import rill
    >>> gn = rill.nn.GroupNorm(2, 4)
    >>> gn(rill.randn(3, 4, 5)).shape
    (3, 4, 5)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, dtype=None, device=None):
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups:
            raise ArgumentError(f"num_channels ({num_channels}) must be divisible by "
                                f"num_groups ({num_groups})", op="GroupNorm")
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = eps, affine
        if affine:
            self.weight = Parameter(ones(num_channels, dtype=dtype, device=device))
            self.bias = Parameter(zeros(num_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _InstanceNorm(Module):
    """Shared by InstanceNorm1d and InstanceNorm2d: `spatial` is how many axes follow C."""

    spatial = 1

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device=None,
                 dtype=None):
        super().__init__()
        _per_channel_state(self, num_features, eps, momentum, affine, track_running_stats,
                           dtype, device)

    def forward(self, input):
        name = type(self).__name__
        batched = self.spatial + 2
        if input.ndim not in (batched, batched - 1):
            raise ShapeError(f"{name} expects (N, C, {'L' if self.spatial == 1 else 'H, W'}) "
                             f"or the same without N, got shape {input.shape}", op=name)
        x = input if input.ndim == batched else input.expand_dims(0)
        if x.shape[1] != self.num_features and self.affine:
            raise ShapeError(f"{name}({self.num_features}) got {x.shape[1]} channels in "
                             f"shape {input.shape}", op=name)
        use_input_stats = self.training or not self.track_running_stats
        momentum = 0.1 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            from ..eager.context import no_grad
            with no_grad():
                self.num_batches_tracked += 1
            if self.momentum is None:
                momentum = 1.0 / int(self.num_batches_tracked)
        y = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            use_input_stats, momentum, self.eps)
        return y if input.ndim == batched else y.squeeze(0)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """Normalizes each channel of each sample of (N, C, L) (or (C, L)) over its length;
    learned per-channel `weight` and `bias` when `affine`, running statistics for eval
    when `track_running_stats` (both off by default, as PyTorch).

    >>> import rill
    >>> y = rill.nn.InstanceNorm1d(3)(rill.randn(2, 3, 8) * 4 + 1)
    >>> bool((y.mean(axis=2).abs() < 1e-5).all())
    True
    """

    spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Normalizes each channel of each sample of (N, C, H, W) (or (C, H, W)) over H and W
    (style transfer's normalization); options as InstanceNorm1d's."""

    spatial = 2


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) over the trailing `normalized_shape` axes, times a learned
    `weight` of that shape (when `elementwise_affine`); eps None means the machine epsilon
    of the input's dtype.

    >>> import rill
    >>> norm = rill.nn.RMSNorm(4)
    >>> norm(rill.ones(2, 4) * 3).tolist()[0]
    [1.0, 1.0, 1.0, 1.0]
    """

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else \
            tuple(normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(shape, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class LocalResponseNorm(Module):
    """Divides each channel by (k + alpha / size * the sum of squares over `size`
    neighbouring channels)^beta (AlexNet's normalization)."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
