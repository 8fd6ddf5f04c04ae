"""Run under rill-launch --ps 1: Adam on the ps updates a table row by row (lazily), as
SparseAdam does in one process."""
import copy

import numpy as np

import rill
import rill.distributed as dist
from rill import nn

w = dist.init()
rill.manual_seed(0)
model = nn.Sequential(nn.Embedding(20, 4), nn.Flatten(), nn.Linear(8, 2))
ref = copy.deepcopy(model)
opt = rill.optim.Adam(model.parameters(), lr=0.1)
ps = dist.ParameterServer(model, opt, mode="sync")
ids = rill.tensor([[1, 5], [17, 1]]); y = rill.tensor([0, 1])
if w.role == "ps":
    ps.serve()
else:
    for _ in range(4):
        ps.pull(rows={"0.weight": ids})
        ps.backward(nn.functional.cross_entropy(model(ids), y))
    ps.pull(rows={"0.weight": rill.arange(20)})
    ropt1 = rill.optim.SparseAdam([ref[0].weight], lr=0.1); ropt2 = rill.optim.Adam(ref[2].parameters(), lr=0.1)
    for _ in range(4):
        ropt1.zero_grad(); ropt2.zero_grad()
        nn.functional.cross_entropy(ref(ids), y).backward()
        ropt1.step(); ropt2.step()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)
    print("lazy adam on the ps equals SparseAdam")
    ps.close()
