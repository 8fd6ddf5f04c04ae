"""Run under rill-launch --max-restarts 1 with a checkpoint directory: worker1 is killed at
step 13 of the first attempt; the second resumes from the chief's latest checkpoint and ends
where an uninterrupted run would."""
import copy
import os
import signal
import sys

import numpy as np

import rill
import rill.distributed as dist
from rill import nn
from rill.train import Checkpoint, CheckpointManager

STEPS = 20
directory = sys.argv[1]
w = dist.init()
rill.manual_seed(0)
model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
initial = copy.deepcopy(model)
opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ckpt = Checkpoint(model=model, optimizer=opt)
manager = CheckpointManager(ckpt, directory, max_to_keep=3, every_n_steps=4)
start = manager.restore_latest() or 0  # every rank reads the chief's latest
print(f"attempt {os.environ['RILL_ATTEMPT']} starts at step {start}")
ddp = dist.AllReduce(model)


def batch(step):
    rng = np.random.default_rng(step)
    return (rill.tensor(rng.normal(size=(8, 5)).astype(np.float32)),
            rill.tensor(rng.integers(0, 3, size=8)))


share = 8 // w.size
mine = slice(w.rank * share, (w.rank + 1) * share)
for step in range(start, STEPS):
    if os.environ["RILL_ATTEMPT"] == "0" and w.rank == 1 and step == 13:
        os.kill(os.getpid(), signal.SIGKILL)  # a worker dies mid-run
    x, y = batch(step)
    opt.zero_grad()
    ddp.backward(nn.functional.cross_entropy(model(x[mine]), y[mine]))
    opt.step()
    if w.chief:
        manager.maybe_save(step + 1)

if w.chief:
    reference, ref_opt = initial, rill.optim.SGD(initial.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        x, y = batch(step)
        ref_opt.zero_grad()
        nn.functional.cross_entropy(reference(x), y).backward()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    for path in manager.checkpoints:  # every file left is whole and loads
        Checkpoint(model=copy.deepcopy(model), optimizer=opt).restore(path)
    print(f"finished at step {STEPS}, checkpoints {[os.path.basename(p) for p in manager.checkpoints]}")
