"""What each role of a job may do: workers train, parameter servers serve.

A script runs on every rank, ps ranks included, so a branch on the role is the user's to
write. Forgotten, a ps would run the worker's code: its pushes reach itself, or its captured
step runs on its own variables, and it ends (exit 0) having applied no worker's gradient.
So the worker APIs refuse on a ps rank (`worker_only`), `serve` refuses on a worker
(`ps_only`), and a ps rank that set up a strategy needing its service (a ParameterServer,
`place_on_ps`, `replicate`) but ends its script without serving fails the job at exit, with
the fix (`expect_serve`, `served`).
"""
from __future__ import annotations

import sys

from ..errors import DistributedError
from .world import World

FIX = ("Branch on the role: `if dist.world().role == \"ps\": {serve}` before the training "
       "loop, which only workers run")


def _who(w: World) -> str:
    return f"rank {w.rank} ({w.name})"


def worker_only(w: World, api: str, serve: str, op: str | None = None) -> None:
    """Refuse `api` on a ps rank; `serve` is what the ps should call instead."""
    if w.role == "ps":
        raise DistributedError(f"{api + ' is ' if op else ''}a worker's call, and "
                               f"{_who(w)} is a parameter "
                               f"server: it would run the workers' code and apply none of "
                               f"their gradients. {FIX.format(serve=serve)}", op=op or api)


def ps_only(w: World, api: str) -> None:
    if w.role != "ps":
        raise DistributedError(f"{api} runs on parameter servers, and {_who(w)} is a worker "
                               f"(launch with rill-launch --ps P; ranks 0..P-1 serve). "
                               f"{FIX.format(serve=api)}", op=api)


_OWED: dict = {}     # id(World) -> (what the ps set up, where, the call that serves it)
_SERVED: set = set()


def expect_serve(w: World, what: str, serve: str) -> None:
    """This ps rank set up `what`, which workers will need it to serve (`serve`)."""
    if w.role != "ps" or w.comm is None or id(w) in _OWED:
        return
    _OWED[id(w)] = (what, _user_line(), serve)
    import atexit
    atexit.register(_check_served, w)  # runs before init()'s barrier at exit (LIFO)


def served(w: World) -> None:
    _SERVED.add(id(w))


def _user_line() -> str:
    """file:line of the user's call (the first frame outside rill)."""
    import os
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _check_served(w: World) -> None:
    """At exit: a ps that owed service and never served fails the job, saying so."""
    if id(w) in _SERVED or id(w) not in _OWED or w.board is not None and w.board.failed:
        return  # served, owed nothing, or failed already (and said why)
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    what, where, serve = _OWED[id(w)]
    print(f"rill.DistributedError: {_who(w)} is a parameter server and its script ended "
          f"without serving: it set up {what} ({where}) but never called {serve}, so no "
          f"worker's gradient was applied. {FIX.format(serve=serve)}",
          file=sys.stderr, flush=True)
    if w.board is not None:
        w.board.note("failed", collective=False)
        w.board.ended(w.rank, "exited", 1)
    from .bootstrap import _let_output_drain
    _let_output_drain()
    w.comm.Abort(1)
