"""default_collate and default_convert: torch.utils.data's rules for turning samples into
batches, producing rill tensors.

These follow PyTorch's documented table, which differs from `rill.data`'s own batching in
three ways a ported program relies on: a Python float becomes float64 (rill.data keeps it
a weak float32), a tuple sample becomes a list of batches, and strings and bytes are kept
as the sequence of them rather than refused.

>>> import numpy as np
>>> batch = default_collate([(np.zeros(2, np.float32), 1, "a"), (np.ones(2, np.float32), 2, "b")])
>>> type(batch).__name__, batch[0].shape, batch[1], batch[2]
('list', (2, 2), tensor([1, 2]), ('a', 'b'))
"""
from __future__ import annotations

import collections.abc
import copy

import numpy as np

from ...dtypes import float64
from ...errors import DataError, Error
from ...ops.creation import as_tensor, tensor
from ...ops.shape import stack
from ...tensor import Tensor

_TEXT = (str, bytes)


def default_collate(batch):
    """One batch from a list of samples, leaf by leaf, as torch's default_collate.

    A tensor or NumPy array leaf is stacked along a new first axis; Python floats become
    a float64 tensor, ints an int64 one, bools a bool one, NumPy scalars keep their dtype;
    strings and bytes stay as the sequence of them. A dict (Mapping) gives the same kind
    of mapping of batches, a namedtuple the same namedtuple, a tuple a *list* of batches
    (as torch), a list a list. Anything else (None, objects, string arrays) raises
    `rill.DataError`, as do samples whose structure or shapes disagree.

    >>> default_collate([{"x": 1.5, "y": [1, 2]}, {"x": 2.5, "y": [3, 4]}])
    {'x': tensor([1.5, 2.5], dtype=float64), 'y': [tensor([1, 3]), tensor([2, 4])]}
    """
    if not isinstance(batch, collections.abc.Sequence) or isinstance(batch, _TEXT):
        raise DataError(f"default_collate takes a list of samples, got a "
                        f"{type(batch).__name__}", op="default_collate")
    if not batch:
        raise DataError("default_collate needs at least one sample", op="default_collate")
    return _collate(batch, "sample")


def _collate(batch, path: str):
    first = batch[0]
    if isinstance(first, Tensor):
        return _stack([_tensor(leaf, first, path) for leaf in batch], path)
    if isinstance(first, np.ndarray):
        if first.dtype.kind in "USOV":
            raise _unsupported(first.dtype, path)
        return _stack([as_tensor(np.asarray(_same(leaf, first, path))) for leaf in batch], path)
    if isinstance(first, np.generic) and first.dtype.kind in "biufc":
        return as_tensor(np.asarray([_same(leaf, first, path) for leaf in batch]))
    if isinstance(first, float):
        return tensor([_same(leaf, first, path) for leaf in batch], dtype=float64)
    if isinstance(first, int):  # bools included: a batch of them is a bool tensor
        return tensor([_same(leaf, first, path) for leaf in batch])
    if isinstance(first, _TEXT):
        return batch
    if isinstance(first, collections.abc.Mapping):
        for i, sample in enumerate(batch):
            if not isinstance(sample, collections.abc.Mapping) or sample.keys() != first.keys():
                raise _mismatch(path, first, sample, i)
        merged = {key: _collate([sample[key] for sample in batch], f"{path}[{key!r}]")
                  for key in first}
        return _rebuild_mapping(first, merged)
    if isinstance(first, collections.abc.Sequence):
        for i, sample in enumerate(batch):
            if not isinstance(sample, collections.abc.Sequence) or len(sample) != len(first):
                raise DataError(f"each element in list of batch should be of equal size: "
                                f"{path} has {len(first)} parts in sample 0 but "
                                f"{_size(sample)} in sample {i}", op="default_collate")
        # Each part's batch is a tuple (strings come back as one, as torch's transpose).
        parts = [_collate(tuple(sample[j] for sample in batch), f"{path}[{j}]")
                 for j in range(len(first))]
        if hasattr(first, "_fields"):  # a namedtuple keeps its type and field names
            return type(first)(*parts)
        if isinstance(first, tuple):
            return parts  # torch gives a list for a tuple sample; programs index it alike
        return _rebuild_sequence(first, parts)
    raise _unsupported(type(first), path)


def default_convert(data):
    """`data` with every NumPy array (and NumPy number) turned into a rill tensor, through
    dicts, namedtuples, tuples and lists; Python numbers and strings stay as they are. The
    collate function of a DataLoader with `batch_size=None`.

    >>> import numpy as np
    >>> default_convert({"x": np.arange(3), "n": 3})
    {'x': tensor([0, 1, 2]), 'n': 3}
    """
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray):
        return data if data.dtype.kind in "USOV" else as_tensor(data)
    if isinstance(data, np.generic):
        return as_tensor(np.asarray(data)) if data.dtype.kind in "biufc" else data
    if isinstance(data, _TEXT):
        return data
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, {k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]  # as torch: a tuple becomes a list
    if isinstance(data, collections.abc.Sequence):
        return _rebuild_sequence(data, [default_convert(d) for d in data])
    return data


# ---- helpers -----------------------------------------------------------------------------------


def _tensor(leaf, first, path: str) -> Tensor:
    return _same(leaf, first, path) if isinstance(leaf, Tensor) else as_tensor(leaf)


def _same(leaf, first, path: str):
    """leaf, if it is the same kind of leaf as the batch's first (a tensor, an array, a
    number); a sample that mixes kinds is a structure error, named."""
    kinds = (Tensor, np.ndarray, np.generic, float, int)
    want = next(k for k in kinds if isinstance(first, k))
    if not isinstance(leaf, want) and not (want in (float, int, np.generic)
                                           and isinstance(leaf, (int, float, np.generic))):
        raise DataError(f"{path} is a {type(first).__name__} in sample 0 but a "
                        f"{type(leaf).__name__} in another sample; default_collate needs "
                        "the same kind of leaf in every sample", op="default_collate")
    return leaf


def _stack(tensors: list, path: str) -> Tensor:
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise DataError(f"{path} has shape {tensors[0].shape} in sample 0 but {t.shape} in "
                            f"sample {i}; stacking needs equal shapes (pad them, e.g. with "
                            "rill.nn.utils.rnn.pad_sequence in a collate_fn)",
                            op="default_collate")
    try:
        return stack(tensors)
    except Error as e:
        raise DataError(f"cannot stack {path}: {e.message}", op="default_collate") from e


def _rebuild_mapping(like, items: dict):
    """A mapping of `like`'s type holding `items`, or a dict if that type cannot be built
    from one (as torch falls back)."""
    if type(like) is dict:
        return items
    if isinstance(like, collections.abc.MutableMapping):
        clone = copy.copy(like)
        clone.update(items)
        return clone
    try:
        return type(like)(items)
    except TypeError:
        return items


def _rebuild_sequence(like, items: list):
    if type(like) is list:
        return items
    try:
        return type(like)(items)
    except TypeError:
        return items


def _size(sample) -> str:
    return str(len(sample)) if isinstance(sample, collections.abc.Sized) else \
        f"a {type(sample).__name__}"


def _mismatch(path: str, first, other, i: int) -> DataError:
    def describe(obj):
        if isinstance(obj, collections.abc.Mapping):
            return f"a mapping with keys {sorted(map(str, obj))}"
        return f"a {type(obj).__name__}"
    return DataError(f"{path} is {describe(first)} in sample 0 but {describe(other)} in "
                     f"sample {i}; default_collate needs equal structures",
                     op="default_collate")


def _unsupported(kind, path: str) -> DataError:
    return DataError(f"default_collate: batch must contain tensors, numpy arrays, numbers, "
                     f"dicts or lists; found {kind} at {path} (convert it in the Dataset, or "
                     "pass a collate_fn that handles it)", op="default_collate")
