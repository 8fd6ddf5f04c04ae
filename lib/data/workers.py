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

Deadlines (see timeouts.py): a consumer waits for each element until its stage's deadline,
then raises a `rill.DataError` naming the stage, the element, and what the thread it waited
on is doing. Each pipeline thread records that as it goes (`doing`): which generator or map
function it is running on which element, or which stage it is waiting for, whose own thread
is described in turn. A timed-out stage closes its queues like any other ending; a thread
stuck in user code stays blocked (it does not poll) until that code returns, then stops.
It is a daemon thread, so it never keeps the process alive.

>>> ds = rill.data.Dataset.from_arrays([1, 2, 3]).map(lambda x: 10 * x, num_workers=2)
>>> [int(x) for x in ds]
[10, 20, 30]
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import os
import threading
import time
import traceback

from ..errors import DataError, strip_framework_frames, user_location
from . import timeouts
from .queue import Queue, QueueClosed


@contextlib.contextmanager
def opened(iterable):
    """A fresh iterator over `iterable`, closed on the way out if it can be.

    A Dataset upstream is opened as its bare pass: the default timeout applies to the loop
    over the whole pipeline, not again at every stage inside it."""
    make_pass = getattr(iterable, "_make_pass", None)
    it = make_pass() if make_pass is not None else iter(iterable)
    try:
        yield it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def call(fn, element):
    """fn(*element) for a tuple element, else fn(element), as tf.data's map."""
    return fn(*element) if type(element) is tuple else fn(element)


def function_name(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


# ---- what each thread is doing, for timeout messages ---------------------------------------

_activity: dict = {}  # thread ident -> (describe, then, since): set and cleared by `doing`
_local = threading.local()  # .tracked: this is a pipeline thread, whose activity is read


def tracked() -> bool:
    """Whether this thread is one of the pipeline's: a consumer with a deadline may report
    what it is doing. The loop's own thread is not, and skips the recording."""
    return getattr(_local, "tracked", False)


def worker_id() -> int | None:
    """Which of a threaded map's workers this thread is (0 to num_workers - 1), or None on
    any other thread, so that a map function can do per-worker setup once."""
    return getattr(_local, "worker_id", None)


def watched(it, what: str):
    """`it`, recording '<what> for element i' around each next() on a pipeline thread."""
    return _watched(it, what) if tracked() else it


def _watched(it, what: str):
    for index in itertools.count():
        with doing(lambda i=index: f"{what} for element {i}"):  # never across the yield
            try:
                element = next(it)
            except StopIteration:
                return
        yield element


class doing:
    """`with doing(describe, then):` records that this thread is busy with what
    `describe()` says, and `then()` what holds that up in turn (both called only when a
    timeout elsewhere reports it). Scopes nest; none spans a `yield`, so an entry always
    describes what the thread is doing now."""

    __slots__ = ("describe", "then", "ident", "previous")

    def __init__(self, describe, then=None):
        self.describe, self.then = describe, then

    def __enter__(self):
        self.ident = threading.get_ident()
        self.previous = _activity.get(self.ident)
        _activity[self.ident] = (self.describe, self.then, time.monotonic())

    def __exit__(self, *exc):
        if self.previous is None:
            _activity.pop(self.ident, None)
        else:
            _activity[self.ident] = self.previous


def activity(thread: threading.Thread | None, who: str = "its thread") -> str:
    """'; <who> has been <doing what> for N s[; what holds that up]', or '' when the
    thread is in no recorded step."""
    entry = None if thread is None else _activity.get(thread.ident)
    if entry is None:
        return ""
    describe, then, since = entry
    return (f"; {who} has been {describe()} for {time.monotonic() - since:.1f} s"
            f"{then() if then is not None else ''}")


_END, _LATE = object(), object()  # what `_take` returns for a closed queue, a passed deadline


def _take(queue: Queue, deadline: float | None):
    """The next item of `queue`, or _END once it is closed and drained, or _LATE."""
    try:
        return queue.get(timeout=timeouts.remaining(deadline))
    except QueueClosed:
        return _END
    except DataError:  # the queue's own timeout
        return _LATE


def _timed_out(stage: str, limit: timeouts.Limit, index: int, why: str, op: str) -> DataError:
    error = DataError(f"{stage} timed out after {limit} waiting for element {index}{why}",
                      op=op)
    error.timed_out = True  # says all there is to say: passed on as it is, no traceback
    return error


class _Failure:
    """An exception raised in a worker, travelling to the consumer in an element's place."""

    __slots__ = ("error", "where")

    def __init__(self, error: BaseException, where: str):
        self.error = error
        self.where = where

    def reraise(self, op: str):
        error = self.error
        if isinstance(error, DataError) and (hasattr(error, "worker_traceback")
                                             or hasattr(error, "timed_out")):
            # Converted by a stage further up, or a stage's timeout: point it at the
            # user's line instead.
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
    thread = threading.Thread(target=context.run, args=(_tracked_run, target, *args),
                              name=name, daemon=True)
    thread.start()
    return thread


def _tracked_run(target, *args):
    _local.tracked = True
    target(*args)


# ---- prefetch --------------------------------------------------------------------------------


def prefetch(upstream, capacity: int, limit: timeouts.Limit, stage: str,
             op: str = "data.prefetch"):
    """The elements of `upstream`, computed by a background thread up to `capacity` ahead;
    each waited for until `limit` (`stage` and `op` name the wait in a timeout's error)."""
    queue = Queue(capacity)
    producer = _start(_produce, upstream, queue, name="rill.data.prefetch")
    try:
        for index in itertools.count():
            deadline = limit.deadline()
            with doing(lambda: f"waiting for {stage}", lambda: activity(producer, "whose thread")):
                item = _take(queue, deadline)
            if item is _END:
                return
            if item is _LATE:
                raise _timed_out(stage, limit, index, activity(producer), op)
            if type(item) is _Failure:
                item.reraise(op)
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

    __slots__ = ("index", "done", "value", "failure", "worker")

    def __init__(self, index: int):
        self.index = index
        self.done = threading.Event()
        self.value = None
        self.failure: _Failure | None = None
        self.worker: threading.Thread | None = None  # the one computing it, once started


def parallel_map(upstream, fn, num_workers: int, limit: timeouts.Limit, stage: str,
                 window: int | None = None):
    """fn over `upstream` on `num_workers` threads, results in input order, each waited
    for until `limit`.

    A feeder thread reads `upstream` and queues one slot per element twice: in input order
    for the consumer, and as work for the workers, so order costs nothing but waiting for
    the slowest element of a window of `window` elements (default 2 * num_workers), which
    is also how far the workers may run ahead of the consumer.
    """
    window = window or 2 * num_workers
    slots = Queue(window)
    work = Queue(window + 1)  # + the slot the consumer is waiting on
    stop = threading.Event()
    feeder = _start(_feed, upstream, slots, work, name="rill.data.map-feeder")
    name = function_name(fn)
    for i in range(num_workers):
        _start(_work, fn, name, work, stop, i, name=f"rill.data.map-worker-{i}")
    waiting_for: list = [None]  # the slot the consumer waits on, None while it waits for one

    def state() -> str:
        """What the element the consumer waits for is held up by."""
        slot = waiting_for[0]
        if slot is None:
            return activity(feeder, "its input thread")
        if slot.worker is None:
            return "; every worker is busy with earlier elements"
        return activity(slot.worker, "its worker") or "; its worker has just finished it"

    def waiting(i: int) -> str:
        return f"waiting for element {i} of {stage}"

    try:
        for index in itertools.count():
            deadline = limit.deadline()
            with doing(lambda i=index: waiting(i), state):
                waiting_for[0] = None
                slot = _take(slots, deadline)
                if slot is _END:
                    return
                if slot is not _LATE:
                    waiting_for[0] = slot
                    while not slot.done.is_set():
                        if not timeouts.wait(slot.done.wait, deadline):
                            slot = _LATE
                            break
                if slot is _LATE:
                    raise _timed_out(stage, limit, index, state(), "data.map")
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
            for index, element in enumerate(it):
                slot = _Slot(index)
                slots.put(slot)
                work.put((slot, element))
    except BaseException as e:
        failed = _Slot(-1)
        failed.failure = _Failure(e, "reading the map's input")
        failed.done.set()
        _hand_over(slots, failed)
    finally:
        slots.close()
        work.close()


def _work(fn, name: str, work: Queue, stop: threading.Event, worker: int) -> None:
    _local.worker_id = worker
    where = f"map function {getattr(fn, '__qualname__', name)}"
    me = threading.current_thread()
    for slot, element in work:
        if stop.is_set():
            return
        slot.worker = me
        try:
            with doing(lambda i=slot.index: f"running map function {name} on element {i}"):
                slot.value = call(fn, element)
        except BaseException as e:
            slot.failure = _Failure(e, where)
        slot.done.set()
