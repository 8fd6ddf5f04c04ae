"""Run under rill-launch -n 2 over two hosts of the bed: a ping-pong between rank 0 and
rank 1 for each message size in argv[1] (comma separated), argv[2] round trips each; rank 0
prints `pingpong [[bytes, one-way seconds], ...]` (the median round trip, halved)."""
import json
import sys
import time

import numpy as np

import rill.distributed as dist

w = dist.init()
comm = w.comm
sizes, repeats = [int(s) for s in sys.argv[1].split(",")], int(sys.argv[2])
points = []
for size in sizes:
    buf = np.zeros(size, np.uint8)
    times = []
    for i in range(repeats + 2):  # the first two set up the connection and buffers
        comm.Barrier()
        start = time.perf_counter()
        if w.rank == 0:
            comm.Send(buf, 1)
            comm.Recv(buf, 1)
        else:
            comm.Recv(buf, 0)
            comm.Send(buf, 0)
        if i >= 2:
            times.append(time.perf_counter() - start)
    points.append([size, float(np.median(times)) / 2])
if w.rank == 0:
    print("pingpong " + json.dumps(points))
