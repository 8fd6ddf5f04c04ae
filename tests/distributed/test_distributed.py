"""rill.distributed: the world of one in process; real multi-process jobs through
rill-launch (mpiexec of the MPICH wheel), each bounded in time."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import rill
import rill.distributed as dist

SCRIPTS = pathlib.Path(__file__).parent  # the job scripts beside this file


from launching import launch  # noqa: E402


def test_a_process_without_a_launcher_is_a_world_of_one():
    w = dist.init()
    assert (w.rank, w.size, w.role, w.chief, w.name) == (0, 1, "worker", True, "worker0")
    x = rill.tensor([1.0, -2.0])
    np.testing.assert_array_equal(dist.all_reduce(x, "mean").numpy(), x.numpy())
    assert dist.all_gather(x).shape == (1, 2)
    assert dist.all_reduce(x, async_op=True).wait().shape == (2,)
    with pytest.raises(rill.DistributedError, match="another rank"):
        dist.send(x, 0)
    with pytest.raises(rill.ArgumentError, match="reduction"):
        dist.all_reduce(x, "median")
    with pytest.raises(rill.DTypeError, match="mean"):
        dist.all_reduce(rill.tensor([1, 2]), "mean")


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_on_real_processes(n):
    rc, out = launch("-n", n, "--timeout", 30, SCRIPTS / "collectives.py")
    assert rc == 0, out
    for k in range(n):
        assert f"worker{k} | collectives ok on worker{k}" in out


def test_roles_with_parameter_servers_label_the_output():
    rc, out = launch("-n", 3, "--ps", 1, "--timeout", 30, SCRIPTS / "collectives.py")
    assert rc == 0, out
    assert "ps0     | collectives ok on ps0" in out and "worker1 | collectives ok" in out


def test_a_rank_that_never_arrives_gives_a_named_timeout():
    rc, out = launch("-n", 3, "--timeout", 2, SCRIPTS / "stall.py", timeout=50)
    assert rc != 0
    assert "DistributedError" in out and "did not complete within 2 s" in out
    assert "rank 1 (worker1), last seen entering all_reduce (its collective #1" in out


def test_a_failed_job_is_started_again():
    rc, out = launch("-n", 2, "--max-restarts", 1, "--timeout", 30, SCRIPTS / "flaky.py")
    assert rc == 0, out
    assert "starting it again (1 of 1 restarts)" in out
    assert "attempt 1 finished" in out and "attempt 0 finished" not in out


def test_launcher_arguments_are_checked():
    rc, out = launch("-n", 2, "--ps", 2, SCRIPTS / "flaky.py")
    assert rc == 2 and "leaves no worker" in out


@pytest.mark.parametrize("n", [2, 3])
def test_allreduce_training_equals_one_process_on_the_combined_batch(n):
    rc, out = launch("-n", n, "--timeout", 30, SCRIPTS / "allreduce_training.py")
    assert rc == 0, out
    assert out.count("allreduce training ok") == n


def test_allreduce_names_parameters_that_differ_between_ranks():
    rc, out = launch("-n", 2, "--timeout", 30, SCRIPTS / "allreduce_training.py", "mismatch")
    assert rc != 0
    assert "models differ: 2.bias: float32[3] on rank 0, float32[4] on rank 1" in out


def test_sync_parameter_server_without_backups_equals_one_process():
    rc, out = launch("-n", 3, "--ps", 1, "--timeout", 30, SCRIPTS / "ps_training.py", "sync0")
    assert rc == 0, out
    assert out.count("sync ps equals one process") == 2
    assert "ps stats {'applied': 6, 'dropped': 0, 'pushes': 12}" in out


def test_sync_parameter_server_drops_and_counts_a_stragglers_gradients():
    rc, out = launch("-n", 4, "--ps", 1, "--timeout", 30, SCRIPTS / "ps_training.py",
                     "straggler")
    assert rc == 0, out
    stats = eval(out.split("ps stats ")[1].splitlines()[0])  # noqa: S307 - our own print
    assert stats["applied"] == 6 and stats["dropped"] >= 1


def test_async_parameter_server_converges_on_digits():
    rc, out = launch("-n", 3, "--ps", 1, "--timeout", 60, SCRIPTS / "ps_training.py", "async",
                     timeout=180)
    assert rc == 0, out
    assert out.count("async accuracy") == 2


def test_sparse_embedding_updates_touch_only_the_rows_looked_up():
    rc, out = launch("-n", 3, "--ps", 2, "--timeout", 30, SCRIPTS / "ps_training.py", "sparse")
    assert rc == 0, out
    assert "ps0     | sparse ok: rows [1, 5] of [0, 10) changed" in out
    assert "ps1     | sparse ok: rows [17] of [10, 20) changed" in out


def test_a_killed_worker_restarts_from_the_last_checkpoint(tmp_path):
    rc, out = launch("-n", 2, "--max-restarts", 1, "--timeout", 30,
                     SCRIPTS / "fault_tolerance.py", tmp_path / "ckpt", timeout=120)
    assert rc == 0, out
    assert "starting it again (1 of 1 restarts)" in out
    assert "worker0 | attempt 1 starts at step 12" in out  # the chief saved every 4 steps
    assert "finished at step 20, checkpoints ['ckpt-12.rill', 'ckpt-16.rill', 'ckpt-20.rill']" \
        in out


def test_a_stateful_optimizer_updates_table_rows_lazily_on_the_ps():
    rc, out = launch("-n", 2, "--ps", 1, "--timeout", 30, SCRIPTS / "ps_sparse_adam.py")
    assert rc == 0, out
    assert "lazy adam on the ps equals SparseAdam" in out


@pytest.mark.parametrize("value", ["nan", "inf", "-3", "0", "soon"])
def test_a_bad_rill_timeout_is_refused_at_init(value):
    # srun passes rill-launch's settings through the environment, unchecked by the launcher.
    code = ("import rill.distributed as d\n"
            "try:\n    d.init()\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    env = dict(os.environ, RILL_TIMEOUT=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60).stdout
    assert "ArgumentError" in out and "RILL_TIMEOUT must be a positive, finite" in out, out
