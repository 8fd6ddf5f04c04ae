"""Run under rill-launch -n 4 --ps 2 --max-restarts 1 with a checkpoint directory: eager
parameter servers, sync, two workers; an embedding table split by rows over both ps, the
rest placed whole; SGD with momentum, whose slots live on the ps. The chief checkpoints the
ParameterServer (Checkpoint(ps=ps)) every 4 global steps. In the first attempt worker1 dies
(SIGKILL) at global step 10; the second attempt resumes from ckpt-8, trains to step 12 and
not beyond, and ends with the parameters of an uninterrupted run of the same math."""
import os
import signal
import sys

import numpy as np

import rill
import rill.distributed as dist
from rill import nn
from rill.train import Checkpoint, CheckpointManager
from sync_reference import two_worker_sgd  # beside this script

STEPS, KILL_AT = 12, 10
directory = sys.argv[1]
attempt = os.environ["RILL_ATTEMPT"]
w = dist.init()
rill.manual_seed(0)  # every rank builds the same model


def make():
    return nn.Sequential(nn.Embedding(6, 3), nn.Flatten(), nn.Linear(6, 4), nn.Tanh(),
                         nn.Linear(4, 3))


model = make()
initial = make()
initial.load_state_dict(model.state_dict())
opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ps = dist.ParameterServer(model, opt, mode="sync")
manager = CheckpointManager(Checkpoint(ps=ps), directory, max_to_keep=2, every_n_steps=4)
start = manager.restore_latest() or 0  # each ps its share, each worker its copies
print(f"attempt {attempt} starts at step {start}, global step {ps.step}")

if w.role == "ps":
    stats = ps.serve()
    print(f"applied {stats['applied']} steps, ending at global step {ps.step}")
    sys.exit(0)


def batch(i):
    rng = np.random.default_rng(i)
    ids = np.stack([rng.permutation(6)[:2] for _ in range(6)])  # every row, most steps
    ids[:3] = np.arange(6).reshape(3, 2)
    return rill.tensor(ids), rill.tensor(rng.integers(0, 3, size=6))


halves = [slice(0, 3), slice(3, 6)]
mine = halves[w.task]
while True:
    x, y = batch(ps.step)
    ps.pull(rows={"0.weight": x[mine]})
    if ps.step >= STEPS:
        break
    if attempt == "0" and w.task == 1 and ps.step == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)  # a worker dies mid-run
    x, y = batch(ps.step)
    ps.backward(nn.functional.cross_entropy(model(x[mine]), y[mine]))
    if w.chief:
        manager.maybe_save(ps.step)
ps.pull(rows={"0.weight": rill.arange(6)})
final = {name: p.numpy().copy() for name, p in model.named_parameters()}
ps.close()

if w.chief:
    two_worker_sgd(initial, batch, halves, STEPS)  # the same math in one process
    for name, p in initial.named_parameters():
        np.testing.assert_allclose(final[name], p.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    print(f"finished at global step {STEPS}, equal to an uninterrupted run; files "
          f"{sorted(os.listdir(directory))}")
