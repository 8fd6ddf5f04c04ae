"""Histogram buckets: TensorFlow's default exponential buckets, or NumPy's bin rules."""
from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import ArgumentError


@functools.cache
def tensorflow_limits() -> np.ndarray:
    """TensorFlow's default bucket edges: +-1e-12 growing by 10% up to 1e20, zero between,
    and the largest double at both ends. Fixed edges make steps comparable: the same value
    lands in the same bucket at every step."""
    positive = []
    edge = 1e-12
    while edge < 1e20:
        positive.append(edge)
        edge *= 1.1
    positive.append(np.finfo(np.float64).max)
    return np.array([-v for v in reversed(positive)] + [0.0] + positive)


def buckets(values: np.ndarray, bins, max_bins, op: str):
    """(bucket right edges, counts) of the finite float64 `values`, empty buckets at both
    ends dropped; `bins` is "tensorflow", a bin count, or a NumPy rule name ("auto", "fd",
    ...); at most `max_bins` buckets (neighbours are merged)."""
    if isinstance(bins, str) and bins == "tensorflow":
        limits = tensorflow_limits()
        # bucket i holds (limits[i-1], limits[i]]
        counts = np.bincount(np.searchsorted(limits, values, side="left"),
                             minlength=len(limits)).astype(np.float64)
    else:
        try:
            counts, edges = np.histogram(values, bins=bins)
        except (TypeError, ValueError) as e:
            raise ArgumentError(f"bins must be 'tensorflow', a number of bins or one of "
                                f"NumPy's bin rules ('auto', 'fd', ...), got {bins!r} ({e})",
                                op=op) from None
        limits, counts = edges[1:], counts.astype(np.float64)
    nonzero = np.flatnonzero(counts)
    limits, counts = limits[nonzero[0]:nonzero[-1] + 1], counts[nonzero[0]:nonzero[-1] + 1]
    if max_bins is not None and len(counts) > max_bins:
        group = math.ceil(len(counts) / max_bins)
        pad = -len(counts) % group
        counts = np.concatenate([counts, np.zeros(pad)]).reshape(-1, group).sum(axis=1)
        limits = np.concatenate([limits, np.full(pad, limits[-1])])[group - 1::group]
    return limits, counts
