"""Dataset: an input pipeline, built from constructors and transformations, run by iterating.

A Dataset is a recipe, not an iterator: each `iter()` (each `for` loop) starts a fresh pass
through every stage. Transformations return new Datasets and leave their input as it was.
`map(fn, num_workers=N)` and `prefetch(n)` run on background threads (see workers.py), so
that preprocessing overlaps the training step, as in the TensorFlow paper's input pipelines.

>>> import numpy as np
>>> ds = rill.data.Dataset.from_arrays(np.arange(10)).map(lambda x: 2 * x).batch(4)
>>> len(ds)
3
>>> [b.tolist() for b in ds]
[[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]]
"""
from __future__ import annotations

import itertools

import numpy as np

from .. import tree
from ..errors import ArgumentError, reports_as
from ..ops.creation import tensor
from ..random import default_generator
from ..tensor import Tensor
from . import stages, timeouts, workers

# Lengths that are not counts, as tf.data's cardinality.
INFINITE = -1
UNKNOWN = -2


class Dataset:
    """A sequence of elements (nested tuples/dicts of tensors, arrays or numbers), one pass
    per `for` loop.

    Build one with `from_tensors`, `from_tensor_slices`, `from_arrays` or `from_generator`;
    chain `map`, `shuffle`, `batch`, `repeat`, `take`, `skip` and `prefetch`.

    >>> ds = rill.data.Dataset.from_tensor_slices({"x": rill.arange(3), "y": rill.ones(3)})
    >>> for element in ds.take(2):
    ...     print(element)
    {'x': tensor(0), 'y': tensor(1.)}
    {'x': tensor(1), 'y': tensor(1.)}
    """

    def __init__(self, make_pass, length: int, name: str, bounded: bool = False):
        # Private: use the constructors. make_pass() returns a generator for one fresh pass.
        # `bounded`: the last stage already waits for each element no longer than the
        # default timeout (a threaded map or prefetch given none), so a loop needs no more.
        self._make_pass = make_pass
        self._length = length
        self._name = name
        self._bounded = bounded

    # ---- constructors ----------------------------------------------------------------------

    @classmethod
    @reports_as("data.from_tensors")
    def from_tensors(cls, *structures) -> "Dataset":
        """One element: the whole of its argument (a tuple of them, if several).

        Leaves that are not tensors become tensors (copies).

        >>> ds = rill.data.Dataset.from_tensors(rill.zeros(2, 3), 7)
        >>> [(x.shape, y) for x, y in ds]
        [((2, 3), tensor(7))]
        """
        leaves, rebuild = tree.flatten(_one(structures, "from_tensors"))
        element = rebuild([_as_tensor(leaf) for leaf in leaves])
        return cls(lambda: iter((element,)), 1, "Dataset.from_tensors(...)")

    @classmethod
    @reports_as("data.from_tensor_slices")
    def from_tensor_slices(cls, *structures) -> "Dataset":
        """Element i: row i of every leaf, in the argument's structure (a tuple, if several).

        Leaves are tensors, NumPy arrays or anything `rill.tensor` takes, and they must all
        have the same size along their first axis. Lists and tuples are structure, not
        data: wrap a list of numbers in `rill.tensor` (or use `from_arrays`).

        >>> images, labels = rill.zeros(5, 2, 2), rill.arange(5)
        >>> ds = rill.data.Dataset.from_tensor_slices(images, labels)
        >>> x, y = next(iter(ds))
        >>> len(ds), x.shape, y
        (5, (2, 2), tensor(0))
        """
        leaves, rebuild = tree.flatten(_one(structures, "from_tensor_slices"))
        if not leaves:
            raise ArgumentError("needs at least one tensor to slice, got an empty structure")
        columns = [_as_tensor(leaf) for leaf in leaves]
        n = _common_size([c.shape for c in columns], "tensor")
        return cls(lambda: stages.rows(columns, rebuild, n), n,
                   f"Dataset.from_tensor_slices(<{len(columns)} tensors of {n}>)")

    @classmethod
    @reports_as("data.from_arrays")
    def from_arrays(cls, *arrays) -> "Dataset":
        """Element i: row i of each array, as NumPy (a tuple of rows, if several arrays).

        The arrays are not copied; the dataset reads them through read-only views. Rows stay
        NumPy until `batch` stacks them into tensors, which keeps NumPy preprocessing in
        `map` cheap.

        >>> import numpy as np
        >>> ds = rill.data.Dataset.from_arrays(np.eye(3), [10, 20, 30])
        >>> [(x.tolist(), int(y)) for x, y in ds.skip(2)]
        [([0.0, 0.0, 1.0], 30)]
        """
        if not arrays:
            raise ArgumentError("needs at least one array")
        try:
            columns = [_read_only(np.asarray(a)) for a in arrays]
        except ValueError as e:  # ragged nested lists
            raise ArgumentError(f"each array must be rectangular: {e}") from None
        n = _common_size([c.shape for c in columns], "array")
        if len(columns) == 1:
            column = columns[0]
            return cls(lambda: iter(column), n, f"Dataset.from_arrays(<1 array of {n}>)")
        return cls(lambda: stages.rows(columns, tuple, n), n,
                   f"Dataset.from_arrays(<{len(columns)} arrays of {n}>)")

    @classmethod
    def from_generator(cls, fn) -> "Dataset":
        """The elements of `fn()`, called again for every pass (so every epoch).

        The length is unknown: `len()` raises TypeError.

        >>> def count():
        ...     yield from range(3)
        >>> ds = rill.data.Dataset.from_generator(count)
        >>> list(ds), list(ds)
        ([0, 1, 2], [0, 1, 2])
        """
        if not callable(fn):
            hint = (" (pass the generator function itself, not a call of it)"
                    if hasattr(fn, "__next__") else "")
            raise ArgumentError("needs a function that returns an iterator, got a "
                                f"{type(fn).__name__}{hint}", op="data.from_generator")
        name = _name(fn)
        return cls(lambda: stages.generated(fn, name), UNKNOWN,
                   f"Dataset.from_generator({name})")

    # ---- transformations -------------------------------------------------------------------

    def map(self, fn, num_workers: int = 0, timeout=timeouts.DEFAULT, *,
            in_flight: int | None = None) -> "Dataset":
        """fn applied to each element; a tuple element is unpacked into arguments.

        With `num_workers > 0`, fn runs on that many background threads, results still in
        input order; this pays off for work that releases the GIL (file and network reads,
        NumPy on large arrays). An exception there is re-raised here as `rill.DataError`
        with the worker's traceback. With 0, fn runs in the loop's own thread and its
        exceptions pass through unchanged.

        `timeout`: seconds the loop waits for each result of a threaded map before raising
        `rill.DataError` naming the function, the element and how long it has run (None or
        inf: no limit; unset: `rill.data.set_default_timeout`'s, read as each pass starts).
        A timeout given with `num_workers=0` runs fn on one background thread, since a call
        in the loop's own thread could not be abandoned.

        `in_flight`: how many elements a threaded map may have taken in ahead of the loop
        (being computed or done and waiting), 2 * num_workers unless given; it bounds both
        the memory held and how far the workers run ahead.

        >>> ds = rill.data.Dataset.from_arrays([1, 2], [3, 4]).map(lambda a, b: a + b)
        >>> [int(v) for v in ds]
        [4, 6]
        """
        if not callable(fn):
            raise ArgumentError(f"fn must be callable, got a {type(fn).__name__}",
                                op="data.map")
        num_workers = _count(num_workers, "num_workers", "data.map", 0)
        timeout, timeout_text = _timeout(timeout, "data.map")
        if in_flight is not None:
            in_flight = _count(in_flight, "in_flight", "data.map", 1)
            if not num_workers:
                raise ArgumentError("in_flight bounds a threaded map; it needs num_workers > 0",
                                    op="data.map")
        if timeout is not timeouts.DEFAULT and timeout is not None and not num_workers:
            num_workers = 1
        if num_workers:
            in_flight_text = "" if in_flight is None else f", in_flight={in_flight}"
            step = f"map({_name(fn)}, num_workers={num_workers}{in_flight_text}{timeout_text})"
            name = f"{self._name}.{step}"
            return self._then(
                lambda: workers.parallel_map(self, fn, num_workers,
                                             timeouts.Limit(timeout, "data.map"), name,
                                             in_flight),
                self._length, step, bounded=timeout is timeouts.DEFAULT)
        return self._then(lambda: stages.mapped(self, fn), self._length, f"map({_name(fn)})")

    def shuffle(self, buffer_size: int, seed: int | None = None) -> "Dataset":
        """Elements in random order, drawn from a buffer of the next `buffer_size` of them.

        A buffer at least as long as the dataset gives a uniform permutation. Each pass is
        shuffled differently; with a `seed`, the sequence of passes is the same every run.
        Without one, each pass's seed is drawn from rill's default generator, so that
        `rill.manual_seed` makes it repeatable too.

        >>> ds = rill.data.Dataset.from_arrays(range(5)).shuffle(5, seed=0)
        >>> sorted(int(x) for x in ds)
        [0, 1, 2, 3, 4]
        """
        buffer_size = _count(buffer_size, "buffer_size", "data.shuffle", 1)
        if seed is not None:
            seed = _count(seed, "seed", "data.shuffle", 0)
        passes = itertools.count()

        def make_pass():
            return stages.shuffled(self, buffer_size, _pass_rng(seed, next(passes)))

        seed_text = "" if seed is None else f", seed={seed}"
        return self._then(make_pass, self._length, f"shuffle({buffer_size}{seed_text})")

    def batch(self, batch_size: int, drop_remainder: bool = False) -> "Dataset":
        """Consecutive elements stacked leaf by leaf into tensors with a new first axis.

        Elements must share their structure and each leaf's shape. The last batch may be
        smaller, unless `drop_remainder`.

        >>> ds = rill.data.Dataset.from_arrays(range(5))
        >>> [b.tolist() for b in ds.batch(2)], len(ds.batch(2, drop_remainder=True))
        ([[0, 1], [2, 3], [4]], 2)
        """
        batch_size = _count(batch_size, "batch_size", "data.batch", 1)
        drop_remainder = bool(drop_remainder)
        n = self._length
        if n >= 0:
            n = n // batch_size if drop_remainder else -(-n // batch_size)
        return self._then(lambda: stages.batched(self, batch_size, drop_remainder), n,
                          f"batch({batch_size}{', drop_remainder=True' * drop_remainder})")

    def repeat(self, count: int | None = None) -> "Dataset":
        """The dataset `count` times over, or forever when count is None.

        Each repetition is a fresh pass (a shuffle upstream reshuffles). Repeating an empty
        dataset forever gives an empty one rather than a hang.

        >>> [int(x) for x in rill.data.Dataset.from_arrays([1, 2]).repeat(2)]
        [1, 2, 1, 2]
        """
        n = self._length
        if count is None:
            n = 0 if n == 0 else (UNKNOWN if n == UNKNOWN else INFINITE)
        else:
            count = _count(count, "count", "data.repeat", 0)
            n = 0 if count == 0 or n == 0 else (n * count if n > 0 else n)
        text = "" if count is None else str(count)
        return self._then(lambda: stages.repeated(self, count), n, f"repeat({text})")

    def take(self, n: int) -> "Dataset":
        """At most the first `n` elements.

        >>> len(rill.data.Dataset.from_arrays([1, 2, 3]).repeat().take(7))
        7
        """
        n = _count(n, "n", "data.take", 0)
        length = self._length
        length = min(length, n) if length >= 0 else (n if length == INFINITE else UNKNOWN)
        return self._then(lambda: stages.taken(self, n), length, f"take({n})")

    def skip(self, n: int) -> "Dataset":
        """All but the first `n` elements.

        >>> [int(x) for x in rill.data.Dataset.from_arrays([1, 2, 3]).skip(1)]
        [2, 3]
        """
        n = _count(n, "n", "data.skip", 0)
        length = max(self._length - n, 0) if self._length >= 0 else self._length
        return self._then(lambda: stages.skipped(self, n), length, f"skip({n})")

    def prefetch(self, n: int, timeout=timeouts.DEFAULT) -> "Dataset":
        """The same elements, computed by a background thread up to `n` elements ahead.

        Put it last, so that the whole pipeline overlaps the training step. `timeout`:
        seconds the loop waits for each element before raising `rill.DataError` naming
        this stage and what its thread is doing (None or inf: no limit; unset:
        `rill.data.set_default_timeout`'s, read as each pass starts).

        >>> [int(x) for x in rill.data.Dataset.from_arrays([1, 2, 3]).prefetch(2)]
        [1, 2, 3]
        """
        n = _count(n, "n", "data.prefetch", 1)
        timeout, timeout_text = _timeout(timeout, "data.prefetch")
        step = f"prefetch({n}{timeout_text})"
        name = f"{self._name}.{step}"
        return self._then(
            lambda: workers.prefetch(self, n, timeouts.Limit(timeout, "data.prefetch"), name),
            self._length, step, bounded=timeout is timeouts.DEFAULT)

    # ---- running ---------------------------------------------------------------------------

    def __iter__(self):
        """A fresh pass, with the default timeout (`rill.data.set_default_timeout`; none
        unless set): `for x in ds` is `for x in ds.iter()`."""
        return self.iter()

    def iter(self, timeout=timeouts.DEFAULT):
        """A fresh pass whose loop waits at most `timeout` seconds for each element.

        Past that, `rill.DataError` names the pipeline, the element, and what the stuck
        stage is doing (which generator or map function, on which element, for how long).
        None or inf: no limit; unset: the default from `rill.data.set_default_timeout`.
        With a limit, the pass runs on a background thread (a stuck call in the loop's own
        thread could not be abandoned), so exceptions from the pipeline arrive as
        `rill.DataError`, as through `prefetch`.

        Background threads, if any, start at the first element and stop when the pass ends,
        the loop breaks, or the iterator is closed or collected. A thread stuck in user code
        when its deadline passes stops as soon as that code returns.

        >>> ds = rill.data.Dataset.from_arrays([1, 2, 3]).map(lambda x: 2 * x)
        >>> [int(x) for x in ds.iter(timeout=10)]
        [2, 4, 6]
        """
        timeout, _ = _timeout(timeout, "data.iter")
        limit = timeouts.Limit(timeout, "data.iter")
        if limit.seconds is None or (limit.by_default and self._bounded):
            return self._make_pass()
        return workers.prefetch(self, 1, limit, f"iterating {self._name}", op="data.iter")

    def __len__(self) -> int:
        if self._length == INFINITE:
            raise TypeError(f"{self._name} is infinite (repeat() without a count), "
                            "so it has no len()")
        if self._length == UNKNOWN:
            raise TypeError(f"the length of {self._name} is unknown before iterating it "
                            "(from_generator), so it has no len()")
        return self._length

    def __bool__(self) -> bool:
        # A recipe is always something: without this, `if ds:` would call __len__ and fail
        # for datasets of unknown length.
        return True

    def __repr__(self) -> str:
        length = {INFINITE: "infinite", UNKNOWN: "unknown"}.get(self._length, self._length)
        return f"<{self._name}, len={length}>"

    def _then(self, make_pass, length: int, step: str, bounded: bool = False) -> "Dataset":
        return Dataset(make_pass, length, f"{self._name}.{step}", bounded)


# ---- helpers -----------------------------------------------------------------------------------


def _one(structures: tuple, method: str):
    if not structures:
        raise ArgumentError(f"{method} needs at least one argument", op=f"data.{method}")
    return structures[0] if len(structures) == 1 else structures


def _as_tensor(leaf) -> Tensor:
    return leaf if isinstance(leaf, Tensor) else tensor(leaf)


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def _common_size(shapes: list, kind: str) -> int:
    """The first-axis size that every shape shares."""
    for shape in shapes:
        if not shape:
            raise ArgumentError(f"slices along the first axis, but a 0-d {kind} has none "
                                f"(shapes {', '.join(map(str, shapes))}); lists and tuples are "
                                "structure here: wrap numbers in rill.tensor, or use from_arrays")
    sizes = [shape[0] for shape in shapes]
    if len(set(sizes)) > 1:
        raise ArgumentError(f"every {kind} needs the same size along the first axis, got "
                            f"sizes {sizes} (shapes {', '.join(map(str, shapes))})")
    return sizes[0]


def _count(value, name: str, op: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ArgumentError(f"{name} must be an int >= {minimum}, got {value!r}", op=op)
    return int(value)


def _timeout(value, op: str) -> tuple:
    """(timeout checked: DEFAULT, None or seconds; its text in the stage's name)."""
    if value is timeouts.DEFAULT:
        return value, ""
    seconds = timeouts.seconds_or_none(value, op)
    return seconds, f", timeout={seconds:g}" if seconds is not None else ", timeout=None"


def _name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _pass_rng(seed: int | None, index: int) -> np.random.Generator:
    if seed is None:
        with default_generator.lock:
            seed, index = int(default_generator.numpy_generator().integers(2**63)), 0
    return np.random.default_rng([seed, index])
