"""Run under rill-launch --ps P: parameter-server training in one of four set-ups (argv[1]):
sync0      synchronous, no backups: the same parameters as one process on the combined batch
straggler  synchronous, 1 backup, worker2 slow: its late gradients are dropped and counted
async      asynchronous: converges on the digits task
sparse     an embedding table split by rows over the ps: only looked-up rows change
"""
import copy
import sys
import time

import numpy as np

import rill
import rill.distributed as dist
from rill import nn

setup = sys.argv[1]
w = dist.init()
rill.manual_seed(0)  # every rank builds the same model
data = np.random.default_rng(1)

if setup == "sparse":
    model = nn.Sequential(nn.Embedding(20, 4), nn.Flatten(), nn.Linear(8, 2))
    opt = rill.optim.SGD(model.parameters(), lr=0.5)
    ps = dist.ParameterServer(model, opt, mode="async")
    start = copy.deepcopy(model[0].weight.numpy())
    if w.role == "ps":
        ps.serve()
        lo, hi = ps.ranges["0.weight"][w.rank]
        now = model[0].weight.numpy()
        changed = {int(r) for r in range(lo, hi) if not np.array_equal(now[r], start[r])}
        assert changed == {1, 5, 17} & set(range(lo, hi)), (changed, lo, hi)
        print(f"sparse ok: rows {sorted(changed)} of [{lo}, {hi}) changed")
    else:
        ids = rill.tensor([[1, 5], [17, 1]])
        for _ in range(3):
            ps.pull(rows={"0.weight": ids})
            ps.backward(nn.functional.cross_entropy(model(ids), rill.tensor([0, 1])))
        ps.close()
    sys.exit(0)

if setup == "async":
    from sklearn.datasets import load_digits
    digits = load_digits()
    x_all = rill.tensor((digits.data / 16).astype(np.float32))
    y_all = rill.tensor(digits.target)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
else:
    x_all = rill.tensor(data.normal(size=(12, 5)).astype(np.float32))
    y_all = rill.tensor(data.integers(0, 3, size=12))
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
reference = copy.deepcopy(model)
opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ps = dist.ParameterServer(model, opt, mode="async" if setup == "async" else "sync",
                          backup_workers=1 if setup == "straggler" else 0)
steps = 6
if w.role == "ps":
    stats = ps.serve()
    print(f"ps stats {stats}")
    if setup == "straggler":
        assert stats["dropped"] >= 1 and stats["applied"] == steps, stats
    sys.exit(0)

worker, workers = w.task, len(w.worker_ranks)
if setup == "async":
    rng = np.random.default_rng(10 + worker)
    for _ in range(300):
        ps.pull()
        batch = rill.tensor(rng.integers(0, 1500, size=32))
        ps.backward(nn.functional.cross_entropy(model(x_all[batch]), y_all[batch]))
    ps.pull()
    accuracy = float((model(x_all[1500:]).argmax(-1) == y_all[1500:]).mean())
    assert accuracy > 0.85, accuracy
    print(f"async accuracy {accuracy:.3f}")
else:
    share = 12 // workers
    mine = slice(worker * share, (worker + 1) * share)
    while True:  # until the global step (the ps's count of applied steps) reaches `steps`
        ps.pull()
        if ps.step >= steps:
            break
        loss = nn.functional.cross_entropy(model(x_all[mine]), y_all[mine])
        if setup == "straggler" and worker == 2:
            time.sleep(0.3)
        ps.backward(loss)
    if setup == "sync0":
        ref_opt = rill.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
        for _ in range(steps):
            ref_opt.zero_grad()
            nn.functional.cross_entropy(reference(x_all), y_all).backward()
            ref_opt.step()
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=name)
        print(f"sync ps equals one process on {w.name}")
ps.close()
