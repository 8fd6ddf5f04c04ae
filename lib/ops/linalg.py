"""Linear algebra: matmul (batched, broadcasting, 1-d cases) and einsum as primitives;
dot, outer and tensordot built on them."""
from __future__ import annotations

import math
import re
import string

from ..errors import ArgumentError, ShapeError
from ..errors import reports_as
from ..eager.bind import bind
from . import attrs as A
from . import batching
from . import promotion
from . import reduce as _reduce, shape as _shape  # used at call time (they import this one)
from .arguments import as_int, as_ints, as_tensor, describe
from .primitive import primitive
from .rules import broadcast_shapes, require

# ---- matmul --------------------------------------------------------------------------------


def _matmul_infer(x, y):
    require(x, "iufc", "numeric tensors")
    if x.ndim == 0 or y.ndim == 0:
        raise ShapeError(f"needs at least 1-d operands, got shapes {x.shape} and {y.shape}")
    xs = x.shape if x.ndim > 1 else (1,) + x.shape
    ys = y.shape if y.ndim > 1 else y.shape + (1,)
    if xs[-1] != ys[-2]:
        raise ShapeError(f"inner dimensions differ: {x.shape} @ {y.shape} "
                         f"({xs[-1]} != {ys[-2]})")
    try:
        batch = broadcast_shapes(xs[:-2], ys[:-2])
    except ShapeError:
        raise ShapeError(f"batch dimensions of {x.shape} and {y.shape} do not broadcast") from None
    shape = batch + (xs[-2],) * (x.ndim > 1) + (ys[-1],) * (y.ndim > 1)
    return shape, x.dtype


def _matmul_vjp(g, out, x, y):
    from .elementwise import sum_to_shape
    from .shape import reshape, swapaxes
    if y.ndim == 2 and x.ndim >= 2 and x.dtype.kind == "f" and x.dtype is y.dtype is g.dtype:
        # x @ W, a linear layer written as a product: x's gradient g @ W^T is one `linear`,
        # W's x^T g over all rows one `linear_weight_grad`: 2 ops instead of 4 to 6 (a
        # transpose and a matmul each, the rows' reshapes), the same GEMMs (an eager GPT
        # step: 502 -> 434 ops)
        gx = linear(g, y) if x.requires_grad else None
        gy = None
        if y.requires_grad:
            gy = bind(linear_weight_grad_p, x, g)  # x^T g over all leading axes
        return gx, gy
    x2 = x if x.ndim > 1 else reshape(x, (1,) + x.shape)
    y2 = y if y.ndim > 1 else reshape(y, y.shape + (1,))
    g2 = g
    if x.ndim == 1:
        g2 = reshape(g2, g2.shape[:-1] + (1,) + g2.shape[-1:] if y.ndim > 1 else g2.shape + (1,))
    if y.ndim == 1:
        g2 = reshape(g2, g2.shape + (1,))
    # An input that needs no gradient (data, a frozen weight) skips its whole product.
    gx = gy = None
    if x.requires_grad:
        gx = reshape(sum_to_shape(matmul(g2, swapaxes(y2, -1, -2)), x2.shape), x.shape)
    if y.requires_grad:
        if x2.ndim > 2 and y2.ndim == 2:
            # x @ W with x (B, T, C): W's gradient is one (B*T, C)^T @ (B*T, D) GEMM, not B
            # products summed
            n = math.prod(x2.shape[:-1])
            rows, grads = reshape(x2, (n, x2.shape[-1])), reshape(g2, (n, g2.shape[-1]))
            gy = reshape(matmul(swapaxes(rows, -1, -2), grads), y.shape)
        else:
            gy = reshape(sum_to_shape(matmul(swapaxes(x2, -1, -2), g2), y2.shape), y.shape)
    return gx, gy


matmul_p = primitive("matmul", _matmul_infer, _matmul_vjp, normalize=promotion.common,
                     attrs={}, batch=batching.matmul_rule)


def matmul(x, y):
    """Matrix product with NumPy's rules: batches broadcast; a 1-d operand is a vector.

    >>> (rill.ones(4, 2, 3) @ rill.ones(3)).shape
    (4, 2)
    """
    return bind(matmul_p, x, y)


@reports_as("dot")
def dot(x, y):
    """Inner product of vectors, or matmul for matrices (NumPy's dot up to 2-d)."""
    x, y = as_tensor(x, "x", "dot"), as_tensor(y, "y", "dot")
    if x.ndim > 2 or y.ndim > 2:
        raise ShapeError(f"dot takes up to 2-d operands, got {x.shape} and {y.shape}; use "
                         "matmul or tensordot", op="dot")
    if x.ndim == 0 or y.ndim == 0:
        return x * y
    return matmul(x, y)


@reports_as("outer")
def outer(x, y):
    """x[i] * y[j] for vectors (other shapes are flattened first)."""
    from .shape import reshape
    x, y = as_tensor(x, "x", "outer"), as_tensor(y, "y", "outer")
    return reshape(x, (-1, 1)) * reshape(y, (1, -1))


@reports_as("tensordot")
def tensordot(x, y, axes=2):
    """Sum over the last `axes` axes of x and the first of y, or over explicit axis lists."""
    from .shape import reshape, transpose
    from .rules import normalize_axis, size_of
    x, y = as_tensor(x, "x", "tensordot"), as_tensor(y, "y", "tensordot")
    if not isinstance(axes, (tuple, list)):
        axes = as_int(axes, "axes", "tensordot")
        if axes < 0 or axes > min(x.ndim, y.ndim):
            raise ShapeError(f"axes={axes} is out of range for {x.shape} and {y.shape}",
                             op="tensordot")
        ax = list(range(x.ndim - axes, x.ndim))
        ay = list(range(axes))
    else:
        if len(axes) != 2:
            raise ArgumentError(f"axes must be an int or a pair of axis lists, got "
                                f"{describe(axes)}", op="tensordot")
        ax, ay = (list(as_ints(a, f"axes[{i}]", "tensordot")) for i, a in enumerate(axes))
        ax = [normalize_axis(a, x.ndim) for a in ax]
        ay = [normalize_axis(a, y.ndim) for a in ay]
    if [x.shape[a] for a in ax] != [y.shape[a] for a in ay]:
        raise ShapeError(f"summed axes differ in length: {[x.shape[a] for a in ax]} vs "
                         f"{[y.shape[a] for a in ay]}", op="tensordot")
    free_x = [a for a in range(x.ndim) if a not in ax]
    free_y = [a for a in range(y.ndim) if a not in ay]
    k = size_of(x.shape[a] for a in ax)
    xm = reshape(transpose(x, free_x + ax), (-1, k))
    ym = reshape(transpose(y, ay + free_y), (k, -1))
    return reshape(matmul(xm, ym), tuple(x.shape[a] for a in free_x) +
                   tuple(y.shape[a] for a in free_y))


# ---- einsum --------------------------------------------------------------------------------


_EQUATION = re.compile(r"[A-Za-z.]*(,[A-Za-z.]*)*(->[A-Za-z.]*)?")


def parse_einsum(equation: str, shapes) -> tuple:
    """(input subscripts, output subscripts) with '...' spelled out as letters."""
    equation = equation.replace(" ", "")
    if not _EQUATION.fullmatch(equation) or any(
            "." in part.replace("...", "", 1) for part in re.split(",|->", equation)):
        raise ArgumentError(f"equation {equation[:60]!r} is not of the form 'ij,jk->ik' "
                            "(ASCII letters, and '...' at most once per operand)")
    if "->" in equation:
        lhs, rhs = equation.split("->")
    else:
        lhs, rhs = equation, None
    inputs = lhs.split(",")
    if len(inputs) != len(shapes):
        raise ArgumentError(f"equation {equation!r} names {len(inputs)} operands, "
                            f"{len(shapes)} given")
    used = set(c for c in equation if c.isalpha())
    spare = [c for c in string.ascii_letters if c not in used]
    ell_ndim = 0
    for subs, shape in zip(inputs, shapes):
        named = len(subs.replace("...", ""))
        if "..." in subs:
            ell_ndim = max(ell_ndim, len(shape) - named)
        elif named != len(shape):
            raise ShapeError(f"subscripts {subs!r} name {named} axes of an operand of shape "
                             f"{tuple(shape)}")
    ell = "".join(spare[:ell_ndim])
    expanded = []
    for subs, shape in zip(inputs, shapes):
        if "..." in subs:
            k = len(shape) - len(subs.replace("...", ""))
            subs = subs.replace("...", ell[ell_ndim - k:] if k else "")
        expanded.append(subs)
    if rhs is None:
        counts = {}
        for c in "".join(expanded):
            counts[c] = counts.get(c, 0) + 1
        rhs = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    else:
        rhs = rhs.replace("...", ell)
    for c in rhs:
        if not any(c in s for s in expanded):
            raise ShapeError(f"output subscript {c!r} appears in no operand")
    return tuple(expanded), rhs


def _einsum_infer(*xs, inputs, output):
    sizes = {}
    for subs, x in zip(inputs, xs):
        if len(subs) != x.ndim:
            raise ShapeError(f"subscripts {subs!r} do not fit shape {x.shape}")
        for c, n in zip(subs, x.shape):
            if sizes.setdefault(c, n) != n and n != 1 and sizes[c] != 1:
                raise ShapeError(f"subscript {c!r} has lengths {sizes[c]} and {n}")
            if sizes[c] == 1:
                sizes[c] = n
    return tuple(sizes[c] for c in output), xs[0].dtype


def _einsum_vjp(g, out, *xs, inputs, output):
    from .elementwise import sum_to_shape
    from .creation import eye
    from .shape import broadcast_to
    grads = []
    for i, (subs, x) in enumerate(zip(inputs, xs)):
        others = [(s, t) for j, (s, t) in enumerate(zip(inputs, xs)) if j != i]
        reachable = set(output).union(*[set(s) for s, _ in others])
        unique = "".join(dict.fromkeys(subs))
        target = "".join(c for c in unique if c in reachable)
        operands = [g] + [t for _, t in others]
        eq = ",".join([output] + [s for s, _ in others]) + "->" + target
        grad = einsum(eq, *operands)
        # Letters only this operand has were summed in the forward pass: broadcast back.
        full_shape = tuple(x.shape[subs.index(c)] for c in unique)
        if target != unique:
            from .shape import reshape
            grad = reshape(grad, tuple(full_shape[unique.index(c)] if c in target else 1
                                       for c in unique))
            grad = broadcast_to(grad, full_shape)
        # Repeated letters (a diagonal, as in 'ii->i') put the gradient on that diagonal.
        if len(unique) != len(subs):
            spare = [c for c in string.ascii_letters if c not in subs + output]
            renamed, factors = [], []
            for c in subs:
                if c in renamed:
                    new = spare.pop()
                    factors.append((c + new, eye(x.shape[subs.index(c)], dtype=x.dtype,
                                                 device=x.device)))
                    renamed.append(new)
                else:
                    renamed.append(c)
            eq = ",".join([unique] + [f for f, _ in factors]) + "->" + "".join(renamed)
            grad = einsum(eq, grad, *[t for _, t in factors])
        grads.append(sum_to_shape(grad, x.shape))
    return tuple(grads)


einsum_p = primitive("einsum", _einsum_infer, _einsum_vjp, normalize=promotion.common,
                     attrs=dict(inputs=A.TupleOf(A.Letters()), output=A.Letters()),
                     batch=batching.einsum_rule)


@reports_as("einsum")
def einsum(equation: str, *operands):
    """Einstein summation over any number of operands ('...' and implicit output allowed).

    >>> rill.einsum("ij,jk->ik", rill.ones(2, 3), rill.ones(3, 4)).shape
    (2, 4)
    """
    if not isinstance(equation, str):
        raise ArgumentError(f"equation must be a str, got {describe(equation)}", op="einsum")
    tensors = [as_tensor(t, f"operands[{i}]", "einsum") for i, t in enumerate(operands)]
    if not tensors:
        raise ArgumentError("einsum needs at least one operand", op="einsum")
    inputs, output = parse_einsum(equation, [t.shape for t in tensors])
    return bind(einsum_p, *tensors, inputs=inputs, output=output)


# ---- linear --------------------------------------------------------------------------------


def _linear_infer(x, w, *bias):
    require(x, "f", "floating-point tensors")
    if x.ndim < 1 or w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise ShapeError(f"expects x (..., in) and weight (out, in); got {x.shape} and "
                         f"{w.shape}")
    if bias and tuple(bias[0].shape) != (w.shape[0],):
        raise ShapeError(f"bias must have shape ({w.shape[0]},), got {bias[0].shape}")
    return x.shape[:-1] + (w.shape[0],), x.dtype


def _linear_vjp(g, out, x, w, *bias):
    reshape = _shape.reshape
    gx = matmul(g, w) if x.requires_grad else None
    gw = gb = None
    if w.requires_grad and x.ndim >= 2:
        gw = bind(linear_weight_grad_p, g, x)  # over all leading axes at once
    elif w.requires_grad:  # one sample: its outer product
        gw = bind(linear_weight_grad_p, reshape(g, (1,) + g.shape), reshape(x, (1,) + x.shape))
    if bias and bias[0].requires_grad:
        # rows counted, not -1: a layer of 0 outputs leaves -1 unknown
        rows = math.prod(g.shape[:-1])
        gb = _reduce.sum(g if g.ndim == 2 else reshape(g, (rows, w.shape[0])), axis=0)
    return (gx, gw, gb) if bias else (gx, gw)


def _weight_grad_infer(g, x):
    if g.ndim < 2 or g.ndim != x.ndim or g.shape[:-1] != x.shape[:-1]:
        raise ShapeError(f"expects g (..., out) and x (..., in) with the same leading axes, "
                         f"got {g.shape} and {x.shape}")
    return (g.shape[-1], x.shape[-1]), x.dtype


def _weight_grad_vjp(h, out, g, x):
    # Bilinear in (g, x): d<h, g^T x>/dg = x h^T, /dx = g h.
    return (linear(x, h) if g.requires_grad else None,
            matmul(g, h) if x.requires_grad else None)


# x @ w.T (+ bias): one primitive, so the bias costs no op, buffer or tape node of its own.
linear_p = primitive("linear", _linear_infer, _linear_vjp, normalize=promotion.common_float,
                     attrs={}, batch=batching.first_leading, cache_rule="compiled")
# g^T x summed over the leading axes (the rows): the weight's gradient, in the weight's own
# (out, in) layout (so the optimizer's update reads it contiguously), with no transpose or
# reshape op on the tape.
linear_weight_grad_p = primitive("linear_weight_grad", _weight_grad_infer, _weight_grad_vjp,
                                 normalize=promotion.common_float, attrs={},
                                 batch=batching.linear_weight_grad_rule)


@reports_as("linear")
def linear(x, weight, bias=None):
    """x @ weight.T + bias, with weight of shape (out_features, in_features).

    >>> rill.nn.functional.linear(rill.ones(2, 3), rill.ones(4, 3)).shape
    (2, 4)
    """
    x, weight = as_tensor(x, "x", "linear"), as_tensor(weight, "weight", "linear")
    if bias is None:
        return bind(linear_p, x, weight)
    return bind(linear_p, x, weight, as_tensor(bias, "bias", "linear"))
