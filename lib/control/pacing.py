"""BLAS threads in a loop: held at one thread once an iteration stalls.

A loop body runs the same small kernels many times in a row (an LSTM step: a 32x256x1024
GEMM, 50 times forward and 50 back). OpenBLAS splits such a GEMM over its threads, and each
call then waits for all of them: on a host whose cores are busy with other processes, a
worker that is not scheduled makes one call last a scheduler time slice (milliseconds)
instead of ~0.1 ms. One thread costs ~1.7x per GEMM on a quiet host, but never waits.

So a loop runs with BLAS's threads until an iteration takes STALL times the body's fastest
iteration so far; from there on, and for the next HOLD_CALLS runs of the same body, BLAS
is held at one thread (kernels/numpy/parallel.py:blas_at_one_thread); then threads are tried
again. Measured (bench/control_flow.py's LSTM step, 2 cores, interleaved in one process):
default threads 343 ms median against 141 held at one thread at load 3.7-5.2; on a quiet
host no iteration stalls and nothing changes. The state lives on the body's graph.
"""
from __future__ import annotations

import math
import time

STALL = 3.0        # an iteration this many times the body's fastest one is a stall,
STALL_MIN_S = 5e-4  # and this long at least (what a descheduled worker costs; tiny bodies'
                    # jitter is no stall)
HOLD_CALLS = 16    # runs of the body held at one BLAS thread after a stall, before retrying


class _Pace:
    __slots__ = ("fastest", "hold")

    def __init__(self):
        self.fastest = math.inf   # the body's fastest iteration with BLAS's threads (s)
        self.hold = 0             # runs left to start held at one thread


class Pacer:
    """`with Pacer(body) as p:` around a loop, `p.tick()` after each iteration."""

    __slots__ = ("pace", "held", "last")

    def __init__(self, body):
        pace = body.__dict__.get("_pace")
        if pace is None:
            pace = body.__dict__["_pace"] = _Pace()
        self.pace, self.held = pace, None

    def __enter__(self) -> "Pacer":
        if self.pace.hold:
            self.pace.hold -= 1
            self._hold()
        self.last = time.perf_counter()
        return self

    def tick(self) -> None:
        now = time.perf_counter()
        took, self.last = now - self.last, now
        if self.held is not None:
            return
        if took > STALL * self.pace.fastest and took > STALL_MIN_S:
            self.pace.hold = HOLD_CALLS
            self._hold()
        elif took < self.pace.fastest:
            self.pace.fastest = took

    def _hold(self) -> None:
        from rill.kernels.numpy.parallel import blas_at_one_thread
        self.held = blas_at_one_thread()
        self.held.__enter__()

    def __exit__(self, *exc) -> None:
        if self.held is not None:
            held, self.held = self.held, None
            held.__exit__(None, None, None)
