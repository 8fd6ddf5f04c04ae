"""Run under rill-launch --ps P: captured between-graph training (argv[1] is the set-up,
argv[2] a directory for results):
eager      the eager ParameterServer strategy, sync, 10 steps: parameters to eager.npz
captured   the same step captured (rill.distributed.replicate, sync): to captured.npz
straggler  captured, sync with 1 backup worker, worker2 slow: its contributions dropped
async      captured, async: converges on the digits task
stalled    captured, sync: worker1 never steps, so worker0's second step waits for the ps,
           whose step 0 waits for worker1: worker0's recv gives up at the deadline, naming
           the ps and the key
The ps ranks serve before the script imports anything of the model's (ps_imports.txt lists
the modules a ps has loaded, for the test to check).
"""
import os
import sys

import rill.distributed as dist

w = dist.init()
setup, out = sys.argv[1], sys.argv[2]
if w.role == "ps" and setup != "eager":
    stats = dist.serve()
    with open(os.path.join(out, f"ps{w.task}_imports.txt"), "w") as f:
        f.write("\n".join(sorted(sys.modules)))
    print(f"ps stats {stats}")
    sys.exit(0)

import time  # noqa: E402 - the ps above must not need anything below

import numpy as np  # noqa: E402

import rill  # noqa: E402
from rill import nn  # noqa: E402
import graph_model  # noqa: E402 - the user's own module, which a ps never imports

rill.manual_seed(0)
steps = 10
if setup == "async":
    from sklearn.datasets import load_digits
    digits = load_digits()
    x_all = rill.tensor((digits.data / 16).astype(np.float32))
    y_all = rill.tensor(digits.target)
    model = graph_model.mlp(64, 32, 10)
else:
    data = np.random.default_rng(1)
    x_all = rill.tensor(data.normal(size=(12, 5)).astype(np.float32))
    y_all = rill.tensor(data.integers(0, 3, size=12))
    model = graph_model.mlp(5, 16, 3)

if setup == "eager":
    opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ps = dist.ParameterServer(model, opt, mode="sync")
    if w.role == "ps":
        ps.serve()
        sys.exit(0)
    share = 12 // len(w.worker_ranks)
    mine = slice(w.task * share, (w.task + 1) * share)
    while True:
        ps.pull()
        if ps.step >= steps:
            break
        ps.backward(nn.functional.cross_entropy(model(x_all[mine]), y_all[mine]))
    if w.chief:
        np.savez(os.path.join(out, "eager.npz"),
                 **{k: v.numpy() for k, v in model.named_parameters()})
    ps.close()
    sys.exit(0)

dist.place_on_ps(model)
opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
mode = "async" if setup == "async" else "sync"


@dist.replicate(mode=mode, backup_workers=1 if setup == "straggler" else 0)
def step(x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


if setup == "async":
    rng = np.random.default_rng(10 + w.task)
    for _ in range(300):
        batch = rill.tensor(rng.integers(0, 1500, size=32))
        step(x_all[batch], y_all[batch])
    local = graph_model.mlp(64, 32, 10)
    local.load_state_dict(dist.fetch(model))
    accuracy = float((local(x_all[1500:]).argmax(-1) == y_all[1500:]).mean())
    assert accuracy > 0.85, accuracy
    print(f"async accuracy {accuracy:.3f}")
else:
    share = 12 // len(w.worker_ranks)
    mine = slice(w.task * share, (w.task + 1) * share)
    if setup == "stalled":
        if w.task == 1:
            time.sleep(8)
        else:
            step(x_all[mine], y_all[mine])
            try:
                step(x_all[mine], y_all[mine])  # raises at the deadline
            except dist.DistributedError as e:  # kept whole for the test (output may be cut
                with open(os.path.join(out, "stalled.txt"), "w") as f:  # when the job stops)
                    f.write(str(e))
                raise
    if setup == "straggler":  # until the ps have applied `steps` steps
        while dist.global_step() < steps:
            if w.task == 2:
                time.sleep(0.3)
            step(x_all[mine], y_all[mine])
    else:
        for i in range(steps):
            step(x_all[mine], y_all[mine])
    params = dist.fetch(model)
    if w.chief:
        np.savez(os.path.join(out, f"{setup}.npz"), **{k: v.numpy() for k, v in params.items()})
dist.close()
