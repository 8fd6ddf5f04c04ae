"""rill.data: input pipelines that overlap preprocessing with training.

A `Dataset` is built from tensors, arrays or a generator, transformed by chained
methods, and run by a `for` loop; `map(..., num_workers=N)` and `prefetch(n)` run on
background threads that feed a bounded `Queue`.

>>> import numpy as np
>>> images = np.arange(12, dtype=np.float32).reshape(6, 2)
>>> labels = np.arange(6)
>>> ds = (rill.data.Dataset.from_arrays(images, labels)
...       .map(lambda x, y: (x / 10, y), num_workers=2)
...       .shuffle(6, seed=0)
...       .batch(4)
...       .prefetch(2))
>>> len(ds)
2
>>> for x, y in ds:
...     print(x.shape, x.dtype, y.shape)
(4, 2) float32 (4,)
(2, 2) float32 (2,)
"""
from .dataset import Dataset
from .queue import Queue, QueueClosed
from .timeouts import set_default_timeout

__all__ = ["Dataset", "Queue", "QueueClosed", "set_default_timeout"]
