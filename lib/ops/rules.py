"""Pieces shared by shape/dtype rules: broadcasting, axes, dtype checks."""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..tensor import normalize_axis  # noqa: F401 - defined with the size() it serves; rules re-export it


def broadcast_shapes(*shapes) -> tuple:
    """NumPy broadcasting of shapes, with a ShapeError naming all of them."""
    first = shapes[0]
    if len(shapes) == 2:
        second = shapes[1]
        if first == second:
            return first
        # a scalar's () broadcasts to the other shape: `1 - y * y` in a gradient rule
        if not second and type(first) is tuple:
            return first
        if not first and type(second) is tuple:
            return second
    if all(s == first for s in shapes):
        return tuple(first)
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(-ndim, 0):
        size = 1
        for s in shapes:
            if -i <= len(s):
                d = s[i]
                if d != 1:
                    if size != 1 and d != size:
                        raise ShapeError("cannot broadcast shapes " +
                                         " and ".join(str(tuple(s)) for s in shapes))
                    size = d
        out.append(size)
    return tuple(out)


def normalize_axes(axis, ndim: int) -> tuple:
    """None, an int or a tuple of ints as a sorted tuple of distinct non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    axes = tuple(sorted(normalize_axis(a, ndim) for a in axis))
    if len(set(axes)) != len(axes):
        raise ShapeError(f"repeated axis in {tuple(axis)}")
    return axes


def reduced_shape(shape, axes, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def require(x, allowed: str, what: str) -> None:
    """DTypeError unless x.dtype.kind is one of `allowed` ('b', 'i', 'u', 'f', 'c')."""
    if x.dtype.kind not in allowed:
        raise DTypeError(f"expected {what}, got {x.dtype}")


def size_of(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
