"""Run under rill-launch: AllReduce used as PyTorch's DistributedDataParallel is, with
`ddp(x)` and a plain `loss.backward()`, equals one process on the combined batch, and every
replica ends with the same parameters, to the bit. One step accumulates two micro-batches
(two backward calls, as with DDP each averages); a parameter unused by the loss stays
unchanged everywhere."""
import copy

import numpy as np

import rill
import rill.distributed as dist
from rill import nn

w = dist.init()
rill.manual_seed(7 + w.rank)  # different on purpose: AllReduce starts all from the chief's


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
        self.unused = nn.Linear(3, 3)  # never in the loss: no rank's backward reaches it

    def forward(self, x):
        return self.body(x)


model = Net()
ddp = dist.AllReduce(model, bucket_mb=0.0002)  # tiny buckets: several posted during backward
reference = copy.deepcopy(model)               # the chief's start, trained alone below
opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ref_opt = rill.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
assert len(ddp.buckets) > 2, ddp.buckets

data = np.random.default_rng(0)
n = 12
x_all = rill.tensor(data.normal(size=(n, 5)).astype(np.float32))
y_all = rill.tensor(data.integers(0, 3, size=n))
share = n // w.size
mine = slice(w.rank * share, (w.rank + 1) * share)
for step in range(6):
    opt.zero_grad()
    if step == 3:  # two micro-batches of half this rank's share each
        half = share // 2
        for part in (slice(mine.start, mine.start + half), slice(mine.start + half, mine.stop)):
            loss = nn.functional.cross_entropy(ddp(x_all[part]), y_all[part]) / 2
            loss.backward()
    else:
        loss = nn.functional.cross_entropy(ddp(x_all[mine]), y_all[mine])
        loss.backward()  # the DDP habit: no ddp.backward(loss)
    opt.step()
    ref_opt.zero_grad()
    nn.functional.cross_entropy(reference(x_all), y_all).backward()
    ref_opt.step()

for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    if name.startswith("unused"):
        assert p.grad is None or not p.grad.numpy().any(), (name, p.grad)
    np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
for name, p in model.named_parameters():
    gathered = dist.all_gather(p).numpy()
    assert all((g == gathered[0]).all() for g in gathered), name  # bit-identical everywhere
print(f"ddp habit ok on {w.name}: loss.backward() averaged over {w.size} ranks")
