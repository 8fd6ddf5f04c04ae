"""Samplers: the order in which a DataLoader reads a map-style dataset, as torch's.

A sampler is an iterable of dataset indices (a BatchSampler: of lists of them), iterated
afresh every epoch. Random samplers draw one seed per epoch from their `generator` (a
`rill.Generator`; rill's default generator when None) when iteration starts, then draw
from a generator of their own, so that `rill.manual_seed` or a seeded generator makes
every epoch's order repeatable, and each epoch differs from the last.

>>> _ = rill.manual_seed(0)
>>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
[[0, 1], [2, 3], [4]]
>>> sorted(RandomSampler(range(4)))
[0, 1, 2, 3]
"""
from __future__ import annotations

import numpy as np

from ...errors import ArgumentError, ShapeError
from ...random import Generator, default_generator
from ...tensor import Tensor


class Sampler:
    """Base class: subclasses define `__iter__` (indices) and, where they know it,
    `__len__`. `data_source` is accepted for torch's signature and not used."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random order of `data_source`'s indices, new every epoch.

    Without `replacement`, each index appears once per permutation; `num_samples` larger
    than the dataset chains fresh permutations (the last one cut short). With
    `replacement`, `num_samples` (default len(data_source)) indices drawn independently.
    `generator`: a `rill.Generator` to draw from (default: rill's default generator).
    """

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None):
        self.data_source = data_source
        self.replacement = _flag(replacement, "replacement", "RandomSampler")
        self._num_samples = None if num_samples is None else \
            _positive(num_samples, "num_samples", "RandomSampler")
        self.generator = check_generator(generator, "RandomSampler")

    @property
    def num_samples(self) -> int:
        # Read at each epoch, as torch: the data source may grow between them.
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, count = len(self.data_source), self.num_samples
        rng = epoch_rng(self.generator)
        if self.replacement:
            yield from rng.integers(n, size=count).tolist()
            return
        for _ in range(count // n if n else 0):
            yield from rng.permutation(n).tolist()
        if n:
            yield from rng.permutation(n)[:count % n].tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given `indices` in a random order, new every epoch."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = check_generator(generator, "SubsetRandomSampler")

    def __iter__(self):
        for i in epoch_rng(self.generator).permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """`num_samples` indices into `weights`, index i drawn with probability proportional to
    weights[i] (which need not sum to 1); without `replacement`, no index twice."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        op = "WeightedRandomSampler"
        self.num_samples = _positive(num_samples, "num_samples", op)
        self.replacement = _flag(replacement, "replacement", op)
        values = np.asarray(weights.numpy() if isinstance(weights, Tensor) else weights,
                            dtype=np.float64)
        if values.ndim != 1:
            raise ShapeError(f"weights should be a 1d sequence, got shape {values.shape}", op=op)
        if not np.isfinite(values).all() or (values < 0).any() or values.sum() <= 0:
            raise ArgumentError("weights must be finite, non-negative and not all zero", op=op)
        if not self.replacement and self.num_samples > np.count_nonzero(values):
            raise ArgumentError(f"cannot draw {self.num_samples} samples without replacement "
                                f"from {np.count_nonzero(values)} non-zero weights", op=op)
        self.weights = values
        self.generator = check_generator(generator, op)

    def __iter__(self):
        p = self.weights / self.weights.sum()
        rng = epoch_rng(self.generator)
        yield from rng.choice(len(p), size=self.num_samples, replace=self.replacement,
                              p=p).tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of `batch_size` consecutive indices from `sampler`; the last list may be
    shorter, unless `drop_last`."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        self.sampler = sampler
        self.batch_size = _positive(batch_size, "batch_size", "BatchSampler")
        self.drop_last = _flag(drop_last, "drop_last", "BatchSampler")

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


# ---- shared by the samplers, random_split and DataLoader ---------------------------------------


def check_generator(generator, op: str):
    """`generator` if it is None or a rill.Generator; a torch.Generator (or anything else)
    is refused with the fix."""
    if generator is None or isinstance(generator, Generator):
        return generator
    kind = type(generator)
    if kind.__module__.split(".")[0] == "torch":
        raise ArgumentError("got a torch.Generator; rill draws from its own generators: pass "
                            "rill.Generator(seed) (or nothing, and seed with rill.manual_seed)",
                            op=op)
    raise ArgumentError(f"generator must be a rill.Generator or None, got a {kind.__name__}",
                        op=op)


def epoch_rng(generator) -> np.random.Generator:
    """A NumPy generator for one epoch, seeded by one draw from `generator` (rill's default
    when None), so that the shared generator advances by the same amount however many
    indices the epoch reads, and on whichever thread it reads them."""
    source = default_generator if generator is None else generator
    with source.lock:
        seed = int(source.numpy_generator().integers(2**63))
    return np.random.default_rng(seed)


def _flag(value, name: str, op: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"{name} should be a boolean value, got {value!r}", op=op)
    return bool(value)


def _positive(value, name: str, op: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ArgumentError(f"{name} should be a positive integer value, got {value!r}", op=op)
    return int(value)
