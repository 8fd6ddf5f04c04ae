"""bind: the only dispatch point of rill.

Every op, eager or captured, passes here:
1. inputs are normalized (Python scalars lifted as weak values, dtypes promoted);
2. the shape/dtype rule runs first, so bad input fails at the user's call, named;
3. the current interpreter (chosen by context, never by the arguments) runs the op;
4. a tape node is recorded when grad mode is on and an input requires grad (or came
   from an op without a gradient, so that differentiating it later can say which).
"""
from __future__ import annotations

from ..errors import DeviceError, Error
from .context import current
from .tape import mark_no_gradient, record


def bind(prim, *args, **attrs):
    """Run primitive `prim` on `args` under the current interpreter."""
    ctx = current()
    args = prim.normalize(args)
    try:
        if prim.device_attr:
            device = attrs["device"]
        else:
            device = args[0].device
            for a in args:
                if a.device is not device:
                    raise DeviceError(f"inputs are on different devices: {device} and "
                                      f"{a.device}; move one with .to(device)")
        avals = prim.infer(*args, **attrs)
    except Error as e:
        if e.op is None:
            e.op = prim.name
        raise
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
