"""rill shortens how long OpenBLAS's idle workers spin (kernels/numpy/parallel.py): at import,
in a process that already used BLAS and limited its threads, without changing a result, the
thread count in force, or the environment; and never over a timeout the user set."""
from __future__ import annotations

import json
import time
import os
import subprocess
import sys

import pytest

threadpoolctl = pytest.importorskip("threadpoolctl")

PROBE = r"""
import ctypes, json, os
import numpy as np
import threadpoolctl
a = np.random.default_rng(0).standard_normal((300, 300))
before = a @ a                                     # OpenBLAS's workers are running already
first = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
with threadpoolctl.threadpool_limits(1, "blas"):
    import rill
    from rill.kernels.numpy import parallel
    inside = [c.get_num_threads() for c in parallel._blas_controllers()]
after = [c.get_num_threads() for c in parallel._blas_controllers()]
openblas = [c for c in parallel._blas_controllers() if c.internal_api == "openblas"]
print(json.dumps({
    "timeouts": [ctypes.CDLL(c.filepath).openblas_thread_timeout() for c in openblas],
    "inside": inside, "after": after, "first": first,
    "same": bool((a @ a == before).all()),
    "env": os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
    "spin": parallel.BLAS_SPIN_LOG2_CYCLES}))
"""


def _probe(**env):
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**environ, **env},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    if not report["timeouts"]:
        pytest.skip("NumPy's BLAS is not an OpenBLAS threadpoolctl drives")
    return report


def test_idle_workers_spin_briefly_and_nothing_else_changes():
    report = _probe()
    assert report["timeouts"] == [report["spin"]] * len(report["timeouts"])
    assert report["inside"] == [1] * len(report["inside"])  # the limit in force stays
    assert report["after"] == report["first"]  # and the count before it, once it ends
    assert report["same"]              # the same GEMM gives the same bits after the restart
    assert report["env"] is None       # not left in the environment for child processes


def test_a_timeout_the_user_set_is_left_alone():
    report = _probe(OPENBLAS_THREAD_TIMEOUT="25")
    assert report["timeouts"] == [25] * len(report["timeouts"])
    assert report["env"] == "25"


def test_a_hold_released_on_another_thread_gives_the_threads_back():
    """A captured step's parallel schedule holds BLAS at one thread on pool threads. OpenBLAS
    ignores a pool thread's request to raise the count again after the main thread lowered
    it, which left every later GEMM of the process on one thread; the main thread now makes
    the restore at its next split (or after the parallel run)."""
    import threading

    import numpy as np

    from rill.kernels.numpy import parallel
    controllers = parallel._blas_controllers()
    if not controllers:
        pytest.skip("no BLAS threadpoolctl can drive")
    before = [c.get_num_threads() for c in controllers]
    if max(before) < 2:
        pytest.skip("BLAS runs one thread here")
    main_in, main_out, other_done = threading.Event(), threading.Event(), threading.Event()

    def other():
        main_in.wait()
        with parallel.blas_at_one_thread():  # entered second, left last: restores
            main_out.wait()
        other_done.set()

    worker = threading.Thread(target=other)
    worker.start()
    with parallel.blas_at_one_thread():    # the main thread lowers the count first
        main_in.set()
        time.sleep(0.05)
    main_out.set()
    other_done.wait(10)
    worker.join()
    parallel.split(lambda lo, hi: None, 4, 1 << 20)  # back on the main thread
    assert [c.get_num_threads() for c in controllers] == before
    assert parallel._blas_pending is None
    a = np.ones((64, 64))
    assert (a @ a == 64).all()
