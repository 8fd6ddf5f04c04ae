"""Nested structures of tensors (tuples, lists, dicts): flatten to leaves and back."""
from __future__ import annotations


def flatten(obj, is_leaf=None):
    """(leaves, rebuild) where rebuild(new_leaves) makes the same structure around them."""
    leaves = []

    def walk(o):
        if is_leaf is not None and is_leaf(o):
            leaves.append(o)
            return lambda it: next(it)
        if isinstance(o, (tuple, list)):
            parts = [walk(v) for v in o]
            kind = type(o)
            if kind not in (tuple, list):  # a namedtuple
                return lambda it: kind(*[p(it) for p in parts])
            return lambda it: kind(p(it) for p in parts)
        if isinstance(o, dict):
            keys = list(o)
            parts = [walk(o[k]) for k in keys]
            return lambda it: {k: p(it) for k, p in zip(keys, parts)}
        leaves.append(o)
        return lambda it: next(it)

    build = walk(obj)
    return leaves, lambda new: build(iter(new))
