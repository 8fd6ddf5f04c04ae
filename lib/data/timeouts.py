"""Deadlines for the input pipeline: how long anything in rill.data waits.

A timeout is None (wait as long as it takes) or a number of seconds. `inf` is the same as
None; a NaN, a negative number or anything that is not a real number is refused with
`rill.ArgumentError` naming the function it was given to, so that a typo cannot turn into a
wait that never ends (or ends at once). Stages of a Dataset (`map`, `prefetch`, iteration)
count their timeout per element: the loop waits at most that long for each next element,
however long the whole pass takes.

A stage that is given no timeout uses the default, None unless `set_default_timeout` says
otherwise; the default is read when a pass starts, so setting it applies to Datasets built
before.

>>> previous = rill.data.set_default_timeout(30)
>>> rill.data.set_default_timeout(previous)
30.0
"""
from __future__ import annotations

import math
import numbers
import threading
import time

from ..errors import ArgumentError


class _Default:
    """The `timeout` of a stage given none: the default when a pass starts."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()

_default: float | None = None


def set_default_timeout(seconds: float | None) -> float | None:
    """Make `seconds` the timeout of every Dataset stage and loop that is given none
    (`for x in ds`, `map(..., num_workers=N)`, `prefetch(n)`); returns the previous default.

    None (the initial default) or `inf` waits forever. A pass reads the default when it
    starts. With a default set, `for x in ds` runs the pass on a background thread so that
    it can stop waiting for a stuck stage, and errors raised in the pipeline arrive as
    `rill.DataError`, as they do through `prefetch`.

    >>> import threading
    >>> release = threading.Event()
    >>> def stuck():
    ...     yield 1
    ...     release.wait()  # stuck until the example is over
    ...     yield 2
    >>> previous = rill.data.set_default_timeout(0.1)
    >>> try:
    ...     for x in rill.data.Dataset.from_generator(stuck):
    ...         pass
    ... except rill.DataError as e:
    ...     print(e.message.split(";")[0])
    iterating Dataset.from_generator(stuck) timed out after 0.1 s (the default from rill.data.set_default_timeout) waiting for element 1
    >>> _ = rill.data.set_default_timeout(previous)
    >>> release.set()
    """
    global _default
    previous, _default = _default, seconds_or_none(seconds, "data.set_default_timeout")
    return previous


def seconds_or_none(value, op: str, *, allow_zero: bool = False) -> float | None:
    """`value` checked as a timeout for `op`: None for no timeout (None or inf), else seconds.

    Zero is a timeout only where `allow_zero` (a Queue's get or put that must not wait); a
    stage that may never wait could never start its threads' work.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"timeout must be None or a number of seconds, got {value!r}", op=op)
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float: longer than anyone will wait
        return None
    if math.isnan(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        low = ">= 0" if allow_zero else "> 0"
        raise ArgumentError(f"timeout must be None, inf or seconds {low}, got {value!r}",
                            op=op)
    return None if math.isinf(seconds) else seconds


class Limit:
    """A stage's timeout for one pass: `seconds` (None: none) and whether it is the default."""

    __slots__ = ("seconds", "by_default")

    def __init__(self, timeout, op: str):
        self.by_default = timeout is DEFAULT
        self.seconds = _default if self.by_default else seconds_or_none(timeout, op)

    def deadline(self) -> float | None:
        """When a wait that starts now must end (time.monotonic), or None."""
        return None if self.seconds is None else time.monotonic() + self.seconds

    def __str__(self) -> str:
        where = " (the default from rill.data.set_default_timeout)" if self.by_default else ""
        return f"{self.seconds:g} s{where}"


def remaining(deadline: float | None) -> float | None:
    """Seconds until `deadline` (never below 0, never more than a lock wait can take)."""
    if deadline is None:
        return None
    return min(max(deadline - time.monotonic(), 0.0), threading.TIMEOUT_MAX)


def wait(wait_once, deadline: float | None) -> bool:
    """Call `wait_once(seconds or None)` (a Condition's or Event's wait) once; False if the
    deadline had already passed. Long timeouts are waited in pieces a lock accepts."""
    if deadline is None:
        wait_once(None)
        return True
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    wait_once(min(left, threading.TIMEOUT_MAX))
    return True
