"""The prefix copy between devices (rill.ops.prefix): the first `count` rows, the rest zero.

It goes through the host like `to_device`'s kernel, so the one function serves every pair of
device kinds (it is registered for cpu and gpu alike). The two helpers are what a partitioned
graph's prefix send and recv do to a buffer (lib/capture/graph_ops.py).
"""
from __future__ import annotations

import numpy as np
from rill.ops import prefix as _declared  # noqa: F401 - the primitive, wherever this loads first
from rill.ops.primitive import register_kernels


def prefix_length(count, device, rows: int) -> int:
    """How many leading rows a count buffer on `device` says are valid (clamped to 0..rows)."""
    return min(max(int(device.backend.to_host(count)), 0), rows)


def padded(host: np.ndarray, shape: tuple) -> np.ndarray:
    """A received prefix (host rows) with zero rows after it, to the full static `shape`."""
    if host.shape == shape:
        return host
    out = np.zeros(shape, host.dtype)
    out[:host.shape[0]] = host
    return out


def _to_device_prefix(x, count, device, source):
    host = source.backend.to_host(x)
    n = prefix_length(count, source, host.shape[0])
    return device.backend.from_host(padded(np.ascontiguousarray(host[:n]), host.shape), device)


register_kernels("cpu", {"to_device_prefix": _to_device_prefix})
register_kernels("gpu", {"to_device_prefix": _to_device_prefix})
