"""Carries, operands and results of control flow: nested tuples/lists/dicts of tensors.

Every leaf becomes a tensor (Python numbers are lifted with rill's defaults), and wherever
two structures must agree — a loop body's result and its carry, two branches' results —
a mismatch is named by the leaf's path and its two specs.
"""
from __future__ import annotations

from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor
from ..tree import flatten
from ..capture.signature import leaves_with_paths, structure
from ..ops.creation import as_tensor
from ..dtypes import short_name


def tensor_leaves(obj, op: str, what: str):
    """(tensor leaves, rebuild): every leaf as a Tensor, numbers and bools lifted; a None
    stands for nothing (a scan step with no y) and comes back as None."""
    from .subtrace import Spec
    leaves, rebuild = flatten(obj, is_leaf=lambda o: isinstance(o, (Tensor, Spec)))
    out, where = [], []
    for (path, _), leaf in zip(leaves_with_paths(obj, what), leaves):
        if leaf is None:
            where.append(False)
            continue
        if not isinstance(leaf, (Tensor, Spec)):
            if not isinstance(leaf, (bool, int, float)):
                raise ArgumentError(f"{path} is {type(leaf).__name__}; {op} carries tensors "
                                    "and numbers (in tuples, lists and dicts)", op=op)
            leaf = as_tensor(leaf)
        out.append(leaf)
        where.append(True)

    def rebuild_with_none(new):
        it = iter(new)
        return rebuild([next(it) if present else None for present in where])
    return out, rebuild_with_none


def paths(obj, what: str) -> list:
    return [p for p, _ in leaves_with_paths(obj, what)]


def check_same(expected, got, op: str, expected_name: str, got_name: str) -> None:
    """Raise unless `got` has expected's structure and each leaf's shape and dtype."""
    if structure(expected) != structure(got):
        raise ArgumentError(f"{got_name} has structure {_show(got)} but {expected_name} has "
                            f"{_show(expected)}", op=op)
    for (path, a), (_, b) in zip(leaves_with_paths(expected), leaves_with_paths(got)):
        spec_a, spec_b = _spec(a), _spec(b)
        if spec_a == spec_b:
            continue
        error = DTypeError if spec_a[1] != spec_b[1] else ShapeError
        raise error(f"{got_name}{path} is {_text(spec_b)} but {expected_name}{path} is "
                    f"{_text(spec_a)}", op=op)


def _spec(leaf):
    if leaf is None:
        return None, None
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):  # a Tensor or a Spec
        return tuple(leaf.shape), leaf.dtype
    t = as_tensor(leaf)
    return tuple(t.shape), t.dtype


def _text(spec) -> str:
    if spec[1] is None:
        return "None"
    return f"{short_name(spec[1])}{list(spec[0])}"


def _show(obj) -> str:
    if isinstance(obj, tuple):
        return "(" + ", ".join(_show(v) for v in obj) + ("," if len(obj) == 1 else "") + ")"
    if isinstance(obj, list):
        return "[" + ", ".join(_show(v) for v in obj) + "]"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k!r}: {_show(v)}" for k, v in obj.items()) + "}"
    return "T"
