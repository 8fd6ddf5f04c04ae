"""Loop pacing (lib/control/pacing.py, issue 20, speed): a loop whose iteration stalls (a BLAS
worker not scheduled on a busy host) holds BLAS at one thread for the rest of the loop and
the next HOLD_CALLS runs of the body, then tries threads again; values never change."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import rill
from rill.control import pacing


class Body:
    """Stands for a body graph: the pacer keeps its state in the object's __dict__."""


@pytest.fixture
def clock_and_holds(monkeypatch):
    now = [0.0]
    held = []

    @contextlib.contextmanager
    def fake_hold():
        held.append("enter")
        yield
        held.append("exit")
    import rill.kernels.numpy.parallel as parallel
    monkeypatch.setattr(parallel, "blas_at_one_thread", fake_hold)
    monkeypatch.setattr(pacing.time, "perf_counter", lambda: now[0])
    return now, held


def run_loop(body, now, durations):
    with pacing.Pacer(body) as p:
        for d in durations:
            now[0] += d
            p.tick()


def test_a_stall_holds_the_rest_of_the_loop_and_the_next_runs(clock_and_holds):
    now, held = clock_and_holds
    body = Body()
    run_loop(body, now, [1e-3, 1e-3, 1e-3])          # steady: no hold
    assert held == []
    run_loop(body, now, [1e-3, 10e-3, 1e-3])         # a stall: held from there to the end
    assert held == ["enter", "exit"]
    for _ in range(pacing.HOLD_CALLS):               # the next runs start held
        run_loop(body, now, [1e-3])
    assert held == ["enter", "exit"] * (1 + pacing.HOLD_CALLS)
    run_loop(body, now, [1e-3, 1e-3])                # then threads again
    assert len(held) == 2 * (1 + pacing.HOLD_CALLS)


def test_tiny_bodies_jitter_is_no_stall(clock_and_holds):
    now, held = clock_and_holds
    body = Body()
    run_loop(body, now, [1e-5, 2e-4, 1e-5])          # 20x, but far below STALL_MIN_S
    assert held == []


def test_paced_scan_gives_the_same_values(monkeypatch):
    """A scan held at one thread from its first iteration computes what it computes with
    threads (each GEMM alone is the same product)."""
    x = rill.tensor(np.random.default_rng(0).standard_normal((6, 4, 8)))
    w = rill.tensor(np.random.default_rng(1).standard_normal((8, 8)))

    @rill.capture
    def f(x):
        return rill.scan(lambda c, xt: (rill.tanh(c @ w + xt), c), rill.zeros(4, 8,
                         dtype=rill.float64), x)[1]
    free = f(x).numpy()
    monkeypatch.setattr(pacing, "STALL", 0.0)       # every iteration "stalls"
    monkeypatch.setattr(pacing, "STALL_MIN_S", 0.0)
    np.testing.assert_array_equal(f(x).numpy(), free)
