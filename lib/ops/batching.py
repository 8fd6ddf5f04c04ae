"""Batching rules: how a primitive runs on inputs that carry an extra batch axis (for vmap).

A rule is `rule(prim, size, args, dims, attrs) -> (outs, out_dims)`. `args` are the inputs
as they are, each with its batch axis at `dims[i]` (None: the input is the same for every
member of the batch); `size` is the batch's length. It answers with the op's results on the
whole batch and where each result's batch axis is. Rules call `bind`, so they run under
whatever interpreter is beneath vmap (eager kernels, a capture, an outer vmap), and the tape
records them like any op.

Most primitives belong to a family below and declare it in one line; a primitive that
declares none is run once per batch member by vmap (lib/func/vmap.py), which is correct for
every op and said once, so a missing rule costs speed, never a wrong answer.
"""
from __future__ import annotations

import math
import warnings

from ..eager.bind import bind
from ..errors import ShapeError, user_stacklevel
from .primitive import PRIMITIVES


# ---- moving batch axes ----------------------------------------------------------------------

def to_front(x, d):
    """x with its batch axis (at d) moved to axis 0; unbatched (d None) x as it is."""
    if d is None or d == 0:
        return x
    axes = (d,) + tuple(i for i in range(x.ndim) if i != d)
    return bind(PRIMITIVES["transpose"], x, axes=axes)


def batched_front(x, d, size):
    """x with a batch axis of `size` at axis 0, broadcast there when x has none."""
    if d is None:
        return bind(PRIMITIVES["broadcast_to"], x, shape=(size,) + tuple(x.shape))
    return to_front(x, d)


def _reshape(x, shape):
    shape = tuple(shape)
    return x if tuple(x.shape) == shape else bind(PRIMITIVES["reshape"], x, shape=shape)


def _rank(x, d) -> int:
    """The rank one member of the batch has."""
    return x.ndim - (d is not None)


def _axis(a: int, rank: int) -> int:
    """Axis a of a member (negative counts from its end) as an axis of the batch (axis 0 first)."""
    return (a % rank if rank else 0) + 1


def _axes(axes, rank: int):
    if axes is None:
        return tuple(range(1, rank + 1))
    if isinstance(axes, int):
        return _axis(axes, rank)
    return tuple(_axis(a, rank) for a in axes)


# ---- families -------------------------------------------------------------------------------

def elementwise(prim, size, args, dims, attrs):
    """Ops that broadcast their inputs against each other: batch axes to the front, and a
    batched input of lower rank than the others given unit axes after its batch axis, so it
    lines up as broadcasting lines up the members."""
    if len(args) == 1:
        return bind(prim, args[0], **attrs), dims[0]
    rank = max(_rank(a, d) for a, d in zip(args, dims))
    lined = []
    for a, d in zip(args, dims):
        if d is not None:
            a = to_front(a, d)
            missing = rank - (a.ndim - 1)
            if missing:
                a = _reshape(a, (a.shape[0],) + (1,) * missing + tuple(a.shape[1:]))
        lined.append(a)
    return bind(prim, *lined, **attrs), 0


def along(*names, flatten_none=False):
    """One-input ops with axis attributes (reductions, scans, softmax, sort, flip, fft):
    the batch axis goes first and each named attr shifts by one; an axis of None means all
    of a member's axes (or, with `flatten_none`, the member flattened: argmax, cumsum, roll)."""
    def rule(prim, size, args, dims, attrs):
        x, rest = to_front(args[0], dims[0]), args[1:]
        if any(d is not None for d in dims[1:]):
            return loop(prim, size, args, dims, attrs)
        rank = x.ndim - 1
        new = dict(attrs)
        if flatten_none and any(attrs.get(n) is None for n in names):
            flat = _reshape(x, (x.shape[0], -1) if rank else (x.shape[0], 1))
            for n in names:  # "axes" attrs are tuples, "axis" ones ints
                one = (1,) if n == "axes" else 1
                new[n] = one if attrs.get(n) is None else _axes(attrs[n], 1)
            out = bind(prim, flat, *rest, **new)
            return _unflatten(prim, out, x, attrs), 0
        for n in names:
            new[n] = _axes(attrs.get(n), rank)
        return at_front(prim, bind(prim, x, *rest, **new))
    return rule


def _unflatten(prim, out, x, attrs):
    """A result computed on each member flattened, shaped as the op shapes it: a roll keeps
    the member's shape, argmax/argmin a reduction's (keepdims or not), a scan stays flat."""
    if prim.name in ("argmax", "argmin"):
        rank = x.ndim - 1
        return _reshape(out, (x.shape[0],) + ((1,) * rank if attrs.get("keepdims") else ()))
    return _reshape(out, x.shape) if prim.name == "roll" else out


def at_front(prim, out):
    """(out, out_dims) for results whose batch axis is first."""
    return out, (tuple(0 for _ in out) if prim.multiple_results else 0)


def same_shapes(prim, size, args, dims, attrs):
    """Elementwise ops that take inputs of one shape (no broadcasting): all batched."""
    return bind(prim, *[batched_front(a, d, size) for a, d in zip(args, dims)], **attrs), 0


def attention_grad_rule(prim, size, args, dims, attrs):
    """(g, q, k, v, out, lse[, mask]): all on leading batch axes; only the mask broadcasts,
    so only it gets unit axes to line up (lse is a rank lower by design)."""
    lined = [batched_front(a, d, size) for a, d in zip(args, dims)]
    if len(lined) == 7:
        mask, rank = lined[6], lined[1].ndim
        lined[6] = _reshape(mask, (size,) + (1,) * (rank - mask.ndim) + tuple(mask.shape[1:]))
    return at_front(prim, bind(prim, *lined, **attrs))


def leading(prim, size, args, dims, attrs):
    """Ops whose leading axes are batch axes already (matrix decompositions, attention,
    tril/triu): every input gets the batch axis first (broadcast where it had none), and an
    input of lower rank (attention's mask) unit axes after it, to line up as before."""
    rank = max(_rank(a, d) for a, d in zip(args, dims))
    lined = []
    for a, d in zip(args, dims):
        a = batched_front(a, d, size)
        missing = rank - (a.ndim - 1)
        lined.append(_reshape(a, (size,) + (1,) * missing + tuple(a.shape[1:])) if missing
                     else a)
    return at_front(prim, bind(prim, *lined, **attrs))


def first_only(inner):
    """A rule that applies when only the first input is batched; the loop otherwise."""
    def rule(prim, size, args, dims, attrs):
        if any(d is not None for d in dims[1:]):
            return loop(prim, size, args, dims, attrs)
        return inner(prim, size, args, dims, attrs)
    return rule


def folding(count: int = 1):
    """Ops whose first `count` inputs (and every result) lead with the op's own batch axis N
    and whose other inputs are weights: the vmap batch folded into N, B*N rows at once
    (convolutions and pooling fold x; lstm_cell its input, h and c). Batched weights loop."""
    def rule(prim, size, args, dims, attrs):
        if any(d is not None for d in dims[count:]):
            return loop(prim, size, args, dims, attrs)
        rows = [batched_front(a, d, size) for a, d in zip(args[:count], dims[:count])]
        rows = [_reshape(a, (size * a.shape[1],) + tuple(a.shape[2:])) for a in rows]
        out = bind(prim, *rows, *args[count:], **attrs)
        unfold = lambda o: _reshape(o, (size, -1) + tuple(o.shape[1:]))  # noqa: E731
        if prim.multiple_results:
            return tuple(unfold(o) for o in out), tuple(0 for _ in out)
        return unfold(out), 0
    return rule


fold_into_n = folding(1)


def _channels_in(x, d, size):
    """(B, N, C, ...) as (N, B*C, ...): the members' channels side by side, so statistics
    over N and space are each member's own."""
    x = batched_front(x, d, size)
    swap = (1, 0) + tuple(range(2, x.ndim))
    x = bind(PRIMITIVES["transpose"], x, axes=swap)
    return _reshape(x, (x.shape[0], -1) + tuple(x.shape[3:]))


def _channels_out(y, size):
    """(N, B*C, ...) back to (B, N, C, ...)."""
    y = _reshape(y, (y.shape[0], size, -1) + tuple(y.shape[2:]))
    return bind(PRIMITIVES["transpose"], y, axes=(1, 0) + tuple(range(2, y.ndim)))


def _per_channel_in(t, d, size):
    return _reshape(batched_front(t, d, size), (-1,))


def batch_norm_rule(prim, size, args, dims, attrs):
    """Training batch norm per member: the members' channels as channels of one call."""
    x, w, b = args
    y, mean, var = bind(prim, _channels_in(x, dims[0], size), _per_channel_in(w, dims[1], size),
                        _per_channel_in(b, dims[2], size), **attrs)
    return (_channels_out(y, size), _reshape(mean, (size, -1)), _reshape(var, (size, -1))), \
        (0, 0, 0)


def batch_norm_grad_rule(prim, size, args, dims, attrs):
    g, x, w, mean, var = args
    dx, dw, db = bind(prim, _channels_in(g, dims[0], size), _channels_in(x, dims[1], size),
                      *[_per_channel_in(t, d, size) for t, d in zip(args[2:], dims[2:])],
                      **attrs)
    return (_channels_out(dx, size), _reshape(dw, (size, -1)), _reshape(db, (size, -1))), \
        (0, 0, 0)


def pool_grad_rule(prim, size, args, dims, attrs):
    """max_pool's gradient (g, winners): both folded into N like the pooling itself (the
    winners are places within one (n, c) plane, so they fold unchanged)."""
    g, winners = (batched_front(a, d, size) for a, d in zip(args, dims))
    shape = tuple(attrs["input_shape"])
    fold = lambda t: _reshape(t, (size * t.shape[1],) + tuple(t.shape[2:]))  # noqa: E731
    out = bind(prim, fold(g), fold(winners),
               **dict(attrs, input_shape=(size * shape[0],) + shape[1:]))
    return _reshape(out, (size,) + shape), 0


def _leading_input_rule(prim, size, args, dims, attrs):
    """linear, lstm_cell's input: leading axes of the first input are batch axes."""
    return bind(prim, to_front(args[0], dims[0]), *args[1:], **attrs), 0


first_leading = first_only(_leading_input_rule)


class FallbackWarning(UserWarning):
    """vmap ran a primitive once per batch member: correct, but slower than a batching rule."""


_warned: set = set()


def loop(prim, size, args, dims, attrs):
    """The op once per batch member (members taken along each input's batch axis), results
    stacked on a new first axis: correct for every primitive."""
    if size == 0:
        raise ShapeError(f"vmap over a batch of size 0 needs a batching rule for {prim.name}, "
                         "which has none", op="vmap")
    if prim.name not in _warned:
        _warned.add(prim.name)
        warnings.warn(f"vmap: {prim.name} has no batching rule for these inputs, so it runs "
                      f"once per batch member ({size} times here)", FallbackWarning,
                      stacklevel=user_stacklevel())
    from .shape import stack
    results = []
    for i in range(size):
        member = [a if d is None else a[(slice(None),) * d + (i,)] for a, d in zip(args, dims)]
        results.append(bind(prim, *member, **attrs))
    if prim.multiple_results:
        columns = list(zip(*results))
        return tuple(stack(list(c)) for c in columns), tuple(0 for _ in columns)
    return stack(results), 0


# ---- single primitives ----------------------------------------------------------------------

def reshape_rule(prim, size, args, dims, attrs):
    x = to_front(args[0], dims[0])
    return bind(prim, x, shape=(x.shape[0],) + tuple(attrs["shape"])), 0


def transpose_rule(prim, size, args, dims, attrs):
    x = to_front(args[0], dims[0])
    return bind(prim, x, axes=(0,) + tuple(a % (x.ndim - 1) + 1 for a in attrs["axes"])), 0


def broadcast_to_rule(prim, size, args, dims, attrs):
    x = to_front(args[0], dims[0])
    shape = tuple(attrs["shape"])
    missing = len(shape) - (x.ndim - 1)
    x = _reshape(x, (x.shape[0],) + (1,) * missing + tuple(x.shape[1:]))
    return bind(prim, x, shape=(x.shape[0],) + shape), 0


def concat_rule(prim, size, args, dims, attrs):
    rank = _rank(args[0], dims[0])
    lined = [batched_front(a, d, size) for a, d in zip(args, dims)]
    return bind(prim, *lined, axis=_axis(attrs["axis"], rank)), 0


def split_rule(prim, size, args, dims, attrs):
    x = to_front(args[0], dims[0])
    return at_front(prim, bind(prim, x, sizes=attrs["sizes"],
                               axis=_axis(attrs["axis"], x.ndim - 1)))


def pad_rule(prim, size, args, dims, attrs):
    x = to_front(args[0], dims[0])
    return bind(prim, x, **dict(attrs, widths=((0, 0),) + tuple(attrs["widths"]))), 0


def gather_along_rule(prim, size, args, dims, attrs):
    """take_along_axis and the scatters: inputs of one rank, all given the batch axis."""
    rank = _rank(args[0], dims[0])
    lined = [batched_front(a, d, size) for a, d in zip(args, dims)]
    return bind(prim, *lined, **dict(attrs, axis=_axis(attrs["axis"], rank))), 0


def matmul_rule(prim, size, args, dims, attrs):
    """Matrix products broadcast their leading axes, so batched operands line up as the
    members' ranks do; a batched vector becomes a batch of one-column (or one-row) matrices."""
    (x, y), (dx, dy) = args, dims
    rx, ry = _rank(x, dx), _rank(y, dy)
    x, y = to_front(x, dx), to_front(y, dy)
    if dx is not None and rx == 1:
        x = _reshape(x, (x.shape[0], 1, x.shape[1]))  # a row
    if dy is not None and ry == 1:
        y = _reshape(y, (y.shape[0], y.shape[1], 1))  # a column
    if dx is not None and dy is None and ry == 1:
        out = bind(prim, x, y)  # (B, ..., m, k) @ (k,)
        return (_drop(out, -1) if rx == 1 else out), 0
    if dy is not None and dx is None and rx == 1:
        out = bind(prim, x, y)  # (k,) @ (B, ..., k, n)
        return (_drop(out, -1) if ry == 1 else out), 0
    rank = max(rx, ry, 2)
    if dx is not None:
        x = _reshape(x, (x.shape[0],) + (1,) * (rank - (x.ndim - 1)) + tuple(x.shape[1:]))
    if dy is not None:
        y = _reshape(y, (y.shape[0],) + (1,) * (rank - (y.ndim - 1)) + tuple(y.shape[1:]))
    out = bind(prim, x, y)
    if rx == 1 and dx is not None:
        out = _drop(out, -2)
    if ry == 1 and dy is not None:
        out = _drop(out, -1)
    return out, 0


def _drop(x, axis):
    """x without its unit axis `axis`."""
    shape = list(x.shape)
    del shape[axis]
    return _reshape(x, shape)


def einsum_rule(prim, size, args, dims, attrs):
    """A new letter for the batch, on each batched operand and first in the output."""
    used = set("".join(attrs["inputs"]) + attrs["output"])
    letter = next(c for c in "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA"
                  if c not in used)
    inputs = tuple(spec if d is None else letter + spec for spec, d in zip(attrs["inputs"], dims))
    lined = [to_front(a, d) for a, d in zip(args, dims)]
    return bind(prim, *lined, inputs=inputs, output=letter + attrs["output"]), 0


def linear_weight_grad_rule(prim, size, args, dims, attrs):
    """g (..., out) and x (..., in) per member: a batch of g^T x over the members' rows, one
    batched matmul."""
    g, x = (batched_front(a, d, size) for a, d in zip(args, dims))
    if g.ndim > 3:  # the members' leading axes as one axis of rows
        rows = math.prod(g.shape[1:-1])
        g, x = _reshape(g, (size, rows, g.shape[-1])), _reshape(x, (size, rows, x.shape[-1]))
    gt = bind(PRIMITIVES["transpose"], g, axes=(0, 2, 1))
    return bind(PRIMITIVES["matmul"], gt, x), 0


def conv_weight_grad_rule(prim, size, args, dims, attrs):
    """Per-member weight gradients (vmap of grad): the members become groups of one grouped
    convolution, x (B, N, C, ...) read as (N, B*C, ...) and g (B, N, O, ...) as (N, B*O, ...),
    so group b*groups + j pairs member b's channels of group j."""
    x, g = (batched_front(a, d, size) for a, d in zip(args, dims))
    swap = (1, 0) + tuple(range(2, x.ndim))
    n = x.shape[1]
    x = _reshape(bind(PRIMITIVES["transpose"], x, axes=swap), (n, -1) + tuple(x.shape[3:]))
    g = _reshape(bind(PRIMITIVES["transpose"], g, axes=swap), (n, -1) + tuple(g.shape[3:]))
    w = bind(prim, x, g, **dict(attrs, groups=attrs["groups"] * size))
    return _reshape(w, (size, -1) + tuple(w.shape[1:])), 0


def _xent_rows(args, dims, size):
    """logits (B, N, C) and target (B, N) folded to (B*N, C) and (B*N,)."""
    logits, target = (batched_front(a, d, size) for a, d in zip(args[:2], dims[:2]))
    n = logits.shape[1]
    return _reshape(logits, (size * n, -1)), _reshape(target, (size * n,)), n


def _per_row(g, reduction, target, n, size, ignore_index):
    """The cotangent of each row's loss, per member: g itself for "none", g for each row of a
    "sum", g over the member's count of rows not ignored for a "mean"."""
    if reduction == "none":
        return g
    if reduction == "mean":
        from .reduce import sum as sum_
        valid = _reshape(target, (size, n)) != ignore_index
        g = g / sum_(valid, axis=1)
    return bind(PRIMITIVES["broadcast_to"], _reshape(g, (size, 1)), shape=(size, n))


def xent_rule(prim, size, args, dims, attrs):
    """softmax_cross_entropy per member: every member's rows as rows of one call without
    reduction, then each member's sum (or mean over its rows not ignored)."""
    logits, target, n = _xent_rows(args, dims, size)
    rows = _reshape(bind(prim, logits, target, **dict(attrs, reduction="none")), (size, n))
    reduction = attrs["reduction"]
    if reduction == "none":
        return rows, 0
    from .reduce import sum as sum_
    total = sum_(rows, axis=1)
    if reduction == "sum":
        return total, 0
    return total / sum_(_reshape(target, (size, n)) != attrs["ignore_index"], axis=1), 0


def xent_grad_rule(prim, size, args, dims, attrs):
    """softmax_cross_entropy_grad (logits, target, g) per member, folded as xent_rule."""
    logits, target, n = _xent_rows(args, dims, size)
    g = batched_front(args[2], dims[2], size)
    g = _per_row(g, attrs["reduction"], target, n, size, attrs["ignore_index"])
    grads = bind(prim, logits, target, _reshape(g, (size * n,)),
                 **dict(attrs, reduction="none"))
    return _reshape(grads, (size, n, -1)), 0


def layer_norm_grad_rule(prim, size, args, dims, attrs):
    """dx from the primitive on the whole batch; dw and db, which sum over a member's rows,
    summed per member here (the primitive would sum over the batch as well)."""
    if dims[2] is not None:
        return loop(prim, size, args, dims, attrs)
    from .elementwise import rsqrt
    from .reduce import mean, sum as sum_, var
    g, x = (batched_front(a, d, size) for a, d in zip(args[:2], dims[:2]))
    dx = bind(prim, g, x, args[2], **attrs)[0]
    axes = attrs["axes"]
    rows = tuple(range(x.ndim - axes, x.ndim))
    xhat = (x - mean(x, axis=rows, keepdims=True)) * rsqrt(var(x, axis=rows, keepdims=True)
                                                           + attrs["eps"])
    lead = tuple(range(1, x.ndim - axes))
    return (dx, sum_(g * xhat, axis=lead), sum_(g, axis=lead)), (0, 0, 0)


def check_rule(prim, size, args, dims, attrs):
    """check(ok, value): every member's condition checked at once; value passes through."""
    ok = to_front(args[0], dims[0])
    return bind(prim, ok, batched_front(args[1], dims[1], size), **attrs), 0


def layer_norm_rule(prim, size, args, dims, attrs):
    """Normalizes trailing axes, so a batch axis in front changes nothing; a batched weight
    or bias is left to the loop."""
    if any(d is not None for d in dims[1:]):
        return loop(prim, size, args, dims, attrs)
    return bind(prim, to_front(args[0], dims[0]), *args[1:], **attrs), 0


def getitem_rule(prim, size, args, dims, attrs):
    """Indexing a batched tensor with unbatched indices: one more full slice in front, when
    numpy's rule keeps the batch axis there (the advanced indices next to each other)."""
    key = attrs["key"]
    if any(d is not None for d in dims[1:]) or not _batch_stays_first(key):
        return loop(prim, size, args, dims, attrs)
    x = to_front(args[0], dims[0])
    return bind(prim, x, *args[1:], key=(("slice", None, None, None),) + tuple(key)), 0


def index_update_rule(prim, size, args, dims, attrs):
    """index_add / index_set (x, values, *indices): the batch first in x, a full slice in
    front of the key, and batched values lined up with the indexed part of one member."""
    key = attrs["key"]
    if any(d is not None for d in dims[2:]) or not _batch_stays_first(key):
        return loop(prim, size, args, dims, attrs)
    from .indexing import key_shape
    x, values = batched_front(args[0], dims[0], size), args[1]
    if dims[1] is not None:
        values = to_front(values, dims[1])
        rank = len(key_shape(tuple(x.shape[1:]), key, [a.shape for a in args[2:]]))
        missing = rank - (values.ndim - 1)
        if missing > 0:
            values = _reshape(values, (size,) + (1,) * missing + tuple(values.shape[1:]))
    return bind(prim, x, values, *args[2:], key=(("slice", None, None, None),) + tuple(key)), 0


def _batch_stays_first(key) -> bool:
    if not any(k[0] == "array" for k in key):
        return True
    advanced = [i for i, k in enumerate(key) if k[0] in ("array", "int")]
    return advanced == list(range(advanced[0], advanced[-1] + 1))


def random_draw(prim, size, attrs):
    """A draw of one member's shape, made for the whole batch: the members differ."""
    return bind(prim, **dict(attrs, shape=(size,) + tuple(attrs["shape"]))), 0
