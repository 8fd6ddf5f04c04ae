"""One pass of each synchronous pipeline stage, as a generator run by the consumer.

Every stage opens its upstream per pass and closes it on the way out (exhausted, stopped
early, or closed), so that threads further up the pipeline are told to stop. Exceptions
raised here, or by user functions called here, reach the consumer unchanged: they happen in
its own thread, with their real traceback.

>>> from rill.data import stages
>>> list(stages.taken(stages.repeated([1, 2], None), 5))
[1, 2, 1, 2, 1]
"""
from __future__ import annotations

import itertools

from ..errors import DataError
from .collate import collate
from .workers import call, doing, function_name, opened, tracked, watched


def rows(columns: list, rebuild, n: int):
    """Element i is `rebuild` around row i of every column."""
    for i in range(n):
        yield rebuild([column[i] for column in columns])


def generated(fn, name: str):
    """The elements of the iterable that fn() returns."""
    source = fn()
    try:
        iter(source)
    except TypeError:
        raise DataError(f"{name}() returned a {type(source).__name__}, which is not iterable; "
                        "from_generator needs a function returning an iterator",
                        op="data.from_generator") from None
    with opened(source) as it:
        yield from watched(it, f"running generator {name}")


def mapped(upstream, fn):
    name = function_name(fn)
    track = tracked()  # on a pipeline thread: say which call a timeout waited for
    with opened(upstream) as it:
        for index, element in enumerate(it):
            if not track:
                yield call(fn, element)
                continue
            with doing(lambda i=index: f"running map function {name} on element {i}"):
                result = call(fn, element)
            yield result


def shuffled(upstream, buffer_size: int, rng):
    """tf.data's buffer shuffle: each output is drawn uniformly from the next `buffer_size`
    candidates, so a buffer as large as the data gives a uniform permutation."""
    buffer = []
    with opened(upstream) as it:
        for element in it:
            if len(buffer) < buffer_size:
                buffer.append(element)
                continue
            i = rng.integers(buffer_size)
            out, buffer[i] = buffer[i], element
            yield out
    for i in rng.permutation(len(buffer)):
        yield buffer[i]


def batched(upstream, batch_size: int, drop_remainder: bool):
    batch = []
    with opened(upstream) as it:
        for element in it:
            batch.append(element)
            if len(batch) == batch_size:
                full, batch = batch, []
                yield collate(full)
    if batch and not drop_remainder:
        yield collate(batch)


def repeated(upstream, count: int | None):
    for _ in itertools.repeat(None) if count is None else range(count):
        produced = False
        with opened(upstream) as it:
            for element in it:
                produced = True
                yield element
        if count is None and not produced:
            return  # repeating an empty pass forever would hang, not loop


def taken(upstream, n: int):
    if n == 0:
        return  # without opening upstream, which might start threads for nothing
    with opened(upstream) as it:
        # islice stops after n without asking upstream for an (n+1)-th element.
        yield from itertools.islice(it, n)


def skipped(upstream, n: int):
    with opened(upstream) as it:
        yield from itertools.islice(it, n, None)
