"""Activation checkpointing, as PyTorch's `torch.utils.checkpoint`: a block runs without
keeping its intermediate values for the backward pass, which computes them again when it
reaches the block, trading compute for memory.

>>> import rill
>>> from rill.utils.checkpoint import checkpoint
>>> lin = rill.nn.Linear(4, 4)
>>> x = rill.ones((2, 4), requires_grad=True)
>>> checkpoint(lambda t: rill.tanh(lin(t)), x).sum().backward()
>>> x.grad.shape
(2, 4)

How. The forward pass runs the block under `no_grad` (its intermediate values are freed as
soon as Python drops them), watching through a wrapping interpreter which tensors its ops
read. The block's result gets one tape node whose inputs are every tensor the block read that
requires grad: the explicit arguments and whatever it reached by itself (a module's
parameters), as PyTorch's non-reentrant checkpoint differentiates both. Its gradient rule
runs the block again with grad mode on and walks that short tape back to those inputs, which
are made leaves for the walk so that it stops there (the outer walk goes on from them).

Randomness. With `preserve_rng_state=True` the recomputation draws the numbers the forward
pass drew, so dropout keeps its mask: eagerly, the state of every generator the block drew
from is saved before its first draw and restored around the recomputation (and put back
after it); inside `@rill.capture`, where the numbers exist only when the graph runs, the
recomputation uses the forward pass's draws themselves (those values are kept until the
backward pass instead of recomputed).

As in PyTorch, state the block changes in place (a BatchNorm's running statistics) is changed
again by the recomputation.

Inside `@rill.capture` the recomputation becomes graph nodes in the backward part of the
step. Its first nodes are ordered after the cotangent that reaches the block (a control
edge), which both says when they run and keeps common-subexpression elimination from
merging them back into the forward pass's nodes (that would keep the values alive again).
"""
from __future__ import annotations

import weakref

from ..eager import context
from ..autodiff.backward import gradients
from ..ops.primitive import COMPLEX_RULES
from ..eager.context import enable_grad, no_grad, use_interpreter
from ..eager.tape import record
from ..eager.wrapping import WrappingInterpreter
from ..errors import ArgumentError, CheckpointError, GradientError
from ..ops.primitive import Primitive
from ..tensor import Tensor
from ..eager.context import detached_value
from ..tree import flatten
from ..dtypes import short_name

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError"]


def checkpoint(function, *args, use_reentrant: bool | None = False, context_fn=None,
               determinism_check: str = "default", debug: bool = False,
               preserve_rng_state: bool = True, **kwargs):
    """function(*args, **kwargs), whose intermediate values are computed again in the
    backward pass instead of being kept (PyTorch's non-reentrant checkpoint).

    Gradients reach the arguments and every tensor the function reads by itself (a module's
    parameters). `preserve_rng_state=True` replays the random numbers of the forward pass,
    so dropout inside gives the gradients it would give without checkpointing. The function
    must compute the same thing when run again: outputs of other shapes or dtypes, or
    another number of random draws, raise CheckpointError in the backward pass.

    >>> import rill
    >>> from rill.utils.checkpoint import checkpoint
    >>> w = rill.ones(3, requires_grad=True)
    >>> checkpoint(lambda x: (rill.sin(x * w)).sum(), rill.zeros(3)).backward()
    >>> w.grad
    tensor([0., 0., 0.])
    """
    _refuse_options(use_reentrant, context_fn, determinism_check, debug)
    if not callable(function):
        raise ArgumentError(f"checkpoint needs a function or Module to run, got {function!r}",
                            op="checkpoint")
    ctx = context.current()
    if not ctx.grad_enabled:  # nothing is kept anyway (PyTorch also just runs it)
        return function(*args, **kwargs)
    block = _Block(function, args, kwargs, bool(preserve_rng_state),
                   ctx.interpreter.capturing, determinism_check == "default")
    return block.forward(ctx.interpreter)


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool | None = False,
                          **kwargs):
    """Run a sequence of functions (a Sequential, or a list of modules or functions) in
    `segments` parts, each part but the last checkpointed, as PyTorch's
    `checkpoint_sequential`. `kwargs` go to `checkpoint` (preserve_rng_state=...).

    >>> import rill
    >>> from rill.utils.checkpoint import checkpoint_sequential
    >>> net = rill.nn.Sequential(rill.nn.Linear(4, 4), rill.nn.ReLU(), rill.nn.Linear(4, 2))
    >>> checkpoint_sequential(net, 2, rill.ones((3, 4), requires_grad=True)).shape
    (3, 2)
    """
    _refuse_options(use_reentrant, kwargs.get("context_fn"), kwargs.get("determinism_check",
                    "default"), kwargs.get("debug", False))
    children = getattr(functions, "children", None)
    parts = list(children()) if callable(children) else list(functions)
    if isinstance(segments, bool) or not isinstance(segments, int) or segments < 1:
        raise ArgumentError(f"segments must be an int >= 1, got {segments!r}",
                            op="checkpoint_sequential")
    if not parts:
        raise ArgumentError("checkpoint_sequential needs at least one function",
                            op="checkpoint_sequential")
    size = max(len(parts) // segments, 1)
    start = 0
    # As PyTorch: segments - 1 parts of len // segments functions are checkpointed, and the
    # rest runs as it is (its values are needed by the backward pass first anyway).
    while start + size < len(parts) and start < size * (segments - 1):
        input = checkpoint(_run_in_order(parts[start:start + size]), input,
                           use_reentrant=use_reentrant, **kwargs)
        start += size
    return _run_in_order(parts[start:])(input)


def _run_in_order(functions):
    def run(x):
        for f in functions:
            x = f(x)
        return x
    return run


def _refuse_options(use_reentrant, context_fn, determinism_check, debug) -> None:
    if use_reentrant:
        raise ArgumentError(
            "use_reentrant=True is not supported: PyTorch's reentrant variant runs a nested "
            "backward() inside the backward pass and differentiates only with respect to the "
            "explicit tensor arguments, a legacy mode PyTorch itself no longer recommends. "
            "Pass use_reentrant=False (the same gradients, and parameters the function reads "
            "get theirs too)", op="checkpoint")
    if context_fn is not None:
        raise ArgumentError("context_fn is not supported: rill has no TorchDispatchMode to "
                            "run the forward and the recomputation under; leave it unset",
                            op="checkpoint")
    if determinism_check not in ("default", "none"):
        raise ArgumentError(f"determinism_check must be 'default' or 'none', got "
                            f"{determinism_check!r}", op="checkpoint")
    if debug:
        raise ArgumentError("debug=True is not supported (it prints PyTorch's operator "
                            "traces); leave it False", op="checkpoint")


def _is_draw(prim, attrs) -> bool:
    return prim.effect == "random" or "generator" in attrs


# The state of a generator, with the counters of its gpu (Philox) draws, which
# Generator.get_state leaves out (lib/random.py keeps them beside the bit generator).
def _rng_state(g):
    philox = getattr(g, "_philox_state", None)
    return g.get_state(), None if philox is None else list(philox)


def _set_rng_state(g, state) -> None:
    bits, philox = state
    g.set_state(bits)
    if philox is None:
        g.__dict__.pop("_philox_state", None)
    else:
        g._philox_state = list(philox)


class _Block:
    """One checkpointed call: what its backward pass needs to run it again."""

    def __init__(self, function, args, kwargs, preserve_rng, capturing, check):
        self.function, self.args, self.kwargs = function, args, kwargs
        self.preserve_rng, self.capturing, self.check = preserve_rng, capturing, check
        self.specs = None         # [(shape, dtype)] of the tensor results
        self.rng: dict = {}       # eager: generator -> its state before the block's first draw
        self.draws: list = []     # captured: (op, avals, outputs) of each draw, in order
        self.versions: list = []  # (weak ref, version) of every outside tensor the block read

    def forward(self, interpreter):
        watcher = _Watcher(interpreter, self)
        with use_interpreter(watcher), no_grad():
            result = self.function(*self.args, **self.kwargs)
        leaves, rebuild = flatten(result, is_leaf=lambda o: isinstance(o, Tensor))
        positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)]
        if not watcher.made and any(all(leaves[i] is not a for a in self.args)
                                    for i in positions):
            raise self._unwatched()
        inputs = list(watcher.wanted.values())
        if not positions or not inputs:  # nothing to differentiate: as run under no_grad
            return result
        self.versions = [(weakref.ref(t), t._version) for t in watcher.outside.values()]
        outs = tuple(detached_value(leaves[i]) for i in positions)
        self.specs = [(o.shape, o.dtype) for o in outs]
        record(_CHECKPOINT, tuple(inputs), {"block": self}, outs)
        for i, out in zip(positions, outs):
            leaves[i] = out
        return rebuild(leaves)

    def backward(self, g, inputs):
        """Cotangents for `inputs`, from the block run again and differentiated."""
        for ref, version in self.versions:
            t = ref()
            if t is not None and t._version != version:
                raise GradientError("a tensor that a checkpointed function read was changed in "
                                    "place after the function ran; recomputing it would use "
                                    "the new values. Change a clone() instead",
                                    op="checkpoint")
        create_graph = context.is_grad_enabled()  # the outer walk tapes itself
        cut = [(t, t._node, t._index) for t in inputs if t._node is not None]
        saved = {gen: _rng_state(gen) for gen in self.rng}
        try:
            for t, _, _ in cut:  # leaves for this walk: it stops at them, the outer goes on
                t._node = None
            for gen, state in self.rng.items():
                _set_rng_state(gen, state)
            replay = _Replay(context.current().interpreter, self, g)
            with use_interpreter(replay), enable_grad():
                result = self.function(*self.args, **self.kwargs)
            replay.finish()
            leaves = [t for t in flatten(result, is_leaf=lambda o: isinstance(o, Tensor))[0]
                      if isinstance(t, Tensor)]
            self._same_results(leaves)
            roots = [(t, c) for t, c in zip(leaves, g) if t.requires_grad and c is not None]
            found = gradients([t for t, _ in roots], [c for _, c in roots], targets=inputs,
                              create_graph=create_graph, retain_graph=create_graph) \
                if roots else {}
        finally:
            for t, node, index in cut:
                t._node, t._index = node, index
            for gen, state in saved.items():
                _set_rng_state(gen, state)
        return tuple(found[id(t)][1] if id(t) in found else None for t in inputs)

    def _unwatched(self) -> CheckpointError:
        # What ran computed tensors without one rill op: a compiled @rill.capture function
        # runs its graph directly when no gradient is recorded. Which tensors it read (its
        # parameters) is then unknown, and their gradients would be lost.
        return CheckpointError(
            f"checkpoint({_name(self.function)}): the function made its results without rill "
            "ops that checkpoint can see (a compiled @rill.capture function runs its graph "
            "directly), so the tensors it reads, and their gradients, are unknown. Call "
            "checkpoint inside the captured function, or the function without checkpoint",
            op="checkpoint")

    def _same_results(self, leaves) -> None:
        specs = [(t.shape, t.dtype) for t in leaves]
        if self.check and specs != self.specs:
            raise CheckpointError(
                f"the checkpointed function {_name(self.function)} returned tensors of "
                f"{_show(specs)} when run again in the backward pass, {_show(self.specs)} "
                "in the forward pass: it must compute the same thing both times (no "
                "dependence on state that changed in between)", op="checkpoint")


class _Watcher(WrappingInterpreter):
    """The forward pass of a block: which tensors its ops read, and its random draws."""

    def __init__(self, inner, block):
        super().__init__(inner)
        self.block = block
        self.wanted: dict = {}   # id -> tensor read that requires grad (the node's inputs)
        self.outside: dict = {}  # id -> tensor read that no op of the block made
        self.made: set = set()   # ids of the tensors the block's ops made

    def apply(self, prim, args, attrs, avals, device):
        for a in args:
            key = id(a)
            if key not in self.made:
                self.outside[key] = a
                if a.requires_grad:
                    self.wanted[key] = a
        block = self.block
        draw = block.preserve_rng and _is_draw(prim, attrs)
        if draw and not block.capturing:
            gen = attrs.get("generator")
            if gen is not None and gen not in block.rng:
                block.rng[gen] = _rng_state(gen)
        outs = self.inner.apply(prim, args, attrs, avals, device)
        many = outs if prim.multiple_results else (outs,)
        self.made.update(id(o) for o in many)
        if draw and block.capturing:
            block.draws.append((prim.name, avals, outs))
        return outs


class _Replay(WrappingInterpreter):
    """The recomputation: the forward pass's draws handed out again (captured), and, in a
    graph, the first recomputed nodes ordered after the cotangent that reached the block."""

    def __init__(self, inner, block, g):
        super().__init__(inner)
        self.block = block
        self.draws = list(block.draws) if block.capturing and block.preserve_rng else []
        self.used = 0
        # ids of graph values (the graph keeps them alive while the trace runs)
        self.fresh: set = set()     # that the recomputation made
        self.replayed: set = set()  # of the forward pass's draws, handed out again
        self.barrier = None
        if block.capturing:
            own = getattr(inner, "own", ())
            for c in g:
                data = getattr(c, "_data", None)
                if data is not None and getattr(data, "node", None) in own:
                    self.barrier = data.node
                    break

    def apply(self, prim, args, attrs, avals, device):
        if self.block.capturing and self.block.preserve_rng and _is_draw(prim, attrs):
            return self._replay(prim, avals)
        outs = self.inner.apply(prim, args, attrs, avals, device)
        if self.block.capturing:
            many = outs if prim.multiple_results else (outs,)
            root = not any(id(a._data) in self.fresh or id(a._data) in self.replayed
                           for a in args)
            if root and self.barrier is not None and many:
                node = many[0]._data.node
                if self.barrier not in node.after:
                    node.after.append(self.barrier)
            self.fresh.update(id(o._data) for o in many)
        return outs

    def _replay(self, prim, avals):
        if self.used >= len(self.draws):
            raise self._mismatch(f"draws more random numbers ({prim.name} number "
                                 f"{self.used + 1}; the forward pass made {len(self.draws)})")
        name, want, outs = self.draws[self.used]
        if name != prim.name or want != avals:
            raise self._mismatch(f"makes draw number {self.used + 1} as {prim.name} of "
                                 f"{avals}, the forward pass as {name} of {want}")
        self.used += 1
        many = outs if prim.multiple_results else (outs,)
        self.replayed.update(id(o._data) for o in many)
        return outs

    def finish(self) -> None:
        if self.used != len(self.draws):
            raise self._mismatch(f"made {self.used} random draws, the forward pass "
                                 f"{len(self.draws)}")

    def _mismatch(self, what: str) -> CheckpointError:
        return CheckpointError(f"the checkpointed function {_name(self.block.function)}, run "
                               f"again in the backward pass, {what}: it must draw the same "
                               "numbers in the same order both times", op="checkpoint")


def _vjp(g, out, *inputs, block):
    return block.backward(g, inputs)


# One tape node per checkpointed call (never a graph node: in a capture its forward and its
# recomputation are ordinary nodes). Its rule differentiates the block's own ops, which
# handle complex numbers themselves, so the walk must not conjugate around it.
_CHECKPOINT = Primitive("checkpoint", None, _vjp, multiple_results=True)
COMPLEX_RULES.add("checkpoint")


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _show(specs) -> str:
    return ", ".join(f"{short_name(d)}{list(s)}" for s, d in specs) or "nothing"
