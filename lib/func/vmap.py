"""vmap: run a function written for one example on a batch of them, as one computation.

vmap is an interpreter, chosen by context like capture: while the function runs, each
tensor it sees carries (as its data) the whole batch with a note of where the batch axis is,
and its shape is one member's. `bind` checks shapes on members as usual, so errors read as
in the unbatched code; the interpreter then applies the primitive's batching rule
(ops/batching.py) to the batched values, under the interpreter beneath it. So vmap nests
(each level keeps its own axis), composes with grad (the tape records the members' ops and
their vjp rules run batched too) and with capture (the rules' ops become graph nodes).
"""
from __future__ import annotations

import functools

from ..eager.context import current, use_interpreter
from ..eager.wrapping import WrappingInterpreter
from ..ops.batching import FallbackWarning, loop  # noqa: F401 - FallbackWarning is public
from ..errors import ArgumentError, Error, ShapeError
from ..ops.sparse_rows import SparseRows
from ..tensor import Tensor, new_tensor
from ..tree import flatten
from ..ops.shape import concat, moveaxis
from ..ops.batching import batched_front
from ..ops.batching import random_draw


class Batched:
    """The data of a tensor inside vmap: `value` holds the whole batch, its batch axis at
    `dim`; `shape` is one member's (what the function sees)."""

    __slots__ = ("value", "dim", "level", "shape")

    def __init__(self, value: Tensor, dim: int, level: "VmapInterpreter"):
        self.value = value
        self.dim = dim
        self.level = level
        shape = list(value.shape)
        del shape[dim]
        self.shape = tuple(shape)

    def __array__(self, dtype=None, copy=None):
        raise escaped_error()

    def check_write(self, target) -> None:
        """An in-place op may write a batched value only into a tensor batched alike: written
        into an outside tensor, the members would have to share one place."""
        if type(target) is Batched and target.level is self.level and target.dim == self.dim:
            return
        if type(target) is Batched and target.level is self.level:
            return
        raise ArgumentError("an in-place op inside vmap writes a value that differs between "
                            "batch members into a tensor that does not (one made outside the "
                            "vmapped function, or not batched); use the out-of-place op and "
                            "return the result, or pass that tensor in as a vmapped input",
                            op="vmap")

    def host_refusal(self, what: str) -> Error:
        """The error for Python asking one value of a tensor that differs between members."""
        if not self.level.active:
            return escaped_error()
        return ArgumentError(f"{what} needs one value, but inside vmap this tensor differs "
                             "between batch members; for a choice use rill.where, or "
                             "rill.cond (each member takes its own branch); to look at "
                             "values, return them from the vmapped function",
                             op=what.split(" ")[0].rstrip("()"))


def escaped_error() -> Error:
    return ArgumentError("a tensor made inside vmap was used after vmap returned; return it "
                         "from the vmapped function instead of keeping it", op="vmap")


class VmapInterpreter(WrappingInterpreter):
    """Runs each op on the batched values of its inputs, through the op's batching rule;
    ops no input of which is batched here go to the interpreter beneath (`inner`)."""

    reruns_python = True  # a captured function called inside runs as Python, batched here

    def __init__(self, size: int, inner, randomness: str):
        super().__init__(inner)
        self.size = size
        self.randomness = randomness
        self.active = True

    def dim_of(self, t: Tensor):
        data = t._data
        if type(data) is Batched:
            if data.level is self:
                return data.dim
            if not data.level.active:
                raise escaped_error()
        return None

    def apply(self, prim, args, attrs, avals, device):
        dims = [self.dim_of(a) for a in args]
        if all(d is None for d in dims):
            if prim.effect == "random" and self.randomness != "same":
                return self._draw(prim, attrs, avals, device)
            return self.inner.apply(prim, args, attrs, avals, device)
        inner = [a._data.value if d is not None else a for a, d in zip(args, dims)]
        rule = prim.batch or loop
        with use_interpreter(self.inner):
            outs, out_dims = rule(prim, self.size, inner, dims, attrs)
        if prim.multiple_results:
            return tuple(self.wrap(prim, o, d, aval) for o, d, aval in zip(outs, out_dims, avals))
        return self.wrap(prim, outs, out_dims, avals)

    def _draw(self, prim, attrs, avals, device):
        if self.randomness == "error":
            raise ArgumentError(f"{prim.name} draws random numbers inside vmap, which was "
                                "given randomness='error'; pass randomness='different' (each "
                                "batch member draws its own) or randomness='same' (one draw "
                                "shared by all)", op="vmap")
        with use_interpreter(self.inner):
            out, d = random_draw(prim, self.size, attrs)
        return self.wrap(prim, out, d, avals)

    def wrap(self, prim, value: Tensor, d, aval) -> Tensor:
        shape, dtype = aval
        if d is None:  # a result that is the same for every member
            value = self._insert(value)
            d = 0
        got = list(value.shape)
        if 0 <= d < len(got):
            size = got.pop(d)
        else:
            size = None
        if size != self.size or tuple(got) != tuple(shape) or value.dtype is not dtype:
            raise AssertionError(f"batching rule of {prim.name} gave {value.dtype}"
                                 f"{list(value.shape)} with the batch at {d}; its shape rule "
                                 f"inferred {dtype}{list(shape)} per member, batch {self.size}")
        return new_tensor(Batched(value, d, self), dtype, value.device)

    def _insert(self, value: Tensor) -> Tensor:
        with use_interpreter(self.inner):
            return batched_front(value, None, self.size)


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None):
    """func mapped over an axis of its inputs: `vmap(f)(xs)` equals stacking f(x) for each
    x in xs, computed as one batched computation.

    in_dims says, per argument (an int or None for all, or a tuple/nest matching the
    arguments), which axis is the batch axis (None: not batched); out_dims where the batch
    axis goes in each output. `randomness`: "error" (a random op inside raises), "different"
    (each member draws its own numbers) or "same" (one draw shared by all members), as in
    torch.func.vmap. vmap nests, and composes with rill.grad and rill.capture.

    >>> import rill
    >>> dot = lambda a, b: (a * b).sum()
    >>> rill.vmap(dot)(rill.ones(3, 2), rill.ones(3, 2))
    tensor([2., 2., 2.])
    """
    if not callable(func):
        raise ArgumentError(f"vmap needs a function, got {type(func).__name__}", op="vmap")
    if randomness not in ("error", "different", "same"):
        raise ArgumentError(f"randomness must be 'error', 'different' or 'same', got "
                            f"{randomness!r}", op="vmap")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ArgumentError(f"chunk_size must be a positive int or None, got {chunk_size!r}",
                            op="vmap")

    @functools.wraps(func)
    def batched(*args, **kwargs):
        dims = _dims_per_leaf(in_dims, args)
        leaves, rebuild = flatten(args)
        size = _batch_size(leaves, dims)
        if chunk_size is not None and chunk_size < size:
            return _in_chunks(batched_call, chunk_size, out_dims, leaves, dims, rebuild, size,
                              kwargs)
        return batched_call(leaves, dims, rebuild, size, kwargs)

    def batched_call(leaves, dims, rebuild, size, kwargs):
        level = VmapInterpreter(size, current().interpreter, randomness)
        members = [leaf if d is None else
                   new_tensor(Batched(leaf, d % leaf.ndim, level), leaf.dtype, leaf.device)
                   for leaf, d in zip(leaves, dims)]
        try:
            with use_interpreter(level):
                out = func(*rebuild(members), **kwargs)
            _write_back(leaves, members, dims)
            return _unbatch(out, level, out_dims)
        finally:
            level.active = False

    return batched


def _write_back(leaves, members, dims) -> None:
    """An input the function changed in place is changed in the caller's tensor too (as
    torch.func.vmap does), through an in-place copy, so the tape and a capture see it."""
    for leaf, member, d in zip(leaves, members, dims):
        if d is None or member._version == 0:
            continue
        batched = member._data
        value = _move(batched.value, batched.dim, d % leaf.ndim)
        leaf.copy_(value)


def _in_chunks(call, chunk, out_dims, leaves, dims, rebuild, size, kwargs):
    """vmap in slices of `chunk` members (less memory at once), outputs concatenated."""
    parts = []
    for start in range(0, size, chunk):
        stop = min(start + chunk, size)
        sliced = [leaf if d is None else leaf[(slice(None),) * (d % leaf.ndim)
                                              + (slice(start, stop),)]
                  for leaf, d in zip(leaves, dims)]
        parts.append(flatten(call(sliced, dims, rebuild, stop - start, kwargs)))
    leaves, rebuild_out = parts[0]
    axes = _out_dims_per_leaf(out_dims, leaves)
    return rebuild_out([parts[0][0][i] if axes[i] is None else
                        concat([p[0][i] for p in parts], axis=axes[i])
                        for i in range(len(leaves))])


def _dims_per_leaf(in_dims, args) -> list:
    """in_dims spread over every tensor leaf of args (an int or None applies to all below)."""
    if isinstance(in_dims, (int, type(None))) and not isinstance(in_dims, bool):
        return [in_dims if isinstance(leaf, Tensor) else None for leaf in flatten(args)[0]]
    if not isinstance(in_dims, (tuple, list)) or len(in_dims) != len(args):
        raise ArgumentError(f"in_dims must be an int, None, or a tuple with one entry per "
                            f"argument ({len(args)}), got {in_dims!r}", op="vmap")
    dims = []
    for spec, arg in zip(in_dims, args):
        leaves = flatten(arg)[0]
        if isinstance(spec, (int, type(None))) and not isinstance(spec, bool):
            dims.extend(spec if isinstance(leaf, Tensor) else None for leaf in leaves)
            continue
        spec_leaves = flatten(spec, is_leaf=lambda s: s is None)[0]
        if len(spec_leaves) != len(leaves):
            raise ArgumentError(f"in_dims entry {spec!r} does not match the structure of its "
                                "argument", op="vmap")
        dims.extend(spec_leaves)
    for leaf, d in zip(flatten(args)[0], dims):
        if d is not None and not isinstance(leaf, Tensor):
            raise ArgumentError(f"in_dims gives a batch axis ({d}) for an argument that is not "
                                f"a tensor ({type(leaf).__name__}); give it None", op="vmap")
    return dims


def _batch_size(leaves, dims) -> int:
    sizes = {}
    for leaf, d in zip(leaves, dims):
        if d is None:
            continue
        if not isinstance(d, int) or not -leaf.ndim <= d < leaf.ndim:
            raise ArgumentError(f"in_dim {d!r} is not an axis of an input of shape "
                                f"{leaf.shape}", op="vmap")
        sizes.setdefault(leaf.shape[d], leaf.shape)
    if not sizes:
        raise ArgumentError("vmap needs at least one input with a batch axis (in_dims are all "
                            "None)", op="vmap")
    if len(sizes) > 1:
        raise ShapeError("vmap's inputs disagree on the batch size: " + ", ".join(
            f"{n} (an input of shape {s})" for n, s in sizes.items()), op="vmap")
    return next(iter(sizes))


def _out_dims_per_leaf(out_dims, leaves) -> list:
    if isinstance(out_dims, (int, type(None))) and not isinstance(out_dims, bool):
        return [out_dims] * len(leaves)
    dims = flatten(out_dims, is_leaf=lambda s: s is None)[0]
    if len(dims) != len(leaves):
        raise ArgumentError(f"out_dims {out_dims!r} does not match the structure of the "
                            "function's output", op="vmap")
    return dims


def _unbatch(out, level, out_dims):
    leaves, rebuild = flatten(out)
    dims = _out_dims_per_leaf(out_dims, leaves)
    results = []
    for leaf, d in zip(leaves, dims):
        if isinstance(leaf, SparseRows):  # an embedding's gradient: dense, per member
            with use_interpreter(level):
                leaf = leaf.to_dense()
        if not isinstance(leaf, Tensor):
            raise ArgumentError(f"a vmapped function must return tensors, got "
                                f"{type(leaf).__name__}", op="vmap")
        at = level.dim_of(leaf)
        if d is None:
            if at is not None:
                raise ArgumentError("out_dims is None for an output that differs between batch "
                                    "members", op="vmap")
            results.append(leaf)
            continue
        value = leaf._data.value if at is not None else _broadcast(leaf, level.size)
        at = at if at is not None else 0
        if not -value.ndim <= d < value.ndim:
            raise ArgumentError(f"out_dim {d} is not an axis of an output of member shape "
                                f"{leaf.shape}", op="vmap")
        results.append(_move(value, at, d % value.ndim))
    return rebuild(results)


def _broadcast(leaf, size):
    return batched_front(leaf, None, size)


def _move(x, source, dest):
    if source == dest:
        return x
    return moveaxis(x, source, dest)
