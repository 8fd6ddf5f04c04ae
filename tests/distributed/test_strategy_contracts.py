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
