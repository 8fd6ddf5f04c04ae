"""Random number generators: explicit `Generator` objects and a default one.

>>> import rill
>>> g = rill.Generator(seed=0)
>>> a = rill.randn(3, generator=g)
>>> _ = rill.manual_seed(0)
>>> b = rill.randn(3)
>>> bool((a == b).all())
True
"""
from __future__ import annotations

import threading

import numpy as np


class Generator:
    """A seeded stream of random numbers (PCG64 on the CPU)."""

    def __init__(self, seed: int | None = None):
        self._lock = threading.Lock()
        self.manual_seed(seed)

    def manual_seed(self, seed: int | None) -> "Generator":
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                                 or seed < 0):
            from .errors import ArgumentError
            raise ArgumentError(f"seed must be None or an int >= 0, got {seed!r}",
                                op="manual_seed")
        self.seed = seed
        self._bits = np.random.PCG64(seed)
        self._numpy = np.random.Generator(self._bits)
        return self

    def numpy_generator(self) -> np.random.Generator:
        """The NumPy generator behind it (CPU kernels draw from it under `lock`)."""
        return self._numpy

    @property
    def lock(self) -> threading.Lock:
        return self._lock

    def philox(self, count: int) -> tuple[int, int]:
        """(key, first counter) for a counter-based draw of `count` numbers (the gpu's
        Philox): the counters are reserved, so draws never overlap, and reseeding starts
        the counters over under a key that depends only on the seed."""
        with self._lock:
            state = getattr(self, "_philox_state", None)
            if state is None or state[0] is not self._bits:  # new, or reseeded since
                hi, lo = np.random.SeedSequence(self.seed).generate_state(2, np.uint32)
                key = (int(hi) >> 1) << 32 | int(lo)  # 63 bits: a non-negative int64
                state = self._philox_state = [self._bits, key, 0]
            first = state[2]
            state[2] += count
            return state[1], first

    def get_state(self) -> dict:
        return self._bits.state

    def set_state(self, state: dict) -> None:
        self._bits.state = state

    def __repr__(self) -> str:
        return f"rill.Generator(seed={self.seed})"


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Reseed the default generator, so that rand/randn/... repeat from here on."""
    return default_generator.manual_seed(seed)


# TensorFlow's candidate samplers are rill.random's too, as tf.random has them:
# random_candidates.py, built from ops that import this module, adds them here when it is
# imported (rill's own import does).
