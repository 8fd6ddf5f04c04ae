"""Running a piece of work in a forked child, for the tests of what survives fork(): GNU
OpenMP's threads and rill's pool do not, and a child that waits for them hangs."""
from __future__ import annotations

import os
import time

import pytest


def in_forked_child(work, seconds: float = 20) -> bytes:
    """The bytes `work()` returns, computed in a child of this process; the test fails if
    the child has not finished after `seconds` (it hung)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without pytest's cleanup
        try:
            os.write(write, work())
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + seconds
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    return os.read(read, 64)
