"""Queue: a bounded, blocking, closable FIFO between threads.

The input pipeline's background threads hand elements to the training loop through one, so
that a producer runs ahead by at most `capacity` items. It is public because the same
hand-off is useful in user code (a reader thread feeding a loop).

>>> q = rill.data.Queue(2)
>>> q.put("a"); q.put("b"); q.close()
>>> list(q)
['a', 'b']
"""
from __future__ import annotations

import collections
import threading
import time

from ..errors import ArgumentError, DataError
from . import timeouts


class QueueClosed(DataError):
    """The queue is closed: `put` may add nothing more, `get` found it closed and drained.

    >>> q = rill.data.Queue(1)
    >>> q.close()
    >>> try:
    ...     q.get()
    ... except rill.data.QueueClosed as e:
    ...     print(e.message)
    the queue is closed and drained
    """


class Queue:
    """First in, first out, holding at most `capacity` items.

    `put` blocks while the queue is full and `get` while it is empty, each for at most
    `timeout` seconds when one is given (then `rill.DataError`). `close()` wakes every
    waiting thread: putters raise `QueueClosed`; getters take what is left, then raise
    `QueueClosed`, which is also where `for item in queue` ends.

    A timeout is None or `inf` (wait as long as it takes), or seconds >= 0 (0: do not wait);
    a NaN, a negative number or a non-number raises `rill.ArgumentError` naming the method.

    >>> q = rill.data.Queue(capacity=1)
    >>> q.put(1)
    >>> try:
    ...     q.put(2, timeout=0.01)
    ... except rill.DataError as e:
    ...     print(e.message)
    put timed out after 0.01 s: the queue stayed full (1 of capacity 1)
    >>> q.get(), len(q)
    (1, 0)
    """

    def __init__(self, capacity: int):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ArgumentError(f"capacity must be a positive int, got {capacity!r}",
                                op="data.Queue")
        self.capacity = capacity
        self._items: collections.deque = collections.deque()
        self._closed = False
        # Two conditions on one lock: a put wakes one getter, a get wakes one putter, and
        # close() wakes everyone on both.
        lock = threading.Lock()
        self._not_empty = threading.Condition(lock)
        self._not_full = threading.Condition(lock)

    @property
    def closed(self) -> bool:
        """Whether close() was called (items may still be waiting to be taken)."""
        return self._closed

    def size(self) -> int:
        """How many items wait to be taken."""
        with self._not_empty:
            return len(self._items)

    __len__ = size

    def put(self, item, timeout: float | None = None) -> None:
        """Append `item`, waiting while the queue is full: at most `timeout` seconds (None
        or inf: as long as it takes; 0: not at all), then `rill.DataError`."""
        seconds, deadline = _deadline(timeout, "put")
        with self._not_full:
            while not self._closed and len(self._items) >= self.capacity:
                if not timeouts.wait(self._not_full.wait, deadline):
                    raise DataError(f"put timed out after {seconds:g} s: the queue stayed full "
                                    f"({len(self._items)} of capacity {self.capacity})",
                                    op="data.Queue.put")
            if self._closed:
                raise QueueClosed("put on a closed queue", op="data.Queue.put")
            self._items.append(item)
            self._not_empty.notify()

    def get(self, timeout: float | None = None):
        """Remove and return the oldest item, waiting while the queue is empty: at most
        `timeout` seconds (None or inf: as long as it takes; 0: not at all), then
        `rill.DataError`.

        Raises `QueueClosed` once the queue is closed and drained.
        """
        seconds, deadline = _deadline(timeout, "get")
        with self._not_empty:
            while not self._closed and not self._items:
                if not timeouts.wait(self._not_empty.wait, deadline):
                    raise DataError(f"get timed out after {seconds:g} s: the queue stayed "
                                    f"empty (0 of capacity {self.capacity})", op="data.Queue.get")
            if not self._items:
                raise QueueClosed("the queue is closed and drained", op="data.Queue.get")
            item = self._items.popleft()
            self._not_full.notify()
            return item

    def close(self) -> None:
        """No more puts; wake every waiting thread. Closing twice is harmless."""
        with self._not_empty:
            self._closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()

    def __iter__(self):
        """Take items until the queue is closed and drained."""
        while True:
            try:
                item = self.get()
            except QueueClosed:
                return
            yield item

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"rill.data.Queue(size={len(self._items)}, capacity={self.capacity}{state})"


def _deadline(timeout, method: str) -> tuple:
    """(seconds, time.monotonic() deadline), both None for no timeout."""
    seconds = timeouts.seconds_or_none(timeout, f"data.Queue.{method}", allow_zero=True)
    return seconds, None if seconds is None else time.monotonic() + seconds
