"""The CPU allocator tuning: on by default on Linux/glibc, off with RILL_CPU_MALLOC=system."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

PROBE = "import rill.cpu_memory as m; print(m.TUNED)"


def _run(env_value):
    env = dict(os.environ)
    env.pop("RILL_CPU_MALLOC", None)
    if env_value is not None:
        env["RILL_CPU_MALLOC"] = env_value
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=env, check=True).stdout.strip()


def test_tuned_by_default_and_not_when_asked():
    assert _run(None) == "True"
    assert _run("system") == "False"


def test_large_buffers_stop_faulting_in_after_reuse():
    # Several large buffers live at once, then freed, again and again (as the ops of a
    # training step): with the tuning the pages are reused; glibc's default returns them to
    # the system and faults them in anew every round.
    code = ("import resource, numpy as np, rill\n"
            "def work():\n"
            "    live = [np.ones(n, np.float32) for n in (2_000_000, 3_000_000, 5_000_000)]\n"
            "for _ in range(3): work()\n"
            "r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
            "for _ in range(10): work()\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)")
    faults = {}
    for mode in (None, "system"):
        env = dict(os.environ)
        env.pop("RILL_CPU_MALLOC", None)
        if mode:
            env["RILL_CPU_MALLOC"] = mode
        faults[mode] = int(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                          text=True, env=env, check=True).stdout)
    assert faults[None] * 10 < faults["system"], faults
