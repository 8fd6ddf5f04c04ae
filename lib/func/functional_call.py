"""functional_call: run a module with parameters and buffers given for this call only, so a
transform (grad, vmap, jacrev) can treat them as inputs."""
from __future__ import annotations

from ..errors import ArgumentError


def functional_call(module, parameter_and_buffer_dicts, args=(), kwargs=None, *,
                    tie_weights: bool = True, strict: bool = False):
    """module(*args, **kwargs) with the named tensors in place of its parameters and buffers,
    which are put back afterwards, as torch.func.functional_call. Names are state_dict's
    dotted names; one dict, or a tuple of dicts with distinct keys. With tie_weights, a tensor
    given for one of several names of one parameter is used for all of them; with strict,
    every parameter and buffer must be given.

    >>> import rill
    >>> lin = rill.nn.Linear(2, 1, bias=False)
    >>> w = rill.tensor([[1.0, 2.0]])
    >>> rill.func.functional_call(lin, {"weight": w}, (rill.ones(1, 2),))
    tensor([[3.]])
    """
    given = _merged(parameter_and_buffer_dicts)
    if not isinstance(args, tuple):
        args = (args,)
    owners = {}  # name -> (module that holds it, registry, attribute name, current value)
    for registry, walk in (("_parameters", module.named_parameters),
                           ("_buffers", module.named_buffers)):
        for name, value in walk(remove_duplicate=False):
            holder, _, attr = _split(module, name)
            owners[name] = (holder, registry, attr, value)
    unexpected = sorted(set(given) - set(owners))
    if unexpected:
        raise ArgumentError(f"unexpected key(s) {unexpected}: the module has no parameter or "
                            "buffer by that name", op="functional_call")
    if strict:
        missing = sorted(set(owners) - set(given))
        if missing:
            raise ArgumentError(f"missing key(s) {missing} (strict=True needs every parameter "
                                "and buffer)", op="functional_call")
    chosen = dict(given)
    if tie_weights:
        by_value = {id(owners[n][3]): t for n, t in given.items()}
        for name, (_, _, _, value) in owners.items():
            if name not in chosen and id(value) in by_value:
                chosen[name] = by_value[id(value)]
    saved = []
    try:
        for name, tensor in chosen.items():
            holder, registry, attr, value = owners[name]
            table = getattr(holder, registry)
            saved.append((table, attr, table[attr]))
            table[attr] = tensor
        return module(*args, **(kwargs or {}))
    finally:
        for table, attr, value in reversed(saved):
            table[attr] = value


def _merged(dicts) -> dict:
    if isinstance(dicts, dict):
        return dict(dicts)
    if not isinstance(dicts, (tuple, list)) or not all(isinstance(d, dict) for d in dicts):
        raise ArgumentError("parameter_and_buffer_dicts must be a dict or a tuple of dicts, "
                            f"got {type(dicts).__name__}", op="functional_call")
    merged: dict = {}
    for d in dicts:
        twice = sorted(set(d) & set(merged))
        if twice:
            raise ArgumentError(f"key(s) {twice} given in more than one dict",
                                op="functional_call")
        merged.update(d)
    return merged


def _split(module, name):
    *path, attr = name.split(".")
    holder = module
    for part in path:
        holder = getattr(holder, part)
    return holder, path, attr
