"""Convolutions (NCHW): three bilinear primitives whose gradients are each other.

    conv2d(x, w)                   y = x (*) w                 forward
    conv_transpose2d(g, w)         the adjoint of conv2d in x  (input gradient)
    conv2d_weight_grad(x, g)       the adjoint of conv2d in w  (weight gradient)

Because each is linear in each argument, the vjp of any of them is built from the other two,
so every derivative order works. conv1d is conv2d with a unit height. All share one set of
attrs: stride (sh, sw), padding ((top, bottom), (left, right)), dilation (dh, dw), groups.
"""
from __future__ import annotations

from ..eager.bind import bind
from ..errors import ArgumentError, ShapeError, reports_as
from . import attrs as A
from . import promotion
from .arguments import as_int, as_ints, as_tensor, describe, optional_tensor
from .primitive import primitive
from .rules import require


def _pair(value, name: str, op: str | None = None) -> tuple:
    """An int or a pair of ints as a pair (a window, a stride, a padding)."""
    if not isinstance(value, (tuple, list)):
        value = as_int(value, name, op)
        return (value, value)
    if len(value) != 2:
        raise ArgumentError(f"{name} must be an int or a pair of ints, got {describe(value)}",
                            op=op)
    return as_ints(value, name, op)


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
    from ..errors import DTypeError
    args = promotion.lift(args)
    for a in args:
        if a.dtype.kind != "f":
            given = " and ".join(str(b.dtype) for b in args)
            raise DTypeError(f"expects floating-point inputs, got {given}")
    return promotion.common(args)


def _conv_infer(x, w, *bias, stride, padding, dilation, groups):
    if len(bias) > 1:
        raise ArgumentError(f"expects x, w and at most a bias, got {2 + len(bias)} inputs")
    require(x, "f", "floating-point tensors")
    _check_common(stride, padding, dilation, groups)
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"expects x (N, C, H, W) and w (O, C/groups, KH, KW), got {x.shape} "
                         f"and {w.shape}")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c % groups or o % groups:
        raise ShapeError(f"channels in {c} and out {o} must both divide by groups={groups}")
    if cg * groups != c:
        raise ShapeError(f"weight {w.shape} expects {cg * groups} input channels "
                         f"(C/groups={cg}, groups={groups}), but x {x.shape} has {c}")
    oh = conv_output_size(h, kh, stride[0], padding[0], dilation[0])
    ow = conv_output_size(wd, kw, stride[1], padding[1], dilation[1])
    if oh < 1 or ow < 1:
        raise ShapeError(f"the kernel {(kh, kw)} (dilation {dilation}) does not fit the padded "
                         f"input {(h + sum(padding[0]), wd + sum(padding[1]))}")
    if bias and tuple(bias[0].shape) != (o,):
        raise ShapeError(f"bias must have shape ({o},), got {bias[0].shape}")
    return (n, o, oh, ow), x.dtype


# Each rule skips the products for inputs that need no gradient (the images fed to the first
# layer, frozen weights): for a first conv layer that is a third of its backward work.

def _conv_vjp(g, out, x, w, *bias, **attrs):
    from .reduce import sum as sum_
    gx = conv_transpose2d_p_bind(g, w, x.shape[2:], attrs) if x.requires_grad else None
    gw = bind(conv2d_weight_grad_p, x, g, kernel_size=w.shape[2:], **attrs) \
        if w.requires_grad else None
    if not bias:
        return gx, gw
    return gx, gw, sum_(g, axis=(0, 2, 3)) if bias[0].requires_grad else None


def _transpose_infer(g, w, *, input_size, stride, padding, dilation, groups):
    require(g, "f", "floating-point tensors")
    if min(input_size) < 1:
        raise ShapeError(f"the output size {tuple(input_size)} must be positive")
    _check_common(stride, padding, dilation, groups)
    if g.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"expects x (N, C, H, W) and w (C, O/groups, KH, KW), got {g.shape} "
                         f"and {w.shape}")
    o, cg, kh, kw = w.shape
    if g.shape[1] != o or o % groups:
        raise ShapeError(f"weight {w.shape} expects {o} input channels (divisible by "
                         f"groups={groups}), x {g.shape} has {g.shape[1]}")
    expected = tuple(conv_output_size(s, k, st, p, d) for s, k, st, p, d in
                     zip(input_size, (kh, kw), stride, padding, dilation))
    if expected != tuple(g.shape[2:]):
        raise ShapeError(f"an output size of {tuple(input_size)} does not fit an input of "
                         f"spatial size {g.shape[2:]} with this kernel, stride and padding")
    return (g.shape[0], cg * groups) + tuple(input_size), g.dtype


def _transpose_vjp(gg, out, g, w, input_size, **attrs):
    return (bind(conv2d_p, gg, w, **attrs) if g.requires_grad else None,
            bind(conv2d_weight_grad_p, gg, g, kernel_size=w.shape[2:], **attrs)
            if w.requires_grad else None)


def _weight_grad_infer(x, g, *, kernel_size, stride, padding, dilation, groups):
    require(x, "f", "floating-point tensors")
    _check_common(stride, padding, dilation, groups)
    if x.ndim != 4 or g.ndim != 4:
        raise ShapeError(f"expects x (N, C, H, W) and g (N, O, OH, OW), got {x.shape} and "
                         f"{g.shape}")
    n, c, h, wd = x.shape
    o = g.shape[1]
    if g.shape[0] != n or o % groups or c % groups:
        raise ShapeError(f"x {x.shape} and output gradient {g.shape} do not pair up")
    return (o, c // groups) + tuple(kernel_size), x.dtype


def _weight_grad_vjp(gw, out, x, g, kernel_size, **attrs):
    return (conv_transpose2d_p_bind(g, gw, x.shape[2:], attrs) if x.requires_grad else None,
            bind(conv2d_p, x, gw, **attrs) if g.requires_grad else None)


def conv_transpose2d_p_bind(g, w, input_size, attrs):
    return bind(conv_transpose2d_p, g, w, input_size=tuple(input_size), **attrs)


# stride (sh, sw), padding ((top, bottom), (left, right)), dilation (dh, dw), groups.
_CONV = dict(stride=A.PAIR, padding=A.TupleOf(A.PAIR, length=2), dilation=A.PAIR,
             groups=A.INT)
conv2d_p = primitive("conv2d", _conv_infer, _conv_vjp, normalize=_floating_inputs, attrs=_CONV)
conv_transpose2d_p = primitive("conv_transpose2d", _transpose_infer, _transpose_vjp,
                               normalize=_floating_inputs,
                               attrs=dict(_CONV, input_size=A.TupleOf(A.NonNegInt, length=2)))
conv2d_weight_grad_p = primitive("conv2d_weight_grad", _weight_grad_infer, _weight_grad_vjp,
                                 normalize=_floating_inputs,
                                 attrs=dict(_CONV, kernel_size=A.TupleOf(A.NonNegInt, length=2)))


# ---- public functions ----------------------------------------------------------------------

def _padding(padding, kernel, dilation, op: str = "conv2d") -> tuple:
    """int | pair | 'valid' | 'same' as ((top, bottom), (left, right))."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0))
        if padding == "same":
            # As PyTorch: the extra pixel of an even kernel goes to the bottom/right.
            total = [d * (k - 1) for k, d in zip(kernel, dilation)]
            return tuple((t // 2, t - t // 2) for t in total)
        raise ArgumentError(f"padding must be an int, a pair, 'same' or 'valid', got "
                            f"{describe(padding)}", op=op)
    ph, pw = _pair(padding, "padding", op)
    if ph < 0 or pw < 0:
        raise ArgumentError(f"padding must not be negative, got {padding!r}")
    return ((ph, ph), (pw, pw))


def _add_bias(y, bias):
    if bias is None:
        return y
    from .shape import reshape
    if bias.ndim != 1 or bias.shape[0] != y.shape[1]:
        raise ShapeError(f"bias must have shape ({y.shape[1]},), got {bias.shape}")
    return y + reshape(bias, (1, -1) + (1,) * (y.ndim - 2))


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
    op = "conv2d"
    x, weight = as_tensor(x, "x", op), as_tensor(weight, "weight", op)
    bias = optional_tensor(bias, "bias", op)
    stride, dilation = _pair(stride, "stride", op), _pair(dilation, "dilation", op)
    if isinstance(padding, str) and padding == "same" and stride != (1, 1):
        raise ArgumentError("padding='same' needs stride 1 (as PyTorch)")
    kernel = tuple(weight.shape[2:]) if weight.ndim == 4 else (1, 1)
    # The bias rides in the same primitive: added into the fresh product, no op of its own.
    return bind(conv2d_p, x, weight, *(() if bias is None else (bias,)), stride=stride,
                padding=_padding(padding, kernel, dilation), dilation=dilation,
                groups=as_int(groups, "groups", op))


@reports_as("conv1d")
def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-d convolution of x (N, C, L) with weight (O, C/groups, K): conv2d with unit height."""
    from .shape import expand_dims, squeeze
    x, weight = as_tensor(x, "x", "conv1d"), as_tensor(weight, "weight", "conv1d")
    if x.ndim != 3 or weight.ndim != 3:
        raise ShapeError(f"expects x (N, C, L) and w (O, C/groups, K), got {x.shape} and "
                         f"{weight.shape}")

    def one(v, name):  # a 1-d window setting as the 2-d one of a unit-height image
        if isinstance(v, (tuple, list)) and len(v) == 1:
            v = v[0]
        if isinstance(v, (tuple, list)):
            return _pair(v, name, "conv1d")
        return (1, as_int(v, name, "conv1d"))
    pad = padding if isinstance(padding, str) else (0, one(padding, "padding")[1])
    y = conv2d(expand_dims(x, 2), expand_dims(weight, 2), bias, one(stride, "stride"), pad,
               one(dilation, "dilation"), groups)
    return squeeze(y, 2)


@reports_as("conv_transpose2d")
def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed convolution of x (N, C, H, W) with weight (C, O/groups, KH, KW): the
    gradient of conv2d with respect to its input, as PyTorch's conv_transpose2d."""
    op = "conv_transpose2d"
    x, weight = as_tensor(x, "x", op), as_tensor(weight, "weight", op)
    bias = optional_tensor(bias, "bias", op)
    groups = as_int(groups, "groups", op)
    stride, dilation = _pair(stride, "stride", op), _pair(dilation, "dilation", op)
    ph, pw = _pair(padding, "padding", op)
    if ph < 0 or pw < 0:
        raise ArgumentError(f"padding must not be negative, got {padding!r}")
    oph, opw = _pair(output_padding, "output_padding", op)
    if oph >= max(stride[0], dilation[0]) or opw >= max(stride[1], dilation[1]):
        raise ArgumentError(f"output_padding {(oph, opw)} must be smaller than stride {stride} "
                            f"or dilation {dilation}")
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"expects x (N, C, H, W) and w (C, O/groups, KH, KW), got {x.shape} "
                         f"and {weight.shape}")
    size = tuple((s - 1) * st - 2 * p + d * (k - 1) + op + 1 for s, st, p, d, k, op in
                 zip(x.shape[2:], stride, (ph, pw), dilation, weight.shape[2:], (oph, opw)))
    if min(size) < 1:
        raise ShapeError(f"the output size {size} is too small: input {x.shape[2:]}, stride "
                         f"{stride}, padding {(ph, pw)}, kernel {weight.shape[2:]}")
    # output_padding uncovers rows the symmetric padding would crop: it is the forward
    # conv's bottom/right padding made smaller by as much (negative pads crop).
    y = bind(conv_transpose2d_p, x, weight, input_size=size, stride=stride,
             padding=((ph, ph - oph), (pw, pw - opw)), dilation=dilation, groups=groups)
    return _add_bias(y, bias)
