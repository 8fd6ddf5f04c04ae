"""Datasets as torch.utils.data defines them: map-style (`__getitem__`, `__len__`) and
iterable-style (`__iter__`), and the wrappers that combine or split them.

>>> ds = TensorDataset(rill.arange(6).reshape(3, 2), rill.tensor([0, 1, 0]))
>>> len(ds), ds[1]
(3, (tensor([2, 3]), tensor(1)))
>>> both = ds + ds
>>> len(both), both[4][1]
(6, tensor(1))
"""
from __future__ import annotations

import bisect
import itertools
import math
import warnings

import numpy as np

from ...errors import ArgumentError, IndexingError, ShapeError
from ...ops.creation import as_tensor
from ...tensor import Tensor
from .sampler import check_generator, epoch_rng


class Dataset:
    """A map-style dataset: subclasses define `__getitem__(index)` and usually
    `__len__()`. `a + b` concatenates two datasets (a ConcatDataset)."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other) -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """An iterable-style dataset: subclasses define `__iter__`. A DataLoader reads it in
    order on one thread (its workers are threads that share it, so there is nothing to
    shard: see DataLoader). `a + b` chains two of them (a ChainDataset)."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other) -> "ChainDataset":
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Sample i is (t[i] for every tensor t): tensors sharing their first dimension.

    NumPy arrays and nested lists are accepted and made tensors once, here.
    """

    def __init__(self, *tensors):
        self.tensors = tuple(t if isinstance(t, Tensor) else as_tensor(t) for t in tensors)
        sizes = [t.shape[0] if t.shape else None for t in self.tensors]
        if not self.tensors or None in sizes or len(set(sizes)) > 1:
            shapes = ", ".join(str(t.shape) for t in self.tensors) or "none"
            raise ShapeError(f"Size mismatch between tensors: needs at least one tensor, all "
                             f"with the same first dimension; got shapes {shapes}",
                             op="TensorDataset")

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """The samples of each map-style dataset in turn; `cumulative_sizes[k]` is the number
    of samples in the first k + 1 of them."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ArgumentError("datasets should not be an empty iterable", op="ConcatDataset")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise ArgumentError("ConcatDataset does not support IterableDataset (use "
                                    "ChainDataset, or IterableDataset + IterableDataset)",
                                    op="ConcatDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        n = len(self)
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise IndexingError(f"index must be an int, got {index!r}", op="ConcatDataset")
        if not -n <= index < n:
            raise IndexingError(f"index {index} is out of range for a ConcatDataset of {n} "
                                "samples", op="ConcatDataset")
        if index < 0:
            index += n
        k = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[k - 1] if k else 0
        return self.datasets[k][index - start]


class ChainDataset(IterableDataset):
    """The samples of each iterable dataset in turn."""

    def __init__(self, datasets):
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise ArgumentError("ChainDataset only supports IterableDataset, got a "
                                    f"{type(d).__name__}", op="ChainDataset")
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset, lengths, generator=None) -> list:
    """Split `dataset` into non-overlapping Subsets of the given `lengths`, its indices
    shuffled by `generator` (a rill.Generator; rill's default generator when None).

    `lengths` are counts summing to len(dataset), or fractions summing to 1: each split
    gets floor(fraction * len(dataset)) and what is left over goes one by one to the
    splits in order, as torch.

    >>> a, b = random_split(range(10), [0.7, 0.3], generator=rill.Generator(0))
    >>> len(a), len(b), sorted(list(a) + list(b)) == list(range(10))
    (7, 3, True)
    """
    generator = check_generator(generator, "random_split")
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(x, float) and 0 <= x <= 1 for x in lengths) and \
            math.isclose(sum(lengths), 1) and sum(lengths) != n:
        counts = [math.floor(n * frac) for frac in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, count in enumerate(counts):
            if count == 0:
                warnings.warn(f"random_split: length of split at index {i} is 0; this "
                              "results in an empty dataset", stacklevel=2)
        lengths = counts
    for x in lengths:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0:
            raise ArgumentError(f"lengths must be non-negative ints, or fractions summing to "
                                f"1; got {lengths!r}", op="random_split")
    if sum(lengths) != n:
        raise ArgumentError(f"Sum of input lengths ({sum(lengths)}) does not equal the length "
                            f"of the input dataset ({n})", op="random_split")
    order = epoch_rng(generator).permutation(n).tolist()
    bounds = list(itertools.accumulate(lengths))
    return [Subset(dataset, order[end - length:end]) for end, length in zip(bounds, lengths)]
