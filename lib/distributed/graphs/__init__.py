"""Captured graphs across the tasks of a distributed job (the paper's §3.3, §4.4).

A task is a process of a `rill-launch` job ("ps:0", "worker:1"); a device name may start
with one ("ps:0/cpu"), and a variable made on another task's device is held there. Each
worker captures its own training step (between-graph replication); placement keeps the
variables' reads, assigns and optimizer updates on the ps that holds them and the rest on
the worker; partition cuts the graph per device, and a send/recv pair whose ends are on
two tasks goes over MPI (postbox.py). The worker registers each ps's part with that ps once
(registration.py: the saved-graph document, checked like any loaded graph), then asks it to
run each step; the ps (server.py) runs no model code.

    program.py       the worker's side: TaskProgram, replicate(), fetch(), close()
    server.py        the ps's side: serve()
    replicas.py      a ps's part cut into pull / contribute / apply; sync and async replicas
    registration.py  a part as a message, and its checks
    postbox.py       values and control messages over MPI, with deadlines
    placement.py     place_on_ps(): variables over the ps tasks
    embedding.py     ShardedEmbedding: a table split by rows over the ps tasks
    checkpoint.py    save/restore graph ops, run by capture through its handler registry
"""
from . import checkpoint  # noqa: F401 - registers the save/restore graph ops with capture
from .embedding import ShardedEmbedding
from .placement import place_on_ps
from .program import close, fetch, global_step, replicate
from .server import serve

__all__ = ["ShardedEmbedding", "place_on_ps", "replicate", "fetch", "global_step", "close", "serve"]
