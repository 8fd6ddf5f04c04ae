"""Who this process is in a distributed job: `rill.distributed.init()`.

Ranks 0 .. P-1 are parameter servers (`rill-launch --ps P`), the others workers; the chief
is the first worker (it checkpoints and logs). Launched without MPI, a process is a world of
one: rank 0, a worker, the chief — so the same script runs on a laptop and under mpiexec.

Slurm. A process that Slurm's `srun` started as one task of a job step (SLURM_STEP_ID and
SLURM_PROCID set; a batch script or an salloc shell has no step id, and stays a world of one)
joins the step's tasks through MPI, rank SLURM_PROCID of SLURM_NTASKS. MPI learns the other
tasks from srun's process-management interface, which srun wires only when asked: with the
MPICH wheel that is PMI-2, `srun --mpi=pmi2` (or SLURM_MPI_TYPE=pmi2, or MpiDefault=pmi2 in
slurm.conf; the wheel has no PMIx). A step of several tasks without it fails at init() with
that fix rather than run every task as its own rank 0. rill-launch's settings come from the
environment, which srun passes on: RILL_NUM_PS (how many of the ranks are parameter servers,
default 0) and RILL_TIMEOUT (seconds, default DEFAULT_TIMEOUT_S), e.g.

    RILL_NUM_PS=1 srun --mpi=pmi2 -n 4 python train.py

Inside an allocation, `rill-launch` itself starts the ranks through srun (see launch.py).
"""
from __future__ import annotations

import os

from ..devices import set_this_task
from ..errors import ArgumentError, DistributedError

# Set by MPICH's and Open MPI's launchers, by srun's PMI-2 and PMIx plugins, and by
# rill-launch: MPI can find the job's other processes, so it is worth initializing.
_LAUNCHED_BY = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "RILL_LAUNCHED")
# The fix, when the tasks srun started have no way to find each other.
# How long a blocking exchange waits for the ranks it needs before it fails naming them
# (rill-launch --timeout; RILL_TIMEOUT): long enough for a rank's own work between two
# exchanges (an evaluation, a checkpoint) on the models rill trains, short enough that a
# stuck rank is named within a minute at a terminal.
DEFAULT_TIMEOUT_S = 60.0
_SRUN_FIX = ("start it with srun --mpi=pmi2 (or export SLURM_MPI_TYPE=pmi2, or set "
             "MpiDefault=pmi2 in slurm.conf): the MPICH wheel that rill[distributed] installs "
             "reaches srun's tasks through PMI-2")


def _timeout(given) -> float:
    """The exchanges' timeout: `given`, else RILL_TIMEOUT (srun passes rill-launch's), else the
    default; positive finite seconds, as rill-launch --timeout checks them."""
    import math
    where = "init(timeout=...)" if given is not None else "RILL_TIMEOUT"
    raw = given if given is not None else os.environ.get("RILL_TIMEOUT", DEFAULT_TIMEOUT_S)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ArgumentError(f"{where} must be a positive, finite number of seconds, got "
                            f"{raw!r}", op="init")
    return value


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
        self.shutdown_comm = None  # init's duplicate of comm for the barrier at exit
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
    """Join the job (once per process; later calls return the same World): the one
    rill-launch or mpiexec started, or the Slurm job step srun started (module docstring).

    >>> import rill.distributed as dist
    >>> world = dist.init()      # not launched through MPI: a world of one
    >>> world.rank, world.size, world.role, world.chief
    (0, 1, 'worker', True)
    """
    global _WORLD
    if _WORLD is not None:
        return _WORLD
    timeout = _timeout(timeout)
    num_ps = int(os.environ.get("RILL_NUM_PS", 0))
    task = srun_task()
    if not any(k in os.environ for k in _LAUNCHED_BY):
        if task is not None and task[1] > 1:
            raise DistributedError(f"srun started this process as task {task[0]} of {task[1]} "
                                   f"without an MPI process-management interface, so the "
                                   f"tasks cannot find each other: {_SRUN_FIX}", op="init")
        _WORLD = World(0, 1, 0, timeout)
        set_this_task(_WORLD.task_name)
        return _WORLD
    try:
        from mpi4py import MPI
    except ImportError:
        raise DistributedError("this process was started by an MPI launcher but mpi4py is "
                               "not installed: pip install 'rill[distributed]'",
                               op="init") from None
    comm = MPI.COMM_WORLD
    if task is not None and task[1] > 1 and comm.Get_size() == 1:
        # srun wired no interface this MPI speaks (rill-launch with SLURM_MPI_TYPE=none, or
        # an MPI that ignores the one wired): each task would be rank 0 of its own world,
        # and train alone. (The MPICH wheel itself stops at MPI_Init under srun's PMIx.)
        raise DistributedError(f"srun started {task[1]} tasks, but MPI found only this one: "
                               f"srun wired no process-management interface this MPI speaks; "
                               f"{_SRUN_FIX}", op="init")
    board = None
    path = os.environ.get("RILL_STATUS_FILE")
    if path:
        from .status import StatusBoard
        board = StatusBoard(path, comm.Get_size(), comm.Get_rank())
    _WORLD = World(comm.Get_rank(), comm.Get_size(), num_ps, timeout, comm, board)
    set_this_task(_WORLD.task_name)
    # The shutdown barrier's own communicator: on COMM_WORLD, a rank's barrier at exit would
    # match a peer's dist.barrier() (collectives match in order), and let that peer run on as
    # if the exiting rank had been there.
    _WORLD.shutdown_comm = comm.Dup() if board is not None else None
    import atexit
    if board is not None:
        atexit.register(board.note, "finished", False)
    atexit.register(_final_barrier, _WORLD)  # runs first (atexit runs the latest first)
    return _WORLD


def _final_barrier(w: World) -> None:
    """At exit, before MPI shuts down: wait for every rank, and give up on one that cannot come.

    MPI_Finalize waits for every other rank to reach it, with no deadline, so a rank stopped
    (SIGSTOP) or gone after its last exchange would hold the others there forever. Every rank
    meets here first. A rank still running may take as long as it needs (ranks of a job may
    finish far apart: a chief's last evaluation, an uneven shard); a rank that is stopped, or
    gone or ended without coming, for longer than the job's timeout is named, with what each
    was last doing, and the job ends (MPI_Abort) instead of entering the shutdown. A rank
    that leaves early (an error, sys.exit) while others wait for it in a later exchange meets
    no barrier: they would never come, and the launcher ends the job on its exit status, as
    before. The barrier runs on a communicator of its own, so it never matches a peer's
    dist.barrier(). Without a status board (no rill-launch) nothing tells these cases apart,
    and the wait is MPI's. (The rill-launch watchdog covers the step into MPI_Finalize.)"""
    import sys
    import time
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    from .collectives import timeout_error
    from .status import process_state
    if w.board is None or w.shutdown_comm is None:
        return  # nothing tells a slow rank from a stuck one: MPI's own wait
    w.board.note("finalize", collective=False)

    def missing(rows):
        return [r for r, row in enumerate(rows)
                if r != w.rank and row.operation not in ("finalize", "finished")]

    def waited_for(rows):  # ranks inside an exchange this rank never entered (it is leaving)
        return [r for r in missing(rows) if rows[r].collectives > rows[w.rank].collectives]
    if waited_for(w.board.read()):
        # A rank leaving early (an error, sys.exit) while others wait for it: no barrier
        # they would never reach; MPI's shutdown and the launcher end the job, as before.
        return
    request = w.shutdown_comm.Ibarrier()
    held_since, looked = None, time.monotonic()
    while not request.Test():
        time.sleep(0.005)
        now = time.monotonic()
        if now - looked < 0.25:
            continue
        looked, rows = now, w.board.read()
        early = waited_for(rows)
        if early:
            print(f"rill.DistributedError: {w.name} (rank {w.rank}) is exiting while rank(s) "
                  f"{', '.join(map(str, early))} wait for it in an exchange it never entered; "
                  "ending the job", file=sys.stderr, flush=True)
            w.board.note("failed", collective=False)
            w.board.ended(w.rank, "exited", 1)
            w.comm.Abort(1)
        held = [r for r in missing(rows)
                if process_state(rows[r]) or rows[r].ending != "running"]
        held_since = None if not held else held_since or now
        if held_since is not None and now - held_since > w.timeout:
            error = timeout_error(w, "shutdown barrier (every rank meets it before MPI "
                                  "shutdown)", missing)
            print(f"rill.DistributedError: {error}", file=sys.stderr, flush=True)
            w.board.note("failed", collective=False)
            w.board.ended(w.rank, "exited", 1)
            w.comm.Abort(1)


def srun_task() -> tuple[int, int] | None:
    """(rank, size) of this process in its Slurm job step when srun started it, else None.

    srun sets SLURM_STEP_ID in every task; a batch script also has SLURM_PROCID (0) and the
    job's SLURM_NTASKS, but no step id, and is one process, not a rank of the job."""
    env = os.environ
    if "SLURM_STEP_ID" not in env or "SLURM_PROCID" not in env:
        return None
    size = env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1"))
    return int(env["SLURM_PROCID"]), int(size)


def joined() -> World | None:
    """The World if init() has run in this process, else None."""
    return _WORLD


def world() -> World:
    """The World of this process (init() on first use)."""
    return _WORLD if _WORLD is not None else init()
