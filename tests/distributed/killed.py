"""Run under rill-launch -n 3 with a signal name (argv[1]): rank 2 kills itself with it
between two all-reduces; the launcher must name rank 2, its role and the signal."""
import os
import signal
import sys

import rill
import rill.distributed as dist

w = dist.init()
dist.all_reduce(rill.ones(3))
if w.rank == 2:
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
dist.all_reduce(rill.ones(3))  # the others wait here until the job is stopped
print("the second all-reduce completed without rank 2")
