"""Convolutions (N, C, *spatial): three bilinear primitives per spatial rank whose gradients
are each other.

    conv{2,3}d(x, w)                 y = x (*) w                 forward
    conv_transpose{2,3}d(g, w)       the adjoint of conv in x    (input gradient)
    conv{2,3}d_weight_grad(x, g)     the adjoint of conv in w    (weight gradient)

Because each is linear in each argument, the vjp of any of them is built from the other two,
so every derivative order works. The rules are written once for any rank; a rank is a family
of three primitives (`_FAMILIES`) sharing them, so a 2-d graph keeps its names and attrs.
conv1d and conv_transpose1d are the 2-d ops on a unit-height image. All share one set of
attrs: stride (one per spatial axis), padding ((before, after) per axis), dilation, groups.
"""
from __future__ import annotations

from ..eager.bind import bind
from ..errors import reports_as, ArgumentError, DTypeError, ShapeError
from . import attrs as A
from . import batching
from . import promotion
from .arguments import as_int, as_ints, as_tensor, describe, optional_tensor
from .primitive import primitive
from .rules import require


def _ntuple(value, n: int, name: str, op: str | None = None) -> tuple:
    """An int, or n ints, as n ints (a window, a stride, a padding)."""
    if not isinstance(value, (tuple, list)):
        value = as_int(value, name, op)
        return (value,) * n
    if len(value) != n:
        raise ArgumentError(f"{name} must be an int or {n} ints, got {describe(value)}", op=op)
    return as_ints(value, name, op)


def _pair(value, name: str, op: str | None = None) -> tuple:
    """An int or a pair of ints as a pair (a window, a stride, a padding)."""
    if isinstance(value, (tuple, list)) and len(value) != 2:
        raise ArgumentError(f"{name} must be an int or a pair of ints, got {describe(value)}",
                            op=op)
    return _ntuple(value, 2, name, op)


def conv_output_size(size: int, kernel: int, stride: int, pad: tuple, dilation: int) -> int:
    return (size + pad[0] + pad[1] - dilation * (kernel - 1) - 1) // stride + 1


def _check_common(stride, padding, dilation, groups):
    if min(stride) < 1 or min(dilation) < 1:
        raise ArgumentError(f"stride {stride} and dilation {dilation} must be positive")
    if groups < 1:
        raise ArgumentError(f"groups must be a positive int, got {groups!r}")


def _floating_inputs(args):
    """Convolutions take floating-point images and weights only (as PyTorch): an integer
    image is a bug (unnormalized pixels), not something to promote quietly."""
    args = promotion.lift(args)
    for a in args:
        if a.dtype.kind != "f":
            given = " and ".join(str(b.dtype) for b in args)
            raise DTypeError(f"expects floating-point inputs, got {given}")
    return promotion.common(args)


def _layout(rank: int, kernel: str) -> str:
    """'(N, C, D, H, W)' and '(O, C/groups, KD, KH, KW)' style names for messages."""
    axes = ("D", "H", "W")[3 - rank:] if rank <= 3 else tuple(f"S{i}" for i in range(rank))
    return "(" + ", ".join(axes) + ")", "(" + ", ".join(kernel + a for a in axes) + ")"


def _check_ranks(x, w, rank, x_name, w_name, w_lead):
    if x.ndim != rank + 2 or w.ndim != rank + 2:
        spatial, kernel = _layout(rank, "K")
        raise ShapeError(f"expects {x_name} (N, C, {spatial[1:-1]}) and {w_name} ({w_lead}, "
                         f"{kernel[1:-1]}), got {x.shape} and {w.shape}")


def _conv_infer(x, w, *bias, stride, padding, dilation, groups):
    if len(bias) > 1:
        raise ArgumentError(f"expects x, w and at most a bias, got {2 + len(bias)} inputs")
    require(x, "f", "floating-point tensors")
    _check_common(stride, padding, dilation, groups)
    _check_ranks(x, w, len(stride), "x", "w", "O, C/groups")
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    if c % groups or o % groups:
        raise ShapeError(f"channels in {c} and out {o} must both divide by groups={groups}")
    if cg * groups != c:
        raise ShapeError(f"weight {w.shape} expects {cg * groups} input channels "
                         f"(C/groups={cg}, groups={groups}), but x {x.shape} has {c}")
    out = tuple(conv_output_size(s, k, st, p, d) for s, k, st, p, d in
                zip(x.shape[2:], w.shape[2:], stride, padding, dilation))
    if min(out) < 1:
        padded = tuple(s + sum(p) for s, p in zip(x.shape[2:], padding))
        raise ShapeError(f"the kernel {tuple(w.shape[2:])} (dilation {dilation}) does not fit "
                         f"the padded input {padded}")
    if bias and tuple(bias[0].shape) != (o,):
        raise ShapeError(f"bias must have shape ({o},), got {bias[0].shape}")
    return (n, o) + out, x.dtype


# Each rule skips the products for inputs that need no gradient (the images fed to the first
# layer, frozen weights): for a first conv layer that is a third of its backward work.

def _conv_vjp(g, out, x, w, *bias, **attrs):
    from .reduce import sum as sum_
    family = _FAMILIES[len(attrs["stride"])]
    gx = bind(family.transpose, g, w, input_size=tuple(x.shape[2:]), **attrs) \
        if x.requires_grad else None
    gw = bind(family.weight_grad, x, g, kernel_size=tuple(w.shape[2:]), **attrs) \
        if w.requires_grad else None
    if not bias:
        return gx, gw
    return gx, gw, sum_(g, axis=(0,) + tuple(range(2, g.ndim))) if bias[0].requires_grad \
        else None


def _transpose_infer(g, w, *, input_size, stride, padding, dilation, groups):
    require(g, "f", "floating-point tensors")
    if min(input_size) < 1:
        raise ShapeError(f"the output size {tuple(input_size)} must be positive")
    _check_common(stride, padding, dilation, groups)
    _check_ranks(g, w, len(stride), "x", "w", "C, O/groups")
    o, cg = w.shape[:2]
    if g.shape[1] != o or o % groups:
        raise ShapeError(f"weight {w.shape} expects {o} input channels (divisible by "
                         f"groups={groups}), x {g.shape} has {g.shape[1]}")
    expected = tuple(conv_output_size(s, k, st, p, d) for s, k, st, p, d in
                     zip(input_size, w.shape[2:], stride, padding, dilation))
    if expected != tuple(g.shape[2:]):
        raise ShapeError(f"an output size of {tuple(input_size)} does not fit an input of "
                         f"spatial size {g.shape[2:]} with this kernel, stride and padding")
    return (g.shape[0], cg * groups) + tuple(input_size), g.dtype


def _transpose_vjp(gg, out, g, w, input_size, **attrs):
    family = _FAMILIES[len(attrs["stride"])]
    return (bind(family.forward, gg, w, **attrs) if g.requires_grad else None,
            bind(family.weight_grad, gg, g, kernel_size=tuple(w.shape[2:]), **attrs)
            if w.requires_grad else None)


def _weight_grad_infer(x, g, *, kernel_size, stride, padding, dilation, groups):
    require(x, "f", "floating-point tensors")
    _check_common(stride, padding, dilation, groups)
    rank = len(stride)
    if x.ndim != rank + 2 or g.ndim != rank + 2:
        raise ShapeError(f"expects x and the output gradient g with {rank} spatial axes, got "
                         f"{x.shape} and {g.shape}")
    n, c = x.shape[:2]
    o = g.shape[1]
    if g.shape[0] != n or o % groups or c % groups:
        raise ShapeError(f"x {x.shape} and output gradient {g.shape} do not pair up")
    return (o, c // groups) + tuple(kernel_size), x.dtype


def _weight_grad_vjp(gw, out, x, g, kernel_size, **attrs):
    family = _FAMILIES[len(attrs["stride"])]
    return (bind(family.transpose, g, gw, input_size=tuple(x.shape[2:]), **attrs)
            if x.requires_grad else None,
            bind(family.forward, x, gw, **attrs) if g.requires_grad else None)


class _Family:
    """The three primitives of one spatial rank."""

    def __init__(self, rank: int):
        # stride, dilation: one int per axis; padding: (before, after) per axis; groups.
        one = A.PAIR if rank == 2 else A.TupleOf(A.INT, length=rank)
        attrs = dict(stride=one, padding=A.TupleOf(A.PAIR, length=rank), dilation=one,
                     groups=A.INT)
        sizes = A.TupleOf(A.NonNegInt, length=rank)
        self.forward = primitive(f"conv{rank}d", _conv_infer, _conv_vjp,
                                 normalize=_floating_inputs, attrs=attrs,
                                 batch=batching.fold_into_n)
        self.transpose = primitive(f"conv_transpose{rank}d", _transpose_infer, _transpose_vjp,
                                   normalize=_floating_inputs,
                                   attrs=dict(attrs, input_size=sizes), batch=batching.fold_into_n)
        self.weight_grad = primitive(f"conv{rank}d_weight_grad", _weight_grad_infer,
                                     _weight_grad_vjp, normalize=_floating_inputs,
                                     attrs=dict(attrs, kernel_size=sizes),
                                     batch=batching.conv_weight_grad_rule)


_FAMILIES = {rank: _Family(rank) for rank in (2, 3)}
conv2d_p, conv_transpose2d_p, conv2d_weight_grad_p = (
    _FAMILIES[2].forward, _FAMILIES[2].transpose, _FAMILIES[2].weight_grad)
conv3d_p, conv_transpose3d_p, conv3d_weight_grad_p = (
    _FAMILIES[3].forward, _FAMILIES[3].transpose, _FAMILIES[3].weight_grad)


def conv_transpose2d_p_bind(g, w, input_size, attrs):
    return bind(conv_transpose2d_p, g, w, input_size=tuple(input_size), **attrs)


# ---- public functions ----------------------------------------------------------------------

def _padding(padding, kernel, dilation, op: str = "conv2d") -> tuple:
    """int | n ints | 'valid' | 'same' as ((before, after), ...) per spatial axis."""
    rank = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * rank
        if padding == "same":
            # As PyTorch: the extra pixel of an even kernel goes to the end of its axis.
            total = [d * (k - 1) for k, d in zip(kernel, dilation)]
            return tuple((t // 2, t - t // 2) for t in total)
        raise ArgumentError(f"padding must be an int, {rank} ints, 'same' or 'valid', got "
                            f"{describe(padding)}", op=op)
    pads = _ntuple(padding, rank, "padding", op)
    if min(pads) < 0:
        raise ArgumentError(f"padding must not be negative, got {padding!r}", op=op)
    return tuple((p, p) for p in pads)


def _add_bias(y, bias):
    if bias is None:
        return y
    from .shape import reshape
    if bias.ndim != 1 or bias.shape[0] != y.shape[1]:
        raise ShapeError(f"bias must have shape ({y.shape[1]},), got {bias.shape}")
    return y + reshape(bias, (1, -1) + (1,) * (y.ndim - 2))


def _conv(rank, op, x, weight, bias, stride, padding, dilation, groups):
    """conv2d and conv3d: the arguments made canonical, then one bind."""
    x, weight = as_tensor(x, "x", op), as_tensor(weight, "weight", op)
    bias = optional_tensor(bias, "bias", op)
    stride = _ntuple(stride, rank, "stride", op)
    dilation = _ntuple(dilation, rank, "dilation", op)
    if isinstance(padding, str) and padding == "same" and stride != (1,) * rank:
        raise ArgumentError("padding='same' needs stride 1 (as PyTorch)", op=op)
    kernel = tuple(weight.shape[2:]) if weight.ndim == rank + 2 else (1,) * rank
    # The bias rides in the same primitive: added into the fresh product, no op of its own.
    return bind(_FAMILIES[rank].forward, x, weight, *(() if bias is None else (bias,)),
                stride=stride, padding=_padding(padding, kernel, dilation, op),
                dilation=dilation, groups=as_int(groups, "groups", op))


@reports_as("conv2d")
def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """2-d convolution (cross-correlation) of x (N, C, H, W) with weight (O, C/groups, KH, KW).

    padding is an int, a pair, 'valid' or 'same' (stride 1).

    >>> x = rill.ones(1, 1, 4, 4)
    >>> rill.nn.functional.conv2d(x, rill.ones(1, 1, 3, 3), padding=1)[0, 0]
    tensor([[4., 6., 6., 4.],
            [6., 9., 9., 6.],
            [6., 9., 9., 6.],
            [4., 6., 6., 4.]])
    """
    return _conv(2, "conv2d", x, weight, bias, stride, padding, dilation, groups)


@reports_as("conv3d")
def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """3-d convolution of x (N, C, D, H, W) with weight (O, C/groups, KD, KH, KW).

    padding is an int, three ints, 'valid' or 'same' (stride 1).

    >>> rill.nn.functional.conv3d(rill.ones(1, 2, 4, 5, 6), rill.ones(3, 2, 3, 3, 3)).shape
    (1, 3, 2, 3, 4)
    """
    return _conv(3, "conv3d", x, weight, bias, stride, padding, dilation, groups)


def _one(value, name, op):
    """A 1-d window setting (an int or a 1-tuple) as the 2-d one of a unit-height image."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if isinstance(value, (tuple, list)):
        raise ArgumentError(f"{name} must be an int or one int, got {describe(value)}", op=op)
    return (1 if name != "padding" and name != "output_padding" else 0,
            as_int(value, name, op))


@reports_as("conv1d")
def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-d convolution of x (N, C, L) with weight (O, C/groups, K): conv2d with unit height."""
    from .shape import expand_dims, squeeze
    x, weight = as_tensor(x, "x", "conv1d"), as_tensor(weight, "weight", "conv1d")
    if x.ndim != 3 or weight.ndim != 3:
        raise ShapeError(f"expects x (N, C, L) and w (O, C/groups, K), got {x.shape} and "
                         f"{weight.shape}")
    pad = padding if isinstance(padding, str) else _one(padding, "padding", "conv1d")
    y = conv2d(expand_dims(x, 2), expand_dims(weight, 2), bias, _one(stride, "stride", "conv1d"),
               pad, _one(dilation, "dilation", "conv1d"), groups)
    return squeeze(y, 2)


def _conv_transpose(rank, op, x, weight, bias, stride, padding, output_padding, groups,
                    dilation):
    """conv_transpose2d and conv_transpose3d: the gradient of conv in its input."""
    x, weight = as_tensor(x, "x", op), as_tensor(weight, "weight", op)
    bias = optional_tensor(bias, "bias", op)
    groups = as_int(groups, "groups", op)
    stride = _ntuple(stride, rank, "stride", op)
    dilation = _ntuple(dilation, rank, "dilation", op)
    pads = _ntuple(padding, rank, "padding", op)
    if min(pads) < 0:
        raise ArgumentError(f"padding must not be negative, got {padding!r}", op=op)
    extra = _ntuple(output_padding, rank, "output_padding", op)
    if any(e >= max(s, d) or e < 0 for e, s, d in zip(extra, stride, dilation)):
        raise ArgumentError(f"output_padding {extra} must be smaller than stride {stride} "
                            f"or dilation {dilation}", op=op)
    if x.ndim != rank + 2 or weight.ndim != rank + 2:
        spatial, kernel = _layout(rank, "K")
        raise ShapeError(f"expects x (N, C, {spatial[1:-1]}) and w (C, O/groups, "
                         f"{kernel[1:-1]}), got {x.shape} and {weight.shape}", op=op)
    size = tuple((s - 1) * st - 2 * p + d * (k - 1) + e + 1 for s, st, p, d, k, e in
                 zip(x.shape[2:], stride, pads, dilation, weight.shape[2:], extra))
    if min(size) < 1:
        raise ShapeError(f"the output size {size} is too small: input {x.shape[2:]}, stride "
                         f"{stride}, padding {pads}, kernel {weight.shape[2:]}", op=op)
    # output_padding uncovers rows the symmetric padding would crop: it is the forward
    # conv's after-padding made smaller by as much (negative pads crop).
    y = bind(_FAMILIES[rank].transpose, x, weight, input_size=size, stride=stride,
             padding=tuple((p, p - e) for p, e in zip(pads, extra)), dilation=dilation,
             groups=groups)
    return _add_bias(y, bias)


@reports_as("conv_transpose2d")
def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed convolution of x (N, C, H, W) with weight (C, O/groups, KH, KW): the
    gradient of conv2d with respect to its input, as PyTorch's conv_transpose2d."""
    return _conv_transpose(2, "conv_transpose2d", x, weight, bias, stride, padding,
                           output_padding, groups, dilation)


@reports_as("conv_transpose3d")
def conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed convolution of x (N, C, D, H, W) with weight (C, O/groups, KD, KH, KW)."""
    return _conv_transpose(3, "conv_transpose3d", x, weight, bias, stride, padding,
                           output_padding, groups, dilation)


@reports_as("conv_transpose1d")
def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed convolution of x (N, C, L) with weight (C, O/groups, K): conv_transpose2d
    on a unit-height image."""
    from .shape import expand_dims, squeeze
    op = "conv_transpose1d"
    x, weight = as_tensor(x, "x", op), as_tensor(weight, "weight", op)
    if x.ndim != 3 or weight.ndim != 3:
        raise ShapeError(f"expects x (N, C, L) and w (C, O/groups, K), got {x.shape} and "
                         f"{weight.shape}")
    y = conv_transpose2d(expand_dims(x, 2), expand_dims(weight, 2), bias,
                         _one(stride, "stride", op), _one(padding, "padding", op),
                         _one(output_padding, "output_padding", op), groups,
                         _one(dilation, "dilation", op))
    return squeeze(y, 2)
