"""Collectives and point-to-point exchanges of tensors between the ranks of a job.

Every exchange is posted non-blocking to MPI and waited on with a deadline (the World's
timeout, `rill-launch --timeout`): a blocking call is the non-blocking one waited on at once,
and `async_op=True` returns the Handle instead. A missed deadline raises DistributedError
naming the ranks that did not arrive and what each was last doing (see status.py) — a job
never hangs without a message.

When every rank has arrived and the data still does not pass (a host's link is down, or so
slow that nothing gets through), no rank is missing, so a late collective also probes the
ranks it waits with: halfway to its deadline it sends each of them a small message, and every
rank waiting in an exchange answers the probes it finds (Probes). The ranks that did not
answer are named, with their hosts: the board cannot tell, since it is a file that a cut-off
host may still write (one kernel in the test bed, a shared filesystem on a cluster), but a
probe travels the way the job's data does. Probes cost a step nothing: a rank sends them
only past half its timeout, and looks for them only once it has waited a millisecond.

Tensors travel through host memory (a device tensor is copied to the host and back); results
are new tensors: rill's buffers are never written in place. In a world of one, collectives
return copies of their input and point-to-point calls have no peer.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from ..errors import ArgumentError, DistributedError, DTypeError
from ..tensor import Tensor
from .world import World, world
from ..ops.creation import tensor

REDUCTIONS = ("sum", "mean", "max", "min")


class Handle:
    """A posted exchange: `wait()` returns its result (a Tensor, or None for sends and
    barriers); `done()` says whether it has finished, without waiting."""

    def __init__(self, w: World, requests, finish, what: str, peers=None, keep=()):
        self.world, self.requests, self.finish = w, requests, finish
        self.what, self.peers, self.keep = what, peers, keep  # keep: buffers MPI still reads
        self.deadline = time.monotonic() + w.timeout
        self.result, self.finished = None, not requests

    def done(self) -> bool:
        if not self.finished:
            from mpi4py import MPI
            self.finished = MPI.Request.Testall(self.requests)
        return self.finished

    def wait(self):
        wait_until(self.done, self.world, self.what, self.peers, self.deadline)
        if self.finish is not None:
            self.result, self.finish = self.finish(), None
        return self.result


def wait_until(done, w: World, what: str, peers=None, deadline: float | None = None) -> None:
    """Poll done() until it is true; past the deadline (now + the World's timeout), raise
    the timeout error naming who did not arrive. Polling, not a blocking MPI call, because
    a blocking call cannot be given up on."""
    start = time.monotonic()
    deadline = start + w.timeout if deadline is None else deadline
    probe_at = deadline - w.timeout / 2
    probes = None
    pause = 2e-5
    while not done():
        now = time.monotonic()
        if now > deadline:
            raise timeout_error(w, what, peers, probes)
        if now - start < 1e-3:
            # The first millisecond only yields the core (most exchanges end within it):
            # sched_yield, as sleep(0) would sleep for the timer slack, ~50-100 us on Linux.
            _yield()
            continue
        # then back off, so that a rank waiting on a slow one idles, answering probes
        if w.board is not None and w.shutdown_comm is not None:
            if probes is None and now >= probe_at and peers is None:
                probes = Probes.start(w)
            Probes.answer(w, probes)
        time.sleep(pause)
        pause = min(pause * 1.5, 2e-3)
    if w.board is not None:
        w.board.left()


class Probes:
    """The probes of one late collective: sent to the ranks that entered it too (the others
    are named as not arrived anyway), answered by every rank that waits in an exchange. They
    travel on init's duplicate of the world's communicator (World.shutdown_comm) as
    point-to-point messages, which never match its barrier nor the user's messages."""

    PING, PONG = 0x7E11, 0x7E12
    _sending: list = []  # (buffer, request) of sends not yet complete: MPI reads the buffers
    _lock = threading.Lock()  # a step's threads may wait at once

    def __init__(self, ident: int, ranks):
        self.ident, self.sent_at = ident, time.monotonic()
        self.probed, self.answered = frozenset(ranks), set()

    @classmethod
    def start(cls, w: World) -> "Probes":
        rows = w.board.read()
        mine = rows[w.rank].collectives
        probes = cls(mine, [r for r, row in enumerate(rows)
                            if r != w.rank and row.collectives >= mine])
        for r in sorted(probes.probed):
            cls._post(w, np.array([mine], np.int64), r, cls.PING)
        return probes

    @classmethod
    def _post(cls, w: World, buf, dest: int, tag: int) -> None:
        from mpi4py import MPI
        with cls._lock:
            cls._sending = [(b, q) for b, q in cls._sending if not q.Test()]
            cls._sending.append((buf, w.shutdown_comm.Isend([buf, MPI.INT64_T], dest, tag)))

    @classmethod
    def answer(cls, w: World, probes: "Probes | None") -> None:
        """Answer the probes that have come; note the answers to `probes`."""
        from mpi4py import MPI
        comm, status = w.shutdown_comm, MPI.Status()
        while True:  # a matched probe: another thread cannot take the message meanwhile
            message = comm.Improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            if message is None:
                return
            source, tag = status.Get_source(), status.Get_tag()
            buf = np.empty(1, np.int64)
            message.Recv([buf, MPI.INT64_T])
            if tag == cls.PING:
                cls._post(w, buf, source, cls.PONG)
            elif tag == cls.PONG and probes is not None and int(buf[0]) == probes.ident:
                probes.answered.add(source)


_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


def timeout_error(w: World, what: str, peers=None, probes=None) -> DistributedError:
    """What a missed deadline says: who did not arrive and what each was last doing. A rank
    whose process is stopped (SIGSTOP) or gone is named first, wherever it is in the job:
    it holds up every exchange that needs it, so the ranks waited for may only be waiting
    for it in turn. `peers` may be a function of the board's rows. `probes`: the ranks that
    entered the exchange too and did not answer a probe are named last, with their hosts."""
    from .status import EXCHANGES, process_state
    head = f"{what} on {w.name} (rank {w.rank}) did not complete within {w.timeout:g} s"
    op = what.split(" ")[0]
    if w.board is None:
        return DistributedError(head + " (launch with rill-launch to learn which ranks did "
                                "not arrive)", op=op)
    rows = w.board.read()
    mine = rows[w.rank].collectives
    if callable(peers):
        peers = peers(rows)
    if peers is None:  # a collective: the ranks that have not entered this one yet
        peers = [r for r, row in enumerate(rows) if r != w.rank and row.collectives < mine]
    halted = [r for r, row in enumerate(rows) if r != w.rank and process_state(row)]
    parts = [describe(w, r, rows[r], rows) for r in halted] + \
        [describe(w, r, rows[r], rows) for r in peers if r not in halted]
    # Ranks in their own code all the time this one waited: a rank waited for may itself be
    # waiting for one of them (a ps in a synchronous step waits for every worker), which
    # `peers` cannot tell. Named apart: nothing says this exchange needs them.
    waited = rows[w.rank].ago or 0.0
    busy = [r for r, row in enumerate(rows)
            if r != w.rank and r not in halted and r not in peers and row.ending == "running"
            and row.left_ago is not None and row.operation in EXCHANGES
            and row.ago is not None and row.ago >= waited - 0.05]
    tail = ""
    if busy:
        named = [describe(w, r, rows[r], rows) for r in busy[:8]]
        more = f"; and {len(busy) - 8} more" if len(busy) > 8 else ""
        tail = (". In their own code, entering no exchange, all the time this rank waited "
                f"(what the ranks above may be waiting for): {'; '.join(named)}{more}")
    if probes is not None:
        w.board.heard(probes.probed, probes.answered)
        tail += _unanswered(w, rows, probes)
    if not parts:
        return DistributedError(head + tail, op=op)
    return DistributedError(f"{head}: waiting for {'; '.join(parts)}{tail}", op=op)


def _unanswered(w: World, rows, probes) -> str:
    """". No answer to a probe sent 2.0 s ago from these ranks, which had entered it too:
    rank 2 (worker2) on h2; answered: rank 1 on h1 — ...": who stopped answering."""
    silent = sorted(probes.probed - probes.answered)
    if not silent:
        return ""
    ago = time.monotonic() - probes.sent_at
    named = "; ".join(f"rank {r} ({_name(w, r)}){_on(rows, r)}" for r in silent[:8])
    more = f"; and {len(silent) - 8} more" if len(silent) > 8 else ""
    heard = sorted(probes.answered)
    answered = ("; answered: " + ", ".join(f"rank {r}{_on(rows, r)}" for r in heard[:8]) +
                (", ..." if len(heard) > 8 else "")) if heard else ""
    elsewhere = {rows[r].hostname for r in silent if rows[r].hostname} - \
        {rows[w.rank].hostname}
    if not heard and len(elsewhere) >= 2:  # the one link all these probes share is ours
        return (f". No answer to a probe sent {ago:.1f} s ago from any other host's ranks, "
                f"which had entered it too: {named}{more} — this host "
                f"({rows[w.rank].hostname}) or its network link most likely failed, not "
                f"all of theirs")
    return (f". No answer to a probe sent {ago:.1f} s ago from these ranks, which had entered "
            f"it too: {named}{more}{answered} — their host, or the network to it, stopped "
            "answering (or they are busy in their own code with this exchange posted)")


def _on(rows, r: int) -> str:
    """" on h2": where rank r runs, when the ranks are not all on one host."""
    names = {row.hostname for row in rows if row.hostname}
    return f" on {rows[r].hostname}" if len(names) > 1 and rows[r].hostname else ""


def describe(w: World, r: int, row, rows=None) -> str:
    """"rank 2 (worker1), stopped (process state T, as after SIGSTOP), last seen entering
    all_reduce (its collective #3, 4.0 s ago)": a rank as an error names it."""
    from .status import process_state
    when = f", {row.ago:.1f} s ago" if row.ago is not None else ""
    state = process_state(row)
    if state == "stopped":
        how = ", stopped (process state T, as after SIGSTOP)"
    elif state == "gone":
        how = f", its process (pid {row.pid}) is gone and left no exit status"
    elif row.ending != "running":
        how = f", {row.outcome()} {row.ended_ago or 0:.1f} s ago"
    else:
        how = ""
    doing = row.doing(_name(w, r)) if not state and row.ending == "running" else ""
    if rows is None:
        rows = w.board.read() if w.board is not None else None
    return (f"rank {r} ({_name(w, r)}){_on(rows, r) if rows else ''}{how}, "
            f"last seen entering {row.operation} "
            f"(its collective #{row.collectives}{when}){', ' + doing if doing else ''}")


def _name(w: World, rank: int) -> str:
    return f"ps{rank}" if rank < w.num_ps else f"worker{rank - w.num_ps}"


# ---- host buffers --------------------------------------------------------------------------

def _host(t, op: str, reduce: bool = False):
    """(contiguous host array, function making a tensor like t from an array)."""
    if not isinstance(t, Tensor):
        raise ArgumentError(f"expects a tensor, got {type(t).__name__}", op=op)
    array = np.ascontiguousarray(t.numpy())
    if array.dtype == np.float16:  # MPI has no float16 arithmetic; exact in float32
        array = array.astype(np.float32)
    if reduce and array.dtype == np.bool_:
        raise DTypeError(f"cannot reduce a {t.dtype} tensor", op=op)

    def like_t(result):
        return tensor(result, dtype=t.dtype, device=t.device)
    return array, like_t


def _post(w: World, operation: str, start, finish, peers=None, keep=(), async_op=False):
    """Note the operation on the status board, post it, and wait unless async_op."""
    if w.board is not None:
        w.board.note(operation, collective=peers is None)
    handle = Handle(w, [start()], finish, operation, peers, keep)
    return handle if async_op else handle.wait()


def _done(value, async_op: bool):
    """A world of one: the result is ready now."""
    if not async_op:
        return value
    handle = Handle(world(), [], None, "local")
    handle.result = value
    return handle


def _MPI_OPS() -> dict:
    from mpi4py import MPI
    return {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}


def _reduced(t, op: str, what: str):
    """The checks every reduction makes; then t's host buffer, as _host gives it."""
    if op not in REDUCTIONS:
        raise ArgumentError(f"unknown reduction {op!r}; expected one of {REDUCTIONS}", op=what)
    if op == "mean" and isinstance(t, Tensor) and not t.dtype.is_floating:
        raise DTypeError(f"the mean of {t.dtype} tensors is not a {t.dtype}; use sum", op=what)
    return _host(t, what, reduce=True)


def _finish_reduction(out, op: str, w: World, like_t):
    """What a posted reduction's wait returns: a mean divides the sum by the ranks."""
    def finish():
        if op == "mean":
            out[...] /= w.size
        return like_t(out)
    return finish


def _check_rank(w: World, rank, what: str, op: str) -> None:
    if not isinstance(rank, int) or not 0 <= rank < w.size:
        raise ArgumentError(f"{what} must be a rank in [0, {w.size}), got {rank!r}", op=op)


# ---- collectives ---------------------------------------------------------------------------

def all_reduce(t: Tensor, op: str = "sum", *, async_op: bool = False):
    """The elementwise sum (mean, max, min) of t over all ranks, on every rank.

    >>> import rill, rill.distributed as dist
    >>> dist.all_reduce(rill.tensor([1.0, 2.0]), "mean")   # a world of one
    tensor([1., 2.])
    """
    w = world()
    array, like_t = _reduced(t, op, "all_reduce")
    if w.comm is None:
        return _done(like_t(array.copy()), async_op)
    out = np.empty_like(array)
    return _post(w, "all_reduce", lambda: w.comm.Iallreduce(array, out, _MPI_OPS()[op]),
                 _finish_reduction(out, op, w, like_t), keep=(array,), async_op=async_op)


def broadcast(t: Tensor, root: int = 0, *, async_op: bool = False):
    """root's t, on every rank (the others pass a tensor of the same shape and dtype)."""
    w = world()
    _check_rank(w, root, "root", "broadcast")
    array, like_t = _host(t, "broadcast")
    if w.comm is None:
        return _done(like_t(array.copy()), async_op)
    buf = array.copy()
    return _post(w, "broadcast", lambda: w.comm.Ibcast(buf, root), lambda: like_t(buf),
                 async_op=async_op)


def all_gather(t: Tensor, *, async_op: bool = False):
    """Every rank's t stacked along a new first axis (rank order), on every rank."""
    w = world()
    array, like_t = _host(t, "all_gather")
    if w.comm is None:
        return _done(like_t(array[None].copy()), async_op)
    out = np.empty((w.size,) + array.shape, array.dtype)
    return _post(w, "all_gather", lambda: w.comm.Iallgather(array, out), lambda: like_t(out),
                 keep=(array,), async_op=async_op)


def reduce_scatter(t: Tensor, op: str = "sum", *, async_op: bool = False):
    """The reduction of t over ranks, split along the first axis: rank r gets part r."""
    w = world()
    if t.ndim == 0 or t.shape[0] % w.size:
        raise ArgumentError(f"the first axis ({t.shape}) must split evenly over {w.size} ranks",
                            op="reduce_scatter")
    array, like_t = _reduced(t, op, "reduce_scatter")
    if w.comm is None:
        return _done(like_t(array.copy()), async_op)
    out = np.empty((array.shape[0] // w.size,) + array.shape[1:], array.dtype)
    return _post(w, "reduce_scatter",
                 lambda: w.comm.Ireduce_scatter_block(array, out, _MPI_OPS()[op]),
                 _finish_reduction(out, op, w, like_t), keep=(array,), async_op=async_op)


def barrier(*, async_op: bool = False):
    """Wait until every rank has reached this barrier."""
    w = world()
    if w.comm is None:
        return _done(None, async_op)
    return _post(w, "barrier", w.comm.Ibarrier, None, async_op=async_op)


# ---- point to point ------------------------------------------------------------------------

def send(t: Tensor, dest: int, tag: int = 0, *, async_op: bool = False):
    """Send t to rank `dest` (which calls recv with a tensor like t)."""
    w = world()
    _check_rank(w, dest, "dest", "send")
    if w.comm is None or dest == w.rank:
        raise DistributedError("send needs another rank to receive it", op="send")
    array, _ = _host(t, "send")
    return _post(w, "send", lambda: w.comm.Isend(array, dest, tag), None, peers=[dest],
                 keep=(array,), async_op=async_op)


def recv(like: Tensor, source: int, tag: int = 0, *, async_op: bool = False):
    """A tensor of like's shape and dtype, sent by rank `source`."""
    w = world()
    _check_rank(w, source, "source", "recv")
    if w.comm is None or source == w.rank:
        raise DistributedError("recv needs another rank to send to it", op="recv")
    array, like_t = _host(like, "recv")
    out = np.empty_like(array)
    return _post(w, "recv", lambda: w.comm.Irecv(out, source, tag), lambda: like_t(out),
                 peers=[source], async_op=async_op)
