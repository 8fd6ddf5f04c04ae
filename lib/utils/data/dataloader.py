"""DataLoader: torch.utils.data's loader, run by a rill.data pipeline.

Each epoch (each `for` loop) is one pass of a `rill.data.Dataset`: a source stage that
yields the sampler's batches of indices, then a `map` that loads and collates each batch,
on `num_workers` threads when asked. The bounded queues, the worker threads, the
read-ahead and the deadlines are rill.data's; this file only says what to compute.

Workers are THREADS, not processes: nothing is pickled or copied into them, they share
the dataset, the model and rill's random generators, and they pay off when loading
releases the GIL (file reads, decoding, NumPy on large arrays). So there is no worker
start-up to amortize and `persistent_workers` changes nothing; the threads of an epoch
stop when its loop ends or breaks.

>>> from rill.utils.data import TensorDataset
>>> ds = TensorDataset(rill.arange(10.0), rill.arange(10))
>>> loader = DataLoader(ds, batch_size=4)
>>> len(loader), [y.tolist() for _, y in loader]
(3, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]])
"""
from __future__ import annotations

import sys
import threading

from ...data import Dataset as Pipeline
from ...data import timeouts, workers
from ...errors import ArgumentError
from .collate import default_collate, default_convert
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler, check_generator

_OP = "DataLoader"
# Fixed once the loader is built, as torch: the index order was derived from them.
_FROZEN = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
           "persistent_workers")


class DataLoader:
    """Batches of a dataset, in the sampler's order, with torch's arguments and meanings.

    - `dataset`: map-style (`__getitem__`/`__len__`; a `__getitems__(indices)` is called
      for a whole batch if it has one) or an `IterableDataset`.
    - `batch_size` (default 1), `drop_last`: `batch_size` samples per batch, the last
      batch shorter unless `drop_last`. `batch_size=None` turns batching off: each sample
      goes through `collate_fn` (default `default_convert`) alone.
    - `shuffle`: a new random order every epoch (a RandomSampler), drawn from `generator`,
      a `rill.Generator` (rill's default generator when None, so `rill.manual_seed` makes
      it repeatable). A torch.Generator is refused. `sampler` / `batch_sampler`: an order
      of your own (each excludes the arguments it replaces, as in torch).
    - `collate_fn`: list of samples -> batch (default `default_collate`).
    - `num_workers`: threads that load and collate batches (0: the loop's own thread).
      With workers, batches still arrive in order; an exception in a worker is re-raised
      at the loop as `rill.DataError` naming the sample index (dataset[i]) that failed and
      carrying the worker's traceback. With 0, the dataset's own exception arrives as it
      was raised, with a note naming the index.
    - `prefetch_factor`: batches each worker may load ahead of the loop (default 2; only
      with num_workers > 0).
    - `timeout`: seconds the loop waits for each batch before a `rill.DataError` says
      which sample was being loaded and for how long (rill.data's deadlines); 0 means no
      limit of the loader's own (`rill.data.set_default_timeout`'s default applies).
    - `worker_init_fn(worker_id)`: called once in each worker thread of every epoch,
      before it loads anything. Threads share rill's generators, so there is no per-worker
      seeding to do.
    - `pin_memory`, `pin_memory_device`, `persistent_workers`, `multiprocessing_context`,
      `in_order`: accepted for torch's programs; they change nothing (batches are made on
      the CPU and copied with `.to(device)` when wanted; threads need no processes to
      keep or start; batches always come in order).
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler=None, batch_sampler=None, num_workers: int = 0, collate_fn=None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True):
        num_workers = _count(num_workers, "num_workers", 0)
        try:  # rill.data's rule (NaN, < 0 and non-numbers refused), but not its None: torch
            #     spells "no limit" 0, and a None here would be a guess between the two
            if timeout is None:
                raise ArgumentError("None", op=_OP)
            timeouts.seconds_or_none(timeout, _OP, allow_zero=True)
        except ArgumentError:
            raise ArgumentError(f"timeout option should be seconds >= 0 (0: no limit of the "
                                f"loader's own), got {timeout!r}", op=_OP) from None
        if prefetch_factor is not None:
            if num_workers == 0:
                raise ArgumentError("prefetch_factor option could only be specified in "
                                    "multiprocessing (threaded) loading: with num_workers > 0",
                                    op=_OP)
            prefetch_factor = _count(prefetch_factor, "prefetch_factor", 1)
        if persistent_workers and num_workers == 0:
            raise ArgumentError("persistent_workers option needs num_workers > 0", op=_OP)
        generator = check_generator(generator, _OP)
        if batch_size is not None:
            batch_size = _count(batch_size, "batch_size", 1)

        if isinstance(dataset, IterableDataset):
            if shuffle:
                raise ArgumentError("DataLoader with IterableDataset: expected unspecified "
                                    f"shuffle option, but got shuffle={shuffle}; shuffle "
                                    "inside the dataset's __iter__", op=_OP)
            if sampler is not None or batch_sampler is not None:
                which = "sampler" if sampler is not None else "batch_sampler"
                raise ArgumentError(f"DataLoader with IterableDataset: expected unspecified "
                                    f"{which} option, but got {which}={sampler or batch_sampler!r}",
                                    op=_OP)
        elif shuffle not in (None, False) and sampler is not None:
            raise ArgumentError("sampler option is mutually exclusive with shuffle", op=_OP)

        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ArgumentError("batch_sampler option is mutually exclusive with "
                                    "batch_size, shuffle, sampler, and drop_last", op=_OP)
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ArgumentError("batch_size=None option disables auto-batching and is "
                                "mutually exclusive with drop_last", op=_OP)

        if sampler is None and not isinstance(dataset, IterableDataset):
            sampler = (RandomSampler(dataset, generator=generator) if shuffle
                       else SequentialSampler(dataset))
        if batch_size is not None and batch_sampler is None and sampler is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn if collate_fn is not None else (
            default_convert if batch_size is None and batch_sampler is None
            else default_collate)
        self.pin_memory = bool(pin_memory)
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = bool(persistent_workers)
        self.in_order = in_order
        self._initialized = True

    def __setattr__(self, name, value):
        if getattr(self, "_initialized", False) and name in _FROZEN:
            raise ArgumentError(f"{name} attribute should not be set after DataLoader is "
                                "initialized; build a new DataLoader", op=_OP)
        super().__setattr__(name, value)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None or (
            isinstance(self.dataset, IterableDataset) and self.batch_size is not None)

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)  # TypeError, as torch, for a dataset without one
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def __iter__(self):
        """One epoch: a fresh pass of the pipeline. The sampler's first batch is taken
        here, on the caller's thread, so a random order is drawn now and in the caller's
        sequence of random draws, not whenever a worker thread gets to it."""
        if isinstance(self.dataset, IterableDataset):
            order = self._iterable_source()
        else:
            order = iter(self.batch_sampler if self.batch_sampler is not None
                         else self.sampler)
            order = _started(order)
        return iter(self._pipeline(order))

    # ---- the pipeline ------------------------------------------------------------------------

    def _pipeline(self, order) -> Pipeline:
        def batches():
            return order
        batches.__name__ = "sampler" if not isinstance(self.dataset, IterableDataset) \
            else type(self.dataset).__name__
        load = _Loader(self)
        timeout = self.timeout if self.timeout > 0 else timeouts.DEFAULT
        in_flight = (self.prefetch_factor * self.num_workers
                     if self.prefetch_factor is not None else None)
        return Pipeline.from_generator(batches).map(load, num_workers=self.num_workers,
                                                    timeout=timeout, in_flight=in_flight)

    def _iterable_source(self):
        """An IterableDataset's samples, in lists of batch_size when batching (read in order
        by the pipeline's source stage)."""
        it = iter(self.dataset)
        if not self._auto_collation:
            yield from (_Read(s) for s in it)
            return
        batch = []
        for sample in it:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield _Read(batch)
                batch = []
        if batch and not self.drop_last:
            yield _Read(batch)


class _Read:
    """What collate_fn takes, already read from an IterableDataset (a sample, or a list of
    them when batching), travelling in place of indices."""

    __slots__ = ("samples",)

    def __init__(self, samples):
        self.samples = samples


class _Loader:
    """The map function: indices (or samples already read) -> collated batch.

    Named by its class in rill.data's timeout messages ("running map function load ...").
    """

    __name__ = "load"

    def __init__(self, loader: DataLoader):
        self.dataset = loader.dataset
        self.collate_fn = loader.collate_fn
        self.auto = loader._auto_collation
        self.worker_init_fn = loader.worker_init_fn if loader.num_workers else None
        self.started = threading.local()

    def __call__(self, item):
        if self.worker_init_fn is not None and not getattr(self.started, "done", False):
            self.started.done = True
            self.worker_init_fn(workers.worker_id() or 0)
        if type(item) is _Read:
            return self.collate_fn(item.samples)
        if not self.auto:
            return self.collate_fn(self._get(item))
        getitems = getattr(self.dataset, "__getitems__", None)
        if callable(getitems):
            samples = self._call(getitems, list(item), item)
        else:
            samples = [self._get(i) for i in item]
        return self.collate_fn(samples)

    def _get(self, index):
        return self._call(self.dataset.__getitem__, index, index)

    def _call(self, fn, arg, index):
        try:
            return fn(arg)
        except Exception as e:  # noqa: BLE001 - named and passed on, never swallowed
            where = f"dataset[{index}]"
            if workers.tracked():
                thread = threading.current_thread().name
                raise workers.worker_error(
                    e, f"{thread}, loading {where}", _OP) from e
            # The loop's own thread: the dataset's exception as it was, as torch with
            # num_workers=0, and a note naming the sample.
            if sys.version_info >= (3, 11):
                e.add_note(f"(raised while DataLoader loaded {where})")
            raise


def _started(order):
    """`order` with its first element already taken (on the calling thread)."""
    try:
        first = next(order)
    except StopIteration:
        return iter(())
    return _chain(first, order)


def _chain(first, rest):
    yield first
    yield from rest


def _count(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "non-negative" if minimum == 0 else "positive"
        raise ArgumentError(f"{name} option should be a {what} integer, got {value!r}",
                            op=_OP)
    return value


def get_worker_info():
    """None, always: torch's per-process worker information has no counterpart, because
    DataLoader workers here are threads sharing one IterableDataset iterator that is read
    once, in order (so an IterableDataset needs no per-worker sharding)."""
    return None
