"""bind: the only dispatch point of rill.

Every op, eager or captured, passes here:
1. attrs are checked against the primitive's declared types, and inputs are normalized
   (Python scalars lifted as weak values, dtypes promoted);
2. the shape/dtype rule runs first, so bad input fails at the user's call, named (its
   answers remembered per primitive: rule_cache.py);
3. the current interpreter (chosen by context, never by the arguments) runs the op;
4. a tape node is recorded when grad mode is on and an input requires grad (or came
   from an op without a gradient, so that differentiating it later can say which).

Where a C compiler is at hand, `bind` is this function's common case compiled (the end of
this file says which case, and how it hands every other call to the Python one).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..devices import Device, check_read, operands_on_two_devices
from ..errors import ArgumentError, Error
from ..tensor import Tensor
from . import context, interpreter, rule_cache, tape
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


# ---- bind's common case, compiled ----------------------------------------------------------
# kernels/native/dispatch.c runs an eager op on tensors of one device, without autocast, with
# one result, and hands every other call to the Python `bind` above: the reference, and what
# runs where there is no C compiler (or RILL_NATIVE=0). rill/__init__.py builds it and
# installs it here before any op module imports `bind` (tests/eager/test_compiled_bind.py
# checks that every module holds the compiled one). It reads the slots of Tensor, Context,
# Device, Node and DType at their offsets; Primitive (ops, a layer above) and the Tensor
# subclasses that add no slot (nn.Parameter) register themselves here.
python_bind = bind
_COMPILED = None
_registered: list = []  # (the module's register function's name, class), in order


def install_compiled(module) -> None:
    """Make `module` (dispatch.c built, or None: nothing changes) this module's `bind`."""
    global bind, _COMPILED
    if module is None:
        return
    set_up(module, python_bind)
    _COMPILED = module
    for how, cls in _registered:
        getattr(module, how)(cls)
    bind = module.bind


def set_up(module, fallback, tensor=Tensor) -> None:
    """Give the compiled module the objects it reads, and `fallback` to hand calls to (a
    TypeError, and every call handed over, if `tensor`'s or Node's slots are not the ones
    it sets)."""
    module.setup(fallback, context._context, interpreter.EAGER, tensor, context.Context, Device,
                 {"inferred": rule_cache.inferred, "attrs_fit": _attrs_fit,
                  "wrap": interpreter.wrap, "kernel_failed": interpreter.kernel_failed,
                  "record": tape.record, "mark_no_gradient": tape.mark_no_gradient,
                  "Node": tape.Node, "DType": dtypes.DType, "ndarray": np.ndarray,
                  "bfloat16": dtypes.bfloat16, "check_kernels": interpreter.CHECK_KERNELS,
                  "check_kernel_result": interpreter.check_kernel_result,
                  "dtypes": dtypes})


def register_primitive(cls) -> None:
    """ops/primitive.py's Primitive: the compiled bind reads its slots."""
    _register("register_primitive", cls)


def register_tensor_subclass(cls) -> None:
    """A Tensor subclass that adds no slot (nn.Parameter): the compiled bind takes its
    instances as tensors; other subclasses' calls run in the Python bind."""
    _register("register_tensor_subclass", cls)


def _register(how: str, cls) -> None:
    _registered.append((how, cls))
    if _COMPILED is not None:
        getattr(_COMPILED, how)(cls)


def operator(prim, function, reflected: bool = False):
    """Tensor's binary operator for op function `function`, which is `bind(prim, x, y)`:
    the compiled one (no frame of `function` per call; its name and docstring are
    `function`'s), or None without the compiled bind. `reflected` swaps the operands."""
    return None if _COMPILED is None else _COMPILED.operator(prim, function, reflected)
