"""Run under rill-launch --timeout 2: worker1 never reaches the second all-reduce."""
import time

import rill
import rill.distributed as dist

w = dist.init()
dist.all_reduce(rill.ones(3))
if w.rank == 1:
    time.sleep(60)  # stuck in its own work; the others must not hang
dist.all_reduce(rill.ones(3))
