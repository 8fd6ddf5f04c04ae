"""Variables over the parameter servers, as TF1 users placed them with a device setter.

`place_on_ps(model)` moves each parameter and buffer of `model` to one ps task's device
("ps:k/cpu"), in place (the same Parameter objects, so an optimizer made afterwards makes
its slots beside them there). Computation stays where the worker runs it: a captured step
reads the variables across tasks (lib/distributed/graphs/__init__.py).
"""
from __future__ import annotations

from ...devices import device as as_device
from ...errors import ArgumentError, DistributedError
from ...eager.context import detached_value, no_grad
from ..world import world
from ...nn.module import assign_


def place_on_ps(module, ps_tasks: int | None = None, *, by: str = "size") -> dict:
    """Put `module`'s parameters and buffers on the job's parameter servers; returns
    {name: device}. by="size": largest first, each on the ps holding the fewest bytes so
    far; by="round_robin": in order, ps 0, 1, ..., 0, ... `ps_tasks` defaults to the
    job's (rill-launch --ps P). Make the optimizer after this call.

    Every process of the job must call it the same way (it decides by sizes and order
    only, so every worker places every variable on the same ps)."""
    if by not in ("size", "round_robin"):
        raise ArgumentError(f"by must be 'size' or 'round_robin', got {by!r}", op="place_on_ps")
    from ..roles import expect_serve
    expect_serve(world(), "dist.place_on_ps(...)", "dist.serve()")
    n = world().num_ps if ps_tasks is None else ps_tasks
    if n < 1:
        raise DistributedError("place_on_ps needs parameter servers: launch with rill-launch "
                               "--ps P (or set RILL_NUM_PS under srun)", op="place_on_ps")
    named = list(module.named_parameters()) + list(module.named_buffers())
    order = sorted(range(len(named)), key=lambda i: -named[i][1].nbytes) if by == "size" \
        else range(len(named))
    load = [0] * n
    chosen = {}
    for k, i in enumerate(order):
        name, t = named[i]
        ps = min(range(n), key=lambda j: (load[j], j)) if by == "size" else k % n
        load[ps] += t.nbytes
        chosen[name] = as_device(f"ps:{ps}/cpu")
    with no_grad():
        for name, t in named:
            if t.device is not chosen[name]:
                assign_(t, detached_value(t).to(chosen[name]))
    return chosen
