"""Stacking a list of elements into one batch, leaf by leaf.

Elements are nested tuples, lists, namedtuples and dicts (the structures of `rill.tree`)
whose leaves are tensors, NumPy arrays or Python numbers. The batch has the same structure,
each leaf a rill tensor with a new first axis.

>>> from rill.data.collate import collate
>>> import numpy as np
>>> batch = collate([{"x": np.zeros(3), "y": 1}, {"x": np.ones(3), "y": 2}])
>>> batch["x"].shape, batch["y"]
((2, 3), tensor([1, 2]))
"""
from __future__ import annotations

import numpy as np

from ..errors import DataError, Error
from ..ops.creation import as_tensor, tensor
from ..ops.shape import stack
from ..tensor import Tensor

_NUMBERS = (bool, int, float)


def collate(elements: list, path: str = "element"):
    """One batch from equally structured `elements` (`path` names the part, for errors)."""
    first = elements[0]
    if isinstance(first, dict):
        for i, e in enumerate(elements):
            if not isinstance(e, dict) or e.keys() != first.keys():
                raise _mismatch(path, first, e, i)
        return {k: collate([e[k] for e in elements], f"{path}[{k!r}]") for k in first}
    if isinstance(first, (tuple, list)):
        for i, e in enumerate(elements):
            if type(e) is not type(first) or len(e) != len(first):
                raise _mismatch(path, first, e, i)
        parts = [collate([e[i] for e in elements], f"{path}[{i}]") for i in range(len(first))]
        return type(first)(*parts) if hasattr(first, "_fields") else type(first)(parts)
    return _stack(elements, path)


def _stack(leaves: list, path: str) -> Tensor:
    shapes = [leaf.shape if isinstance(leaf, Tensor) else np.shape(leaf) for leaf in leaves]
    for i, shape in enumerate(shapes):
        if shape != shapes[0]:
            raise DataError(f"{path} has shape {shapes[0]} in item 0 of the batch but {shape} "
                            f"in item {i}; batch needs equal shapes (pad or crop in a map first)",
                            op="data.batch")
    try:
        if any(isinstance(leaf, Tensor) for leaf in leaves):
            return stack([as_tensor(leaf) for leaf in leaves])
        if all(type(leaf) in _NUMBERS for leaf in leaves):
            return tensor(leaves)  # Python numbers stay weak: floats become float32
        return tensor(np.stack([np.asarray(leaf) for leaf in leaves]))
    except Error as e:
        raise DataError(f"cannot stack {path} into a tensor: {e.message}",
                        op="data.batch") from e


def _mismatch(path: str, first, other, i: int) -> DataError:
    return DataError(f"{path} is {_describe(first)} in item 0 of the batch but "
                     f"{_describe(other)} in item {i}; batch needs equal structures",
                     op="data.batch")


def _describe(obj) -> str:
    if isinstance(obj, dict):
        return f"a dict with keys {sorted(map(str, obj))}"
    if isinstance(obj, (tuple, list)):
        return f"a {type(obj).__name__} of {len(obj)}"
    return f"a {type(obj).__name__}"
