"""Who this process is in a distributed job: `rill.distributed.init()`.

Ranks 0 .. P-1 are parameter servers (`rill-launch --ps P`), the others workers; the chief
is the first worker (it checkpoints and logs). Launched without MPI, a process is a world of
one: rank 0, a worker, the chief — so the same script runs on a laptop and under mpiexec.
"""
from __future__ import annotations

import os

from ..errors import ArgumentError, DistributedError

# Set by MPICH's and Open MPI's launchers (and by rill-launch): MPI is worth initializing.
_LAUNCHED_BY = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "RILL_LAUNCHED")


class World:
    """rank, size, role ("ps" or "worker"), chief, the ps and worker ranks, the timeout of
    every blocking exchange (seconds), and the MPI communicator (None for a world of one)."""

    def __init__(self, rank: int, size: int, num_ps: int, timeout: float, comm=None,
                 board=None):
        if not 0 <= num_ps < size:
            raise ArgumentError(f"{num_ps} parameter servers need at least {num_ps + 1} "
                                f"processes (one worker), the job has {size}", op="init")
        self.rank, self.size, self.num_ps = rank, size, num_ps
        self.timeout, self.comm, self.board = timeout, comm, board
        self.ps_ranks = list(range(num_ps))
        self.worker_ranks = list(range(num_ps, size))
        self.role = "ps" if rank < num_ps else "worker"
        self.chief = rank == num_ps
        self.task = rank if rank < num_ps else rank - num_ps  # index within its role

    @property
    def task_name(self) -> str:
        """"ps:0", "worker:1": this process as a task, the prefix of its devices' names
        (`rill.device("ps:0")`, `"worker:1/gpu:0"`)."""
        return f"{self.role}:{self.task}"

    @property
    def name(self) -> str:
        """"ps0", "worker2": how rill-launch labels this rank's output."""
        return f"{self.role}{self.task}"

    def __repr__(self) -> str:
        return (f"<World rank {self.rank} of {self.size}: {self.name}"
                f"{' (chief)' if self.chief else ''}>")


_WORLD: World | None = None


def init(timeout: float | None = None) -> World:
    """Join the job (once per process; later calls return the same World).

    >>> import rill.distributed as dist
    >>> world = dist.init()      # not launched through MPI: a world of one
    >>> world.rank, world.size, world.role, world.chief
    (0, 1, 'worker', True)
    """
    global _WORLD
    if _WORLD is not None:
        return _WORLD
    timeout = float(timeout if timeout is not None else os.environ.get("RILL_TIMEOUT", 300))
    num_ps = int(os.environ.get("RILL_NUM_PS", 0))
    if not any(k in os.environ for k in _LAUNCHED_BY):
        _WORLD = World(0, 1, 0, timeout)
        return _WORLD
    try:
        from mpi4py import MPI
    except ImportError:
        raise DistributedError("this process was started by an MPI launcher but mpi4py is "
                               "not installed: pip install 'rill[distributed]'",
                               op="init") from None
    comm = MPI.COMM_WORLD
    board = None
    path = os.environ.get("RILL_STATUS_FILE")
    if path:
        from .status import StatusBoard
        board = StatusBoard(path, comm.Get_size(), comm.Get_rank())
    _WORLD = World(comm.Get_rank(), comm.Get_size(), num_ps, timeout, comm, board)
    if board is not None:
        import atexit
        atexit.register(board.note, "finished", False)
    return _WORLD


def joined() -> World | None:
    """The World if init() has run in this process, else None."""
    return _WORLD


def world() -> World:
    """The World of this process (init() on first use)."""
    return _WORLD if _WORLD is not None else init()
