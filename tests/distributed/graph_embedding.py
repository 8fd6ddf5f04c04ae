"""Run under rill-launch -n 4 --ps 2: a sharded embedding over the two ps, captured async
training on two workers (argv[1]: a directory for results).

The model is embedding (rows split over ps:0 and ps:1) -> mean over each bag -> linear (on
ps:0). Every step, each worker checks what its postbox sent and received against what a
lookup must move: per shard, the ids that fall in it (8 bytes each) and a count (8 bytes)
out, those rows (dim * 4 bytes each) and a count back, and their gradient rows out; plus the
linear's weight and bias in and their gradients out. At the end: the loss went down, and
the rows no worker ever looked up are still their initial values on the ps; and the same
step with mode="sync" is refused (sharded tables are async-only for now).
"""
import os
import sys

import rill.distributed as dist

w = dist.init()
out = sys.argv[1]
if w.role == "ps":
    stats = dist.serve()
    with open(os.path.join(out, f"ps{w.task}_imports.txt"), "w") as f:
        f.write("\n".join(sorted(sys.modules)))
    print(f"ps stats {stats}")
    sys.exit(0)

import numpy as np  # noqa: E402 - the ps above must not need anything below

import rill  # noqa: E402
from rill import nn  # noqa: E402
from rill.distributed.graphs.embedding import ShardedEmbedding  # noqa: E402
from rill.distributed.graphs.postbox import postbox  # noqa: E402

NUM, DIM, CLASSES, BAGS, BAG = 40, 8, 3, 6, 4
rill.manual_seed(0)
emb = ShardedEmbedding(NUM, DIM)                  # rows 0-19 on ps:0, 20-39 on ps:1
head = nn.Linear(DIM, CLASSES)
dist.place_on_ps(head, ps_tasks=1)                # the linear on ps:0
assert [str(p.device) for p in emb.shards] == ["ps:0/cpu", "ps:1/cpu"]
initial = [p.numpy().copy() for p in emb.shards]  # host copies keep the initial values
opt = rill.optim.SGD(list(emb.parameters()) + list(head.parameters()), lr=0.5)


@dist.replicate(mode="async")
def step(ids, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(head(emb(ids).mean(1)), y)
    loss.backward()
    opt.step()
    return loss


# Never looked up: row 20 (shard 1's local row 0, where padding entries point) and 30-39.
rows = np.array([r for r in range(30) if r != 20])
rng = np.random.default_rng(7 + w.task)
box = postbox(w)
dense = (DIM * CLASSES + CLASSES) * 4             # the linear's weight and bias, float32
losses = []
for i in range(60):
    y = rng.integers(0, CLASSES, size=BAGS)      # a bag holds rows of its class (row % 3)
    pool = rows[rows < 20] if i % 5 == 4 else rows  # every 5th step: nothing for shard 1
    ids = np.stack([rng.choice(pool[pool % CLASSES == c], size=BAG) for c in y])
    sent, received = box.sent_bytes, box.received_bytes
    losses.append(float(step(rill.tensor(ids), rill.tensor(y))))
    counts = [int(np.sum(ids < 20)), int(np.sum(ids >= 20))]
    want_out = sum(8 * c + 8 + DIM * 4 * c for c in counts) + dense
    want_in = sum(DIM * 4 * c + 8 for c in counts) + dense
    got = (box.sent_bytes - sent, box.received_bytes - received)
    assert got == (want_out, want_in), (i, counts, got, (want_out, want_in))

first, last = np.mean(losses[:10]), np.mean(losses[-10:])
assert last < 0.7 * first, (first, last)
held = dist.fetch(emb)
for k, (lo, p) in enumerate(((0, held["shard0"]), (20, held["shard1"]))):
    now = p.numpy()
    untouched = [r - lo for r in range(lo, lo + 20) if r not in rows]
    np.testing.assert_array_equal(now[untouched], initial[k][untouched], err_msg=f"shard{k}")
    touched = [r - lo for r in rows if lo <= r < lo + 20]
    assert not np.any(np.all(now[touched] == initial[k][touched], axis=1)), f"shard{k}"


@dist.replicate(mode="sync")  # a lookup's ids cannot be averaged: refused, for now
def sync_step(ids, y):
    opt.zero_grad()
    nn.functional.cross_entropy(head(emb(ids).mean(1)), y).backward()
    opt.step()


try:
    sync_step(rill.tensor(ids), rill.tensor(y))
    raise AssertionError("a synchronous step with a sharded lookup was not refused")
except rill.DistributedError as e:
    assert "mode='async'" in str(e), e
print(f"embedding ok {w.name}: loss {first:.3f} -> {last:.3f}, bytes per step checked")
dist.close()
