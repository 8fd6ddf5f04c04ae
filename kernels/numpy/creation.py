"""Creation CPU kernels, and the copy between devices."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _to_device(x, device, source):
    return device.backend.from_host(source.backend.to_host(x), device)


register_kernels("cpu", {
    "full": lambda shape, dtype, device, value: np.full(shape, value, dtype=dtype.storage),
    "empty": lambda shape, dtype, device: np.empty(shape, dtype=dtype.storage),
    "arange": lambda start, stop, step, dtype, device: np.arange(start, stop, step,
                                                                 dtype=dtype.storage),
    "linspace": lambda start, stop, num, endpoint, dtype, device: np.linspace(
        start, stop, num, endpoint=endpoint, dtype=dtype.storage),
    "eye": lambda n, m, k, dtype, device: np.eye(n, m, k, dtype=dtype.storage),
    "to_device": _to_device,
})
