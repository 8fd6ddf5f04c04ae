"""rill.nn.functional: the layer math as functions (the layers in rill.nn call these).

Fused primitives (convolutions, pooling, softmax) are declared in rill.ops; everything else
here is composed from primitives, so each function differentiates, captures, and runs on any
device its pieces run on.
"""
from __future__ import annotations

import math

from .. import dtypes as dt
from ..eager.context import no_grad
from ..errors import ArgumentError, DTypeError, ShapeError, reports_as
from ..ops import promotion
from ..ops import activation as _act
from ..ops import arguments as arg  # a module, so its helpers are not functional's API
from ..ops import elementwise as _E
from ..ops.checks import check
from ..ops.creation import ones, zeros
from ..ops.batch_norm import batch_norm_train as _batch_norm_train
from ..ops.normalization import layer_norm as _layer_norm
from ..ops.elementwise import abs, rsqrt, scaled_add, square, where
from ..ops.indexing import take, take_along_axis
from ..ops.linalg import matmul
from ..ops.methods import assign
from ..ops.methods import update_in_place as _update_in_place
from ..ops.random import rand
from ..ops.reduce import mean, norm, sum
from ..ops.rules import broadcast_shapes as _broadcast_shapes
from ..ops.shape import (broadcast_to, expand_dims, moveaxis, reshape, squeeze, swapaxes,
                         tril)
from ..eager.context import detached_value as _detached_value
from ..tensor import Tensor

# The fused primitives and the activations, under the names layers and users reach for.
from ..ops.activation import log_softmax, softmax, softmax_cross_entropy  # noqa: F401
from ..ops.conv import (conv1d, conv2d, conv3d, conv_transpose1d,  # noqa: F401
                        conv_transpose2d, conv_transpose3d)
from ..ops.elementwise import gelu, sigmoid, tanh  # noqa: F401
from ..ops.linalg import linear  # noqa: F401
from ..ops.pooling import (adaptive_avg_pool1d, adaptive_avg_pool2d,  # noqa: F401
                           adaptive_avg_pool3d, adaptive_max_pool1d, adaptive_max_pool2d,
                           avg_pool1d, avg_pool2d, avg_pool3d, max_pool1d, max_pool2d,
                           max_pool3d)
from ..ops.padding import pad  # noqa: F401
from ..ops.resize import interpolate, pixel_shuffle, pixel_unshuffle  # noqa: F401
from .sampled_losses import nce_loss, sampled_softmax_loss  # noqa: F401

REDUCTIONS = ("mean", "sum", "none")


# ---- dense layers ---------------------------------------------------------------------------

@reports_as("embedding")
def embedding(indices, weight, padding_idx: int | None = None):
    """Rows of `weight` at integer `indices`; the gradient is sparse (rill.SparseRows).

    Rows at padding_idx are looked up but receive no gradient.

    >>> w = rill.arange(6.0).reshape(3, 2)
    >>> rill.nn.functional.embedding(rill.tensor([2, 0]), w)
    tensor([[4., 5.],
            [0., 1.]])
    """
    indices = arg.as_tensor(indices, "indices", "embedding")
    weight = arg.as_tensor(weight, "weight", "embedding")
    if indices.dtype.kind not in "iu":
        raise DTypeError(f"indices must be integers, got {indices.dtype}", op="embedding")
    if weight.ndim != 2:
        raise ShapeError(f"weight must be (num_embeddings, dim), got {weight.shape}",
                         op="embedding")
    out = take(weight, indices, axis=0)
    if padding_idx is not None:
        padding_idx = arg.as_int(padding_idx, "padding_idx", "embedding")
        if not -weight.shape[0] <= padding_idx < weight.shape[0]:
            raise ArgumentError(f"padding_idx {padding_idx} is outside the {weight.shape[0]} "
                                "rows of the table", op="embedding")
        keep = expand_dims(indices != (padding_idx % weight.shape[0]), -1)
        out = where(keep, out, _detached_value(out))
    return out


# ---- regularization ------------------------------------------------------------------------

@reports_as("dropout")
def dropout(x, p: float = 0.5, training: bool = True, inplace: bool = False,
            generator=None):
    """Zero each element with probability p and scale the rest by 1/(1-p); identity when
    not training. `inplace=True` gives x the result (see `activation_in_place`).

    >>> x = rill.ones(1000)
    >>> y = rill.nn.functional.dropout(x, 0.5, generator=rill.Generator(0))
    >>> sorted(set(y.tolist()))
    [0.0, 2.0]
    """
    x = arg.as_tensor(x, "x", "dropout")
    p = arg.as_float(p, "p", "dropout")
    if not 0.0 <= p <= 1.0:
        raise ArgumentError(f"p must be in [0, 1], got {p}", op="dropout")
    inplace = arg.as_bool(inplace, "inplace", "dropout")
    if not arg.as_bool(training, "training", "dropout") or p == 0.0:
        return x
    if p == 1.0:
        return _in_place(lambda t: t * 0.0, x, inplace, "dropout")
    keep = rand(*x.shape, dtype=x.dtype, device=x.device, generator=generator) >= p
    return _in_place(lambda t: where(keep, t * (1.0 / (1.0 - p)), 0.0), x, inplace, "dropout")


# ---- activations, with PyTorch's signatures ------------------------------------------------
# rill tensors are values, so `inplace=True` cannot share memory with a view the way
# PyTorch's does; it means: the input tensor object takes the result (through rill's in-place
# mechanism, as `x += 1` does) and is returned. It is allowed where PyTorch allows it: not on
# a leaf that requires grad while gradients are recorded (a rill.GradientError, as PyTorch's
# RuntimeError); under no_grad, or on a non-leaf, the tape sees an out-of-place op on the old
# value, so the gradients are those of inplace=False.

def _in_place(fn, x, inplace: bool, op: str):
    """fn(x), given to x itself when `inplace` (see the section comment)."""
    if not arg.as_bool(inplace, "inplace", op):
        return fn(x)
    if not isinstance(x, Tensor):
        raise ArgumentError(f"inplace=True changes a tensor, got {arg.describe(x)}", op=op)
    return _update_in_place(x, fn)


@reports_as("relu")
def relu(input, inplace: bool = False):
    """max(input, 0); `inplace` as the section comment says."""
    return _in_place(_E.relu, input, inplace, "relu")


@reports_as("relu6")
def relu6(input, inplace: bool = False):
    """min(max(input, 0), 6)."""
    return _in_place(_act.relu6, input, inplace, "relu6")


@reports_as("leaky_relu")
def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    """input where input > 0, negative_slope * input elsewhere."""
    slope = arg.as_float(negative_slope, "negative_slope", "leaky_relu")
    return _in_place(lambda t: _E.leaky_relu(t, slope), input, inplace, "leaky_relu")


@reports_as("elu")
def elu(input, alpha: float = 1.0, inplace: bool = False):
    """input where input > 0, alpha * (exp(input) - 1) elsewhere."""
    alpha = arg.as_float(alpha, "alpha", "elu")
    return _in_place(lambda t: _E.elu(t, alpha), input, inplace, "elu")


@reports_as("selu")
def selu(input, inplace: bool = False):
    """scale * elu(input, alpha), the self-normalizing constants (rill.ops.activation)."""
    return _in_place(_act.selu, input, inplace, "selu")


@reports_as("celu")
def celu(input, alpha: float = 1.0, inplace: bool = False):
    """input where input > 0, alpha * (exp(input / alpha) - 1) elsewhere."""
    alpha = arg.as_float(alpha, "alpha", "celu")
    return _in_place(lambda t: _act.celu(t, alpha), input, inplace, "celu")


@reports_as("silu")
def silu(input, inplace: bool = False):
    """input * sigmoid(input) (also called swish)."""
    return _in_place(_E.silu, input, inplace, "silu")


@reports_as("mish")
def mish(input, inplace: bool = False):
    """input * tanh(softplus(input))."""
    return _in_place(_act.mish, input, inplace, "mish")


@reports_as("hardtanh")
def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """input clamped to [min_val, max_val] (gradient 0 on the bounds, as PyTorch).

    >>> rill.nn.functional.hardtanh(rill.tensor([-2.0, 0.5, 3.0]))
    tensor([-1. ,  0.5,  1. ])
    """
    lo = arg.as_float(min_val, "min_val", "hardtanh")
    hi = arg.as_float(max_val, "max_val", "hardtanh")
    return _in_place(lambda t: _act.hardtanh(t, lo, hi), input, inplace, "hardtanh")


@reports_as("hardsigmoid")
def hardsigmoid(input, inplace: bool = False):
    """0 below -3, 1 above 3, input / 6 + 1/2 between."""
    return _in_place(_act.hardsigmoid, input, inplace, "hardsigmoid")


@reports_as("hardswish")
def hardswish(input, inplace: bool = False):
    """input * hardsigmoid(input)."""
    return _in_place(_act.hardswish, input, inplace, "hardswish")


@reports_as("threshold")
def threshold(input, threshold: float, value: float, inplace: bool = False):  # noqa: F811
    """input where input > threshold, else value."""
    t = arg.as_float(threshold, "threshold", "threshold")
    v = arg.as_float(value, "value", "threshold")
    return _in_place(lambda x: _act.threshold(x, t, v), input, inplace, "threshold")


def softsign(input):
    """input / (1 + |input|)."""
    return _act.softsign(input)


def tanhshrink(input):
    """input - tanh(input)."""
    return _act.tanhshrink(input)


def logsigmoid(input):
    """log(sigmoid(input)), stable for large |input|."""
    return _act.logsigmoid(input)


def prelu(input, weight):
    """input where input > 0, weight * input elsewhere; one slope, or one per channel."""
    return _act.prelu(input, weight)


def glu(input, dim: int = -1):
    """a * sigmoid(b) for the halves a, b of input along `dim`.

    >>> rill.nn.functional.glu(rill.tensor([1.0, 2.0, 0.0, 0.0]))
    tensor([0.5, 1. ])
    """
    return _act.glu(input, dim)


@reports_as("softmin")
def softmin(input, dim: int | None = None, dtype=None):
    """softmax(-input) along `dim` (the last axis when None), computed in `dtype` if given."""
    x = arg.as_tensor(input, "input", "softmin")
    if dtype is not None:
        x = x.astype(arg.as_dtype(dtype, "softmin"))
    return _act.softmin(x, -1 if dim is None else arg.as_axis(dim, "softmin", "dim"))


@reports_as("softplus")
def softplus(input, beta: float = 1.0, threshold: float = 20.0):  # noqa: F811
    """log(1 + exp(beta * input)) / beta, and input itself where beta * input > threshold
    (as PyTorch: linear where the curve has met its asymptote)."""
    x = arg.as_tensor(input, "input", "softplus")
    beta = arg.as_float(beta, "beta", "softplus")
    limit = arg.as_float(threshold, "threshold", "softplus")
    scaled = x * beta if beta != 1.0 else x
    smooth = _E.softplus(scaled)
    if beta != 1.0:
        smooth = smooth / beta
    return where(scaled > limit, x, smooth)


# ---- normalization -------------------------------------------------------------------------

def _affine(y, weight, bias, shape):
    if weight is not None:
        y = y * reshape(weight, shape)
    if bias is not None:
        y = y + reshape(bias, shape)
    return y


def _check_channels(name, t, c, what):
    if t is not None and tuple(t.shape) != (c,):
        raise ShapeError(f"{what} must have shape ({c},), got {t.shape}", op=name)


@reports_as("batch_norm")
def batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5):
    """Normalize each channel (axis 1) by batch statistics (training) or by the running ones.

    In training, running_mean and running_var (if given) are updated in place:
    new = (1 - momentum) * old + momentum * batch, the variance unbiased (as PyTorch).
    """
    op = "batch_norm"
    x = arg.as_tensor(x, "x", op)
    running_mean = arg.optional_tensor(running_mean, "running_mean", op)
    running_var = arg.optional_tensor(running_var, "running_var", op)
    weight, bias = arg.optional_tensor(weight, "weight", op), arg.optional_tensor(bias, "bias", op)
    training = arg.as_bool(training, "training", op)
    momentum, eps = arg.as_float(momentum, "momentum", op), arg.as_float(eps, "eps", op)
    if x.ndim < 2:
        raise ShapeError(f"expects (N, C, ...), got {x.shape}", op=op)
    c = x.shape[1]
    for t, what in ((running_mean, "running_mean"), (running_var, "running_var"),
                    (weight, "weight"), (bias, "bias")):
        _check_channels("batch_norm", t, c, what)
    if training:
        count = x.size // c
        if count <= 1:
            raise ShapeError(f"training batch_norm needs more than one value per channel, got "
                             f"input {x.shape}", op="batch_norm")
        if (running_mean is None) != (running_var is None):
            raise ArgumentError("give both running_mean and running_var, or neither",
                                op="batch_norm")
        # The fused primitive on CPU float32/float64, else the same math in rill ops.
        y, mu, v = _batch_norm_train(x, weight, bias, eps)
        if running_mean is not None:
            with no_grad():
                m = float(momentum)
                assign(running_mean, scaled_add(running_mean, mu, 1 - m, m))
                assign(running_var, scaled_add(running_var, v, 1 - m,
                                               m * count / (count - 1)))  # unbiased
        return y
    if running_mean is None or running_var is None:
        raise ArgumentError("inference batch_norm needs running_mean and running_var",
                            op="batch_norm")
    shape = (1, c) + (1,) * (x.ndim - 2)
    y = (x - reshape(running_mean, shape)) * reshape(rsqrt(running_var + eps), shape)
    return _affine(y, weight, bias, shape)


@reports_as("layer_norm")
def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Normalize over the trailing `normalized_shape` axes, then scale and shift.

    >>> y = rill.nn.functional.layer_norm(rill.tensor([[1.0, 2.0, 3.0]]), (3,))
    >>> [round(v, 4) for v in y[0].tolist()]
    [-1.2247, 0.0, 1.2247]
    """
    x = arg.as_tensor(x, "x", "layer_norm")
    normalized_shape = arg.as_shape(normalized_shape, "layer_norm", "normalized_shape")
    weight = arg.optional_tensor(weight, "weight", "layer_norm")
    bias = arg.optional_tensor(bias, "bias", "layer_norm")
    eps = arg.as_float(eps, "eps", "layer_norm")
    k = len(normalized_shape)
    if tuple(x.shape[x.ndim - k:]) != normalized_shape or k > x.ndim:
        raise ShapeError(f"input {x.shape} does not end with normalized_shape "
                         f"{normalized_shape}", op="layer_norm")
    for t, what in ((weight, "weight"), (bias, "bias")):
        if t is not None and tuple(t.shape) != normalized_shape:
            raise ShapeError(f"{what} must have shape {normalized_shape}, got {t.shape}",
                             op="layer_norm")
    # One fused primitive, forward and back; absent weight/bias are ones/zeros.
    if weight is None:
        weight = ones(normalized_shape, dtype=x.dtype, device=x.device)
    if bias is None:
        bias = zeros(normalized_shape, dtype=x.dtype, device=x.device)
    return _layer_norm(x, weight, bias, eps, k)


@reports_as("group_norm")
def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalize each group of channels of each sample, then a per-channel scale and shift."""
    x = arg.as_tensor(x, "x", "group_norm")
    num_groups = arg.as_int(num_groups, "num_groups", "group_norm")
    weight = arg.optional_tensor(weight, "weight", "group_norm")
    bias = arg.optional_tensor(bias, "bias", "group_norm")
    eps = arg.as_float(eps, "eps", "group_norm")
    if x.ndim < 2:
        raise ShapeError(f"expects (N, C, ...), got {x.shape}", op="group_norm")
    n, c = x.shape[:2]
    if num_groups < 1 or c % num_groups:
        raise ArgumentError(f"{c} channels do not split into {num_groups} groups",
                            op="group_norm")
    _check_channels("group_norm", weight, c, "weight")
    _check_channels("group_norm", bias, c, "bias")
    g = reshape(x, (n, num_groups, -1))
    mu = mean(g, axis=2, keepdims=True)
    centered = g - mu
    y = reshape(centered * rsqrt(mean(square(centered), axis=2, keepdims=True) + eps), x.shape)
    return _affine(y, weight, bias, (1, c) + (1,) * (x.ndim - 2))


@reports_as("instance_norm")
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5):
    """Normalize each channel of each sample of (N, C, ...) over its own spatial axes, then
    a per-channel scale and shift.

    With `use_input_stats` (PyTorch's default) the sample's statistics are used, and
    running_mean/running_var, if given, move by `momentum` towards their mean over the
    batch (the variance unbiased, as PyTorch); otherwise the running ones are used.
    """
    op = "instance_norm"
    x = arg.as_tensor(input, "input", op)
    running_mean = arg.optional_tensor(running_mean, "running_mean", op)
    running_var = arg.optional_tensor(running_var, "running_var", op)
    weight, bias = arg.optional_tensor(weight, "weight", op), arg.optional_tensor(bias, "bias", op)
    use_input_stats = arg.as_bool(use_input_stats, "use_input_stats", op)
    momentum, eps = arg.as_float(momentum, "momentum", op), arg.as_float(eps, "eps", op)
    if x.ndim < 3:
        raise ShapeError(f"expects (N, C, ...) with at least one spatial axis, got {x.shape}",
                         op=op)
    c = x.shape[1]
    for t, what in ((running_mean, "running_mean"), (running_var, "running_var"),
                    (weight, "weight"), (bias, "bias")):
        _check_channels(op, t, c, what)
    if (running_mean is None) != (running_var is None):
        raise ArgumentError("give both running_mean and running_var, or neither", op=op)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if not use_input_stats:
        if running_mean is None:
            raise ArgumentError("use_input_stats=False needs running_mean and running_var",
                                op=op)
        y = (x - reshape(running_mean, shape)) * reshape(rsqrt(running_var + eps), shape)
        return _affine(y, weight, bias, shape)
    axes = tuple(range(2, x.ndim))
    count = math.prod(x.shape[2:])
    mu = mean(x, axis=axes, keepdims=True)
    centered = x - mu
    v = mean(square(centered), axis=axes, keepdims=True)
    if running_mean is not None:
        if count <= 1:
            raise ShapeError(f"tracking running statistics needs more than one value per "
                             f"channel, got input {x.shape}", op=op)
        with no_grad():
            batch_mu = mean(reshape(mu, x.shape[:2]), axis=0)
            batch_var = mean(reshape(v, x.shape[:2]), axis=0) * (count / (count - 1))
            assign(running_mean, scaled_add(running_mean, batch_mu, 1 - momentum, momentum))
            assign(running_var, scaled_add(running_var, batch_var, 1 - momentum, momentum))
    return _affine(centered * rsqrt(v + eps), weight, bias, shape)


@reports_as("rms_norm")
def rms_norm(input, normalized_shape, weight=None, eps: float | None = None):
    """input / sqrt(mean(input^2) + eps) over the trailing `normalized_shape` axes, times
    `weight` (of that shape); eps None means the machine epsilon of input's dtype (as
    PyTorch).

    >>> rill.nn.functional.rms_norm(rill.tensor([[3.0, 4.0]]), (2,), eps=0.0)
    tensor([[0.84852815, 1.1313709 ]])
    """
    op = "rms_norm"
    x = arg.as_tensor(input, "input", op)
    normalized_shape = arg.as_shape(normalized_shape, op, "normalized_shape")
    weight = arg.optional_tensor(weight, "weight", op)
    if not x.dtype.is_floating:
        raise DTypeError(f"expects a floating input, got {x.dtype}", op=op)
    eps = float(dt.finfo(x.dtype).eps) if eps is None else arg.as_float(eps, "eps", op)
    k = len(normalized_shape)
    if k > x.ndim or tuple(x.shape[x.ndim - k:]) != normalized_shape:
        raise ShapeError(f"input {x.shape} does not end with normalized_shape "
                         f"{normalized_shape}", op=op)
    if weight is not None and tuple(weight.shape) != normalized_shape:
        raise ShapeError(f"weight must have shape {normalized_shape}, got {weight.shape}",
                         op=op)
    axes = tuple(range(x.ndim - k, x.ndim))
    y = x * rsqrt(mean(square(x), axis=axes, keepdims=True) + eps)
    return y if weight is None else y * weight


@reports_as("local_response_norm")
def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0):
    """input / (k + alpha / size * sum of input^2 over `size` neighbouring channels)^beta,
    the window centred on each channel (size // 2 before, (size - 1) // 2 after) and
    zero beyond the ends."""
    op = "local_response_norm"
    x = arg.as_tensor(input, "input", op)
    size = arg.as_int(size, "size", op, low=1)
    alpha, beta, k = (arg.as_float(alpha, "alpha", op), arg.as_float(beta, "beta", op),
                      arg.as_float(k, "k", op))
    if x.ndim < 3:
        raise ShapeError(f"expects (N, C, ...) with at least one spatial axis, got {x.shape}",
                         op=op)
    from ..ops.shape import pad as pad_widths, slice_axis  # NumPy-style widths, not F.pad's
    c = x.shape[1]
    widths = [(0, 0)] * x.ndim
    widths[1] = (size // 2, (size - 1) // 2)
    sq = pad_widths(square(x), widths)
    window = slice_axis(sq, 1, 0, c)
    for i in range(1, size):
        window = window + slice_axis(sq, 1, i, i + c)
    return x / _E.power(window * (alpha / size) + k, beta)


# ---- losses --------------------------------------------------------------------------------

def _reduce(loss, reduction: str, op: str):
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum(loss)
    if reduction == "none":
        return loss
    raise ArgumentError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}", op=op)


def _classes_last(x):
    """(N, C, d1, ...) -> (N, d1, ..., C): the class axis last, as the losses index it."""
    return moveaxis(x, 1, -1) if x.ndim > 2 else x


@reports_as("nll_loss")
def nll_loss(log_probs, target, weight=None, ignore_index: int = -100,
             reduction: str = "mean"):
    """-log_probs[target], per sample (class axis 1), weighted, ignoring ignore_index.

    With reduction='mean' the sum is divided by the total weight of the counted targets.
    """
    op = "nll_loss"
    log_probs, target = arg.as_tensor(log_probs, "input", op), arg.as_tensor(target, "target", op)
    weight = arg.optional_tensor(weight, "weight", op)
    ignore_index = arg.as_int(ignore_index, "ignore_index", op)
    reduction = arg.as_choice(reduction, "reduction", op, REDUCTIONS)
    if target.dtype.kind not in "iu":
        raise DTypeError(f"target must hold class indices (integers), got {target.dtype}; "
                         "for probabilities use cross_entropy", op="nll_loss")
    if log_probs.ndim < 1 or (log_probs.ndim == 1 and target.ndim != 0) or (
            log_probs.ndim > 1 and (tuple(target.shape) != (log_probs.shape[0],) +
                                    tuple(log_probs.shape[2:]))):
        raise ShapeError(f"target {target.shape} does not match input {log_probs.shape} "
                         "(expected the input's shape without the class axis 1)", op="nll_loss")
    c = log_probs.shape[1] if log_probs.ndim > 1 else log_probs.shape[0]
    if weight is not None and tuple(weight.shape) != (c,):
        raise ShapeError(f"weight must have shape ({c},), got {weight.shape}", op="nll_loss")
    valid = target != ignore_index
    safe = where(valid, target, 0)
    safe = check(((safe >= 0) & (safe < c)).all(), safe,
                 f"target holds class indices outside [0, {c})", op="nll_loss")
    lp = _classes_last(log_probs) if log_probs.ndim > 1 else log_probs
    picked = squeeze(take_along_axis(lp, expand_dims(safe, -1), axis=-1), -1)
    w = valid.astype(log_probs.dtype)
    if weight is not None:
        w = w * take(weight, safe)
    loss = -picked * w
    if reduction == "mean":
        return sum(loss) / sum(w)
    return _reduce(loss, reduction, "nll_loss")


@reports_as("cross_entropy")
def cross_entropy(logits, target, weight=None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """Softmax cross-entropy of logits (N, C, ...) against class indices (N, ...) or class
    probabilities (the logits' shape), as PyTorch's cross_entropy.

    >>> logits = rill.tensor([[2.0, 0.0, 0.0]])
    >>> round(float(rill.nn.functional.cross_entropy(logits, rill.tensor([0]))), 4)
    0.2395
    """
    op = "cross_entropy"
    label_smoothing = arg.as_float(label_smoothing, "label_smoothing", op)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}",
                            op="cross_entropy")
    reduction = arg.as_choice(reduction, "reduction", op, REDUCTIONS)
    ignore_index = arg.as_int(ignore_index, "ignore_index", op)
    weight = arg.optional_tensor(weight, "weight", op)
    target = arg.as_tensor(target, "target", op)
    logits = arg.as_tensor(logits, "input", op)
    if logits.ndim < 1:
        raise ShapeError("logits need a class axis", op="cross_entropy")
    class_axis = 1 if logits.ndim > 1 else 0
    c = logits.shape[class_axis]
    if weight is not None and tuple(weight.shape) != (c,):
        raise ShapeError(f"weight must have one entry per class, shape ({c},), got "
                         f"{weight.shape}", op="cross_entropy")
    if target.dtype.kind == "f":  # class probabilities
        lp = log_softmax(logits, axis=class_axis)
        if tuple(target.shape) != tuple(logits.shape):
            raise ShapeError(f"probability targets {target.shape} must match logits "
                             f"{logits.shape}", op="cross_entropy")
        if label_smoothing:
            target = target * (1.0 - label_smoothing) + label_smoothing / c
        weighted = lp if weight is None else lp * reshape(weight, (c,) + (1,) * (
            logits.ndim - class_axis - 1))
        return _reduce(-sum(weighted * target, axis=class_axis), reduction, "cross_entropy")
    expected = (() if logits.ndim == 1 else (logits.shape[0],) + tuple(logits.shape[2:]))
    if tuple(target.shape) != expected:
        raise ShapeError(f"target {target.shape} does not match logits {logits.shape} "
                         "(expected the logits' shape without the class axis 1)",
                         op="cross_entropy")
    if weight is None:
        # The common case, fused: one kernel forward, one rule back, no (N, C) temporaries
        # kept on the tape.
        if logits.ndim == 2:
            return softmax_cross_entropy(logits, target, ignore_index, label_smoothing,
                                         reduction)
        flat = reshape(_classes_last(logits), (-1, c)) if logits.ndim > 1 else \
            reshape(logits, (1, c))
        loss = softmax_cross_entropy(flat, reshape(target, (-1,)), ignore_index,
                                     label_smoothing, reduction)
        return reshape(loss, target.shape) if reduction == "none" else loss
    lp = log_softmax(logits, axis=class_axis)
    loss = nll_loss(lp, target, weight, ignore_index, reduction)
    if not label_smoothing:
        return loss
    # The smoothing term: the mean over classes of -log p, weighted like the nll term.
    lpl = _classes_last(lp) if lp.ndim > 1 else lp
    per_class = -lpl if weight is None else -lpl * weight
    valid = (target != ignore_index).astype(lp.dtype)
    smooth = sum(per_class, axis=-1) * valid
    if reduction == "mean":
        denom = sum(valid if weight is None else valid * take(weight, where(
            target != ignore_index, target, 0)))
        smooth = sum(smooth) / denom
    else:
        smooth = _reduce(smooth, reduction, "cross_entropy")
    return loss * (1.0 - label_smoothing) + smooth * (label_smoothing / c)


def _pair_check(x, y, op):
    x, y = promotion.common_float((arg.as_tensor(x, "input", op), arg.as_tensor(y, "target", op)))
    if tuple(x.shape) != tuple(y.shape):
        raise ShapeError(f"input {x.shape} and target {y.shape} must have one shape", op=op)
    return x, y


@reports_as("mse_loss")
def mse_loss(x, y, reduction: str = "mean"):
    """Mean squared error.

    >>> float(rill.nn.functional.mse_loss(rill.tensor([1.0, 3.0]), rill.tensor([0.0, 0.0])))
    5.0
    """
    reduction = arg.as_choice(reduction, "reduction", "mse_loss", REDUCTIONS)
    x, y = _pair_check(x, y, "mse_loss")
    return _reduce(square(x - y), reduction, "mse_loss")


@reports_as("l1_loss")
def l1_loss(x, y, reduction: str = "mean"):
    """Mean absolute error."""
    reduction = arg.as_choice(reduction, "reduction", "l1_loss", REDUCTIONS)
    x, y = _pair_check(x, y, "l1_loss")
    return _reduce(abs(x - y), reduction, "l1_loss")


@reports_as("huber_loss")
def huber_loss(x, y, reduction: str = "mean", delta: float = 1.0):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), for d = x - y."""
    reduction = arg.as_choice(reduction, "reduction", "huber_loss", REDUCTIONS)
    delta = arg.as_float(delta, "delta", "huber_loss")
    if not delta > 0:
        raise ArgumentError(f"delta must be positive, got {delta}", op="huber_loss")
    x, y = _pair_check(x, y, "huber_loss")
    d = abs(x - y)
    loss = where(d < delta, 0.5 * square(d), delta * (d - 0.5 * delta))
    return _reduce(loss, reduction, "huber_loss")


@reports_as("binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(x, y, weight=None, pos_weight=None,
                                     reduction: str = "mean"):
    """-[pos_weight * y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], stable for any x."""
    op = "binary_cross_entropy_with_logits"
    reduction = arg.as_choice(reduction, "reduction", op, REDUCTIONS)
    weight = arg.optional_tensor(weight, "weight", op)
    pos_weight = arg.optional_tensor(pos_weight, "pos_weight", op)
    x, y = _pair_check(x, y, op)
    # log sigmoid(x) = -softplus(-x); log(1 - sigmoid(x)) = -softplus(x)
    positive = _E.softplus(-x)
    if pos_weight is not None:
        positive = positive * pos_weight
    loss = y * positive + (1.0 - y) * _E.softplus(x)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def legacy_reduction(size_average, reduce, reduction: str, op: str) -> str:
    """PyTorch's deprecated size_average/reduce pair, turned into the reduction it means
    (reduce=False: 'none'; else size_average=False: 'sum'; else 'mean')."""
    if size_average is None and reduce is None:
        return arg.as_choice(reduction, "reduction", op, REDUCTIONS)
    size_average = True if size_average is None else arg.as_bool(size_average,
                                                                   "size_average", op)
    reduce = True if reduce is None else arg.as_bool(reduce, "reduce", op)
    return "none" if not reduce else ("mean" if size_average else "sum")


def _clamped_log(x):
    """log(x), never below -100: PyTorch's documented clamp, so log(0) gives a finite loss."""
    return _E.maximum(_E.log(x), -100.0)


@reports_as("binary_cross_entropy")
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """-weight * [target log(input) + (1 - target) log(1 - input)] for probabilities input
    in [0, 1], each log clamped at -100 (as PyTorch).

    >>> p = rill.tensor([0.5, 1.0])
    >>> rill.nn.functional.binary_cross_entropy(p, rill.tensor([1.0, 0.0]), reduction="none")
    tensor([  0.6931472, 100.       ])
    """
    op = "binary_cross_entropy"
    reduction = legacy_reduction(size_average, reduce, reduction, op)
    weight = arg.optional_tensor(weight, "weight", op)
    x, y = _pair_check(input, target, op)
    x = check(((x >= 0) & (x <= 1)).all(), x, "all input values must be probabilities in "
              "[0, 1]; for logits use binary_cross_entropy_with_logits", op=op)
    loss = -(y * _clamped_log(x) + (1.0 - y) * _clamped_log(1.0 - x))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, op)


@reports_as("smooth_l1_loss")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta, for d = input - target (beta=0:
    the L1 loss). huber_loss(delta) = delta * smooth_l1_loss(beta=delta).

    >>> rill.nn.functional.smooth_l1_loss(rill.tensor([0.5, 3.0]), rill.tensor([0.0, 0.0]))
    tensor(1.3125)
    """
    op = "smooth_l1_loss"
    reduction = legacy_reduction(size_average, reduce, reduction, op)
    beta = arg.as_float(beta, "beta", op)
    if beta < 0:
        raise ArgumentError(f"beta must not be negative, got {beta}", op=op)
    x, y = _pair_check(input, target, op)
    d = abs(x - y)
    loss = d if beta == 0 else where(d < beta, (0.5 / beta) * square(d), d - 0.5 * beta)
    return _reduce(loss, reduction, op)


KL_REDUCTIONS = ("mean", "batchmean", "sum", "none")


@reports_as("kl_div")
def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False):
    """Pointwise KL divergence target * (log target - input), input being log-probabilities
    (and target too with `log_target`); 0 where target is 0. reduction='batchmean' divides
    the sum by the batch size (input.shape[0]), the true KL divergence per sample; 'mean'
    divides by the number of elements (as PyTorch, which warns about it)."""
    op = "kl_div"
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce, "mean", op)
    reduction = arg.as_choice(reduction, "reduction", op, KL_REDUCTIONS)
    log_target = arg.as_bool(log_target, "log_target", op)
    x, y = promotion.common_float((arg.as_tensor(input, "input", op),
                                   arg.as_tensor(target, "target", op)))
    if log_target:
        loss = _E.exp(y) * (y - x)
    else:
        positive = y > 0
        # x log x taken as 0 at x = 0 (its limit); the masked log never sees a zero.
        loss = where(positive, y * _E.log(where(positive, y, 1.0)), 0.0) - y * x
    if reduction == "batchmean":
        return sum(loss) / (x.shape[0] if x.ndim else 1)
    return _reduce(loss, reduction, op)


def _vector_norm(x, p: float, axis: int, keepdims: bool = False):
    return norm(x, p, axis=axis, keepdims=keepdims)


@reports_as("normalize")
def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    """input / max(||input||_p, eps) along `dim`.

    >>> rill.nn.functional.normalize(rill.tensor([[3.0, 4.0]]))
    tensor([[0.6, 0.8]])
    """
    op = "normalize"
    x = arg.as_tensor(input, "input", op)
    p, eps = arg.as_float(p, "p", op), arg.as_float(eps, "eps", op)
    dim = arg.as_axis(dim, op, "dim")
    if x.ndim == 0:
        raise ShapeError("normalize needs at least one axis", op=op)
    return x / _E.maximum(_vector_norm(x, p, dim, True), eps)


@reports_as("cosine_similarity")
def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """x1 . x2 / max(||x1|| ||x2||, eps) along `dim` (the inputs broadcast).

    >>> rill.nn.functional.cosine_similarity(rill.tensor([[1.0, 0.0]]), rill.tensor([[1.0, 1.0]]))
    tensor([0.70710677])
    """
    op = "cosine_similarity"
    a, b = promotion.common_float((arg.as_tensor(x1, "x1", op), arg.as_tensor(x2, "x2", op)))
    dim = arg.as_axis(dim, op, "dim")
    eps = arg.as_float(eps, "eps", op)
    try:
        shape = _broadcast_shapes(a.shape, b.shape)
    except ShapeError:
        raise ShapeError(f"x1 {a.shape} and x2 {b.shape} do not broadcast", op=op) from None
    if not shape:
        raise ShapeError("cosine_similarity needs at least one axis", op=op)
    a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    norms = _vector_norm(a, 2.0, dim) * _vector_norm(b, 2.0, dim)
    return sum(a * b, axis=dim) / _E.maximum(norms, eps)


@reports_as("pairwise_distance")
def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """||x1 - x2 + eps||_p over the last axis (eps keeps the gradient finite at 0)."""
    op = "pairwise_distance"
    a, b = promotion.common_float((arg.as_tensor(x1, "x1", op), arg.as_tensor(x2, "x2", op)))
    p, eps = arg.as_float(p, "p", op), arg.as_float(eps, "eps", op)
    keepdim = arg.as_bool(keepdim, "keepdim", op)
    d = a - b
    if d.ndim == 0:
        raise ShapeError("pairwise_distance needs at least one axis", op=op)
    return _vector_norm(d + eps, p, -1, keepdim)


def _check_labels(target, shape, op):
    if tuple(target.shape) != tuple(shape):
        raise ShapeError(f"target must have shape {tuple(shape)}, got {target.shape}", op=op)


@reports_as("cosine_embedding_loss")
def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, size_average=None,
                          reduce=None, reduction: str = "mean"):
    """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1;
    inputs (N, D) with target (N,), or (D,) with a 0-d target."""
    op = "cosine_embedding_loss"
    reduction = legacy_reduction(size_average, reduce, reduction, op)
    margin = arg.as_float(margin, "margin", op)
    a, b = promotion.common_float((arg.as_tensor(input1, "input1", op),
                                   arg.as_tensor(input2, "input2", op)))
    y = arg.as_tensor(target, "target", op)
    if a.ndim not in (1, 2) or tuple(a.shape) != tuple(b.shape):
        raise ShapeError(f"expects input1 and input2 of one shape, (N, D) or (D,); got "
                         f"{a.shape} and {b.shape}", op=op)
    _check_labels(y, a.shape[:-1], op)
    # PyTorch's form: a tiny epsilon inside each squared norm, not a floor on their product.
    tiny = 1e-12
    cos = sum(a * b, axis=-1) * rsqrt((sum(square(a), axis=-1) + tiny) *
                                      (sum(square(b), axis=-1) + tiny))
    loss = where(y == 1, 1.0 - cos, where(y == -1, _E.maximum(cos - margin, 0.0), 0.0))
    return _reduce(loss, reduction, op)


@reports_as("margin_ranking_loss")
def margin_ranking_loss(input1, input2, target, margin: float = 0.0, size_average=None,
                        reduce=None, reduction: str = "mean"):
    """max(0, -target * (input1 - input2) + margin): target 1 wants input1 ranked higher."""
    op = "margin_ranking_loss"
    reduction = legacy_reduction(size_average, reduce, reduction, op)
    margin = arg.as_float(margin, "margin", op)
    a, b, y = promotion.common_float((arg.as_tensor(input1, "input1", op),
                                      arg.as_tensor(input2, "input2", op),
                                      arg.as_tensor(target, "target", op)))
    if not (tuple(a.shape) == tuple(b.shape) == tuple(y.shape)):
        raise ShapeError(f"input1 {a.shape}, input2 {b.shape} and target {y.shape} must "
                         "have one shape", op=op)
    return _reduce(_E.maximum(-y * (a - b) + margin, 0.0), reduction, op)


@reports_as("triplet_margin_loss")
def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean"):
    """max(d(anchor, positive) - d(anchor, negative) + margin, 0), d the pairwise p-distance;
    with `swap`, the negative's distance is the smaller of d(a, n) and d(p, n)."""
    op = "triplet_margin_loss"
    reduction = legacy_reduction(size_average, reduce, reduction, op)
    margin, eps = arg.as_float(margin, "margin", op), arg.as_float(eps, "eps", op)
    p, swap = arg.as_float(p, "p", op), arg.as_bool(swap, "swap", op)
    if margin <= 0:
        raise ArgumentError(f"margin must be positive, got {margin}", op=op)
    a, pos, neg = promotion.common_float((arg.as_tensor(anchor, "anchor", op),
                                          arg.as_tensor(positive, "positive", op),
                                          arg.as_tensor(negative, "negative", op)))
    if a.ndim not in (1, 2) or not (a.ndim == pos.ndim == neg.ndim):
        raise ShapeError(f"expects anchor, positive and negative (N, D) or (D,), got "
                         f"{a.shape}, {pos.shape}, {neg.shape}", op=op)
    d_pos = pairwise_distance(a, pos, p, eps)
    d_neg = pairwise_distance(a, neg, p, eps)
    if swap:
        d_neg = _E.minimum(d_neg, pairwise_distance(pos, neg, p, eps))
    return _reduce(_E.maximum(d_pos - d_neg + margin, 0.0), reduction, op)


@reports_as("soft_margin_loss")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """log(1 + exp(-target * input)), for targets 1 and -1."""
    op = "soft_margin_loss"
    reduction = legacy_reduction(size_average, reduce, reduction, op)
    x, y = _pair_check(input, target, op)
    return _reduce(_E.softplus(-y * x), reduction, op)


@reports_as("gaussian_nll_loss")
def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean"):
    """0.5 * (log(var) + (input - target)^2 / var) (+ 0.5 log(2 pi) when `full`): the
    negative log-likelihood of target under N(input, var). var has the input's shape, or
    one axis of length 1, or one axis fewer; values below eps are raised to eps, the
    gradient passing through unchanged (as PyTorch)."""
    op = "gaussian_nll_loss"
    reduction = arg.as_choice(reduction, "reduction", op, REDUCTIONS)
    full, eps = arg.as_bool(full, "full", op), arg.as_float(eps, "eps", op)
    x, y, v = promotion.common_float((arg.as_tensor(input, "input", op),
                                      arg.as_tensor(target, "target", op),
                                      arg.as_tensor(var, "var", op)))
    if tuple(v.shape) != tuple(x.shape):
        if x.ndim and tuple(v.shape) == tuple(x.shape[:-1]):
            v = expand_dims(v, -1)
        elif not (x.ndim and v.ndim == x.ndim and v.shape[-1] == 1 and
                  tuple(v.shape[:-1]) == tuple(x.shape[:-1])):
            raise ShapeError(f"var {v.shape} must have the input's shape {x.shape}, or that "
                             "shape with a last axis of 1, or without its last axis", op=op)
    v = check((v >= 0).all(), v, "var has negative entries", op=op)
    clamped = v + _detached_value(_E.maximum(v, eps) - v)  # value clamped, gradient straight through
    loss = 0.5 * (_E.log(clamped) + square(x - y) / clamped)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, op)


@reports_as("poisson_nll_loss")
def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False,
                     size_average=None, eps: float = 1e-8, reduce=None,
                     reduction: str = "mean"):
    """The Poisson negative log-likelihood of target with rate exp(input) (`log_input`) or
    input: exp(input) - target * input, or input - target * log(input + eps); `full` adds
    Stirling's approximation of log(target!) where target > 1."""
    op = "poisson_nll_loss"
    reduction = legacy_reduction(size_average, reduce, reduction, op)
    log_input, full = arg.as_bool(log_input, "log_input", op), arg.as_bool(full, "full", op)
    eps = arg.as_float(eps, "eps", op)
    x, y = _pair_check(input, target, op)
    loss = _E.exp(x) - y * x if log_input else x - y * _E.log(x + eps)
    if full:
        big = y > 1
        safe = where(big, y, 2.0)
        stirling = safe * _E.log(safe) - safe + 0.5 * _E.log(2 * math.pi * safe)
        loss = loss + where(big, stirling, 0.0)
    return _reduce(loss, reduction, op)


# ---- attention -----------------------------------------------------------------------------

@reports_as("scaled_dot_product_attention")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False):
    """softmax(query @ key^T * scale + mask) @ value over (..., L, E) queries and (..., S, E)
    keys, as torch.nn.functional.scaled_dot_product_attention.

    attn_mask: bool (True = may attend) or float (added to the scores), broadcastable to
    (..., L, S); is_causal masks the keys after each query (query i sees keys 0..i); scale
    defaults to 1/sqrt(E); enable_gqa lets key and value have fewer heads (axis -3) than the
    query, each shared by a group of query heads. A row left with no key gives 0. Leading
    axes broadcast.

    Runs the fused primitive (rill.ops.attention: one kernel forward, one backward, no
    (L, S) mask made for is_causal) except with dropout_p > 0, complex inputs or a float
    mask that requires grad, which take the composite of matmul, softmax and dropout (the
    mask then gets its gradient).

    >>> q = rill.ones(2, 4, 8)
    >>> rill.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).shape
    (2, 4, 8)
    """
    op = "scaled_dot_product_attention"
    q, k, v = promotion.common_float((arg.as_tensor(query, "query", op),
                                      arg.as_tensor(key, "key", op),
                                      arg.as_tensor(value, "value", op)))
    attn_mask = arg.optional_tensor(attn_mask, "attn_mask", op)
    dropout_p = arg.as_float(dropout_p, "dropout_p", op)
    is_causal = arg.as_bool(is_causal, "is_causal", op)
    scale = None if scale is None else arg.as_float(scale, "scale", op)
    enable_gqa = arg.as_bool(enable_gqa, "enable_gqa", op)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or \
            k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"expects query (..., L, E), key (..., S, E), value (..., S, Ev); "
                         f"got {q.shape}, {k.shape}, {v.shape}", op=op)
    if is_causal and attn_mask is not None:
        raise ArgumentError("give either attn_mask or is_causal, not both", op=op)
    if not 0.0 <= dropout_p <= 1.0:
        raise ArgumentError(f"dropout_p must be in [0, 1], got {dropout_p}", op=op)
    if enable_gqa:
        k, v = _shared_heads(q, k, "key"), _shared_heads(q, v, "value")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    batch = _broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if attn_mask is not None:
        if attn_mask.dtype.kind != "b" and not attn_mask.dtype.is_floating:
            raise DTypeError(f"attn_mask must be bool or floating, got {attn_mask.dtype}",
                             op=op)
        scores_shape = _broadcast_shapes(attn_mask.shape, batch + (q.shape[-2], k.shape[-2]))
        batch = scores_shape[:-2]
    if not dropout_p and q.dtype.kind == "f" and \
            (attn_mask is None or not attn_mask.requires_grad):
        from ..ops.attention import attention
        q, k, v = (t if t.shape[:-2] == batch else broadcast_to(t, batch + t.shape[-2:])
                   for t in (q, k, v))
        if attn_mask is not None:
            if attn_mask.dtype.kind == "b":
                attn_mask = where(attn_mask, zeros((), dtype=q.dtype, device=q.device),
                                  float("-inf"))
            elif attn_mask.dtype is not q.dtype:
                attn_mask = _E.cast(attn_mask, q.dtype)
            if attn_mask.ndim < 2:
                attn_mask = reshape(attn_mask, (1,) * (2 - attn_mask.ndim) + attn_mask.shape)
        return attention(q, k, v, attn_mask, scale=scale, is_causal=is_causal)
    scores = matmul(q, swapaxes(k, -1, -2)) * scale
    if is_causal:
        attn_mask = tril(ones(q.shape[-2], k.shape[-2], dtype=dt.bool_, device=q.device))
    if attn_mask is not None:
        if attn_mask.dtype.kind == "b":
            scores = where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = softmax(scores, axis=-1)
    if dropout_p:
        weights = dropout(weights, dropout_p, True)
    return matmul(weights, v)


def _shared_heads(q, t, what):
    """key or value with its heads (axis -3) repeated to the query's (enable_gqa): each of
    its heads serves q_heads // heads consecutive query heads."""
    if q.ndim < 3 or t.ndim < 3:
        raise ShapeError(f"enable_gqa needs heads on axis -3: query {q.shape}, {what} "
                         f"{t.shape}", op="scaled_dot_product_attention")
    heads, q_heads = t.shape[-3], q.shape[-3]
    if heads == q_heads:
        return t
    if heads == 0 or q_heads % heads:
        raise ShapeError(f"enable_gqa: the query's {q_heads} heads must be a multiple of the "
                         f"{what}'s {heads}", op="scaled_dot_product_attention")
    group = q_heads // heads
    wide = broadcast_to(expand_dims(t, -3), t.shape[:-2] + (group,) + t.shape[-2:])
    return reshape(wide, t.shape[:-3] + (q_heads,) + t.shape[-2:])
