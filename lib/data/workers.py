"""Background threads of the input pipeline: prefetch and parallel map.

Each stage is a generator run by the consumer (the training loop). It starts its daemon
threads on the first `next()`, and they feed bounded `Queue`s, so preprocessing overlaps
training but never runs more than a queue's capacity ahead.

Shutdown: the generator's `finally` (the loop ran out, broke early, `close()`, or garbage
collection) closes the queues. A producer blocked on a full queue wakes with `QueueClosed`
and returns; one busy in user code returns as soon as that call does. Upstream iterators are
closed by the thread that runs them (a generator cannot be closed from another thread while
it runs), so the shutdown travels up the pipeline one stage at a time. Nothing here joins a
thread: the `finally` may run inside garbage collection, on any thread, and must not block.

An exception in a thread is handed to the consumer in the element's place and re-raised
there as a `rill.DataError` chained from it, so that elements before it still arrive in
order and iteration never hangs on a dead thread.

>>> ds = rill.data.Dataset.from_arrays([1, 2, 3]).map(lambda x: 10 * x, num_workers=2)
>>> [int(x) for x in ds]
[10, 20, 30]
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import traceback

from ..errors import DataError, strip_framework_frames, user_location
from .queue import Queue, QueueClosed


@contextlib.contextmanager
def opened(iterable):
    """A fresh iterator over `iterable`, closed on the way out if it can be."""
    it = iter(iterable)
    try:
        yield it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def call(fn, element):
    """fn(*element) for a tuple element, else fn(element), as tf.data's map."""
    return fn(*element) if type(element) is tuple else fn(element)


class _Failure:
    """An exception raised in a worker, travelling to the consumer in an element's place."""

    __slots__ = ("error", "where")

    def __init__(self, error: BaseException, where: str):
        self.error = error
        self.where = where

    def reraise(self, op: str):
        error = self.error
        if isinstance(error, DataError) and hasattr(error, "worker_traceback"):
            # Already converted by a stage further up: point it at the user's line instead.
            error.location = user_location()
            raise error
        raise worker_error(error, self.where, op) from error


def worker_error(error: BaseException, where: str, op: str) -> DataError:
    """A DataError for `error`, raised in a worker, with the worker's traceback as text."""
    tb = error.__traceback__
    if os.environ.get("RILL_TRACEBACK", "").lower() != "full":
        tb = strip_framework_frames(tb) or tb
    text = "".join(traceback.format_exception(type(error), error, tb)).rstrip()
    out = DataError(f"{type(error).__name__} raised in a data worker ({where}): {error}\n"
                    f"Worker traceback:\n{text}", op=op)
    out.worker_traceback = text
    return out


def _start(target, *args, name: str) -> threading.Thread:
    # A copy of the consumer's context per thread, so that workers run in the loop's modes
    # (rill.no_grad() around the loop holds inside map functions too).
    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(target, *args), name=name, daemon=True)
    thread.start()
    return thread


# ---- prefetch --------------------------------------------------------------------------------


def prefetch(upstream, capacity: int):
    """The elements of `upstream`, computed by a background thread up to `capacity` ahead."""
    queue = Queue(capacity)
    _start(_produce, upstream, queue, name="rill.data.prefetch")
    try:
        for item in queue:
            if type(item) is _Failure:
                item.reraise("data.prefetch")
            yield item
    finally:
        queue.close()


def _produce(upstream, queue: Queue) -> None:
    try:
        with opened(upstream) as it:
            for element in it:
                queue.put(element)
    except BaseException as e:
        _hand_over(queue, _Failure(e, "prefetch thread"))
    finally:
        queue.close()


def _hand_over(queue: Queue, failure: _Failure) -> None:
    """Queue the failure unless the consumer has gone (then nobody is left to tell)."""
    if queue.closed:
        return
    try:
        queue.put(failure)
    except QueueClosed:
        pass


# ---- parallel map ----------------------------------------------------------------------------


class _Slot:
    """One element's result, filled by whichever worker computed it."""

    __slots__ = ("done", "value", "failure")

    def __init__(self):
        self.done = threading.Event()
        self.value = None
        self.failure: _Failure | None = None


def parallel_map(upstream, fn, num_workers: int):
    """fn over `upstream` on `num_workers` threads, results in input order.

    A feeder thread reads `upstream` and queues one slot per element twice: in input order
    for the consumer, and as work for the workers, so order costs nothing but waiting for
    the slowest element of a window of 2 * num_workers.
    """
    window = 2 * num_workers
    slots = Queue(window)
    work = Queue(window + 1)  # + the slot the consumer is waiting on
    stop = threading.Event()
    _start(_feed, upstream, slots, work, name="rill.data.map-feeder")
    for i in range(num_workers):
        _start(_work, fn, work, stop, name=f"rill.data.map-worker-{i}")
    try:
        for slot in slots:
            slot.done.wait()
            if slot.failure is not None:
                slot.failure.reraise("data.map")
            yield slot.value
    finally:
        stop.set()
        slots.close()
        work.close()


def _feed(upstream, slots: Queue, work: Queue) -> None:
    try:
        with opened(upstream) as it:
            for element in it:
                slot = _Slot()
                slots.put(slot)
                work.put((slot, element))
    except BaseException as e:
        failed = _Slot()
        failed.failure = _Failure(e, "reading the map's input")
        failed.done.set()
        _hand_over(slots, failed)
    finally:
        slots.close()
        work.close()


def _work(fn, work: Queue, stop: threading.Event) -> None:
    where = f"map function {getattr(fn, '__qualname__', type(fn).__name__)}"
    for slot, element in work:
        if stop.is_set():
            return
        try:
            slot.value = call(fn, element)
        except BaseException as e:
            slot.failure = _Failure(e, where)
        slot.done.set()
