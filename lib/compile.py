"""rill.compile: PyTorch's `torch.compile` spelling of `rill.capture`.

torch.compile's keywords map onto capture where they mean something rill does; the rest
are refused with the reason, never silently ignored:
- fullgraph: rill always records the whole function. Where torch would break the graph and
  fall back to Python (data-dependent `if`, `.item()`), capture raises a CaptureError at the
  line that needs `rill.cond` / `rill.while_loop`; so both True and False are accepted and
  mean fullgraph=True.
- dynamic: None or False (one graph per shape set: a new shape traces again, up to
  max_variants); True (symbolic shapes) is refused.
- backend: "inductor" runs capture's optimizing passes; "eager" and "aot_eager" (torch's
  debugging backends: the captured graph run as is) run it without them; other backends,
  and backend functions, are refused.
- mode: None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs":
  a captured function already runs its whole graph with no Python per op (what CUDA graphs
  buy torch) and rill's GPU kernels autotune and cache on disk, so all run the same.
- options: inductor's settings have no rill counterpart: only None or {}.
- disable=True returns `fn` itself, as torch does.
"""
from __future__ import annotations

from .capture.function import capture
from .errors import ArgumentError

_BACKENDS = {"inductor": True, "eager": False, "aot_eager": False}
_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile(fn=None, *, fullgraph: bool = False, dynamic=None, backend="inductor",  # noqa: A001
            mode=None, options=None, disable: bool = False):
    """`fn` (a function, method or Module) captured into graphs, as `rill.capture` does;
    PyTorch's keywords as the module text says. Usable as `@rill.compile` or
    `@rill.compile(...)`.

    >>> import rill
    >>> @rill.compile(fullgraph=True)
    ... def f(x):
    ...     return (x * 2).sum()
    >>> f(rill.ones(3))
    tensor(6.)
    """
    op = "compile"
    for name, value in (("fullgraph", fullgraph), ("disable", disable)):
        if not isinstance(value, bool):
            raise ArgumentError(f"{name} must be a bool, got {value!r}", op=op)
    if dynamic is True:
        raise ArgumentError("dynamic=True (graphs over symbolic shapes) is not supported: rill "
                            "traces one graph per set of shapes, and a new shape traces again; "
                            "pass dynamic=None or False", op=op)
    if dynamic not in (None, False):
        raise ArgumentError(f"dynamic must be None, False or True, got {dynamic!r}", op=op)
    if not isinstance(backend, str) or backend not in _BACKENDS:
        raise ArgumentError(f"backend {backend!r} has no rill counterpart: rill compiles with "
                            "its own passes; pass 'inductor' (optimized) or 'eager' (the "
                            "captured graph as recorded)", op=op)
    if mode not in _MODES:
        raise ArgumentError(f"mode must be one of {', '.join(map(repr, _MODES))}, got "
                            f"{mode!r}", op=op)
    if options:
        keys = sorted(map(str, options)) if isinstance(options, dict) else options
        raise ArgumentError(f"options {keys!r} are inductor settings, which rill does not "
                            "have; rill.capture's own keywords are optimize, parallel and "
                            "max_variants", op=op)
    settings = dict(fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                    options=options, disable=disable)
    if fn is None:
        return lambda f: compile(f, **settings)
    if disable:
        return fn
    return capture(fn, optimize=_BACKENDS[backend])
