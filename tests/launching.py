"""Starting a real rill-launch job from a test: the environment cleared of anything a
cluster's resource manager (or an enclosing job) would set, and a bound on time."""
from __future__ import annotations

import os
import subprocess
import sys

# Set by a cluster's resource manager or by hand: they would spread a job over hosts.
CLUSTER = ("PMI_", "RILL_", "HYDRA_", "SLURM_", "PBS_", "LSB_", "PE_HOSTFILE", "UCX_", "FI_")


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(CLUSTER)}


def command(*args) -> list:
    return [sys.executable, "-m", "rill.distributed.launch", *map(str, args)]


def launch(*args, timeout=120):
    """rill-launch ARGS; returns (exit code, combined output)."""
    proc = subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout,
                          env=clean_env())
    return proc.returncode, proc.stdout + proc.stderr
