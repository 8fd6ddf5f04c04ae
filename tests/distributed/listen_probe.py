"""Run under rill-launch: each rank says its pid, then waits (at most 60 s) for the file
argv[1] to appear, so that a test can look at the job's sockets while every rank is up."""
import os
import sys
import time

import rill.distributed as dist

w = dist.init()
dist.barrier()
print(f"pid {os.getpid()} ready", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
dist.barrier()
print("probe done")
