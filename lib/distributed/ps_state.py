"""A parameter-server job's training state, for checkpoints: `ParameterServer.state_dict()`.

Under parameter servers the state of training is on the ps ranks: each holds the current
values of the variables placed on it (and its rows of each embedding table), the
optimizer's slots for them (momentum, Adam's moments and step counts), and its count of
applied steps, the global step. A worker's model holds the values of its last pull and its
optimizer holds nothing. So a checkpoint of such a job is the ParameterServer's state:

    ckpt = Checkpoint(ps=ps)                  # on every rank, after ParameterServer(...)
    manager = CheckpointManager(ckpt, directory, every_n_steps=4)
    start = manager.restore_latest() or 0     # each ps its share, each worker its copies

`state_dict()` on a worker asks every ps for its share ("state"; in sync mode answered once
the step this worker pushed for is applied, so it includes that step) and assembles them:
{"step": the global step, "ps_steps": each ps's, "model": {name: value}, "optimizer": as
the optimizer's own state_dict()}. `load_state_dict(state)` on a worker takes the values
and the global step, and sends each ps its share ("snapshot"), which the ps applies before
anything that worker sends later; on a ps rank it applies the ps's own share directly. A
ps applies one restore before its first step; the same checkpoint again (other workers
restore it too) is skipped, and any other once steps have been applied is refused.

A share travels as wire entries: value (a variable), indices + rows (a table's rows of that
ps), array (a tensor slot, "<variable>\\n<slot>", a table's slot as its rows) and meta (a
number slot), each checked against the receiver's own variables on receipt.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, DistributedError
from ..tensor import Tensor
from ..ops.creation import tensor
from ..eager.context import no_grad


def param_index(optimizer) -> dict:
    """id(parameter) -> its index in the optimizer's state_dict (position across groups)."""
    index: dict = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            index.setdefault(id(p), len(index))
    return index


def own_share(ps) -> dict:
    """This ps's share of the state, from its live variables and optimizer."""
    k = ps.world.rank
    share: dict = {"dense": {}, "rows": {}, "slots": {}}
    for name, p in ps.params.items():
        rows = _rows_of(ps, name, k)
        if rows is None and ps.place.get(name) != k:
            continue
        value = p.numpy()
        if rows is None:
            share["dense"][name] = value
        else:
            share["rows"][name] = value[rows]
        slots = {}
        for slot, v in ps.optimizer.state.get(p, {}).items():
            if isinstance(v, Tensor):
                a = v.numpy()
                slots[slot] = a[rows] if rows is not None and v.shape == p.shape else a
            elif isinstance(v, (bool, int, float)):
                slots[slot] = v
            else:
                raise DistributedError(f"the optimizer's slot {slot!r} of {name!r} is a "
                                       f"{type(v).__name__}, which a checkpoint of a "
                                       "parameter-server job cannot carry",
                                       op="ParameterServer.state_dict")
        if slots:
            share["slots"][name] = slots
    return share


def to_entries(ps, share: dict, k: int) -> list:
    """ps k's share as wire entries (a table's rows with their indices)."""
    entries = [("value", n, a) for n, a in share["dense"].items()]
    for name, rows in share["rows"].items():
        lo, hi = ps.ranges[name][k]
        entries.append(("indices", name, np.arange(lo, hi, dtype=np.int64)))
        entries.append(("rows", name, rows))
    for name, slots in share["slots"].items():
        for slot, v in slots.items():
            field = "array" if isinstance(v, np.ndarray) else "meta"
            entries.append((field, f"{name}\n{slot}", np.asarray(v)))
    return entries


def checked(ps, message, owner: int, who: str) -> dict:
    """A received share of ps `owner`, once every entry matches its variables."""
    def refuse(why):
        return DistributedError(f"malformed message from {who}: {why}; refused",
                                op="ParameterServer")

    share: dict = {"dense": {}, "rows": {}, "slots": {}}
    indices = {}
    for field, name, array in message.entries:
        if field == "value":
            p = ps.params.get(name)
            if p is None or ps.place.get(name) != owner or array.shape != p.shape:
                raise refuse(f"{name!r} is not a variable of shape {array.shape} on ps{owner}")
            share["dense"][name] = array
        elif field in ("indices", "rows"):
            if name not in ps.ranges:
                raise refuse(f"{name!r} is not an embedding table split over the ps")
            lo, hi = ps.ranges[name][owner]
            p = ps.params[name]
            if field == "indices":
                if array.dtype != np.int64 or not np.array_equal(array, np.arange(lo, hi)):
                    raise refuse(f"the rows of {name!r} are not ps{owner}'s, [{lo}, {hi})")
                indices[name] = True
            elif array.shape != (hi - lo,) + p.shape[1:]:
                raise refuse(f"{hi - lo} rows of {name!r} have shape {array.shape}")
            else:
                share["rows"][name] = array
        elif field in ("array", "meta"):
            name_, _, slot = name.partition("\n")
            p = ps.params.get(name_)
            if p is None or not slot.isidentifier() or \
                    (name_ not in ps.ranges and ps.place.get(name_) != owner):
                raise refuse(f"slot {name!r} is not an optimizer slot of a variable of ps{owner}")
            if field == "meta" and array.ndim:
                raise refuse(f"the number slot {name!r} has shape {array.shape}")
            share["slots"].setdefault(name_, {})[slot] = array if field == "array" else \
                array.item()
        else:
            raise refuse(f"a {field} entry ({name!r}) in a {message.kind}")
    if set(indices) != set(share["rows"]):
        raise refuse("a table's rows came without their indices, or indices without rows")
    return share


def assemble(ps, shares: dict, steps: dict) -> dict:
    """The whole state from every ps's share ({ps rank: share}, {ps rank: its step})."""
    model, slots = {}, {}
    for name, p in ps.params.items():
        if name in ps.ranges:
            full = np.empty(p.shape, shares[min(shares)]["rows"][name].dtype)
            parts = {}
            for k, share in shares.items():
                lo, hi = ps.ranges[name][k]
                full[lo:hi] = share["rows"][name]
                for slot, v in share["slots"].get(name, {}).items():
                    parts.setdefault(slot, {})[k] = v
            model[name] = full
            slots[name] = {slot: _table_slot(name, slot, p, got, ps.ranges[name])
                           for slot, got in parts.items()}
        else:
            share = shares[ps.place[name]]
            model[name] = share["dense"][name]
            slots[name] = dict(share["slots"].get(name, {}))
    index = param_index(ps.optimizer)
    state = {}
    for name, p in ps.params.items():
        if slots[name] and id(p) in index:
            state[index[id(p)]] = {s: _tensor(v) for s, v in slots[name].items()}
    groups = type(ps.optimizer).state_dict(ps.optimizer)["param_groups"]
    return {"step": max(steps.values()), "ps_steps": [steps[k] for k in sorted(steps)],
            "model": {n: _tensor(v, ps.params[n].dtype) for n, v in model.items()},
            "optimizer": {"state": state, "param_groups": groups}}


def _table_slot(name, slot, p, got: dict, ranges):
    """One slot of a table from the ps that have it: rows assembled (zero where a ps made
    none yet, as a ps makes them), numbers equal on every ps that has one."""
    arrays = [v for v in got.values() if isinstance(v, np.ndarray)]
    row_shaped = [k for k, v in got.items() if isinstance(v, np.ndarray) and v.ndim and
                  v.shape == (ranges[k][1] - ranges[k][0],) + p.shape[1:]]
    if arrays and len(row_shaped) == len(got):
        full = np.zeros(p.shape, arrays[0].dtype)
        for k, v in got.items():
            full[ranges[k][0]:ranges[k][1]] = v
        return full
    values = list(got.values())
    if all(np.array_equal(np.asarray(v), np.asarray(values[0])) for v in values):
        return values[0]
    raise DistributedError(f"the optimizer's {slot!r} of the table {name!r} differs between "
                           f"the parameter servers that hold its rows ({values}); one value "
                           "per table cannot restore them", op="ParameterServer.state_dict")


def _tensor(v, dtype=None):
    if not isinstance(v, np.ndarray):
        return v
    return tensor(np.array(v), dtype=dtype) if dtype is not None else tensor(np.array(v))


def share_for(ps, state: dict, k: int) -> dict:
    """ps k's share of a whole state (as state_dict() gives it), checked against the model."""
    op = "ParameterServer.load_state_dict"
    if not isinstance(state, dict) or not {"step", "ps_steps", "model", "optimizer"} <= set(state):
        raise ArgumentError("a ParameterServer state holds 'step', 'ps_steps', 'model' and "
                            "'optimizer' (as state_dict() returns it)", op=op)
    model = state["model"]
    if set(model) != set(ps.params):
        raise ArgumentError(f"the state's variables {sorted(model)} are not the model's "
                            f"{sorted(ps.params)}", op=op)
    by_index = {i: p for i, p in enumerate_params(ps.optimizer)}
    slots_of = {id(p): s for i, s in state["optimizer"].get("state", {}).items()
                for p in [by_index.get(int(i))] if p is not None}
    share: dict = {"dense": {}, "rows": {}, "slots": {}}
    for name, p in ps.params.items():
        value = model[name]
        if tuple(value.shape) != p.shape:
            raise ArgumentError(f"{name!r} has shape {tuple(value.shape)} in the state, "
                                f"{p.shape} in the model", op=op)
        value = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        rows = _rows_of(ps, name, k)
        if rows is None and ps.place.get(name) != k:
            continue
        if rows is None:
            share["dense"][name] = value
        else:
            share["rows"][name] = value[rows]
        slots = {}
        for slot, v in slots_of.get(id(p), {}).items():
            if isinstance(v, Tensor):
                a = v.numpy()
                slots[slot] = a[rows] if rows is not None and v.shape == p.shape else a
            else:
                slots[slot] = v
        if slots:
            share["slots"][name] = slots
    return share


def enumerate_params(optimizer):
    index = param_index(optimizer)
    by_id = {id(p): p for g in optimizer.param_groups for p in g["params"]}
    return [(i, by_id[key]) for key, i in index.items()]


def apply_share(ps, share: dict, step: int) -> None:
    """Make this ps's variables, slots and step those of `share` (a restore)."""
    from .ps import _set, _set_rows
    k = ps.world.rank
    opt = ps.optimizer
    whole = type(opt).state_dict(opt)
    index = param_index(opt)
    with no_grad():
        for name, value in share["dense"].items():
            _set(ps.params[name], value)
        for name, values in share["rows"].items():
            lo, hi = ps.ranges[name][k]
            _set_rows(ps.params[name], np.arange(lo, hi), values)
    for name in set(share["dense"]) | set(share["rows"]):
        p = ps.params[name]
        if id(p) not in index:
            continue
        slots = {}
        current = whole["state"].get(index[id(p)], {})
        for slot, v in share["slots"].get(name, {}).items():
            if name in ps.ranges and isinstance(v, np.ndarray) and v.ndim and \
                    v.shape[1:] == p.shape[1:]:
                lo, hi = ps.ranges[name][k]
                old = current.get(slot)
                full = old.numpy().copy() if isinstance(old, Tensor) and \
                    old.shape == p.shape else np.zeros(p.shape, v.dtype)
                full[lo:hi] = v
                v = full
            slots[slot] = _tensor(v)
        if slots:
            whole["state"][index[id(p)]] = slots
        else:
            whole["state"].pop(index[id(p)], None)
    type(opt).load_state_dict(opt, whole)
    ps.step = step


def _rows_of(ps, name: str, k: int):
    """The slice of table `name` that ps k holds, or None for a variable that is not a table."""
    if name not in ps.ranges:
        return None
    lo, hi = ps.ranges[name][k]
    return slice(lo, hi)


def refuse_on_worker(optimizer) -> None:
    """On a worker, the optimizer given to ParameterServer is the ps's: it never steps here
    and holds no slots. Its step() and state_dict() would be silently wrong (a local update
    that the next pull discards; a checkpoint without momentum or global step), so they
    refuse with the fix."""
    def refuse(api, fix):
        def refused(*args, **kwargs):
            raise DistributedError(f"optimizer.{api} on a worker of a parameter-server job: "
                                   f"the ps ranks hold the optimizer's slots and apply its "
                                   f"steps. {fix}", op=f"{type(optimizer).__name__}.{api}")
        return refused
    checkpoint = ("Checkpoint the ParameterServer instead, Checkpoint(ps=ps): its state has "
                  "the variables, the optimizer's slots and the global step")
    optimizer.step = refuse("step()", "ps.backward(loss) pushes the gradients; the ps applies "
                                      "them (remove optimizer.step() on workers)")
    optimizer.state_dict = refuse("state_dict()", checkpoint)
    optimizer.load_state_dict = refuse("load_state_dict()", checkpoint)
