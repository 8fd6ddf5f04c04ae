"""Run under rill-launch: every collective and exchange, checked on every rank."""
import numpy as np

import rill
import rill.distributed as dist

w = dist.init()
n, r = w.size, w.rank
x = rill.tensor([float(r), 1.0, -float(r)])
ranks = np.arange(n, dtype=np.float32)
np.testing.assert_array_equal(dist.all_reduce(x).numpy(), [ranks.sum(), n, -ranks.sum()])
np.testing.assert_allclose(dist.all_reduce(x, "mean").numpy(), [ranks.mean(), 1, -ranks.mean()])
np.testing.assert_array_equal(dist.all_reduce(x, "max").numpy(), [n - 1, 1, 0])
np.testing.assert_array_equal(dist.all_reduce(x, "min").numpy(), [0, 1, -(n - 1)])
np.testing.assert_array_equal(dist.all_reduce(rill.tensor([r]), "sum").numpy(), [ranks.sum()])
half = dist.all_reduce(rill.tensor([0.5 * r], dtype=rill.float16)).numpy()
assert half.dtype == np.float16 and half[0] == 0.5 * ranks.sum()
np.testing.assert_array_equal(dist.broadcast(x, root=n - 1).numpy(), [n - 1, 1, -(n - 1)])
gathered = dist.all_gather(x).numpy()
assert gathered.shape == (n, 3) and (gathered[:, 0] == ranks).all()
part = dist.reduce_scatter(rill.ones(2 * n, 2) * (r + 1)).numpy()
assert part.shape == (2, 2) and (part == ranks.sum() + n).all()
handles = [dist.all_reduce(x, async_op=True), dist.all_gather(x, async_op=True)]
np.testing.assert_array_equal(handles[0].wait().numpy(), dist.all_reduce(x).numpy())
assert handles[1].wait().shape == (n, 3) and handles[1].done()
dist.barrier()
# A ring of sends: each rank sends its rank to the next and receives from the previous.
pending = dist.send(rill.tensor([float(r)]), (r + 1) % n, tag=7, async_op=True)
got = dist.recv(rill.zeros(1), (r - 1) % n, tag=7)
pending.wait()
assert float(got[0]) == (r - 1) % n
dist.barrier(async_op=True).wait()
print(f"collectives ok on {w.name}")
