"""Run under rill-launch --max-restarts 1: the first attempt fails on one rank."""
import os
import sys

import rill
import rill.distributed as dist

w = dist.init()
dist.all_reduce(rill.ones(1))
if os.environ["RILL_ATTEMPT"] == "0" and w.rank == 1:
    sys.exit(3)
dist.barrier()
print(f"attempt {os.environ['RILL_ATTEMPT']} finished")
