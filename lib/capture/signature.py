"""What a captured function's cache is keyed by, and the plain words for a retrace.

The key is the arguments' structure, each tensor's shape, dtype, device and requires_grad,
the values of the other arguments, and whether grad mode is on.
"""
from __future__ import annotations

from ..tensor import Tensor


def leaves_with_paths(obj, path: str = ""):
    """[(path, leaf)] through tuples, lists and dicts; path reads like the argument access."""
    if isinstance(obj, (tuple, list)):
        out = []
        for i, v in enumerate(obj):
            out += leaves_with_paths(v, f"{path}[{i}]")
        return out
    if isinstance(obj, dict):
        out = []
        for k, v in obj.items():
            out += leaves_with_paths(v, f"{path}[{k!r}]")
        return out
    return [(path, obj)]


def structure(obj):
    """The nesting of obj with its leaves blanked (part of the key)."""
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, tuple(structure(v) for v in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((k, structure(v)) for k, v in obj.items()))
    return "*"


def leaf_key(leaf):
    if isinstance(leaf, Tensor):
        return ("tensor", leaf.shape, leaf.dtype, leaf.device, leaf.requires_grad)
    try:
        hash(leaf)
    except TypeError:
        return ("object", type(leaf).__name__, id(leaf))
    return ("value", type(leaf), leaf)


def describe_leaf(key) -> str:
    if key[0] == "tensor":
        _, shape, dtype, device, requires_grad = key
        text = f"{dtype}{list(shape)}"
        if str(device) != "cpu":
            text += f" on {device}"
        return text + (" requiring grad" if requires_grad else "")
    if key[0] == "object":
        return f"a {key[1]} object (id {key[2]:#x})"
    return repr(key[2])


def explain(name: str, old, new, arg_names) -> str:
    """Why `new` missed the cache where `old` was traced, in one sentence."""
    old_struct, old_leaves, old_grad = old
    new_struct, new_leaves, new_grad = new
    if old_grad != new_grad:
        return f"{name} is traced again because grad mode is now {'on' if new_grad else 'off'}"
    if old_struct != new_struct or len(old_leaves) != len(new_leaves):
        return f"{name} is traced again because the structure of its arguments changed"
    for (path, a), (_, b) in zip(old_leaves, new_leaves):
        if a != b:
            return (f"{name} is traced again because argument {_readable(path, arg_names)} "
                    f"changed from {describe_leaf(a)} to {describe_leaf(b)}")
    return f"{name} is traced again"


def _readable(path: str, arg_names) -> str:
    # path is "[0][i]..." over (args, kwargs): name the parameter where we can.
    if path.startswith("[0]["):
        rest = path[4:]
        index = int(rest[:rest.index("]")])
        tail = rest[rest.index("]") + 1:]
        name = arg_names[index] if index < len(arg_names) else f"args[{index}]"
        return f"`{name}{tail}`"
    if path.startswith("[1]["):
        rest = path[4:]
        key = rest[:rest.index("]")]
        return f"`{key.strip(chr(39))}{rest[rest.index(']') + 1:]}`"
    return f"`{path}`"
