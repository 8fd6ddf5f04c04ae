"""Run under rill-launch -n 2 --ps 1: the worker sends the ps a request that is not a rill
message (argv[1]: "pickle", a pickled object whose unpickling would run code; "truncated",
a header that promises more than it carries). The ps must refuse it with a DistributedError
and never unpickle it."""
import sys
import time

import numpy as np

import rill
import rill.distributed as dist
from rill import nn
from rill.distributed.ps import REQUEST

w = dist.init()
model = nn.Linear(2, 1)
ps = dist.ParameterServer(model, rill.optim.SGD(model.parameters(), lr=0.1))
if w.role == "ps":
    ps.serve()
    print("the ps served a malformed message without complaint")
    sys.exit(0)


class Evil:
    def __reduce__(self):
        return (print, ("UNPICKLED: the ps ran code it was sent",))


if sys.argv[1] == "pickle":
    w.comm.send(Evil(), 0, tag=REQUEST)  # what a peer that can reach the port could send
else:
    # A plausible header (magic, version 1, kind push, step 0, one entry) cut short.
    head = b"RLPS" + bytes([1, 2, 0, 0]) + (0).to_bytes(8, "little") + (1).to_bytes(4, "little")
    w.comm.Send(np.frombuffer(head + bytes(4), np.uint8), 0, tag=REQUEST)
time.sleep(60)  # the ps's failure stops the job long before this ends
