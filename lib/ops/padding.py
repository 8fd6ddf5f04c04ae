"""PyTorch's F.pad: padding given as a flat tuple, last axis first.

    pad(x, (left, right))                          pads the last axis
    pad(x, (left, right, top, bottom))             the last two
    pad(x, (l, r, t, b, front, back))              the last three

A composite of rill.pad (NumPy's pad_width, one pair per axis, modes constant/reflect/edge):
the pairs are reversed into NumPy's order, 'replicate' is NumPy's 'edge', negative constant
pads crop (as PyTorch), and 'circular' is a concatenation of the wrapped slices. Gradients,
capture and the gpu device come from the ops underneath.
"""
from __future__ import annotations

from ..errors import ArgumentError, ShapeError, reports_as
from .arguments import as_choice, as_int, as_number, as_tensor, describe

_MODES = ("constant", "reflect", "replicate", "circular")


def _pairs(pad, ndim: int, op: str) -> list:
    """The flat tuple as (before, after) pairs per axis, first axis first."""
    if not isinstance(pad, (tuple, list)):
        raise ArgumentError(f"pad must be a tuple of ints (last axis first), got "
                            f"{describe(pad)}", op=op)
    pad = [as_int(p, "pad", op) for p in pad]
    if len(pad) % 2:
        raise ArgumentError(f"pad must hold an even number of ints, a (before, after) pair per "
                            f"axis from the last axis back, got {len(pad)}", op=op)
    if len(pad) // 2 > ndim:
        raise ArgumentError(f"pad {tuple(pad)} pads {len(pad) // 2} axes, but the input has "
                            f"only {ndim}", op=op)
    pairs = [(0, 0)] * (ndim - len(pad) // 2)
    return pairs + [(pad[i], pad[i + 1]) for i in reversed(range(0, len(pad), 2))]


def _circular(x, pairs, op: str):
    """Wrap around: the last `before` entries go in front, the first `after` behind."""
    from .shape import concat
    for axis, (lo, hi) in enumerate(pairs):
        if not (lo or hi):
            continue
        n = x.shape[axis]
        if lo > n or hi > n:
            raise ShapeError(f"circular padding ({lo}, {hi}) of axis {axis} may not exceed its "
                             f"length {n}", op=op)
        lead = (slice(None),) * axis
        parts = ([x[lead + (slice(n - lo, n),)]] if lo else []) + [x] + \
            ([x[lead + (slice(0, hi),)]] if hi else [])
        x = concat(parts, axis=axis)
    return x


@reports_as("pad")
def pad(input, pad, mode: str = "constant", value=None):
    """Pad `input` as PyTorch's F.pad: `pad` is a flat tuple of (before, after) pairs starting
    from the last axis; mode 'constant' (with `value`, 0 by default; negative pads crop),
    'reflect' (mirror without the edge), 'replicate' (repeat the edge) or 'circular' (wrap).

    >>> x = rill.arange(3.0).reshape(1, 3)
    >>> rill.nn.functional.pad(x, (2, 1), mode="circular")
    tensor([[1., 2., 0., 1., 2., 0.]])
    >>> rill.nn.functional.pad(x, (1, 1, 1, 0), value=-1.0)
    tensor([[-1., -1., -1., -1., -1.],
            [-1.,  0.,  1.,  2., -1.]])
    """
    from .shape import pad as numpy_pad
    op = "pad"
    x = as_tensor(input, "input", op)
    mode = as_choice(mode, "mode", op, _MODES)
    pairs = _pairs(pad, x.ndim, op)
    if mode == "constant":
        value = 0 if value is None else as_number(value, "value", op)
        if any(lo < 0 or hi < 0 for lo, hi in pairs):  # a negative pad crops
            x = x[tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in
                        zip(pairs, x.shape))]
            pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
        if not any(lo or hi for lo, hi in pairs):
            return x
        return numpy_pad(x, tuple(pairs), mode="constant", value=value)
    if value is not None and value != 0:
        raise ArgumentError(f"padding mode {mode!r} takes no value (only 'constant' does), got "
                            f"value={describe(value)}", op=op)
    padded = len(pad) // 2
    if padded > 3 or x.ndim not in (padded + 1, padded + 2):
        raise ShapeError(f"{mode} padding of the last {padded} axes needs a tensor of "
                         f"{padded + 1} or {padded + 2} axes ((N,) C and those), got shape "
                         f"{x.shape}", op=op)
    if any(lo < 0 or hi < 0 for lo, hi in pairs):
        raise ArgumentError(f"{mode} padding must not be negative, got {tuple(pad)}", op=op)
    if mode == "circular":
        return _circular(x, pairs, op)
    if mode == "reflect":
        for (lo, hi), n in zip(pairs, x.shape):
            if lo >= n or hi >= n:
                raise ShapeError(f"reflect padding ({lo}, {hi}) must be smaller than the axis "
                                 f"it pads (length {n}), as PyTorch; use mode='replicate' or "
                                 f"'circular' for wider pads", op=op)
    return numpy_pad(x, tuple(pairs), mode="edge" if mode == "replicate" else "reflect")
