"""Distributed training over MPI: who this process is (`init`), collectives and
point-to-point exchanges with deadlines, and the `rill-launch` launcher.

>>> import rill.distributed as dist
>>> dist.init().size      # a script run without a launcher is a world of one
1
"""
from ..errors import DistributedError
from .collectives import (Handle, all_gather, all_reduce, barrier, broadcast, recv,
                          reduce_scatter, send)
from .world import World, init, world
from .allreduce import AllReduce
from .ps import ParameterServer
from .graphs import (ShardedEmbedding, close, fetch, global_step, place_on_ps, replicate,
                     serve)

__all__ = ["init", "world", "World", "Handle", "all_reduce", "broadcast", "all_gather",
           "reduce_scatter", "barrier", "send", "recv", "DistributedError", "AllReduce",
           "ParameterServer", "ShardedEmbedding", "place_on_ps", "replicate", "serve", "fetch", "global_step", "close"]
