"""bind: the only dispatch point of rill.

Every op, eager or captured, passes here:
1. attrs are checked against the primitive's declared types, and inputs are normalized
   (Python scalars lifted as weak values, dtypes promoted);
2. the shape/dtype rule runs first, so bad input fails at the user's call, named (its
   answers remembered per primitive: rule_cache.py);
3. the current interpreter (chosen by context, never by the arguments) runs the op;
4. a tape node is recorded when grad mode is on and an input requires grad (or came
   from an op without a gradient, so that differentiating it later can say which).
"""
from __future__ import annotations

from ..devices import check_read, operands_on_two_devices
from ..errors import ArgumentError, Error
from .context import current
from .rule_cache import inferred
from .tape import mark_no_gradient, record

# What a shape/dtype rule or a normalization raises when handed a value it cannot use: the
# user's bad argument, reported as one (chained, so the original stays visible).
_RULE_FAILURES = (TypeError, ValueError, OverflowError, IndexError, ZeroDivisionError)


def bind(prim, *args, **attrs):
    """Run primitive `prim` on `args` under the current interpreter."""
    ctx = current()
    # Mixed precision (rill.amp.autocast): floating inputs cast per rill/amp/policy.py's
    # table, by rill ops (on the tape, in a trace). Off, this is the one check it costs.
    if ctx.autocast is not None:
        args = ctx.autocast.cast_inputs(prim, args)
    try:
        if (attrs or prim.required_attrs) and not _attrs_fit(prim.attr_checks, attrs):
            _attr_error(prim, attrs)
        args = prim.normalize(args)
        if prim.device_attr:
            device = attrs["device"]
            if args and args[0].device is not device:  # a move: from another task, refused
                check_read(args[0].device, device, ctx.interpreter.capturing)
        else:
            device = args[0].device
            for a in args:
                if a.device is not device:
                    args, device = operands_on_two_devices(args, device, a.device,
                                                           ctx.interpreter.capturing)
                    break
        avals = prim.infer(*args, **attrs) if prim.rule_cache is None else \
            inferred(prim, args, attrs)
    except Error as e:
        if e.op is None:
            e.op = prim.name
        raise
    except _RULE_FAILURES as e:
        raise ArgumentError(f"{type(e).__name__}: {e}", op=prim.name) from e
    outs = ctx.interpreter.apply(prim, args, attrs, avals, device)
    if ctx.grad_enabled:
        origin = None
        for a in args:
            if a.requires_grad:
                record(prim, args, attrs, outs)
                break
            if a._origin is not None:
                origin = a._origin
        else:
            if origin is not None:
                mark_no_gradient(prim, outs, origin)
    return outs


def _attrs_fit(checks, attrs) -> bool:
    """Every attr declared and of its declared type, and none missing (the fast path: a
    False here may still be fine, when an optional attr was left out; _attr_error decides)."""
    if checks is None:  # a primitive that declares no attr types
        return True
    if len(attrs) != len(checks):
        return False
    try:
        for key, value in attrs.items():
            check = checks.get(key)
            if check is None or check(value) is not None:
                return False
    except Exception:  # noqa: BLE001 - a value too odd for the fast path to judge
        return False
    return True


def _attr_error(prim, attrs) -> None:
    """ArgumentError naming every attr of `attrs` that does not fit `prim`'s declaration
    (returns quietly when all fit: only optional attrs were left out)."""
    problems = prim.attr_problems(attrs)
    if problems:
        raise ArgumentError("; ".join(
            f"unknown attribute {path}" if why == "unknown attribute" else
            f"missing attribute {path}" if why == "missing" else f"attribute {path}: {why}"
            for path, why in problems), op=prim.name)
