"""rill.autocast: ops run in the dtype policy.py's table gives them, inside a region.

The state lives in the per-thread context `bind` consults (eager/context.py); `bind` hands
each op's inputs to `AutocastState.cast_inputs`, which casts floating inputs with rill's
`cast` op, so the casts are on the tape (the gradient of a float32 weight used in bfloat16
comes back in float32) and in a captured graph.

A capture bakes the casts into its graph, so a trace must also say which autocast state it
ran under: every trace runs under a `Traced` state that, at the trace's first op, guards
the caller's autocast state (and rill.get_default_dtype(), which creation ops bake in the
same way). A captured function called under another state traces again and says why.
"""
from __future__ import annotations

import functools

from .. import dtypes as dt
from ..capture import guards
from ..eager import context
from ..eager.context import current, use_autocast
from ..errors import ArgumentError, DTypeError
from ..ops.elementwise import cast
from ..tensor import Tensor
from .policy import FLOAT32, LOWER, RULES, WIDEST

# PyTorch's device_type names -> rill's device kinds, and each kind's default dtype.
_KINDS = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu"}
_DEFAULT_DTYPE = {"cpu": dt.bfloat16, "gpu": dt.float16}
_LOW = (dt.float16, dt.bfloat16)


class AutocastState:
    """Which device kinds autocast, to which dtype; and the cast cache of one region."""

    __slots__ = ("dtypes", "cache", "key")

    def __init__(self, dtypes: dict, cache: bool):
        self.dtypes = dtypes  # {"cpu": rill.bfloat16}
        # Casts of leaf tensors that require grad (weights), made once per region: a weight
        # used at every step of a loop is cast once, as PyTorch's cache_enabled does.
        self.cache = {} if cache else None
        self.key = " ".join(f"{k} {d}" for k, d in sorted(dtypes.items()))

    def cast_inputs(self, prim, args):
        device = None
        for a in args:
            if isinstance(a, Tensor):
                device = a.device
                break
        if device is None:
            return args
        low = self.dtypes.get(device.kind)
        if low is None:
            return args
        how = RULES.get(prim.name, WIDEST)
        if how is LOWER:
            return tuple(self._cast(a, low) if isinstance(a, Tensor) and a.dtype.kind == "f"
                         and a.dtype is not low and a.dtype is not dt.float64 else a
                         for a in args)
        if how is FLOAT32:
            return tuple(self._cast(a, dt.float32) if isinstance(a, Tensor) and a.dtype in _LOW
                         else a for a in args)
        widest, mixed = None, False
        for a in args:
            if isinstance(a, Tensor) and a.dtype.kind == "f" and a.dtype is not widest:
                mixed = widest is not None
                widest = a.dtype if widest is None else dt.promote_types(widest, a.dtype)
        if not mixed:
            return args
        return tuple(self._cast(a, widest) if isinstance(a, Tensor) and a.dtype.kind == "f"
                     and a.dtype is not widest else a for a in args)

    def _cast(self, a: Tensor, dtype) -> Tensor:
        cache = self.cache
        if cache is None or not (a.requires_grad and a._node is None) or \
                not current().grad_enabled:
            return cast(a, dtype)
        hit = cache.get((id(a), dtype))
        # Still valid: same tensor, same buffer (an optimizer's write gives a new one), and a
        # tape node that no backward() has released yet.
        if hit is not None and hit[0] is a and hit[1] is a._data and \
                hit[2]._node is not None and hit[2]._node.inputs is not None:
            return hit[2]
        out = cast(a, dtype)
        cache[id(a), dtype] = (a, a._data, out)
        return out


class Traced:
    """The autocast state of a trace: `inner` (None: off), and at the trace's first op, a
    guard on the caller's state and on the default dtype."""

    __slots__ = ("inner", "guarded")

    def __init__(self, inner):
        self.inner = inner
        self.guarded = False

    def cast_inputs(self, prim, args):
        if not self.guarded:
            self.guard()
        inner = self.inner
        return args if inner is None else inner.cast_inputs(prim, args)

    def guard(self) -> None:
        """Called while this is the current state, so the reads below see it."""
        self.guarded = True
        guards.guard("the autocast state (rill.autocast)", autocast_key)
        guards.guard("rill.get_default_dtype()", lambda: dt.default_float)


def autocast_key() -> str:
    """'off', or e.g. 'cpu bfloat16': the autocast state ops run under now."""
    state = current().autocast
    if type(state) is Traced:
        state = state.inner
    return "off" if state is None else state.key


def _for_interpreter(state, capturing: bool):
    """context's hook: a trace runs under a Traced state; anything else under the plain one."""
    if type(state) is Traced:
        state = state.inner
    return Traced(state) if capturing else state


context.autocast_for_interpreter = _for_interpreter


class autocast:
    """Run ops inside in mixed precision: matmul, linear, convolutions and attention in
    `dtype` (bfloat16 or float16), reductions, softmax, norms, losses and the exponential
    family in float32, the rest in the widest type of their inputs (rill/amp/policy.py has
    the table). Usable as a context manager or a decorator; nests (the inner region wins).

    device_type: "cpu", or "cuda" / "gpu"; only tensors on that kind of device are cast.
    dtype: rill.bfloat16 (the default on the cpu) or rill.float16 (the default on a gpu).
    cache_enabled: cast each weight once per region (None: True).

    >>> import rill
    >>> w = rill.ones(3, 2, requires_grad=True)
    >>> with rill.autocast("cpu"):
    ...     y = rill.ones(4, 3) @ w
    ...     loss = y.sum()
    >>> y.dtype, loss.dtype
    (rill.bfloat16, rill.float32)
    >>> loss.backward(); w.grad.dtype
    rill.float32
    """

    def __init__(self, device_type: str, dtype=None, enabled: bool = True,
                 cache_enabled: bool | None = None):
        kind = _KINDS.get(device_type) if isinstance(device_type, str) else None
        if kind is None:
            raise ArgumentError(f"device_type must be 'cpu' or 'cuda' (rill's 'gpu'), got "
                                f"{device_type!r}", op="autocast")
        if dtype is None:
            dtype = _DEFAULT_DTYPE[kind]
        dtype = dt.as_dtype(dtype, "autocast")
        if dtype not in _LOW:
            raise DTypeError(f"autocast runs ops in rill.bfloat16 or rill.float16, got {dtype}; "
                             "for float32 everywhere, leave autocast off (enabled=False)",
                             op="autocast")
        if not isinstance(enabled, bool):
            raise ArgumentError(f"enabled must be a bool, got {enabled!r}", op="autocast")
        if cache_enabled is not None and not isinstance(cache_enabled, bool):
            raise ArgumentError(f"cache_enabled must be a bool or None, got {cache_enabled!r}",
                                op="autocast")
        self.device_type, self.fast_dtype, self.enabled = device_type, dtype, enabled
        self._kind = kind
        self._cache = True if cache_enabled is None else cache_enabled
        self._switches: list = []

    def __enter__(self):
        ctx = current()
        outer = ctx.autocast
        if type(outer) is Traced and not outer.guarded:
            outer.guard()  # the state around this region is baked in too
        inner = outer.inner if type(outer) is Traced else outer
        dtypes = dict(inner.dtypes) if inner is not None else {}
        if self.enabled:
            dtypes[self._kind] = self.fast_dtype
        else:
            dtypes.pop(self._kind, None)
        # No cache while tracing: the graph's common-subexpression pass merges repeated casts.
        state = AutocastState(dtypes, self._cache and not ctx.interpreter.capturing) \
            if dtypes else None
        if type(outer) is Traced:
            state = Traced(state)
            state.guarded = True
        switch = use_autocast(state)
        switch.__enter__()
        self._switches.append(switch)
        return self

    def __exit__(self, *exc):
        self._switches.pop().__exit__(*exc)
        return False

    def __call__(self, fn):
        """As a decorator: each call of fn runs in a region of its own."""
        settings = (self.device_type, self.fast_dtype, self.enabled, self._cache)

        @functools.wraps(fn)
        def autocasted(*args, **kwargs):
            with autocast(*settings):
                return fn(*args, **kwargs)
        return autocasted

    def __repr__(self) -> str:
        state = self.fast_dtype if self.enabled else "disabled"
        return f"rill.autocast({self.device_type!r}, {state})"


def is_autocast_enabled(device_type: str = "cpu") -> bool:
    """Whether ops on `device_type` run under autocast here."""
    state = current().autocast
    state = state.inner if type(state) is Traced else state
    return state is not None and _KINDS.get(device_type) in state.dtypes


def get_autocast_dtype(device_type: str = "cpu"):
    """The dtype autocast uses for `device_type` (its default when no region is active)."""
    kind = _KINDS.get(device_type)
    if kind is None:
        raise ArgumentError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}",
                            op="get_autocast_dtype")
    state = current().autocast
    state = state.inner if type(state) is Traced else state
    return state.dtypes.get(kind, _DEFAULT_DTYPE[kind]) if state else _DEFAULT_DTYPE[kind]
