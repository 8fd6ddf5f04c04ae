"""Distributed strategies do what the user's code says, or fail saying why (issue 32).

- AllReduce averages on a plain `loss.backward()` (PyTorch DDP's habit), not only through
  `ddp.backward(loss)`: equal to one process on the combined batch, replicas bit-identical.
- A ParameterServer job restarted by `rill-launch --max-restarts` resumes exactly: global
  step, variables and the optimizer's slots (momentum), no step trained twice.
- A ps rank that runs worker code, or ends without serving, fails with a DistributedError
  naming its rank and the fix; a worker that calls serve() too.
Each job is a real rill-launch job, bounded in time."""
from __future__ import annotations

import pathlib
import sys
import time

import numpy as np
import pytest

import rill
import rill.distributed as dist

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
from launching import launch  # noqa: E402

pytest.importorskip("mpi4py", reason="real jobs need mpi4py (pip install 'rill[distributed]')")


def _timed(*args, bound=30):
    start = time.monotonic()
    rc, out = launch(*args, timeout=bound + 30)
    took = time.monotonic() - start
    assert took < bound, f"the job took {took:.0f} s (bound {bound} s):\n{out}"
    return rc, out


# ---- AllReduce: loss.backward() averages -------------------------------------------------

@pytest.mark.parametrize("n", [2, 3])
def test_loss_backward_under_allreduce_equals_one_process_on_the_whole_batch(n):
    rc, out = _timed("-n", n, "--timeout", 20, HERE / "ddp_habit.py")
    assert rc == 0, out
    assert out.count("ddp habit ok") == n, out


def test_allreduce_in_a_world_of_one_hooks_backward_and_refuses_what_it_cannot_average():
    model = rill.nn.Linear(3, 2)
    ddp = dist.AllReduce(model)
    x = rill.ones(4, 3)
    ddp(x).sum().backward()
    alone = rill.nn.Linear(3, 2)
    alone.load_state_dict(model.state_dict())
    alone(x).sum().backward()
    np.testing.assert_array_equal(model.weight.grad.numpy(), alone.weight.grad.numpy())
    step = rill.capture(lambda x: model(x).sum().backward())
    with pytest.raises(rill.DistributedError, match="outside the captured function"):
        step(x)
    # a gradient with history (backward(create_graph=True) through a tanh) is refused
    w = rill.nn.Parameter(rill.ones(2))
    holder = rill.nn.Module()
    holder.w = w
    other = dist.AllReduce(holder)
    try:
        with pytest.raises(rill.DistributedError, match="create_graph=True"):
            rill.tanh(w * 3).sum().backward(create_graph=True)
    finally:
        other.remove()
    ddp.remove()
    model.weight.grad = None
    ddp(x).sum().backward()  # removed: this rank's own gradient, as without AllReduce
    np.testing.assert_array_equal(model.weight.grad.numpy(), alone.weight.grad.numpy())


# ---- ParameterServer: a restarted job resumes exactly --------------------------------------

def test_a_restarted_parameter_server_job_resumes_global_step_and_momentum(tmp_path):
    rc, out = _timed("-n", 4, "--ps", 2, "--max-restarts", 1, "--timeout", 20,
                     HERE / "ps_resume.py", tmp_path)
    assert rc == 0, out
    assert "worker1) was killed by SIGKILL" in out, out
    # every rank of the second attempt starts from ckpt-8, global step 8 included
    assert out.count("attempt 1 starts at step 8, global step 8") == 4, out
    # each ps applies the 4 steps left, not 12 more, and the job ends at step 12
    assert out.count("applied 4 steps, ending at global step 12") == 2, out
    assert "finished at global step 12, equal to an uninterrupted run" in out, out


# ---- roles: a ps serves, a worker trains ------------------------------------------------

def _refused(out):
    return [line.split(" | ", 1)[-1] for line in out.splitlines()
            if "DistributedError: " in line]


@pytest.mark.parametrize("case, says", [
    ("readme_swap", "ParameterServer.backward: a worker's call, and rank 0 (ps0) is a "
                    "parameter server"),
    ("eager_no_serve", "rank 0 (ps0) is a parameter server and its script ended without "
                       "serving: it set up dist.ParameterServer(...) (ps_roles.py:"),
    ("graph_step_on_ps", "calling the replicated step step() is a worker's call, and rank 0 "
                         "(ps0) is a parameter server"),
    ("worker_serves", "ParameterServer.serve runs on parameter servers, and rank 1 (worker0) "
                      "is a worker"),
])
def test_a_ps_running_worker_code_or_a_worker_serving_fails_with_the_fix(case, says):
    rc, out = _timed("-n", 2, "--ps", 1, "--timeout", 20, HERE / "ps_roles.py", case)
    assert rc != 0, out
    errors = _refused(out)
    assert any(says in e for e in errors), out
    assert any("Branch on the role: `if dist.world().role == \"ps\":" in e for e in errors), out
    rank = "rank 1 (worker0)" if case == "worker_serves" else "rank 0 (ps0)"
    assert f"rill-launch: {rank} failed with exit code 1" in out, out


def test_a_workers_optimizer_refuses_to_step_or_be_checkpointed():
    rc, out = _timed("-n", 2, "--ps", 1, "--timeout", 20, HERE / "ps_roles.py",
                     "worker_optimizer")
    assert rc == 0, out
    assert "refused: SGD.step(): optimizer.step() on a worker of a parameter-server job" in out
    assert "refused: SGD.state_dict(): " in out and "Checkpoint(ps=ps)" in out, out
    assert "served until the worker closed; global step 1" in out, out
