"""Run under rill-launch: all-reduce training equals one process on the combined batch."""
import copy
import sys

import numpy as np

import rill
import rill.distributed as dist
from rill import nn

w = dist.init()
rill.manual_seed(100 + w.rank)  # different on purpose: the strategy broadcasts the chief's
model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
if len(sys.argv) > 1 and sys.argv[1] == "mismatch" and w.rank == 1:
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 4))
ddp = dist.AllReduce(model, bucket_mb=0.0002)  # tiny buckets: several in flight at once
reference = copy.deepcopy(model)               # the chief's start, trained alone below
opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ref_opt = rill.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)

data = np.random.default_rng(0)
x_all = rill.tensor(data.normal(size=(12, 5)).astype(np.float32))
y_all = rill.tensor(data.integers(0, 3, size=12))
share = 12 // w.size
mine = slice(w.rank * share, (w.rank + 1) * share)
for step in range(5):
    opt.zero_grad()
    ddp.backward(nn.functional.cross_entropy(model(x_all[mine]), y_all[mine]))
    opt.step()
    ref_opt.zero_grad()
    nn.functional.cross_entropy(reference(x_all), y_all).backward()
    ref_opt.step()
for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
gathered = dist.all_gather(model[0].weight).numpy()
assert all((g == gathered[0]).all() for g in gathered)  # bit-identical on every rank
print(f"allreduce training ok on {w.name}")
