"""Run under rill-launch -n 3 --ps 1 --max-restarts 1 with a checkpoint directory: a captured
sync step (two workers, the variables and their momentum on ps:0), a distributed checkpoint
every 4 steps written by the chief. In the first attempt the chief SIGKILLs the ps before
step 10 (its pid from the launcher's status board); the second attempt restores every task
from ckpt-8 (the ps its shard, each worker the manifest) and runs to step 12. The chief then
checks the parameters against a local eager run of the same math, bit for bit.
"""
import os
import sys

import rill.distributed as dist

w = dist.init()
if w.role == "ps":  # before anything of the model's: a ps imports no user module
    dist.serve()
    sys.exit(0)

import copy  # noqa: E402
import signal  # noqa: E402

import numpy as np  # noqa: E402

import rill  # noqa: E402
from rill import nn  # noqa: E402
from rill.distributed.status import StatusBoard  # noqa: E402
from rill.train import Checkpoint, CheckpointManager  # noqa: E402
from sync_reference import two_worker_sgd  # noqa: E402 - beside this script

STEPS, KILL_BEFORE = 12, 10
directory = sys.argv[1]
attempt = os.environ["RILL_ATTEMPT"]
rill.manual_seed(0)
model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
initial = copy.deepcopy(model)  # local, for the reference run
dist.place_on_ps(model)
opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
manager = CheckpointManager(Checkpoint(model=model, optimizer=opt), directory, max_to_keep=2,
                            every_n_steps=4)
start = manager.restore_latest() or 0  # every worker: the ps restores its shard once
print(f"attempt {attempt} starts at step {start}")


@dist.replicate(mode="sync")
def step(x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def batch(i):
    rng = np.random.default_rng(i)
    return (rill.tensor(rng.normal(size=(8, 5)).astype(np.float32)),
            rill.tensor(rng.integers(0, 3, size=8)))


halves = [slice(0, 4), slice(4, 8)]
for i in range(start, STEPS):
    if attempt == "0" and w.chief and i == KILL_BEFORE:
        ps = StatusBoard(os.environ["RILL_STATUS_FILE"], w.size).read()[w.ps_ranks[0]]
        print(f"killing ps0 (pid {ps.pid}) before step {i}")
        os.kill(ps.pid, signal.SIGKILL)
    x, y = batch(i)
    step(x[halves[w.task]], y[halves[w.task]])
    if w.chief:
        manager.maybe_save(i + 1)

params = dist.fetch(model)
if w.chief:
    two_worker_sgd(initial, batch, halves, STEPS)  # the same math in one process
    for name, p in initial.named_parameters():
        np.testing.assert_array_equal(params[name].numpy(), p.numpy(), err_msg=name)
    print(f"finished at step {STEPS}: the parameters equal an uninterrupted run's bit for bit; "
          f"files {sorted(os.listdir(directory))}")
dist.close()
